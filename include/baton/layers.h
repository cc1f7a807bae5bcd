/* layers: the forward/backward pairs of every layer kind.
 *
 * Tensors are float32, NHWC (batch, height, width, channels), contiguous.
 * A layer is a descriptor (bt_layer) plus two free functions. Neither
 * allocates: the caller hands in parameters, the output buffer, the layer's
 * saved state for backward ("aux") and a scratch workspace, each sized by the
 * query functions below. Backward accumulates (+=) into parameter gradients
 * and overwrites the input gradient.
 *
 * Weight layouts (row-major):
 *   conv2d    W[kh*kw*cin][cout] then bias[cout]
 *   dwconv2d  W[kh*kw][c]        then bias[c]
 *   dense     W[in][out]         then bias[out]
 *   batchnorm gamma[c] then beta[c]; state: running mean[c], running var[c]
 * A residual block owns sub-layers (body, then shortcut); its parameters are
 * theirs, concatenated. It is one unit for partitioning. */
#ifndef BATON_LAYERS_H
#define BATON_LAYERS_H

#include <stddef.h>
#include <stdint.h>

#include "baton/err.h"

typedef enum bt_layer_kind {
  BT_CONV2D,
  BT_DWCONV2D,
  BT_DENSE,
  BT_RELU,
  BT_RELU6,
  BT_MAXPOOL,
  BT_AVGPOOL,
  BT_GLOBAL_AVGPOOL,
  BT_BATCHNORM,
  BT_FLATTEN,
  BT_DROPOUT,
  BT_RESIDUAL,
  BT_SOFTMAX_CE,
  BT_LAYER_KIND_COUNT
} bt_layer_kind;

/* Shape of one sample: height, width, channels. */
typedef struct bt_shape {
  int h, w, c;
} bt_shape;

typedef struct bt_layer {
  bt_layer_kind kind;
  char name[48];
  bt_shape in, out;
  int units;               /* conv2d output channels, dense output features */
  int kh, kw, stride, pad; /* conv2d, dwconv2d, maxpool, avgpool */
  float p;                 /* dropout probability */
  int post_relu;           /* residual: ReLU after the sum */
  struct bt_layer *sub;    /* residual: n_body body layers then n_short */
  int n_body, n_short;     /* shortcut layers; n_short 0 = identity */
  /* Filled by bt_layer_finalize: */
  size_t n_params;  /* trainable floats (including sub-layers) */
  size_t n_state;   /* non-trainable floats (batch-norm running stats) */
  size_t param_off; /* offset in the enclosing parameter buffer */
  size_t state_off; /* offset in the enclosing state buffer */
  uint64_t stream;  /* random stream id: initialisation and dropout */
} bt_layer;

/* Execution context shared by all layers of one forward or backward pass. */
typedef struct bt_exec {
  int training;  /* 1: batch statistics, dropout active */
  uint64_t seed; /* run seed (dropout masks) */
  long step;     /* optimizer step (dropout masks) */
  int micro;     /* micro-batch index within the step */
  float *ws;     /* scratch of at least bt_layer_ws_floats() */
  size_t ws_floats;
  const int32_t *labels; /* softmax-ce: labels of this micro-batch */
  float loss_scale;      /* softmax-ce: gradient scale, 1/(whole batch) */
  double loss_sum;       /* softmax-ce: sum of -log p[label] (added to) */
  long correct;          /* softmax-ce: correct predictions (added to) */
} bt_exec;

const char *bt_layer_kind_name(bt_layer_kind kind);
/* Parses a kind name ("conv2d", "relu", ...); returns -1 if unknown. */
int bt_layer_kind_parse(const char *name);

static inline size_t bt_shape_elems(bt_shape s) { return (size_t)s.h * s.w * s.c; }

/* Computes the output shape and the sizes of `l` (and of its sub-layers)
 * from l->in and the hyper-parameters; validates them. `where` names the
 * layer in errors ("layer 7 (conv2d)"). */
int bt_layer_finalize(bt_layer *l, const char *where, bt_err *err);

/* Floats of saved state that backward needs, beyond the layer's input and
 * output, for `batch` samples. */
size_t bt_layer_aux_floats(const bt_layer *l, int batch);
/* Scratch floats that forward and backward need for `batch` samples. */
size_t bt_layer_ws_floats(const bt_layer *l, int batch);

/* Per-sample forward FLOPs (multiply-add counted as 2), and backward FLOPs
 * (input and weight gradients). */
double bt_layer_flops_fwd(const bt_layer *l);
double bt_layer_flops_bwd(const bt_layer *l);

/* Initialises parameters (P) and state (S) of `l` from the seed: PyTorch's
 * default scheme (uniform +-1/sqrt(fan_in) for weights and biases, batch-norm
 * gamma 1 beta 0, running var 1), stream chosen by l->stream. */
void bt_layer_init(const bt_layer *l, float *P, float *S, uint64_t seed);

void bt_layer_forward(const bt_layer *l, const float *P, float *S, const float *in, float *out,
                      float *aux, int batch, bt_exec *x);

/* dP += dL/dP; din = dL/din (skipped when din is NULL). `in`, `out`, `aux`
 * are what forward saw and produced. */
void bt_layer_backward(const bt_layer *l, const float *P, const float *in, const float *out,
                       const float *aux, const float *dout, float *din, float *dP, int batch,
                       bt_exec *x);

/* Frees the sub-layer array of a residual block (recursively). */
void bt_layer_release(bt_layer *l);

#endif
