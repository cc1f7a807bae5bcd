/* predictor: shared host-time regressions plus a per-device head; see
 * include/baton/predictor.h and docs/predictor.md. GSL only (no BLIS here). */
#include "baton/predictor.h"

#include "baton/kernels.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <gsl/gsl_errno.h>
#include <gsl/gsl_linalg.h>
#include <gsl/gsl_matrix.h>
#include <gsl/gsl_vector.h>

enum { NP = BT_PRED_THETA, MAXF = 48, MAXT = 40, MAX_OPS = BT_DEVICE_LAYER_OPS_MAX };
/* Boosted regression trees on the regressions' log residuals: complete
 * trees of depth opt.tree_depth (at most TREE_MAX_DEPTH: 63 splits, 64
 * leaves); a tree of depth d uses the first 2^d - 1 splits and 2^d leaves. */
enum {
  TREE_MAX_DEPTH = 6,
  TREE_INNER = (1 << TREE_MAX_DEPTH) - 1,
  TREE_LEAVES = 1 << TREE_MAX_DEPTH
};
#define TREE_SHRINK 0.2 /* learning rate */
#define TREE_SUBSAMPLE 0.8
#define TREE_LEAF_RIDGE 1.0
enum { TREE_MIN_LEAF = 2 };

typedef struct gtree {
  unsigned char f[TREE_INNER]; /* feature of each split */
  float thr[TREE_INNER];       /* x[f] <= thr goes left */
  float leaf[TREE_LEAVES];
} gtree;
/* One host-time regression per layer kind and pass (a residual block is
 * composed from its sub-layers, so its slot stays unused). */
enum { N_GROUPS = BT_LAYER_KIND_COUNT, N_PASS = 3 /* bt_pass: fwd, bwd, bwd without din */ };

/* A first layer's backward (no input gradient) is a separate regression
 * of convolutions and dense layers; it is the weight gradient, which runs
 * the forward's code path on the same GEMM sizes, so it uses the forward's
 * features. Every other kind has no such pass. */
static bt_pass effective_pass(const bt_layer *l, bt_pass pass) {
  return pass == BT_PASS_BWD_NODIN && bt_pass_backward_of(l, 0) != BT_PASS_BWD_NODIN ? BT_PASS_BWD
                                                                                     : pass;
}
static int feature_pass(bt_pass pass) { return pass == BT_PASS_BWD_NODIN ? 0 : (int)pass; }

typedef struct reg {
  int nf, fitted;
  double mean[MAXF], sd[MAXF], beta[MAXF];
  double ylo, yhi; /* range of the fitted log times */
  /* Residual memory: standardised features and log residuals of the fitted
   * rows; a prediction adds the kernel-weighted residual of its nearest
   * neighbours (the regression's systematic misses near known layers). */
  int nk;
  float *kx;
  float *kr;
  /* Boosted trees on tree_features() (nt trees of depth `depth`, ntf features). */
  int nt, ntf, depth;
  gtree *tr;
} reg;

typedef struct head {
  char name[64];
  int raw; /* real hardware (or the bare host): every layer scales with its host time */
  double th[NP];
  double P[NP * NP]; /* covariance */
  long n_obs;
  /* The host rates of the session whose host times this (emulated) device's
   * times are mapped from, and the host device built from them: an emulated
   * device's time is host seconds x T_device / T_host(these rates), so the
   * head maps with them too (raw heads: the predictor's host). */
  bt_host_rates hostr;
  bt_device hostd;
} head;

struct bt_predictor {
  bt_predictor_options opt;
  bt_host_rates hostr;
  bt_device host;
  reg hr[N_GROUPS][N_PASS];
  double resid_corr[2];
  /* The in-model context: log(in-model / back-to-back host time) of the
   * sets' zoo rows (profiled with --in-model), an intercept and boosted
   * trees per kind group (residual blocks in their own slot) and pass
   * (fwd, bwd; the backward without din takes bwd's). in_model: predictions
   * of unknown host times carry it (bt_predictor_set_in_model). */
  reg ctx[N_GROUPS][2];
  int n_ctx_rows, in_model;
  double mu[NP], cov[NP * NP];
  double mu_raw[NP]; /* prior mean of raw heads (mu when none was fitted) */
  int n_dev;
  head dev[BT_PRED_DEVICES_MAX];
};

void bt_predictor_default_options(bt_predictor_options *o) {
  o->sigma = 0.08;
  o->forget = 0.9;
  o->process = 0.15;
  o->ridge = 0.3;
  o->linear_head = 0;
  o->residual_memory = 0;
  o->trees = 200;
  o->tree_depth = 5;
}

/* ---- features of the shared host-time model -------------------------------- */

/* Convolutions, depthwise and dense layers have their own regressions; the
 * memory-bound kinds share one (same bytes-to-time curve, kind offsets and
 * slopes), filed under BT_RELU. */
static int group_of(bt_layer_kind k) {
  switch (k) {
  case BT_RESIDUAL:
    return -1;
  case BT_CONV2D:
  case BT_DWCONV2D:
  case BT_DENSE:
    return (int)k;
  default:
    return BT_RELU;
  }
}

static double lg(double x) { return log(x > 1e-30 ? x : 1e-30); }
static double hinge(double x, double knot) { return x > knot ? x - knot : 0.0; }
/* log of the work a blocked kernel really does over the useful work. */
static double waste(double n, double block) { return n > 0 ? log(ceil(n / block) * block / n) : 0; }

/* Which code path layers.c takes for a convolution (the kernels' own
 * conditions): 0 GEMM on the input (1x1 stride 1), 1 direct, 2 thin, 3 im2col. */
static int conv_path(const bt_layer *l, int batch, int back) {
  if (l->kh == 1 && l->kw == 1 && l->stride == 1 && l->pad == 0)
    return 0;
  if (l->stride != 1)
    return 3;
  bt_conv_geom g = back ? (bt_conv_geom){batch, l->out.h, l->out.w,           l->out.c, l->in.c,
                                         l->kh, l->kw,    l->kh - 1 - l->pad, l->in.h,  l->in.w}
                        : (bt_conv_geom){batch, l->in.h, l->in.w, l->in.c,  l->out.c,
                                         l->kh, l->kw,   l->pad,  l->out.h, l->out.w};
  if ((back ? l->out.c >= 16 : l->in.c >= 4) && bt_conv_direct_ok(&g))
    return 1;
  if (bt_conv_thin_ok(&g))
    return 2;
  return 3;
}

/* Sum over the n output positions of the kernel taps that fall inside the
 * input (stride 1, `in` input positions, padding pad, kernel k). */
static double valid_taps(int n, int in, int pad, int k) {
  double s = 0;
  for (int o = 0; o < n; o++) {
    const int a = pad - o > 0 ? pad - o : 0, b = in + pad - o < k ? in + pad - o : k;
    s += b > a ? b - a : 0;
  }
  return s;
}

/* The share of a convolution's nominal multiply-adds a direct or thin
 * kernel really does: they skip the kernel taps on the padding (rows only
 * on images of more than 16 output pixels, rows and columns on smaller ones,
 * which run across the batch), im2col and GEMM multiply the zeros too.
 * back: the input gradient's view (a convolution of dout, complementary
 * padding). */
static double tap_share(const bt_layer *l, int batch, int back) {
  const int path = conv_path(l, batch, back);
  if (path != 1 && path != 2)
    return 1.0;
  const int H = back ? l->out.h : l->in.h, W = back ? l->out.w : l->in.w;
  const int OH = back ? l->in.h : l->out.h, OW = back ? l->in.w : l->out.w;
  const int pad = back ? l->kh - 1 - l->pad : l->pad;
  const double rows = valid_taps(OH, H, pad, l->kh) / ((double)OH * l->kh);
  if (OH * OW > 16)
    return rows;
  return rows * valid_taps(OW, W, pad, l->kw) / ((double)OW * l->kw);
}

/* Pixels per register block of the direct kernel: 6 along a row, or 8
 * samples of one pixel on images of at most 16 output pixels; a ragged
 * split wastes the FMA pipeline. */
static double direct_block_fill(const bt_layer *l, int batch) {
  const int small = l->out.h * l->out.w <= 16;
  const int n = small ? batch : l->out.w, m = small ? 8 : 6;
  const int nblk = (n + m - 1) / m;
  return (double)n / nblk / m;
}

static int gemm_features(double M, double N, double K, double *x) {
  const double lm = lg(M), ln = lg(N), lk = lg(K);
  int n = 0;
  x[n++] = lm, x[n++] = ln, x[n++] = lk;
  x[n++] = lm * lm, x[n++] = ln * ln, x[n++] = lk * lk;
  x[n++] = lm * ln, x[n++] = lm * lk, x[n++] = ln * lk;
  x[n++] = waste(N, 16), x[n++] = waste(N, 64), x[n++] = waste(M, 6);
  return n;
}

/* How far a GEMM-like layer sits in the memory-bound regime: log of
 * max(FLOPs, balance * bytes) over FLOPs for two machine balances (FLOP per
 * byte) around the host's (110 GFLOP/s over 6-40 GB/s). Small batches on
 * large weights (vgg11's 2x2x512 convolution at batch 4: 9.4 MB of weights
 * read, and in the backward their gradient written too) take the time of
 * their bytes, not of their FLOPs, which the smooth log-GEMM terms
 * extrapolated down with the batch (-42% at batch 4 from batches 8 and 32). */
static int memory_bound_features(const bt_layer *l, int batch, int pass, double *x) {
  const double B = batch > 0 ? batch : 1;
  const double fl = fmax(B * (pass ? bt_layer_flops_bwd(l) : bt_layer_flops_fwd(l)), 1);
  const double io = (double)(bt_shape_elems(l->in) + bt_shape_elems(l->out)) * B;
  const double bytes = 4 * (io * (1 + pass) + (double)l->n_params * (1 + 2 * pass));
  x[0] = lg(fmax(fl, 4 * bytes)) - lg(fl);
  x[1] = lg(fmax(fl, 16 * bytes)) - lg(fl);
  return 2;
}

