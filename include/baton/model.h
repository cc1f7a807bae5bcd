/* model: a chain of layers, the model zoo, and a stage (a consecutive range
 * of layers with its own memory) that runs forward and backward.
 *
 * A bt_model is only a descriptor: shapes, sizes, FLOPs; no weights. Weights
 * live in a bt_stage, which allocates parameters, gradients, optimizer state
 * and activations for its layers only, initialised from the seed by global
 * layer index so that any partition starts from the same weights. The whole
 * model is simply the stage [0, n_layers). */
#ifndef BATON_MODEL_H
#define BATON_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "baton/err.h"
#include "baton/layers.h"

typedef struct bt_model {
  char name[64];
  bt_shape input;
  int classes;
  int n_layers, cap;
  bt_layer *layers; /* finalized: shapes, sizes, param_off (global) */
  size_t n_params, n_state;
} bt_model;

/* Layer descriptors for building models (shapes are filled in later). */
bt_layer bt_conv2d(int out_channels, int kernel, int stride, int pad);
bt_layer bt_dwconv2d(int kernel, int stride, int pad);
bt_layer bt_dense(int units);
bt_layer bt_relu(void);
bt_layer bt_relu6(void);
bt_layer bt_maxpool(int kernel, int stride, int pad);
bt_layer bt_avgpool(int kernel, int stride, int pad);
bt_layer bt_global_avgpool(void);
bt_layer bt_batchnorm(void);
bt_layer bt_flatten(void);
bt_layer bt_dropout(float p);
bt_layer bt_softmax_ce(void);
/* A residual block; copies the body and shortcut arrays (n_short 0 means
 * identity). Release with bt_layer_release (bt_model_free does). */
bt_layer bt_residual(const bt_layer *body, int n_body, const bt_layer *shortcut, int n_short,
                     int post_relu);

void bt_model_init(bt_model *m, const char *name, bt_shape input, int classes);
/* Appends a layer (the model takes ownership of a residual's sub-layers). */
void bt_model_push(bt_model *m, bt_layer l);
/* Infers every shape, size and offset; validates; ends with softmax_ce
 * whose input must have `classes` scores. */
int bt_model_finalize(bt_model *m, bt_err *err);
void bt_model_free(bt_model *m);

/* Current output shape of the chain built so far (input if empty); lets a
 * builder decide, e.g., to skip a pooling layer on a 1x1 image. */
bt_shape bt_model_tail_shape(const bt_model *m, bt_err *err);

/* Totals over the model, per sample. */
double bt_model_flops_fwd(const bt_model *m);
double bt_model_flops_bwd(const bt_model *m);

/* The model zoo: mlp, lenet5, vgg11, vgg16, resnet18, mobilenetv2. */
extern const char *const bt_zoo_names[];
extern const int bt_zoo_count;
int bt_zoo_build(const char *name, bt_shape input, int classes, bt_model *m, bt_err *err);

/* ---- stages --------------------------------------------------------- */

/* Bytes held by a stage, by kind (for the memory accounting and reports). */
typedef struct bt_stage_mem {
  size_t params, grads, optim, state, acts, grad_bufs, workspace;
} bt_stage_mem;

typedef struct bt_stage {
  const bt_model *model;
  int first, last; /* layers [first, last) */
  int max_batch;   /* samples per micro-batch */
  int slots;       /* activation sets: micro-batches in flight at once */
  float *params, *grads, *momentum, *state;
  size_t n_params, n_state;
  size_t param_base, state_base; /* global offsets of the first layer */
  float *acts;                   /* slots x slot_floats */
  size_t slot_floats;
  size_t *out_off, *aux_off; /* per layer of the stage, inside a slot */
  float *grad_buf[2];        /* ping-pong activation gradients */
  size_t grad_floats;
  float *ws;
  size_t ws_floats;
  bt_stage_mem mem;
  /* Per-layer timing, off unless layer_fwd_s/layer_bwd_s are set (arrays of
   * last - first seconds, added to by forward/backward), read with
   * timing_clock (a clockid_t such as CLOCK_THREAD_CPUTIME_ID). */
  double *layer_fwd_s, *layer_bwd_s;
  int timing_clock;
} bt_stage;

/* Allocates and initialises the stage [first, last) of `m`. */
int bt_stage_init(bt_stage *s, const bt_model *m, int first, int last, int max_batch, int slots,
                  uint64_t seed, bt_err *err);
void bt_stage_free(bt_stage *s);
size_t bt_stage_mem_total(const bt_stage_mem *mem);

/* Runs the stage's layers on `in` (batch samples) into activation set
 * `slot`; returns the last layer's output (inside the slot). */
const float *bt_stage_forward(bt_stage *s, int slot, const float *in, int batch, bt_exec *x);

/* Back-propagates through the stage using activation set `slot` (filled by
 * forward from the same `in`). `dout` is the gradient of the stage output
 * (ignored when the stage ends with softmax_ce); `din` receives the input
 * gradient (NULL to skip, e.g. on the first stage). Gradients accumulate. */
void bt_stage_backward(bt_stage *s, int slot, const float *in, const float *dout, float *din,
                       int batch, bt_exec *x);

void bt_stage_zero_grad(bt_stage *s);

/* The output shape of the stage. */
bt_shape bt_stage_out_shape(const bt_stage *s);

#endif