/* Log-space features; returns their count (the intercept is implicit). */
static int features(const bt_layer *l, int batch, int pass, double *x) {
  const double B = batch > 0 ? batch : 1;
  const double ein = (double)bt_shape_elems(l->in) * B, eout = (double)bt_shape_elems(l->out) * B;
  const double lb = lg(4 * (ein + eout));
  int n = 0;
  switch (l->kind) {
  case BT_CONV2D: {
    const double M = B * l->out.h * l->out.w, N = l->units, K = (double)l->kh * l->kw * l->in.c;
    n = gemm_features(M, N, K, x);
    const double lm = lg(M), ln = lg(N), lk = lg(K);
    /* Code paths: forward's, or backward's weight- and input-gradient paths. */
    const int pf = conv_path(l, batch, 0), pb = pass ? conv_path(l, batch, 1) : pf;
    for (int path = 0; path < 3; path++) {
      const double on = (pf == path) + (pass ? (pb == path) : 0);
      x[n++] = on, x[n++] = on * lm, x[n++] = on * ln, x[n++] = on * lk;
    }
    x[n++] = l->stride > 1, x[n++] = l->in.c < 8, x[n++] = l->out.h * l->out.w <= 16;
    x[n++] = lg(B), x[n++] = lg(l->out.w), x[n++] = waste(l->out.w, 6), x[n++] = waste(l->in.c, 16);
    x[n++] = hinge(lb, lg(1 << 20)), x[n++] = hinge(lb, lg(8 << 20));
    /* The multiply-adds the kernels really do, and the direct kernel's
     * register-block fill (forward, or weight + input gradient). */
    const double tf = tap_share(l, batch, 0);
    x[n++] = pass ? lg(0.5 * (tf + tap_share(l, batch, 1))) : lg(tf);
    const double lw = lg(4.0 * l->n_params);
    x[n++] = hinge(lw, lg(512 << 10)), x[n++] = hinge(lw, lg(2 << 20));
    const double fill = direct_block_fill(l, batch);
    x[n++] = ((pf == 1) + (pass ? (pb == 1) : 0)) * lg(fill);
    x[n++] = (l->out.h * l->out.w <= 16) * waste(N, 48);
    return n + memory_bound_features(l, batch, pass, x + n);
  }
  case BT_DENSE:
    n = gemm_features(B, l->units, (double)bt_shape_elems(l->in), x);
    x[n++] = lg(4.0 * l->units * bt_shape_elems(l->in));
    x[n++] = hinge(lg(4.0 * l->units * bt_shape_elems(l->in)), lg(1 << 20));
    x[n++] = hinge(lg(4.0 * l->units * bt_shape_elems(l->in)), lg(8 << 20));
    return n + memory_bound_features(l, batch, pass, x + n);
  case BT_DWCONV2D:
    x[n++] = lg(eout), x[n++] = lg(eout) * lg(eout), x[n++] = lg(l->in.c);
    x[n++] = lg(l->out.h * l->out.w), x[n++] = lg(B), x[n++] = l->kh;
    x[n++] = l->stride > 1, x[n++] = lg(l->in.c) * lg(l->in.c), x[n++] = waste(l->in.c, 16);
    x[n++] = hinge(lb, lg(1 << 20)), x[n++] = hinge(lb, lg(8 << 20));
    return n;
  default: {
    static const bt_layer_kind kinds[] = {BT_RELU6,     BT_MAXPOOL, BT_AVGPOOL, BT_GLOBAL_AVGPOOL,
                                          BT_BATCHNORM, BT_FLATTEN, BT_DROPOUT, BT_SOFTMAX_CE};
    x[n++] = lb, x[n++] = lb * lb;
    x[n++] = hinge(lb, lg(256 << 10)), x[n++] = hinge(lb, lg(1 << 20));
    x[n++] = hinge(lb, lg(4 << 20)), x[n++] = hinge(lb, lg(16 << 20));
    x[n++] = lg(l->in.c), x[n++] = lg(B), x[n++] = waste(l->in.c, 16);
    x[n++] = lg(eout / ein), x[n++] = l->kind == BT_MAXPOOL && l->kh == 3;
    for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++) {
      const double on = l->kind == kinds[k];
      x[n++] = on, x[n++] = on * lb;
    }
    return n;
  }
  }
}

/* Features of the boosted trees (any monotone scale will do: trees split
 * on thresholds): the raw shapes, the code paths, FLOPs, bytes, arithmetic
 * intensity and channel counts modulo the SIMD blocking, so that the trees
 * can carve out what the smooth regressions miss (a path switch, a cache
 * level, a ragged block). Returns their count (<= MAXT). */
static int tree_features(const bt_layer *l, int batch, int pass, double *x) {
  const double B = batch > 0 ? batch : 1;
  const double ein = (double)bt_shape_elems(l->in) * B, eout = (double)bt_shape_elems(l->out) * B;
  const double fl = B * (pass ? bt_layer_flops_bwd(l) : bt_layer_flops_fwd(l));
  const double w = (double)l->n_params;
  const double bytes = 4 * (ein + eout + w * (1 + pass));
  int n = 0;
  x[n++] = lg(B), x[n++] = lg(fl), x[n++] = lg(bytes), x[n++] = lg(fl) - lg(bytes);
  x[n++] = lg(4 * w), x[n++] = lg(4 * ein), x[n++] = lg(4 * eout);
  x[n++] = l->in.c, x[n++] = l->out.c, x[n++] = l->in.c % 16, x[n++] = l->out.c % 16;
  x[n++] = l->in.c % 64, x[n++] = l->out.c % 64;
  x[n++] = l->in.h, x[n++] = l->out.h, x[n++] = l->out.w % 6, x[n++] = l->out.w % 8;
  x[n++] = l->kh, x[n++] = l->stride;
  switch (l->kind) {
  case BT_CONV2D: {
    const double M = B * l->out.h * l->out.w, N = l->units, K = (double)l->kh * l->kw * l->in.c;
    x[n++] = lg(M), x[n++] = lg(N), x[n++] = lg(K);
    x[n++] = conv_path(l, batch, 0), x[n++] = pass ? conv_path(l, batch, 1) : -1;
    x[n++] = l->out.h * l->out.w <= 16, x[n++] = l->in.h * l->in.w <= 16;
    x[n++] = lg(4 * B * l->out.h * l->out.w * K); /* the im2col matrix */
    x[n++] = tap_share(l, batch, 0), x[n++] = pass ? tap_share(l, batch, 1) : 1;
    x[n++] = direct_block_fill(l, batch);
    x[n++] = lg(fl) + lg(pass ? 0.5 * (tap_share(l, batch, 0) + tap_share(l, batch, 1))
                              : tap_share(l, batch, 0));
    break;
  }
  case BT_DENSE: {
    const double K = (double)bt_shape_elems(l->in);
    x[n++] = lg(B), x[n++] = lg(l->units), x[n++] = lg(K), x[n++] = (int)K % 16;
    break;
  }
  case BT_RESIDUAL:
    x[n++] = l->n_body, x[n++] = l->n_short, x[n++] = l->post_relu;
    x[n++] = l->n_body > 0 ? l->sub[0].out.c / (double)(l->in.c > 0 ? l->in.c : 1) : 1;
    x[n++] = lg(eout / ein), x[n++] = l->in.h * l->in.w;
    break;
  default:
    x[n++] = l->kind, x[n++] = lg(eout / ein), x[n++] = l->in.h * l->in.w;
    break;
  }
  return n;
}

/* Eight trees walked side by side: each walk is a chain of dependent loads,
 * and eight independent chains keep the core busy (mobilenetv2's
 * predictions 1.5x faster; four chains gave 1.25x; docs/predictor.md,
 * "Cost"). The leaves are summed in tree order, so the sum is the same as
 * one tree at a time. */
static double gbt_eval(const reg *r, const double *x) {
  double y = 0;
  const int inner = (1 << r->depth) - 1;
  int t = 0;
  for (; t + 8 <= r->nt; t += 8) {
    const gtree *g = &r->tr[t];
    int n[8] = {0};
    for (int d = 0; d < r->depth; d++)
      for (int j = 0; j < 8; j++)
        n[j] = 2 * n[j] + 1 + (x[g[j].f[n[j]]] > g[j].thr[n[j]]);
    for (int j = 0; j < 8; j++)
      y += g[j].leaf[n[j] - inner];
  }
  for (; t < r->nt; t++) {
    const gtree *g = &r->tr[t];
    int node = 0;
    for (int d = 0; d < r->depth; d++)
      node = 2 * node + 1 + (x[g->f[node]] > g->thr[node]);
    y += g->leaf[node - inner];
  }
  return y;
}

typedef struct keyed {
  double v;
  int i;
} keyed;

/* By value, ties by row: the same order on every platform's qsort. */
static int cmp_keyed(const void *a, const void *b) {
  const keyed *x = a, *y = b;
  return x->v != y->v ? (x->v > y->v) - (x->v < y->v) : (x->i > y->i) - (x->i < y->i);
}

/* Node `nd` splits on feature `j` between values lo and hi (lo < hi). */
static void gtree_set_split(gtree *g, int nd, int j, double lo, double hi) {
  g->f[nd] = (unsigned char)j;
  g->thr[nd] = (float)(0.5 * (lo + hi));
  /* float rounding must not move a row across the threshold */
  if (!((double)g->thr[nd] >= lo && (double)g->thr[nd] < hi))
    g->thr[nd] = (float)lo;
}

/* A row's node in the tree being grown (-1: not in its sample) and its
 * residual, side by side: the split search reads both of each row. */
typedef struct gbt_row {
  double res;
  int node;
} gbt_row;

/* The best splits on feature `j` of every node of the level from `first`:
 * o[ms] the tree's sampled rows in value order, v[ms] their values. S/N:
 * each node's residual sum and count, parent: S*S/N. A split gaining more
 * than best[k] replaces node k's in g. */
static void level_splits(gtree *g, int j, const int *o, const double *v, int ms,
                         const gbt_row *rows, int first, const double *S, const int *N,
                         const double *parent, double *best) {
  double SL[TREE_LEAVES] = {0}, last[TREE_LEAVES];
  int NL[TREE_LEAVES] = {0};
  for (int k = 0; k < TREE_LEAVES; k++)
    last[k] = -INFINITY;
  for (int i = 0; i < ms; i++) {
    const gbt_row *row = &rows[o[i]];
    const int k = row->node - first;
    const double x = v[i];
    if (NL[k] >= TREE_MIN_LEAF && N[k] - NL[k] >= TREE_MIN_LEAF && x > last[k]) {
      const double sr = S[k] - SL[k];
      const double gain = SL[k] * SL[k] / NL[k] + sr * sr / (N[k] - NL[k]) - parent[k];
      if (gain > best[k]) {
        gtree_set_split(g, first + k, j, last[k], x);
        best[k] = gain;
      }
    }
    SL[k] += row->res, NL[k]++, last[k] = x;
  }
}

/* Gradient boosting of `nt` trees of depth `depth` on the residuals res[m] (changed:
 * what remains) of rows X (m x nf): level by level, each level's best
 * splits found in one pass over every feature's presorted rows; 80% of the
 * rows (a fixed pseudo-random draw) per tree, leaves shrunk by a ridge and
 * the learning rate. Deterministic. Returns 0 or -1 (out of memory). */
static int fit_gbt(reg *r, const double *X, int m, int nf, double *res, int nt, int depth) {
  r->nt = 0;
  r->ntf = nf;
  r->depth = depth;
  const int inner = (1 << depth) - 1, leaves = 1 << depth;
  if (nt <= 0 || m < 4 * TREE_MIN_LEAF)
    return 0;
  /* Each feature's rows in value order with their values (order, sorted),
   * and per tree its sampled rows alone (o_t, v_t): the split search reads
   * them in sequence and skips no row (`baton predictor fit` 6.9 -> 5.1 s). */
  const size_t mn = (size_t)m * nf;
  int *order = malloc(mn * sizeof *order), *o_t = malloc(mn * sizeof *o_t);
  double *sorted = malloc(mn * sizeof *sorted), *v_t = malloc(mn * sizeof *v_t);
  gbt_row *rows = malloc((size_t)m * sizeof *rows);
  keyed *kv = malloc((size_t)m * sizeof *kv);
  r->tr = calloc((size_t)nt, sizeof *r->tr);
  if (!order || !o_t || !sorted || !v_t || !rows || !kv || !r->tr) {
    free(order), free(o_t), free(sorted), free(v_t), free(rows), free(kv), free(r->tr);
    r->tr = NULL;
    return -1;
  }
  for (int j = 0; j < nf; j++) {
    for (int i = 0; i < m; i++)
      kv[i] = (keyed){X[(size_t)i * nf + j], i};
    qsort(kv, (size_t)m, sizeof *kv, cmp_keyed);
    for (int i = 0; i < m; i++)
      order[(size_t)j * m + i] = kv[i].i, sorted[(size_t)j * m + i] = kv[i].v;
  }
  free(kv);
  for (int i = 0; i < m; i++)
    rows[i].res = res[i];
  unsigned long long rng = 0x2545F4914F6CDD1DULL;
  for (int t = 0; t < nt; t++) {
    gtree *g = &r->tr[t];
    for (int i = 0; i < m; i++) {
      rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
      rows[i].node = (double)(rng >> 11) / 9007199254740992.0 < TREE_SUBSAMPLE ? 0 : -1;
    }
    int ms = 0;
    for (int j = 0; j < nf; j++) {
      ms = 0;
      for (int i = 0; i < m; i++) {
        const int row = order[(size_t)j * m + i];
        if (rows[row].node >= 0)
          o_t[(size_t)j * m + ms] = row, v_t[(size_t)j * m + ms++] = sorted[(size_t)j * m + i];
      }
    }
    for (int d = 0; d < depth; d++) {
      const int first = (1 << d) - 1, cnt = 1 << d;
      double S[TREE_LEAVES] = {0}, best[TREE_LEAVES], parent[TREE_LEAVES];
      int N[TREE_LEAVES] = {0};
      for (int i = 0; i < m; i++)
        if (rows[i].node >= 0)
          S[rows[i].node - first] += rows[i].res, N[rows[i].node - first]++;
      for (int k = 0; k < cnt; k++) {
        best[k] = 1e-12;
        parent[k] = N[k] > 0 ? S[k] * S[k] / N[k] : 0;
        g->f[first + k] = 0;
        g->thr[first + k] = INFINITY;
      }
      for (int j = 0; j < nf; j++)
        level_splits(g, j, o_t + (size_t)j * m, v_t + (size_t)j * m, ms, rows, first, S, N, parent,
                     best);
      for (int i = 0; i < m; i++)
        if (rows[i].node >= 0) {
          const int k = rows[i].node;
          rows[i].node = 2 * k + 1 + (X[(size_t)i * nf + g->f[k]] > g->thr[k]);
        }
    }
    double LS[TREE_LEAVES] = {0};
    int LN[TREE_LEAVES] = {0};
    for (int i = 0; i < m; i++)
      if (rows[i].node >= 0)
        LS[rows[i].node - inner] += rows[i].res, LN[rows[i].node - inner]++;
    for (int k = 0; k < leaves; k++)
      g->leaf[k] = (float)(TREE_SHRINK * LS[k] / (LN[k] + TREE_LEAF_RIDGE));
    r->nt = t + 1;
    for (int i = 0; i < m; i++) {
      int nd = 0;
      for (int d = 0; d < depth; d++)
        nd = 2 * nd + 1 + (X[(size_t)i * nf + g->f[nd]] > g->thr[nd]);
      rows[i].res -= g->leaf[nd - inner];
    }
  }
  for (int i = 0; i < m; i++)
    res[i] = rows[i].res;
  free(order), free(o_t), free(sorted), free(v_t), free(rows);
  return 0;
}

static double reg_eval(const reg *r, const double *x) {
  double y = r->beta[0];
  for (int j = 0; j < r->nf; j++)
    y += r->beta[j + 1] * (x[j] - r->mean[j]) / r->sd[j];
  return y;
}

enum { KNN_K = 4 };
#define KNN_TAU 1.0
#define KNN_SHRINK 0.15

/* The neighbours' residual: sum w r / (sum w + shrink), w = exp(-d^2 / tau),
 * over the KNN_K nearest stored rows; far from every known layer it is 0. */
static double knn_correction(const reg *r, const double *x) {
  if (r->nk == 0)
    return 0;
  double z[MAXF], bd[KNN_K], br[KNN_K];
  int nb = 0;
  for (int j = 0; j < r->nf; j++)
    z[j] = (x[j] - r->mean[j]) / r->sd[j];
  for (int i = 0; i < r->nk; i++) {
    const float *k = r->kx + (size_t)i * r->nf;
    double d = 0;
    for (int j = 0; j < r->nf && (nb < KNN_K || d < bd[nb - 1]); j++)
      d += (z[j] - k[j]) * (z[j] - k[j]);
    if (nb == KNN_K && d >= bd[nb - 1])
      continue;
    int at = nb < KNN_K ? nb++ : nb - 1;
    while (at > 0 && bd[at - 1] > d) {
      bd[at] = bd[at - 1], br[at] = br[at - 1];
      at--;
    }
    bd[at] = d, br[at] = r->kr[i];
  }
  double sw = 0, swr = 0;
  for (int i = 0; i < nb; i++) {
    double w = exp(-bd[i] / KNN_TAU);
    sw += w, swr += w * br[i];
  }
  return swr / (sw + KNN_SHRINK);
}

static double clamp_time(double t) {
  if (!isfinite(t) || !(t > 0))
    return t > 0 ? 1e3 : 1e-9;
  return t < 1e-9 ? 1e-9 : t > 1e3 ? 1e3 : t;
}

static double host_time(const bt_predictor *p, const bt_layer *l, int batch, bt_pass pass);

/* Residual add (and post-ReLU) costs: an element-wise layer at the output shape. */
static double elem_like(const bt_predictor *p, bt_shape s, int batch, bt_pass pass, double scale) {
  bt_layer r;
  memset(&r, 0, sizeof r);
  r.kind = BT_RELU;
  r.in = r.out = s;
  return scale * host_time(p, &r, batch, pass);
}

/* The share of a layer's host time spent in BLIS GEMMs (what changes with
 * the BLIS kernel set or thread count; the direct, thin and depthwise
 * kernels do not): dense layers and lowered convolutions (1x1 GEMM or
 * im2col) are GEMMs; a backward pass is half weight gradient (the forward's
 * path) and half input gradient. Residual blocks: host_time_g. */
static double gemm_share(const bt_layer *l, int batch, bt_pass pass) {
  if (l->kind == BT_DENSE)
    return 1.0;
  if (l->kind != BT_CONV2D)
    return 0.0;
  const int pf = conv_path(l, batch, 0), lf = pf == 0 || pf == 3;
  if (pass != BT_PASS_BWD) /* forward, or the weight gradient alone (the forward's path) */
    return lf;
  const int pb = conv_path(l, batch, 1);
  return 0.5 * (lf + (pb == 0 || pb == 3));
}

static double host_time_g(const bt_predictor *p, const bt_layer *l, int batch, bt_pass pass,
                          double *gemm_seconds);

static double host_time(const bt_predictor *p, const bt_layer *l, int batch, bt_pass pass) {
  return host_time_g(p, l, batch, pass, NULL);
}

/* Predicted host seconds and (gemm_seconds, optional) the part of them in
 * GEMMs. */
static double host_time_g(const bt_predictor *p, const bt_layer *l, int batch, bt_pass pass,
                          double *gemm_seconds) {
  pass = effective_pass(l, pass);
  if (l->kind == BT_RESIDUAL) {
    double t = 0, tg = 0;
    for (int j = 0; j < l->n_body + l->n_short; j++) {
      double gj = 0;
      t += host_time_g(p, &l->sub[j], batch, pass, &gj);
      tg += gj;
    }
    t += elem_like(p, pass == BT_PASS_FWD ? l->out : l->in, batch, pass, 1.5);
    if (l->post_relu)
      t += elem_like(p, l->out, batch, pass, 1.0);
    double c = p->resid_corr[pass];
    const reg *rr = &p->hr[BT_RESIDUAL][pass];
    if (rr->nt > 0) {
      double xt[MAXT];
      tree_features(l, batch, pass, xt);
      c *= exp(fmax(-2.0, fmin(2.0, gbt_eval(rr, xt))));
    }
    if (gemm_seconds)
      *gemm_seconds = tg * c;
    return clamp_time(t * c);
  }
  const int g = group_of(l->kind);
  if (pass == BT_PASS_BWD_NODIN && !p->hr[g][pass].fitted) {
    /* No set timed it: the full backward less its input-gradient share, the
     * share the host device model gives. */
    const double full = host_time_g(p, l, batch, BT_PASS_BWD, gemm_seconds);
    const double a = bt_device_layer_analytic(&p->host, l, batch, BT_PASS_BWD, 0).total,
                 b = bt_device_layer_analytic(&p->host, l, batch, BT_PASS_BWD_NODIN, 0).total;
    const double share = a > 0 ? fmin(1.0, b / a) : 1.0;
    if (gemm_seconds)
      *gemm_seconds *= share;
    return clamp_time(full * share);
  }
  const reg *r = &p->hr[g][pass];
  if (!r->fitted) {
    const double h = clamp_time(bt_device_layer_analytic(&p->host, l, batch, pass, 0).total);
    if (gemm_seconds)
      *gemm_seconds = h * gemm_share(l, batch, pass);
    return h;
  }
  double x[MAXF];
  features(l, batch, feature_pass(pass), x);
  double ly = reg_eval(r, x) + knn_correction(r, x);
  if (r->nt > 0) {
    double xt[MAXT];
    tree_features(l, batch, feature_pass(pass), xt);
    ly += gbt_eval(r, xt);
  }
  /* Far outside the fitted layers a quadratic can run away: keep within
   * e^2 (7.4x) of the range of fitted times. */
  ly = ly < r->ylo - 2 ? r->ylo - 2 : ly > r->yhi + 2 ? r->yhi + 2 : ly;
  const double h = clamp_time(exp(ly));
  if (gemm_seconds)
    *gemm_seconds = h * gemm_share(l, batch, pass);
  return h;
}

double bt_predictor_host_time(const bt_predictor *p, const bt_layer *l, int batch, bt_pass pass) {
  return l ? host_time(p, l, batch, pass) : 0.0;
}

/* Ridge regression of y on standardised x (rows n, features nf) with GSL. */
static int fit_reg(reg *r, const double *X, const double *y, int n, int nf, double ridge) {
  memset(r, 0, sizeof *r);
  r->nf = nf;
  if (n < 4)
    return 0;
  for (int j = 0; j < nf; j++) {
    double m = 0, v = 0;
    for (int i = 0; i < n; i++)
      m += X[i * nf + j];
    m /= n;
    for (int i = 0; i < n; i++)
      v += (X[i * nf + j] - m) * (X[i * nf + j] - m);
    r->mean[j] = m;
    r->sd[j] = v > 1e-12 * n ? sqrt(v / n) : 1.0;
  }
  const int d = nf + 1;
  gsl_matrix *A = gsl_matrix_calloc(d, d);
  gsl_vector *b = gsl_vector_calloc(d), *beta = gsl_vector_alloc(d);
  double z[MAXF + 1];
  for (int i = 0; i < n; i++) {
    z[0] = 1;
    for (int j = 0; j < nf; j++)
      z[j + 1] = (X[i * nf + j] - r->mean[j]) / r->sd[j];
    for (int a = 0; a < d; a++) {
      gsl_vector_set(b, a, gsl_vector_get(b, a) + z[a] * y[i]);
      for (int c = 0; c < d; c++)
        gsl_matrix_set(A, a, c, gsl_matrix_get(A, a, c) + z[a] * z[c]);
    }
  }
  for (int a = 1; a < d; a++)
    gsl_matrix_set(A, a, a, gsl_matrix_get(A, a, a) + ridge);
  gsl_matrix_set(A, 0, 0, gsl_matrix_get(A, 0, 0) + 1e-9);
  int ok = gsl_linalg_cholesky_decomp1(A) == 0 && gsl_linalg_cholesky_solve(A, b, beta) == 0;
  if (ok)
    for (int a = 0; a < d; a++)
      r->beta[a] = gsl_vector_get(beta, a);
  r->fitted = ok;
  r->ylo = r->yhi = y[0];
  for (int i = 1; i < n; i++)
    r->ylo = fmin(r->ylo, y[i]), r->yhi = fmax(r->yhi, y[i]);
  gsl_matrix_free(A);
  gsl_vector_free(b);
  gsl_vector_free(beta);
  return 0;
}

/* ---- the head ----------------------------------------------------------------- */

static void theta_device(const bt_predictor *p, const double *th, bt_device *d) {
  memset(d, 0, sizeof *d);
  snprintf(d->name, sizeof d->name, "predicted");
  for (int c = 0; c < BT_OP_CLASS_COUNT; c++)
    d->rate[c] = p->host.rate[c] * exp(-th[1 + c]);
  d->op_overhead_us = exp(th[0]);
  d->half_util_flops = 1e6 * exp(th[6]);
  d->cache_kib = 1024 * exp(th[7]);
  d->cache_speedup = 1 + exp(th[8]);
  d->capacity_mib = d->bandwidth_gbs = d->link_bandwidth_mbps = 1;
}

void bt_predictor_head_device(const bt_predictor *p, int dev, bt_device *out) {
  if (dev < 0 || dev >= p->n_dev) {
    memset(out, 0, sizeof *out);
    return;
  }
  theta_device(p, p->dev[dev].th, out);
  snprintf(out->name, sizeof out->name, "%s", p->dev[dev].name);
}

/* A sample with everything that does not depend on theta precomputed. */
typedef struct fsample {
  int n_ops;
  bt_device_op ops[MAX_OPS];
  double h;         /* predicted host seconds */
  double g;         /* share of h in BLIS GEMMs (gemm_share) */
  double t_host;    /* host-model busy seconds of all ops */
  double t_host_cb; /* of its compute-bound ops */
  double logy;      /* log measured seconds */
  int raw;          /* the head's kind (see head.raw) */
} fsample;

/* The host-model busy times of s's ops on `host` (the session its device
 * times are mapped from). */
static void rehost(const bt_device *host, fsample *s) {
  s->t_host = s->t_host_cb = 0;
  for (int k = 0; k < s->n_ops; k++) {
    double b = bt_device_op_busy(host, &s->ops[k], 0);
    s->t_host += b;
    if (bt_op_class_compute_bound(s->ops[k].cls))
      s->t_host_cb += b;
  }
}

static int ctx_group(bt_layer_kind k) { return k == BT_RESIDUAL ? BT_RESIDUAL : group_of(k); }

/* In-model host time over back-to-back host time (1 without a context model). */
static double context_factor(const bt_predictor *p, const bt_layer *l, int batch, bt_pass pass) {
  const int cp = pass == BT_PASS_FWD ? 0 : 1;
  const reg *r = &p->ctx[ctx_group(l->kind)][cp];
  if (!r->fitted)
    return 1.0;
  double y = r->beta[0];
  if (r->nt > 0) {
    double xt[MAXT];
    tree_features(l, batch, cp, xt);
    y += gbt_eval(r, xt);
  }
  return exp(fmax(-1.5, fmin(1.5, y)));
}

double bt_predictor_context_factor(const bt_predictor *p, const bt_layer *l, int batch,
                                   bt_pass pass) {
  return p && l && batch > 0 ? context_factor(p, l, batch, pass) : 1.0;
}

int bt_predictor_set_in_model(bt_predictor *p, int on) {
  if (!p)
    return 0;
  p->in_model = on && p->n_ctx_rows > 0;
  return p->in_model;
}

static void prep(const bt_predictor *p, const bt_device *host, const bt_layer *l, int batch,
                 bt_pass pass, double h, fsample *s) {
  int n = bt_device_layer_ops(l, batch, pass, s->ops, MAX_OPS);
  s->n_ops = n < MAX_OPS ? n : MAX_OPS;
  double gs = 0;
  double hp = host_time_g(p, l, batch, pass, &gs);
  if (p->in_model && !(h > 0)) {
    const double c = context_factor(p, l, batch, pass);
    hp = clamp_time(hp * c), gs *= c;
  }
  s->h = h > 0 ? h : hp;
  s->g = hp > 0 ? fmin(1.0, gs / hp) : 0.0;
  rehost(host, s);
}

/* The host device a head maps with. */
static const bt_device *head_host(const bt_predictor *p, const head *h) {
  return h->raw || !(h->hostr.sgemm_gflops > 0) ? &p->host : &h->hostd;
}

/* Device seconds from host seconds s->h, exactly as bt_device_layer_mapped
 * maps them (tests/test_predictor.c checks the two agree): the busy time
 * scales by T_d / T_host, except for a layer the host model finds mostly
 * memory-bound, which keeps its analytic device time; plus the overheads. */
static double head_time(const bt_predictor *p, const bt_device *d, const double *th,
                        const fsample *s) {
  if (p->opt.linear_head)
    return clamp_time(s->h * exp(th[1]));
  /* th[9]: the GEMM part of the host time runs exp(th[9]) times slower (a
   * real CPU with other BLIS kernels or threads; ~0 for emulated devices). */
  const double h = s->raw ? s->h * (1 - s->g + s->g * exp(th[9])) : s->h;
  double td = 0;
  for (int k = 0; k < s->n_ops; k++)
    td += bt_device_op_busy(d, &s->ops[k], 0);
  const double ovh = s->n_ops * d->op_overhead_us * 1e-6;
  if (!(s->t_host > 0) || !(h > 0) || (!s->raw && s->t_host_cb < 0.5 * s->t_host))
    return clamp_time(ovh + td);
  return clamp_time(ovh + h * td / s->t_host);
}

/* Sum of squared standardised residuals + prior term. */
static double objective(const bt_predictor *p, const fsample *s, int n, const double *th,
                        const double *mu, const double *prec, double *res) {
  bt_device d;
  theta_device(p, th, &d);
  double f = 0;
  for (int i = 0; i < n; i++) {
    double r = (log(head_time(p, &d, th, &s[i])) - s[i].logy) / p->opt.sigma;
    /* Huber: a sample 3 sigma off (a noisy timing) pulls linearly, not quadratically. */
    double w = fabs(r) > 3 ? sqrt(3 / fabs(r)) : 1;
    if (res)
      res[i] = r * w;
    f += r * w * r * w;
  }
  for (int a = 0; a < NP; a++)
    for (int b = 0; b < NP; b++)
      f += (th[a] - mu[a]) * prec[a * NP + b] * (th[b] - mu[b]);
  return f;
}

static int invert_spd(const double *in, double *out) {
  gsl_matrix *A = gsl_matrix_alloc(NP, NP);
  for (int a = 0; a < NP * NP; a++)
    A->data[a] = in[a];
  for (int a = 0; a < NP; a++)
    A->data[a * NP + a] += 1e-10;
  int ok = gsl_linalg_cholesky_decomp1(A) == 0 && gsl_linalg_cholesky_invert(A) == 0;
  if (ok)
    for (int a = 0; a < NP * NP; a++)
      out[a] = A->data[a];
  gsl_matrix_free(A);
  return ok ? 0 : -1;
}

/* MAP by Levenberg-Marquardt from th (in/out); posterior covariance into cov. */
static void map_fit(const bt_predictor *p, const fsample *s, int n, const double *mu,
                    const double *prec, double *th, double *cov, int iters) {
  double *res = malloc((size_t)(n + 1) * sizeof *res),
         *res2 = malloc((size_t)(n + 1) * sizeof *res2);
  double *J = malloc((size_t)(n + 1) * NP * sizeof *J);
  double lambda = 1e-2;
  double f = objective(p, s, n, th, mu, prec, res);
  double H[NP * NP];
  for (int it = 0; it < iters && res && res2 && J; it++) {
    for (int a = 0; a < NP; a++) {
      double t2[NP];
      memcpy(t2, th, sizeof t2);
      const double step = a == 7 ? 0.15 : 1e-4;
      t2[a] += step;
      objective(p, s, n, t2, mu, prec, res2);
      for (int i = 0; i < n; i++)
        J[i * NP + a] = (res2[i] - res[i]) / step;
    }
    double g[NP];
    for (int a = 0; a < NP; a++) {
      g[a] = 0;
      for (int b = 0; b < NP; b++) {
        double h = prec[a * NP + b];
        for (int i = 0; i < n; i++)
          h += J[i * NP + a] * J[i * NP + b];
        H[a * NP + b] = h;
        g[a] += prec[a * NP + b] * (th[b] - mu[b]);
      }
      for (int i = 0; i < n; i++)
        g[a] += J[i * NP + a] * res[i];
    }
    int improved = 0;
    for (int tries = 0; tries < 8 && !improved; tries++) {
      gsl_matrix *A = gsl_matrix_alloc(NP, NP);
      gsl_vector *bv = gsl_vector_alloc(NP), *dx = gsl_vector_alloc(NP);
      for (int a = 0; a < NP; a++) {
        for (int b = 0; b < NP; b++)
          gsl_matrix_set(A, a, b, H[a * NP + b]);
        gsl_matrix_set(A, a, a, H[a * NP + a] * (1 + lambda) + 1e-9);
        gsl_vector_set(bv, a, -g[a]);
      }
      double t2[NP];
      if (gsl_linalg_cholesky_decomp1(A) == 0 && gsl_linalg_cholesky_solve(A, bv, dx) == 0) {
        for (int a = 0; a < NP; a++) {
          double st = gsl_vector_get(dx, a);
          st = st > 2 ? 2 : st < -2 ? -2 : st;
          t2[a] = th[a] + st;
        }
        double f2 = objective(p, s, n, t2, mu, prec, res2);
        if (!(f2 < f) && t2[7] != th[7]) {
          /* The cache term is a step: with the cache on a sample's byte
           * count every step down crosses the jump, however small, and LM
           * stalled there with the other parameters far from their optimum
           * (a batch-norm probe 23% off on an emulated rpi4). The same step
           * without the cache component. */
          t2[7] = th[7];
          f2 = objective(p, s, n, t2, mu, prec, res2);
        }
        if (f2 < f) {
          memcpy(th, t2, sizeof t2);
          memcpy(res, res2, (size_t)n * sizeof *res);
          f = f2;
          improved = 1;
          lambda = lambda / 3 > 1e-7 ? lambda / 3 : 1e-7;
        }
      }
      if (!improved)
        lambda *= 5;
      gsl_matrix_free(A);
      gsl_vector_free(bv);
      gsl_vector_free(dx);
    }
    if (!improved)
      break;
  }
  if (cov) {
    /* Posterior precision: J'J + prior precision, at the optimum. */
    for (int a = 0; a < NP; a++) {
      double t2[NP];
      memcpy(t2, th, sizeof t2);
      const double step = a == 7 ? 0.15 : 1e-4;
      t2[a] += step;
      objective(p, s, n, t2, mu, prec, res2);
      for (int i = 0; i < n; i++)
        J[i * NP + a] = (res2[i] - res[i]) / step;
    }
    for (int a = 0; a < NP; a++)
      for (int b = 0; b < NP; b++) {
        double h = prec[a * NP + b];
        for (int i = 0; i < n; i++)
          h += J[i * NP + a] * J[i * NP + b];
        H[a * NP + b] = h;
      }
    if (invert_spd(H, cov) < 0)
      memcpy(cov, p->cov, sizeof H);
  }
  free(res), free(res2), free(J);
}

static int cmp_d(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return (a > b) - (a < b);
}

/* The head parameter of the cache size: th[TH_CACHE] = log(cache / 1 MiB). */
enum { TH_CACHE = 7 };
static double cache_theta(double bytes) { return log(bytes / (1024.0 * 1024.0)); }
static double cache_bytes(const double *th) { return 1024.0 * 1024.0 * exp(th[TH_CACHE]); }

/* The distinct byte counts of the samples' ops, ascending, into *m (NULL
 * and 0 if none): where the cache term can change. */
static double *op_sizes(const fsample *s, int n, int *m) {
  double *b = malloc((size_t)(n > 0 ? n : 1) * MAX_OPS * sizeof *b);
  int u = 0;
  for (int i = 0; b && i < n; i++)
    for (int k = 0; k < s[i].n_ops; k++)
      if (s[i].ops[k].bytes > 0)
        b[u++] = s[i].ops[k].bytes;
  if (u == 0) {
    free(b);
    *m = 0;
    return NULL;
  }
  qsort(b, (size_t)u, sizeof *b, cmp_d);
  int d = 1;
  for (int i = 1; i < u; i++)
    if (b[i] > b[d - 1] * (1 + 1e-12))
      b[d++] = b[i];
  *m = d;
  return b;
}

/* The data part of the objective (no prior) with the cache at `bytes`. */
static double data_objective_at(const bt_predictor *p, const fsample *s, int n, const double *th,
                                double bytes) {
  double t[NP], zero[NP * NP] = {0};
  memcpy(t, th, sizeof t);
  t[TH_CACHE] = cache_theta(bytes);
  return objective(p, s, n, t, t, zero, NULL);
}

/* The samples cannot tell where the cache is between two of their ops'
 * byte counts: the objective is flat there, and LM leaves the cache at the
 * edge the prior leans on, so that every layer in the gap is wrong when the
 * device's cache is on the other side (ten probes left jetson-tx2's 512 KiB
 * anywhere between 448 KiB and 3 MiB, and the prior put it at 2.9 MiB). The
 * cache moves to the middle (in log size) of the run of gaps around it
 * that fit the samples equally; above or below every sample it stays. */
static void centre_cache(const bt_predictor *p, const fsample *s, int n, double *th) {
  int m;
  double *b = op_sizes(s, n, &m);
  /* Gap g lies between b[g-1] and b[g]; the cache is in gap `at`. */
  const double cache = cache_bytes(th);
  int at = 0;
  while (at < m && b[at] <= cache)
    at++;
  if (at > 0 && at < m) {
    const double d0 = data_objective_at(p, s, n, th, cache), tol = 1e-9 * (1 + fabs(d0));
    int lo = at, hi = at;
    while (lo > 1 && fabs(data_objective_at(p, s, n, th, sqrt(b[lo - 2] * b[lo - 1])) - d0) <= tol)
      lo--;
    while (hi < m - 1 && fabs(data_objective_at(p, s, n, th, sqrt(b[hi] * b[hi + 1])) - d0) <= tol)
      hi++;
    th[TH_CACHE] = cache_theta(sqrt(b[lo - 1] * b[hi]));
  }
  free(b);
}

/* The gap between the samples' byte counts (or below or above them all)
 * whose middle minimises the objective, the other parameters fixed, into
 * th[TH_CACHE]. Many byte counts (a seen device's corpus): a first pass over
 * coarse gaps spanning every k-th count, then every gap inside the best. */
static void search_cache(const bt_predictor *p, const fsample *s, int n, const double *mu,
                         const double *prec, double *th) {
  int m;
  double *b = op_sizes(s, n, &m);
  if (!b)
    return;
    /* Gap i (0..m) lies between lo_edge(i) and hi_edge(i); the outer ones
     * reach a factor 4 beyond the extremes, so their middles are half the
     * smallest and twice the largest count. */
#define LO_EDGE(i) ((i) > 0 ? b[(i)-1] : b[0] / 4)
#define HI_EDGE(i) ((i) < m ? b[(i)] : b[m - 1] * 4)
  double t[NP];
  memcpy(t, th, sizeof t);
  int first = 0, last = m;
  const int stride = (m + 63) / 64;
  double best = INFINITY;
  for (int i = 0; stride > 1 && i <= m; i += stride) {
    const int j = i + stride - 1 < m ? i + stride - 1 : m; /* gaps i..j */
    t[TH_CACHE] = cache_theta(sqrt(LO_EDGE(i) * HI_EDGE(j)));
    const double f = objective(p, s, n, t, mu, prec, NULL);
    if (f < best)
      best = f, first = i, last = j;
  }
  best = INFINITY;
  for (int i = first; i <= last; i++) {
    t[TH_CACHE] = cache_theta(sqrt(LO_EDGE(i) * HI_EDGE(i)));
    const double f = objective(p, s, n, t, mu, prec, NULL);
    if (f < best)
      best = f, th[TH_CACHE] = t[TH_CACHE];
  }
#undef LO_EDGE
#undef HI_EDGE
  free(b);
}

/* A full fit. The cache term is a step, so LM alone stays in whichever
 * gap between the samples' byte counts it starts in: from the population
 * mean it missed the laptop's 12 MiB, and the gap that fits best with the
 * other parameters held can lose once they follow (a real host, whose
 * probes fit best with every op in its cache). So LM runs from three
 * starts, the given one, the best gap of search_cache and a cache above
 * every sample, and the best end wins; then the cache moves to the middle
 * of its gap (centre_cache). */
static void full_fit(const bt_predictor *p, const fsample *s, int n, const double *mu,
                     const double *prec, double *th, double *cov, int iters) {
  map_fit(p, s, n, mu, prec, th, NULL, iters);
  if (!p->opt.linear_head) {
    double best[NP], fbest = objective(p, s, n, th, mu, prec, NULL), big = 0;
    memcpy(best, th, sizeof best);
    for (int i = 0; i < n; i++)
      for (int k = 0; k < s[i].n_ops; k++)
        big = fmax(big, s[i].ops[k].bytes);
    for (int start = 0; start < 2; start++) {
      double t[NP];
      memcpy(t, th, sizeof t);
      if (start == 0)
        search_cache(p, s, n, mu, prec, t);
      else
        t[TH_CACHE] = cache_theta(2 * fmax(big, 1.0));
      if (t[TH_CACHE] == th[TH_CACHE])
        continue;
      map_fit(p, s, n, mu, prec, t, NULL, iters);
      const double f = objective(p, s, n, t, mu, prec, NULL);
      if (f < fbest)
        fbest = f, memcpy(best, t, sizeof best);
    }
    memcpy(th, best, sizeof best);
    centre_cache(p, s, n, th);
  }
  map_fit(p, s, n, mu, prec, th, cov, 0);
}

/* A vague prior for fitting seen devices on their own data. */
static void vague_prior(double *mu, double *prec) {
  static const double m[NP] = {1.6, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  memcpy(mu, m, sizeof m);
  memset(prec, 0, NP * NP * sizeof *prec);
  for (int a = 0; a < NP; a++)
    prec[a * NP + a] = 1.0 / 9.0; /* std 3 in log space */
}

/* ---- fitting ------------------------------------------------------------------ */

static int same_corpus(const bt_profile *a, const bt_profile *b, const char *na, const char *nb,
                       bt_err *err) {
  if (a->n != b->n)
    return bt_err_set(err,
                      "profiling sets '%s' (%d layers) and '%s' (%d layers) time different "
                      "corpora; regenerate them with the same --seed and --random "
                      "(experiments/predictor/profile-all.sh)",
                      na, a->n, nb, b->n);
  for (int i = 0; i < a->n; i++)
    if (a->e[i].batch != b->e[i].batch || strcmp(a->e[i].spec, b->e[i].spec) != 0)
      return bt_err_set(err,
                        "profiling sets '%s' and '%s' differ at row %d (%.120s batch %d vs "
                        "%.120s batch %d); regenerate them with the same corpus",
                        na, nb, i, a->e[i].spec, a->e[i].batch, b->e[i].spec, b->e[i].batch);
  return 0;
}

static double median_of(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_d);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static int fit_heads_and_prior(bt_predictor *p, const bt_profile *sets, int n_sets,
                               const unsigned char *use_row);

/* One row of the host-time fit: a layer, its batch and its host seconds per
 * pass (the median over the base-host sets, or a host corpus's own figure). */
typedef struct host_row {
  const bt_layer *layer;
  int batch;
  double t[N_PASS]; /* t[BT_PASS_BWD_NODIN]: NaN where no set timed it */
} host_row;

static int cmp_entry_key(const void *a, const void *b) {
  const bt_profile_entry *x = *(const bt_profile_entry *const *)a;
  const bt_profile_entry *y = *(const bt_profile_entry *const *)b;
  int c = strcmp(x->spec, y->spec);
  return c ? c : (x->batch > y->batch) - (x->batch < y->batch);
}

static int check_corpus(const bt_profile *c, const char *base_arch, int k, bt_err *err) {
  if (strcmp(c->device, "host") != 0 || c->threads > 1 || strcmp(c->blis_arch, base_arch) != 0)
    return bt_err_set(err,
                      "host corpus %d (device '%s', BLIS %s, %d threads) was not timed on the "
                      "base host (device host, BLIS %s, 1 thread); profile it with "
                      "'baton profile --device host --seed S' on the same kernels",
                      k, c->device, c->blis_arch, c->threads, base_arch);
  return 0;
}

/* The rows of the host-time fit: the corpus rows in use with their median
 * host times hf/hb, then every randomised row of the host corpora whose layer
 * and batch the corpus does not hold (so that rows held out of a
 * cross-validation stay out of the fit). Returns the count or -1. */
static int collect_host_rows(const bt_profile *corpus, const unsigned char *use_row,
                             const double *hf, const double *hb, const double *hn,
                             const bt_profile *extra, int n_extra, host_row **out) {
  const int n = corpus->n;
  long cap = n;
  for (int k = 0; k < n_extra; k++)
    cap += extra[k].n;
  host_row *r = malloc((size_t)cap * sizeof *r);
  const bt_profile_entry **keys = malloc((size_t)(n > 0 ? n : 1) * sizeof *keys);
  if (!r || !keys) {
    free(r), free(keys);
    return -1;
  }
  int m = 0;
  for (int i = 0; i < n; i++) {
    keys[i] = &corpus->e[i];
    if (!use_row || use_row[i])
      r[m++] = (host_row){&corpus->e[i].layer, corpus->e[i].batch, {hf[i], hb[i], hn[i]}};
  }
  qsort(keys, (size_t)n, sizeof *keys, cmp_entry_key);
  for (int k = 0; k < n_extra; k++)
    for (int i = 0; i < extra[k].n; i++) {
      const bt_profile_entry *e = &extra[k].e[i];
      if (!bt_profile_source_fitted(e->source) ||
          bsearch(&e, keys, (size_t)n, sizeof *keys, cmp_entry_key))
        continue;
      r[m++] = (host_row){&e->layer, e->batch, {e->host_fwd, e->host_bwd, e->host_bwd_nodin}};
    }
  free(keys);
  *out = r;
  return m;
}

enum { CTX_TREES = 50, CTX_DEPTH = 3 };

/* Median over the base sets `from` of entry i's in-model (model) or
 * back-to-back host seconds of pass cp; NaN when a set has no in-model one. */
static double median_host_of(const bt_profile *sets, const int *from, int nb, int i, int cp,
                             int model, double *tmp) {
  for (int j = 0; j < nb; j++) {
    const bt_profile_entry *e = &sets[from[j]].e[i];
    tmp[j] =
        model ? (cp ? e->host_bwd_model : e->host_fwd_model) : (cp ? e->host_bwd : e->host_fwd);
    if (!isfinite(tmp[j]))
      return NAN;
  }
  return median_of(tmp, nb);
}

/* The in-model context (struct bt_predictor): on the zoo rows every base
 * set timed in their model, y = log of the medians' ratio; an intercept
 * per group and pass, then shallow boosted trees on what it misses.
 * Scratch for every used row of sets[0]: y and res one double each, Xt
 * MAXT. */
static int fit_context(bt_predictor *p, const bt_profile *sets, const int *from, int nb,
                       const unsigned char *use_row, double *y, double *Xt, double *res) {
  const int n = sets[0].n;
  double *tmp = malloc((size_t)(nb + 1) * sizeof *tmp);
  if (!tmp)
    return -1;
  p->n_ctx_rows = 0;
  for (int cp = 0; cp < 2; cp++)
    for (int g = 0; g < N_GROUPS; g++) {
      int m = 0, ntf = 0;
      for (int i = 0; i < n; i++) {
        const bt_profile_entry *e = &sets[0].e[i];
        if ((use_row && !use_row[i]) || ctx_group(e->layer.kind) != g)
          continue;
        const double a = median_host_of(sets, from, nb, i, cp, 1, tmp);
        const double b = median_host_of(sets, from, nb, i, cp, 0, tmp);
        if (!(a > 0) || !(b > 0))
          continue;
        ntf = tree_features(&e->layer, e->batch, cp, Xt + (size_t)m * MAXT);
        y[m++] = log(a / b);
      }
      if (m == 0)
        continue;
      reg *r = &p->ctx[g][cp];
      double mean = 0;
      for (int i = 0; i < m; i++)
        mean += y[i] / m;
      r->fitted = 1, r->nf = 0, r->beta[0] = mean;
      for (int i = 0; i < m; i++) {
        memmove(Xt + (size_t)i * ntf, Xt + (size_t)i * MAXT, (size_t)ntf * sizeof *Xt);
        res[i] = y[i] - mean;
      }
      if (fit_gbt(r, Xt, m, ntf, res, CTX_TREES, CTX_DEPTH) < 0) {
        free(tmp);
        return -1;
      }
      p->n_ctx_rows += m;
    }
  free(tmp);
  return 0;
}

int bt_predictor_fit(const bt_profile *sets, const char *const *names, int n_sets,
                     const unsigned char *use_row, const bt_predictor_options *opt,
                     bt_predictor **out, bt_err *err) {
  return bt_predictor_fit_ex(sets, names, n_sets, use_row, NULL, 0, opt, out, err);
}

int bt_predictor_fit_ex(const bt_profile *sets, const char *const *names, int n_sets,
                        const unsigned char *use_row, const bt_profile *host_corpora, int n_corpora,
                        const bt_predictor_options *opt, bt_predictor **out, bt_err *err) {
  *out = NULL;
  gsl_set_error_handler_off();
  if (n_sets < 1)
    return bt_err_set(err, "the predictor needs at least one profiling set");
  if (n_sets > BT_PRED_DEVICES_MAX)
    return bt_err_set(err, "at most %d profiling sets", BT_PRED_DEVICES_MAX);
  if (n_corpora < 0 || (n_corpora > 0 && !host_corpora))
    return bt_err_set(err, "bt_predictor_fit_ex: %d host corpora without an array", n_corpora);
  for (int k = 1; k < n_sets; k++)
    if (same_corpus(&sets[0], &sets[k], names ? names[0] : sets[0].device,
                    names ? names[k] : sets[k].device, err) < 0)
      return -1;
  /* The base host: the most common BLIS arch among single-thread sets. */
  int base = -1, best = 0;
  for (int k = 0; k < n_sets; k++) {
    int c = 0;
    for (int j = 0; j < n_sets; j++)
      c += sets[j].threads <= 1 && strcmp(sets[j].blis_arch, sets[k].blis_arch) == 0;
    if (sets[k].threads <= 1 && c > best)
      best = c, base = k;
  }
  if (base < 0)
    base = 0;
  for (int k = 0; k < n_corpora; k++)
    if (check_corpus(&host_corpora[k], sets[base].blis_arch, k, err) < 0)
      return -1;
  bt_predictor *p = calloc(1, sizeof *p);
  if (!p)
    return bt_err_set(err, "out of memory");
  if (opt)
    p->opt = *opt;
  else
    bt_predictor_default_options(&p->opt);
  if (p->opt.tree_depth < 1 || p->opt.tree_depth > TREE_MAX_DEPTH) {
    const int d = p->opt.tree_depth;
    free(p);
    return bt_err_set(err, "predictor: tree depth %d is out of range 1..%d", d, TREE_MAX_DEPTH);
  }
  const int n = sets[0].n;
  int *from = malloc((size_t)n_sets * sizeof *from), nb = 0;
  double *tmp = malloc((size_t)(n_sets + 1) * sizeof *tmp);
  double *hf = malloc((size_t)n * sizeof *hf), *hb = malloc((size_t)n * sizeof *hb);
  double *hn = malloc((size_t)n * sizeof *hn);
  host_row *rows = NULL;
  double *X = NULL, *y = NULL, *Xt = NULL, *res = NULL;
  int nr = -1;
  if (from && tmp && hf && hb && hn) {
    for (int k = 0; k < n_sets; k++)
      if (sets[k].threads <= 1 && strcmp(sets[k].blis_arch, sets[base].blis_arch) == 0)
        from[nb++] = k;
    for (int i = 0; i < n; i++) {
      for (int j = 0; j < nb; j++)
        tmp[j] = sets[from[j]].e[i].host_fwd;
      hf[i] = median_of(tmp, nb);
      for (int j = 0; j < nb; j++)
        tmp[j] = sets[from[j]].e[i].host_bwd;
      hb[i] = median_of(tmp, nb);
      int k = 0; /* the sets that timed the backward without input gradient */
      for (int j = 0; j < nb; j++)
        if (isfinite(sets[from[j]].e[i].host_bwd_nodin))
          tmp[k++] = sets[from[j]].e[i].host_bwd_nodin;
      hn[i] = k ? median_of(tmp, k) : NAN;
    }
    nr = collect_host_rows(&sets[0], use_row, hf, hb, hn, host_corpora, n_corpora, &rows);
  }
  if (nr >= 0) {
    const size_t nx = nr > 0 ? (size_t)nr : 1;
    X = malloc(nx * MAXF * sizeof *X), y = malloc(nx * sizeof *y);
    Xt = malloc(nx * MAXT * sizeof *Xt), res = malloc(nx * sizeof *res);
  }
#define FIT_FREE()                                                                                 \
  free(from), free(tmp), free(hf), free(hb), free(hn), free(rows), free(X), free(y), free(Xt),     \
      free(res)
  if (nr < 0 || !X || !y || !Xt || !res) {
    FIT_FREE();
    free(p);
    return bt_err_set(err, "out of memory");
  }
  /* Host rates: medians over the base-host sets. */
  for (int j = 0; j < nb; j++)
    tmp[j] = sets[from[j]].host.sgemm_gflops;
  p->hostr.sgemm_gflops = median_of(tmp, nb);
  for (int j = 0; j < nb; j++)
    tmp[j] = sets[from[j]].host.mem_gbs;
  p->hostr.mem_gbs = median_of(tmp, nb);
  if (bt_host_as_device(&p->hostr, &p->host, err) < 0) {
    FIT_FREE();
    free(p);
    return -1;
  }
  p->resid_corr[0] = p->resid_corr[1] = 1;
  for (int pass = 0; pass < N_PASS; pass++) {
    const int fp = feature_pass((bt_pass)pass);
    for (int g = 0; g < N_GROUPS; g++) {
      int m = 0, nf = 0, ntf = 0;
      for (int i = 0; i < nr; i++) {
        const bt_layer *l = rows[i].layer;
        if (group_of(l->kind) != g || !isfinite(rows[i].t[pass]) || !(rows[i].t[pass] > 0) ||
            (int)effective_pass(l, (bt_pass)pass) != pass)
          continue;
        nf = features(l, rows[i].batch, fp, X + (size_t)m * MAXF);
        ntf = tree_features(l, rows[i].batch, fp, Xt + (size_t)m * MAXT);
        y[m++] = log(rows[i].t[pass]);
      }
      if (nf >= MAXF || ntf > MAXT) { /* a feature list outgrew its arrays */
        FIT_FREE();
        bt_predictor_free(p);
        return bt_err_set(err, "predictor: %d regression / %d tree features exceed %d / %d", nf,
                          ntf, MAXF - 1, MAXT);
      }
      /* features() writes rows MAXF apart; compact them. */
      for (int i = 0; i < m; i++) {
        memmove(X + (size_t)i * nf, X + (size_t)i * MAXF, (size_t)nf * sizeof *X);
        memmove(Xt + (size_t)i * ntf, Xt + (size_t)i * MAXT, (size_t)ntf * sizeof *Xt);
      }
      reg *r = &p->hr[g][pass];
      fit_reg(r, X, y, m, nf, p->opt.ridge);
      if (r->fitted && m > 0 && p->opt.residual_memory) {
        r->kx = malloc((size_t)m * nf * sizeof *r->kx);
        r->kr = malloc((size_t)m * sizeof *r->kr);
        if (r->kx && r->kr) {
          for (int i = 0; i < m; i++) {
            for (int j = 0; j < nf; j++)
              r->kx[(size_t)i * nf + j] = (float)((X[(size_t)i * nf + j] - r->mean[j]) / r->sd[j]);
            r->kr[i] = (float)(y[i] - reg_eval(r, X + (size_t)i * nf));
          }
          r->nk = m;
        }
      }
      if (r->fitted && p->opt.trees > 0) {
        for (int i = 0; i < m; i++)
          res[i] = y[i] - reg_eval(r, X + (size_t)i * nf) - knn_correction(r, X + (size_t)i * nf);
        if (fit_gbt(r, Xt, m, ntf, res, p->opt.trees, p->opt.tree_depth) < 0) {
          FIT_FREE();
          bt_predictor_free(p);
          return bt_err_set(err, "out of memory fitting the boosted trees");
        }
      }
    }
    if (pass == BT_PASS_BWD_NODIN)
      continue; /* no residual block computes its backward without din */
    /* Residual blocks: one composition factor per pass (geometric mean). */
    double s = 0;
    int m = 0;
    for (int i = 0; i < nr; i++) {
      const bt_layer *l = rows[i].layer;
      if (l->kind != BT_RESIDUAL)
        continue;
      s += log(rows[i].t[pass]) - log(host_time(p, l, rows[i].batch, pass));
      m++;
    }
    p->resid_corr[pass] = m ? exp(s / m) : 1;
    /* Then boosted trees on what the composition still misses (the slot of
     * residual blocks has no regression of its own). */
    reg *rr = &p->hr[BT_RESIDUAL][pass];
    int ntf = 0;
    m = 0;
    for (int i = 0; i < nr && p->opt.trees > 0; i++) {
      const bt_layer *l = rows[i].layer;
      if (l->kind != BT_RESIDUAL)
        continue;
      ntf = tree_features(l, rows[i].batch, pass, Xt + (size_t)m * MAXT);
      res[m++] = log(rows[i].t[pass]) - log(host_time(p, l, rows[i].batch, pass));
    }
    for (int i = 0; i < m; i++)
      memmove(Xt + (size_t)i * ntf, Xt + (size_t)i * MAXT, (size_t)ntf * sizeof *Xt);
    if (m > 0 && fit_gbt(rr, Xt, m, ntf, res, p->opt.trees, p->opt.tree_depth) < 0) {
      FIT_FREE();
      bt_predictor_free(p);
      return bt_err_set(err, "out of memory fitting the boosted trees");
    }
  }
  if (fit_context(p, sets, from, nb, use_row, X, Xt, res) < 0) {
    FIT_FREE();
    bt_predictor_free(p);
    return bt_err_set(err, "out of memory fitting the in-model context");
  }
  FIT_FREE();
#undef FIT_FREE
  p->n_dev = n_sets;
  for (int k = 0; k < n_sets; k++)
    snprintf(p->dev[k].name, sizeof p->dev[k].name, "%s", names ? names[k] : sets[k].device);
  if (fit_heads_and_prior(p, sets, n_sets, use_row) < 0) {
    bt_predictor_free(p);
    return bt_err_set(err, "out of memory fitting device heads");
  }
  *out = p;
  return 0;
}

static int fit_heads_and_prior(bt_predictor *p, const bt_profile *sets, int n_sets,
                               const unsigned char *use_row) {
  const int n = sets[0].n;
  fsample *s = malloc((size_t)2 * n * sizeof *s);
  if (!s)
    return -1;
  int m = 0;
  for (int i = 0; i < n; i++) {
    if (use_row && !use_row[i])
      continue;
    for (int pass = 0; pass < 2; pass++)
      prep(p, &p->host, &sets[0].e[i].layer, sets[0].e[i].batch, pass, 0, &s[m++]);
  }
  double mu[NP], prec[NP * NP];
  vague_prior(mu, prec);
  for (int k = 0; k < n_sets; k++) {
    head *h = &p->dev[k];
    int j = 0;
    for (int i = 0; i < n; i++) {
      if (use_row && !use_row[i])
        continue;
      s[j++].logy = log(sets[k].e[i].fwd);
      s[j++].logy = log(sets[k].e[i].bwd);
    }
    h->raw = strcmp(sets[k].device, "host") == 0;
    h->hostr = sets[k].host;
    if (bt_host_as_device(&h->hostr, &h->hostd, NULL) < 0)
      h->hostr = p->hostr, h->hostd = p->host;
    for (int i = 0; i < m; i++) {
      s[i].raw = h->raw;
      rehost(head_host(p, h), &s[i]);
    }
    memcpy(h->th, mu, sizeof h->th);
    h->th[8] = 0.0;
    full_fit(p, s, m, mu, prec, h->th, h->P, 40);
    h->n_obs = m;
  }
  free(s);
  /* Population prior: mean and covariance of the seen heads, shrunk towards
   * a diagonal floor so that one device cannot make it singular. */
  for (int a = 0; a < NP; a++) {
    p->mu[a] = 0;
    for (int k = 0; k < n_sets; k++)
      p->mu[a] += p->dev[k].th[a] / n_sets;
  }
  for (int a = 0; a < NP; a++)
    for (int b = 0; b < NP; b++) {
      double c = 0;
      for (int k = 0; k < n_sets; k++)
        c += (p->dev[k].th[a] - p->mu[a]) * (p->dev[k].th[b] - p->mu[b]);
      p->cov[a * NP + b] = n_sets > 1 ? c / (n_sets - 1) : 0;
    }
  for (int a = 0; a < NP; a++)
    p->cov[a * NP + a] = 1.2 * p->cov[a * NP + a] + 0.1;
  /* Raw heads (real hardware) start from the raw heads seen, if any: a real
   * CPU is closer to the host than to the emulated boards. */
  int n_raw = 0;
  memset(p->mu_raw, 0, sizeof p->mu_raw);
  for (int k = 0; k < n_sets; k++)
    if (p->dev[k].raw) {
      n_raw++;
      for (int a = 0; a < NP; a++)
        p->mu_raw[a] += p->dev[k].th[a];
    }
  for (int a = 0; a < NP; a++)
    p->mu_raw[a] = n_raw ? p->mu_raw[a] / n_raw : p->mu[a];
  return 0;
}

void bt_predictor_free(bt_predictor *p) {
  if (!p)
    return;
  for (int g = 0; g < N_GROUPS; g++)
    for (int pass = 0; pass < N_PASS; pass++)
      free(p->hr[g][pass].kx), free(p->hr[g][pass].kr), free(p->hr[g][pass].tr);
  for (int g = 0; g < N_GROUPS; g++)
    for (int cp = 0; cp < 2; cp++)
      free(p->ctx[g][cp].tr);
  free(p);
}

/* ---- devices, adaptation, online updates -------------------------------------- */

int bt_predictor_device(const bt_predictor *p, const char *name) {
  for (int k = 0; p && name && k < p->n_dev; k++)
    if (strcmp(p->dev[k].name, name) == 0)
      return k;
  return -1;
}

int bt_predictor_n_devices(const bt_predictor *p) { return p ? p->n_dev : 0; }

const char *bt_predictor_device_name(const bt_predictor *p, int dev) {
  return p && dev >= 0 && dev < p->n_dev ? p->dev[dev].name : NULL;
}

static int check_samples(const bt_pred_sample *s, int n, bt_err *err) {
  if (n < 0 || (n > 0 && !s))
    return bt_err_set(err, "predictor: %d samples but no sample array", n);
  for (int i = 0; i < n; i++) {
    if (!s[i].layer)
      return bt_err_set(err, "predictor: sample %d has no layer", i);
    if (s[i].batch < 1)
      return bt_err_set(err, "predictor: sample %d (%s): batch %d must be >= 1", i,
                        bt_layer_kind_name(s[i].layer->kind), s[i].batch);
    if (s[i].pass != BT_PASS_FWD && s[i].pass != BT_PASS_BWD && s[i].pass != BT_PASS_BWD_NODIN)
      return bt_err_set(err,
                        "predictor: sample %d: pass must be forward, backward or backward "
                        "without input gradient",
                        i);
    if (!isfinite(s[i].seconds) || !(s[i].seconds > 0))
      return bt_err_set(err,
                        "predictor: sample %d (%s, batch %d): time %g s; measured times must be "
                        "positive and finite",
                        i, bt_layer_kind_name(s[i].layer->kind), s[i].batch, s[i].seconds);
  }
  return 0;
}

static fsample *prep_samples(const bt_predictor *p, const head *h, const bt_pred_sample *in,
                             int n) {
  fsample *s = malloc((size_t)(n + 1) * sizeof *s);
  for (int i = 0; s && i < n; i++) {
    prep(p, head_host(p, h), in[i].layer, in[i].batch, in[i].pass, 0, &s[i]);
    s[i].logy = log(in[i].seconds);
    s[i].raw = h->raw;
  }
  return s;
}

static int device_slot(bt_predictor *p, const char *device, bt_err *err) {
  int k = bt_predictor_device(p, device);
  if (k >= 0)
    return k;
  if (!device || !device[0] || strlen(device) >= sizeof p->dev[0].name)
    return bt_err_set(err, "predictor: a device needs a name of 1..63 characters");
  if (p->n_dev == BT_PRED_DEVICES_MAX)
    return bt_err_set(err, "predictor: at most %d devices", BT_PRED_DEVICES_MAX);
  k = p->n_dev++;
  memset(&p->dev[k], 0, sizeof p->dev[k]);
  snprintf(p->dev[k].name, sizeof p->dev[k].name, "%s", device);
  p->dev[k].hostr = p->hostr;
  p->dev[k].hostd = p->host;
  return k;
}

/* How far a few probes may pull a new head from the population prior: the
 * prior covariance times the scale (of ADAPT_SCALES) whose leave-one-layer-
 * out error over the probes is smallest (empirical Bayes by cross-
 * validation). Ten probes cannot pin ten parameters down; a scale too wide
 * fits the probes and misses every other layer (a real host variant after
 * 10 probes was worse than after none), one too narrow ignores the device.
 * The scale is not the single best one but the scales' geometric mean,
 * weighted by exp(-(error / best error - 1) / ADAPT_SOFT): ten probes'
 * errors often tie two scales 30x apart, and a hard choice flipped between
 * them from one population fit to the next (jetson-tx2 held out: 0.03 in 4
 * of 5 folds, then 1 in 3 of 5 after a change of the host model). Fewer
 * than ADAPT_CV_MIN probe layers: scale 1. Every fit here, and the final
 * one, scans the cache size as a full fit does (full_fit): from the
 * population mean, LM alone cannot reach a cache far from it. Scale 10 lets
 * 50 samples pull a head well away from a population of eight devices. */
static const double ADAPT_SCALES[] = {0.03, 0.1, 0.3, 1.0, 3.0, 10.0};
static const double ADAPT_SOFT = 0.1;
enum { ADAPT_CV_MIN = 4, ADAPT_CV_ITERS = 100 };

static double adapt_prior_scale(const bt_predictor *p, const fsample *s, int n, const double *mu,
                                const double *prec) {
  /* Groups: the samples of one probe layer (consecutive with the same ops). */
  int *grp = malloc((size_t)n * sizeof *grp), ng = 0;
  fsample *train = malloc((size_t)n * sizeof *train);
  if (!grp || !train) {
    free(grp), free(train);
    return 1.0;
  }
  for (int i = 0; i < n; i++) {
    const int same = i > 0 && s[i].n_ops == s[i - 1].n_ops && s[i].raw == s[i - 1].raw &&
                     memcmp(s[i].ops, s[i - 1].ops, sizeof s[i].ops[0] * (size_t)s[i].n_ops) == 0;
    grp[i] = same ? ng - 1 : ng++;
  }
  enum { NQ = sizeof ADAPT_SCALES / sizeof *ADAPT_SCALES };
  double errs[NQ];
  double best = 1.0, best_err = INFINITY;
  for (size_t q = 0; ng >= ADAPT_CV_MIN && q < NQ; q++) {
    double pr[NP * NP], e = 0;
    for (int a = 0; a < NP * NP; a++)
      pr[a] = prec[a] / ADAPT_SCALES[q];
    for (int g = 0; g < ng; g++) {
      int m = 0;
      for (int i = 0; i < n; i++)
        if (grp[i] != g)
          train[m++] = s[i];
      double th[NP];
      memcpy(th, mu, sizeof th);
      full_fit(p, train, m, mu, pr, th, NULL, ADAPT_CV_ITERS);
      bt_device d;
      theta_device(p, th, &d);
      for (int i = 0; i < n; i++)
        if (grp[i] == g) {
          const double r = log(head_time(p, &d, th, &s[i])) - s[i].logy;
          e += fmin(r * r, 1.0); /* one wild probe must not decide alone */
        }
    }
    errs[q] = e;
    if (e < best_err)
      best_err = e, best = ADAPT_SCALES[q];
  }
  free(grp), free(train);
  if (ng >= ADAPT_CV_MIN && best_err > 0) {
    double sw = 0, sl = 0;
    for (int q = 0; q < NQ; q++) {
      const double w = exp(-(errs[q] / best_err - 1) / ADAPT_SOFT);
      sw += w, sl += w * log(ADAPT_SCALES[q]);
    }
    best = exp(sl / sw);
  }
  return best;
}

int bt_predictor_adapt(bt_predictor *p, const char *device, const bt_pred_sample *probes, int n,
                       bt_err *err) {
  gsl_set_error_handler_off();
  if (check_samples(probes, n, err) < 0)
    return -1;
  int k = device_slot(p, device, err);
  if (k < 0)
    return -1;
  head *h = &p->dev[k];
  const double *mu = h->raw ? p->mu_raw : p->mu;
  memcpy(h->th, mu, sizeof h->th);
  memcpy(h->P, p->cov, sizeof h->P);
  h->n_obs = n;
  if (n == 0)
    return k;
  double prec[NP * NP];
  fsample *s = prep_samples(p, h, probes, n);
  if (!s || invert_spd(p->cov, prec) < 0) {
    free(s);
    return bt_err_set(err, "predictor: out of memory or singular prior");
  }
  const double scale = adapt_prior_scale(p, s, n, mu, prec);
  for (int a = 0; a < NP * NP; a++)
    prec[a] /= scale;
  full_fit(p, s, n, mu, prec, h->th, h->P, 100);
  free(s);
  return k;
}

int bt_predictor_set_raw(bt_predictor *p, int dev, int raw) {
  if (!p || dev < 0 || dev >= p->n_dev)
    return -1;
  p->dev[dev].raw = raw != 0;
  return 0;
}

int bt_predictor_set_host_rates(bt_predictor *p, int dev, const bt_host_rates *rates, bt_err *err) {
  if (!p || dev < 0 || dev >= p->n_dev || !rates)
    return bt_err_set(err, "predictor: no device %d to set host rates for", dev);
  bt_device d;
  if (bt_host_as_device(rates, &d, err) < 0)
    return -1;
  p->dev[dev].hostr = *rates;
  p->dev[dev].hostd = d;
  return 0;
}

int bt_predictor_clone_device(bt_predictor *p, const char *from, const char *to, bt_err *err) {
  int a = bt_predictor_device(p, from);
  if (a < 0)
    return bt_err_set(err, "predictor: no device '%s' to copy", from ? from : "(null)");
  int k = device_slot(p, to, err);
  if (k < 0)
    return -1;
  head h = p->dev[a];
  snprintf(h.name, sizeof h.name, "%s", to);
  p->dev[k] = h;
  return k;
}

int bt_predictor_update(bt_predictor *p, const char *device, const bt_pred_sample *measured, int n,
                        bt_err *err) {
  gsl_set_error_handler_off();
  if (check_samples(measured, n, err) < 0)
    return -1;
  int k = bt_predictor_device(p, device);
  if (k < 0) /* a device never seen: start from the population prior */
    k = bt_predictor_adapt(p, device, NULL, 0, err);
  if (k < 0)
    return -1;
  head *h = &p->dev[k];
  /* Forgetting and process noise: old evidence fades, so a device whose
   * speed changes mid-run is followed within a few rounds. */
  double P[NP * NP], prec[NP * NP], mu[NP];
  for (int a = 0; a < NP * NP; a++)
    P[a] = h->P[a] / p->opt.forget;
  for (int a = 0; a < NP; a++)
    P[a * NP + a] += p->opt.process * p->opt.process;
  if (n == 0) {
    memcpy(h->P, P, sizeof P);
    return 0;
  }
  if (invert_spd(P, prec) < 0)
    return bt_err_set(err, "predictor: head covariance of '%s' is singular", device);
  fsample *s = prep_samples(p, h, measured, n);
  if (!s)
    return bt_err_set(err, "predictor: out of memory");
  memcpy(mu, h->th, sizeof mu);
  map_fit(p, s, n, mu, prec, h->th, h->P, 20);
  h->n_obs += n;
  free(s);
  return 0;
}

double bt_predictor_predict_dev(const bt_predictor *p, int dev, const bt_layer *l, int batch,
                                bt_pass pass) {
  if (!p || !l || dev < 0 || dev >= p->n_dev || batch < 1)
    return 0.0;
  fsample s;
  prep(p, head_host(p, &p->dev[dev]), l, batch, pass, 0, &s);
  s.raw = p->dev[dev].raw;
  bt_device d;
  theta_device(p, p->dev[dev].th, &d);
  double t = head_time(p, &d, p->dev[dev].th, &s);
  return isfinite(t) && t >= 0 ? t : 0.0;
}

int bt_predictor_predict_all(const bt_predictor *p, const bt_layer *l, int batch, bt_pass pass,
                             double *out) {
  if (!p || !l || batch < 1 || !out)
    return 0;
  fsample s;
  prep(p, &p->host, l, batch, pass, 0, &s); /* the host time and ops, once for all heads */
  for (int k = 0; k < p->n_dev; k++) {
    bt_device d;
    theta_device(p, p->dev[k].th, &d);
    s.raw = p->dev[k].raw;
    rehost(head_host(p, &p->dev[k]), &s);
    double t = head_time(p, &d, p->dev[k].th, &s);
    out[k] = isfinite(t) && t >= 0 ? t : 0.0;
  }
  return p->n_dev;
}

double bt_predictor_map_dev(const bt_predictor *p, int dev, const bt_layer *l, int batch,
                            bt_pass pass, double host_seconds) {
  if (!p || !l || dev < 0 || dev >= p->n_dev || batch < 1)
    return 0.0;
  fsample s;
  prep(p, head_host(p, &p->dev[dev]), l, batch, pass,
       isfinite(host_seconds) && host_seconds > 0 ? host_seconds : 0, &s);
  s.raw = p->dev[dev].raw;
  bt_device d;
  theta_device(p, p->dev[dev].th, &d);
  double t = head_time(p, &d, p->dev[dev].th, &s);
  return isfinite(t) && t >= 0 ? t : 0.0;
}

double bt_predictor_predict(const bt_predictor *p, const char *device, const bt_layer *l, int batch,
                            bt_pass pass) {
  int k = bt_predictor_device(p, device);
  return k < 0 ? -1.0 : bt_predictor_predict_dev(p, k, l, batch, pass);
}

/* ---- model file ---------------------------------------------------------------- */

/* Doubles at 17 digits, floats at 9: a loaded predictor predicts exactly
 * what the fitted one did, so the fit cache never changes a plan. */

static void put_vec(FILE *f, const char *key, const double *v, int n) {
  fprintf(f, "%s", key);
  for (int i = 0; i < n; i++)
    fprintf(f, " %.17g", v[i]);
  fprintf(f, "\n");
}

static void put_reg(FILE *f, const char *tag, int g, int pass, const reg *r) {
  fprintf(f, "%s %d %d %d %d %.17g %.17g\n", tag, g, pass, r->nf, r->fitted, r->ylo, r->yhi);
  put_vec(f, " mean", r->mean, r->nf);
  put_vec(f, " sd", r->sd, r->nf);
  put_vec(f, " beta", r->beta, r->nf + 1);
  fprintf(f, " knn %d\n", r->nk);
  for (int i = 0; i < r->nk; i++) {
    for (int j = 0; j < r->nf; j++)
      fprintf(f, " %.9g", (double)r->kx[(size_t)i * r->nf + j]);
    fprintf(f, " %.9g\n", (double)r->kr[i]);
  }
  fprintf(f, " trees %d %d %d\n", r->nt, r->ntf, r->depth);
  for (int t = 0; t < r->nt; t++) {
    const gtree *tg = &r->tr[t];
    for (int j = 0; j < (1 << r->depth) - 1; j++)
      fprintf(f, " %d %.9g", tg->f[j], (double)tg->thr[j]);
    for (int j = 0; j < 1 << r->depth; j++)
      fprintf(f, " %.9g", (double)tg->leaf[j]);
    fprintf(f, "\n");
  }
}

int bt_predictor_save(const bt_predictor *p, const char *path, bt_err *err) {
  FILE *f = fopen(path, "w");
  if (!f)
    return bt_err_set(err, "%s: cannot write the predictor file", path);
  fprintf(f, "%s %d\n", BT_PREDICTOR_FORMAT, BT_PREDICTOR_VERSION);
  fprintf(f, "options %.17g %.17g %.17g %.17g %d %d %d\n", p->opt.sigma, p->opt.forget,
          p->opt.process, p->opt.ridge, p->opt.linear_head, p->opt.trees, p->opt.tree_depth);
  fprintf(f, "host %.17g %.17g\n", p->hostr.sgemm_gflops, p->hostr.mem_gbs);
  put_vec(f, "resid", p->resid_corr, 2);
  for (int g = 0; g < N_GROUPS; g++)
    for (int pass = 0; pass < N_PASS; pass++)
      put_reg(f, "reg", g, pass, &p->hr[g][pass]);
  fprintf(f, "context %d\n", p->n_ctx_rows);
  for (int g = 0; g < N_GROUPS; g++)
    for (int cp = 0; cp < 2; cp++)
      put_reg(f, "ctx", g, cp, &p->ctx[g][cp]);
  put_vec(f, "prior_mu", p->mu, NP);
  put_vec(f, "prior_cov", p->cov, NP * NP);
  put_vec(f, "prior_mu_raw", p->mu_raw, NP);
  fprintf(f, "devices %d\n", p->n_dev);
  for (int k = 0; k < p->n_dev; k++) {
    fprintf(f, "device %s %ld %d %.17g %.17g\n", p->dev[k].name, p->dev[k].n_obs, p->dev[k].raw,
            p->dev[k].hostr.sgemm_gflops, p->dev[k].hostr.mem_gbs);
    put_vec(f, " theta", p->dev[k].th, NP);
    put_vec(f, " cov", p->dev[k].P, NP * NP);
  }
  int bad = ferror(f);
  if (fclose(f) != 0 || bad)
    return bt_err_set(err, "%s: writing the predictor file failed", path);
  return 0;
}

static int get_vec(FILE *f, const char *key, double *v, int n) {
  char k[32];
  if (fscanf(f, " %31s", k) != 1 || strcmp(k, key) != 0)
    return -1;
  for (int i = 0; i < n; i++)
    if (fscanf(f, " %lf", &v[i]) != 1 || !isfinite(v[i]))
      return -1;
  return 0;
}

/* Reads one regression written by put_reg into slots[g * n_pass + pass];
 * 1 when it parsed and is valid (what it allocated stays in the slot, for
 * bt_predictor_free). */
static int get_reg(FILE *f, const char *tag, int n_pass, reg *slots) {
  char t[16];
  int g, pass, nf, fitted;
  double ylo = 0, yhi = 0;
  int ok = fscanf(f, " %15s %d %d %d %d %lf %lf", t, &g, &pass, &nf, &fitted, &ylo, &yhi) == 7 &&
           strcmp(t, tag) == 0 && g >= 0 && g < N_GROUPS && isfinite(ylo) && isfinite(yhi) &&
           pass >= 0 && pass < n_pass && nf >= 0 && nf < MAXF;
  if (!ok)
    return 0;
  reg *r = &slots[g * n_pass + pass];
  r->nf = nf;
  r->fitted = fitted != 0;
  r->ylo = ylo, r->yhi = yhi;
  ok = get_vec(f, "mean", r->mean, nf) == 0 && get_vec(f, "sd", r->sd, nf) == 0 &&
       get_vec(f, "beta", r->beta, nf + 1) == 0;
  for (int j = 0; ok && r->fitted && j < nf; j++) /* an unfitted slot has zeros */
    ok = r->sd[j] > 0;
  int nk = -1;
  ok = ok && fscanf(f, " knn %d", &nk) == 1 && nk >= 0 && nk < 1000000;
  if (ok && nk > 0) {
    r->kx = malloc((size_t)nk * (nf + 1) * sizeof *r->kx);
    r->kr = malloc((size_t)nk * sizeof *r->kr);
    ok = r->kx && r->kr;
    for (int q = 0; ok && q < nk; q++) {
      for (int j = 0; ok && j < nf; j++)
        ok = fscanf(f, " %f", &r->kx[(size_t)q * nf + j]) == 1 &&
             isfinite(r->kx[(size_t)q * nf + j]);
      ok = ok && fscanf(f, " %f", &r->kr[q]) == 1 && isfinite(r->kr[q]);
    }
    r->nk = ok ? nk : 0;
  }
  int nt = -1, ntf = -1, depth = -1;
  ok = ok && fscanf(f, " trees %d %d %d", &nt, &ntf, &depth) == 3 && nt >= 0 && nt <= 100000 &&
       ntf >= 0 && ntf <= MAXT && depth >= (nt > 0) && depth <= TREE_MAX_DEPTH;
  r->depth = ok ? depth : 0;
  if (ok && nt > 0) {
    r->tr = calloc((size_t)nt, sizeof *r->tr);
    ok = r->tr != NULL;
    for (int tt = 0; ok && tt < nt; tt++) {
      gtree *tg = &r->tr[tt];
      for (int j = 0; ok && j < (1 << depth) - 1; j++) {
        int fj = -1;
        ok =
            fscanf(f, " %d %f", &fj, &tg->thr[j]) == 2 && fj >= 0 && fj < ntf && !isnan(tg->thr[j]);
        tg->f[j] = (unsigned char)(ok ? fj : 0);
      }
      for (int j = 0; ok && j < 1 << depth; j++)
        ok = fscanf(f, " %f", &tg->leaf[j]) == 1 && isfinite(tg->leaf[j]);
    }
    r->nt = ok ? nt : 0;
    r->ntf = ntf;
  }
  return ok;
}

int bt_predictor_load(const char *path, bt_predictor **out, bt_err *err) {
  *out = NULL;
  FILE *f = fopen(path, "r");
  if (!f)
    return bt_err_set(err, "%s: no such predictor file (fit one with 'baton predictor fit')", path);
  bt_predictor *p = calloc(1, sizeof *p);
  char fmt[32] = "";
  int ver = 0, ok = p != NULL;
  ok = ok && fscanf(f, " %31s %d", fmt, &ver) == 2 && strcmp(fmt, BT_PREDICTOR_FORMAT) == 0 &&
       ver == BT_PREDICTOR_VERSION;
  ok = ok && fscanf(f, " options %lf %lf %lf %lf %d %d %d", &p->opt.sigma, &p->opt.forget,
                    &p->opt.process, &p->opt.ridge, &p->opt.linear_head, &p->opt.trees,
                    &p->opt.tree_depth) == 7;
  ok = ok && p->opt.sigma > 0 && p->opt.forget > 0 && p->opt.forget <= 1 && p->opt.process >= 0;
  ok = ok && fscanf(f, " host %lf %lf", &p->hostr.sgemm_gflops, &p->hostr.mem_gbs) == 2;
  ok = ok && bt_host_as_device(&p->hostr, &p->host, err) == 0;
  ok = ok && get_vec(f, "resid", p->resid_corr, 2) == 0 && p->resid_corr[0] > 0 &&
       p->resid_corr[1] > 0;
  for (int i = 0; ok && i < N_PASS * N_GROUPS; i++)
    ok = get_reg(f, "reg", N_PASS, &p->hr[0][0]);
  ok = ok && fscanf(f, " context %d", &p->n_ctx_rows) == 1 && p->n_ctx_rows >= 0;
  for (int i = 0; ok && i < 2 * N_GROUPS; i++)
    ok = get_reg(f, "ctx", 2, &p->ctx[0][0]);
  ok = ok && get_vec(f, "prior_mu", p->mu, NP) == 0 &&
       get_vec(f, "prior_cov", p->cov, NP * NP) == 0 &&
       get_vec(f, "prior_mu_raw", p->mu_raw, NP) == 0;
  ok = ok && fscanf(f, " devices %d", &p->n_dev) == 1 && p->n_dev >= 0 &&
       p->n_dev <= BT_PRED_DEVICES_MAX;
  for (int k = 0; ok && k < p->n_dev; k++) {
    head *h = &p->dev[k];
    ok = fscanf(f, " device %63s %ld %d %lf %lf", h->name, &h->n_obs, &h->raw,
                &h->hostr.sgemm_gflops, &h->hostr.mem_gbs) == 5 &&
         bt_host_as_device(&h->hostr, &h->hostd, err) == 0 && get_vec(f, "theta", h->th, NP) == 0 &&
         get_vec(f, "cov", h->P, NP * NP) == 0;
  }
  fclose(f);
  if (!ok) {
    bt_predictor_free(p);
    return bt_err_set(err,
                      "%s: not a valid baton predictor file (corrupt, truncated or another "
                      "version); refit it with 'baton predictor fit'",
                      path);
  }
  *out = p;
  return 0;
}
