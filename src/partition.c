/* partition: exact plan search (suffix DP for bounds + branch and bound on
 * the exact makespan), baselines and a brute-force reference; see
 * include/baton/partition.h and docs/partition.md. Pure: no MPI, no I/O. */
#include "baton/partition.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { MAXD = BT_PLAN_MAX_DEVICES };

/* Largest DP table (states) the search accepts: two floats per state. */
#define MAX_DP_STATES (1L << 25)

typedef struct ctx {
  const bt_plan_problem *p;
  int L, D, M;
  double ratio, scale;
  double *F, *B, *O; /* per-device prefix sums [D][L+1] */
  double *W, *A;     /* prefix sums of state and stash bytes [L+1] */
  bt_schedule sched[MAXD + 1];
  int built[MAXD + 1];
} ctx;

static int ctx_init(ctx *c, const bt_plan_problem *p, bt_err *err) {
  memset(c, 0, sizeof *c);
  if (bt_plan_problem_check(p, err) < 0)
    return -1;
  c->p = p;
  c->L = p->n_layers;
  c->D = p->n_devices;
  c->M = p->micro;
  c->ratio = p->codec_ratio > 0 ? p->codec_ratio : 1.0;
  c->scale = p->mem_scale > 0 ? p->mem_scale : 1.0;
  int L = c->L, D = c->D;
  c->F = calloc((size_t)D * (L + 1), sizeof(double));
  c->B = calloc((size_t)D * (L + 1), sizeof(double));
  c->O = calloc((size_t)D * (L + 1), sizeof(double));
  c->W = calloc((size_t)L + 1, sizeof(double));
  c->A = calloc((size_t)L + 1, sizeof(double));
  if (!c->F || !c->B || !c->O || !c->W || !c->A)
    return bt_err_set(err, "partition: out of memory for %d layers x %d devices", L, D);
  for (int d = 0; d < D; d++)
    for (int l = 0; l < L; l++) {
      size_t k = (size_t)d * (L + 1) + l;
      c->F[k + 1] = c->F[k] + p->fwd[(size_t)d * L + l];
      c->B[k + 1] = c->B[k] + p->bwd[(size_t)d * L + l];
      c->O[k + 1] = c->O[k] + (p->optim ? p->optim[(size_t)d * L + l] : 0.0);
    }
  for (int l = 0; l < L; l++) {
    c->W[l + 1] = c->W[l] + (p->state_bytes ? p->state_bytes[l] : 0.0);
    c->A[l + 1] = c->A[l] + (p->stash_bytes ? p->stash_bytes[l] : 0.0);
  }
  return 0;
}

static void ctx_free(ctx *c) {
  free(c->F);
  free(c->B);
  free(c->O);
  free(c->W);
  free(c->A);
  for (int s = 0; s <= MAXD; s++)
    if (c->built[s])
      bt_schedule_free(&c->sched[s]);
  memset(c, 0, sizeof *c);
}

/* Compute of stage [i, j) on d, codec work included. */
static void stage_time(const ctx *c, int d, int i, int j, double *f, double *b) {
  size_t o = (size_t)d * (c->L + 1);
  double ff = c->F[o + j] - c->F[o + i], bb = c->B[o + j] - c->B[o + i];
  const bt_plan_problem *p = c->p;
  if (p->codec_encode > 0 || p->codec_decode > 0) {
    if (i > 0) { /* decode act in, encode grad out */
      double by = p->act_bytes[i - 1];
      ff += p->codec_decode * by;
      bb += p->codec_encode * by;
    }
    if (j < c->L) { /* encode act out, decode grad in */
      double by = p->act_bytes[j - 1];
      ff += p->codec_encode * by;
      bb += p->codec_decode * by;
    }
  }
  *f = ff;
  *b = bb;
}

/* Micro-batches in flight on a stage with r stages from it to the end (S - s). */
static int in_flight(const ctx *c, int r) {
  if (c->p->kind == BT_SCHED_1F1B)
    return r < c->M ? r : c->M;
  return c->M;
}

static double stage_mem(const ctx *c, int i, int j, int r) {
  return (c->W[j] - c->W[i]) + (double)in_flight(c, r) * (c->A[j] - c->A[i]);
}

static double cap(const ctx *c, int d) {
  return c->p->mem_cap ? c->p->mem_cap[d] * c->scale : INFINITY;
}

/* Link times of the cut before layer j between d (stage before) and e. */
static void link_time(const ctx *c, int d, int e, int j, double *a, double *g) {
  const bt_plan_problem *p = c->p;
  int D = c->D;
  double by = c->ratio * p->act_bytes[j - 1];
  *a = (p->latency ? p->latency[d * D + e] : 0.0) + by / p->bandwidth[d * D + e];
  *g = (p->latency ? p->latency[e * D + d] : 0.0) + by / p->bandwidth[e * D + d];
}

/* The per-stage weight x_k of the bound P + (M-1) max_k x_k (docs/partition.md). */
static double stage_x(const ctx *c, double f, double b, int r) {
  if (c->p->kind == BT_SCHED_GPIPE || c->M <= 1)
    return f + b;
  int w = r - 1 < c->M ? r - 1 : c->M;
  int k = c->M - 1 - w;
  return f + (k > 0 ? (double)k / (double)(c->M - 1) * b : 0.0);
}

static float down(double v) {
  float f = (float)v;
  if ((double)f > v)
    f = nextafterf(f, -INFINITY);
  return f;
}

/* Fills the predicted fields of plan (n_stages, device, first set, valid).
 * Returns 1 when it fits memory, 0 when stage *bad does not, -1 on error. */
static int plan_fill(ctx *c, bt_plan *pl, int *bad, bt_err *err) {
  int S = pl->n_stages;
  *bad = -1;
  for (int s = 0; s < S; s++) {
    int d = pl->device[s], i = pl->first[s], j = pl->first[s + 1];
    stage_time(c, d, i, j, &pl->fwd[s], &pl->bwd[s]);
    size_t o = (size_t)d * (c->L + 1);
    pl->optim[s] = c->O[o + j] - c->O[o + i];
    pl->mem[s] = stage_mem(c, i, j, S - s);
    pl->act_comm[s] = pl->grad_comm[s] = 0.0;
    if (s + 1 < S)
      link_time(c, d, pl->device[s + 1], j, &pl->act_comm[s], &pl->grad_comm[s]);
    if (*bad < 0 && pl->mem[s] > cap(c, d))
      *bad = s;
  }
  if (!c->built[S]) {
    if (bt_schedule_build(&c->sched[S], c->p->kind, S, c->M, err) < 0)
      return -1;
    c->built[S] = 1;
  }
  bt_sched_costs costs = {pl->fwd, pl->bwd, pl->act_comm, pl->grad_comm, pl->optim};
  if (bt_schedule_makespan(&c->sched[S], &costs, &pl->iter_time, err) < 0)
    return -1;
  return *bad < 0;
}

static int finite_nonneg(const double *x, size_t n) {
  for (size_t k = 0; k < n; k++)
    if (!(x[k] >= 0.0) || !isfinite(x[k]))
      return 0;
  return 1;
}

int bt_plan_problem_check(const bt_plan_problem *p, bt_err *err) {
  if (!p)
    return bt_err_set(err, "partition: no problem given");
  int L = p->n_layers, D = p->n_devices;
  if (L < 1)
    return bt_err_set(err, "partition: n_layers = %d; need at least 1 layer", L);
  if (D < 1 || D > MAXD)
    return bt_err_set(err, "partition: n_devices = %d; need 1..%d", D, MAXD);
  if (p->micro < 1 || p->micro > BT_SCHED_MAX_MICRO)
    return bt_err_set(err, "partition: micro = %d; need 1..%d micro-batches", p->micro,
                      BT_SCHED_MAX_MICRO);
  if (p->kind != BT_SCHED_GPIPE && p->kind != BT_SCHED_1F1B)
    return bt_err_set(err, "partition: unknown schedule kind %d", (int)p->kind);
  if (!p->fwd || !p->bwd)
    return bt_err_set(err, "partition: fwd and bwd times [devices x layers] are required");
  size_t n = (size_t)D * L;
  if (!finite_nonneg(p->fwd, n) || !finite_nonneg(p->bwd, n) ||
      (p->optim && !finite_nonneg(p->optim, n)))
    return bt_err_set(err, "partition: fwd/bwd/optim times must be finite and >= 0");
  if ((p->state_bytes && !finite_nonneg(p->state_bytes, L)) ||
      (p->stash_bytes && !finite_nonneg(p->stash_bytes, L)) ||
      (p->act_bytes && !finite_nonneg(p->act_bytes, L)))
    return bt_err_set(err, "partition: byte counts must be finite and >= 0");
  if (p->mem_cap)
    for (int d = 0; d < D; d++)
      if (!(p->mem_cap[d] >= 0.0))
        return bt_err_set(err, "partition: mem_cap[%d] = %g; must be >= 0", d, p->mem_cap[d]);
  if (!(p->codec_ratio >= 0.0) || !(p->codec_encode >= 0.0) || !(p->codec_decode >= 0.0) ||
      !(p->mem_scale >= 0.0) || !isfinite(p->codec_ratio) || !isfinite(p->codec_encode) ||
      !isfinite(p->codec_decode) || !isfinite(p->mem_scale))
    return bt_err_set(err, "partition: codec ratio/costs and mem_scale must be finite and >= 0");
  if (D > 1 || p->codec_encode > 0 || p->codec_decode > 0) {
    if (!p->act_bytes)
      return bt_err_set(err, "partition: act_bytes [layers] is required with several devices");
  }
  if (D > 1) {
    if (!p->bandwidth)
      return bt_err_set(err, "partition: bandwidth [devices x devices] is required");
    for (int a = 0; a < D; a++)
      for (int b = 0; b < D; b++) {
        if (a == b)
          continue;
        double bw = p->bandwidth[a * D + b];
        if (!(bw > 0.0))
          return bt_err_set(err, "partition: bandwidth[%d][%d] = %g; must be > 0 bytes/s", a, b,
                            bw);
        if (p->latency && (!(p->latency[a * D + b] >= 0.0) || !isfinite(p->latency[a * D + b])))
          return bt_err_set(err, "partition: latency[%d][%d] must be finite and >= 0", a, b);
      }
  }
  return 0;
}

/* Shared structural checks of a plan. */
static int plan_check(const ctx *c, const bt_plan *pl, bt_err *err) {
  int S = pl->n_stages;
  if (S < 1 || S > c->D || S > c->L)
    return bt_err_set(err, "partition: %d stages; need 1..%d (devices %d, layers %d)", S,
                      c->D < c->L ? c->D : c->L, c->D, c->L);
  if (pl->first[0] != 0 || pl->first[S] != c->L)
    return bt_err_set(err, "partition: stages must cover layers 0..%d", c->L - 1);
  for (int k = 1; k < S; k++) {
    int cut = pl->first[k];
    if (cut < 1 || cut >= c->L)
      return bt_err_set(err, "partition: cut %d (first layer of stage %d) = %d is out of range; "
                        "cuts must lie in [1, %d]", k - 1, k, cut, c->L - 1);
    if (cut <= pl->first[k - 1])
      return bt_err_set(err, "partition: cut %d (first layer of stage %d) = %d is not greater "
                        "than the previous cut %d; cuts must be strictly increasing", k - 1, k,
                        cut, pl->first[k - 1]);
  }
  unsigned used = 0;
  for (int s = 0; s < S; s++) {
    int d = pl->device[s];
    if (d < 0 || d >= c->D)
      return bt_err_set(err, "partition: stage %d device %d out of range [0, %d)", s, d, c->D);
    if (used & (1u << d))
      return bt_err_set(err, "partition: device %d runs two stages", d);
    used |= 1u << d;
  }
  return 0;
}

static int evaluate_ctx(ctx *c, bt_plan *pl, bt_err *err) {
  if (plan_check(c, pl, err) < 0)
    return -1;
  int bad, r = plan_fill(c, pl, &bad, err);
  if (r < 0)
    return -1;
  if (r == 0)
    return bt_err_set(err, "partition: stage %d (layers %d..%d) needs %.4g bytes on device %d, "
                      "which has %.4g; move layers off it or add memory", bad, pl->first[bad],
                      pl->first[bad + 1] - 1, pl->mem[bad], pl->device[bad], cap(c, pl->device[bad]));
  return 0;
}

int bt_plan_evaluate(const bt_plan_problem *p, bt_plan *plan, bt_err *err) {
  ctx c;
  int rc = ctx_init(&c, p, err);
  if (rc == 0)
    rc = evaluate_ctx(&c, plan, err);
  ctx_free(&c);
  return rc;
}

/* ---- minimum memory scale: bottleneck DP of memory / capacity ---- */

/* Whether a plan may start on device d with device set U, and whether a
 * stage on d may be followed by one on e, under p->device_use. */
static int root_allowed(const ctx *c, size_t U, int d) {
  const size_t all = ((size_t)1 << c->D) - 1;
  switch (c->p->device_use) {
  case BT_PLAN_ALL_DEVICES:
    return U == all;
  case BT_PLAN_DEVICES_IN_ORDER:
    return U == all && d == 0;
  default:
    return 1;
  }
}

static int next_allowed(const ctx *c, int d, int e) {
  return c->p->device_use != BT_PLAN_DEVICES_IN_ORDER || e == d + 1;
}

static double ratio_of(double mem, double capacity) {
  if (mem <= 0.0)
    return 0.0;
  if (!(capacity > 0.0))
    return INFINITY;
  return mem / capacity;
}

static int min_scale_ctx(const ctx *c, double *scale, bt_err *err) {
  int L = c->L, D = c->D;
  size_t nU = (size_t)1 << D;
  size_t ns = (size_t)L * nU * D;
  if ((long)ns > MAX_DP_STATES)
    return bt_err_set(err, "partition: %d layers x 2^%d device sets x %d devices is too large "
                      "for the exact search; use fewer devices or coarser layers", L, D, D);
  double *R = malloc(ns * sizeof(double));
  if (!R)
    return bt_err_set(err, "partition: out of memory for the DP table");
  const double *mc = c->p->mem_cap;
  double best = INFINITY;
  for (int i = L - 1; i >= 0; i--)
    for (size_t U = 1; U < nU; U++) {
      int r = __builtin_popcount((unsigned)U);
      for (int d = 0; d < D; d++) {
        double *v = &R[((size_t)i * nU + U) * D + d];
        *v = INFINITY;
        if (!(U & (1u << d)) || r > L - i)
          continue;
        double capd = mc ? mc[d] : INFINITY;
        if (r == 1) {
          *v = ratio_of(stage_mem(c, i, L, 1), capd);
        } else {
          size_t V = U & ~((size_t)1 << d);
          for (int j = i + 1; j <= L - r + 1; j++) {
            double x = ratio_of(stage_mem(c, i, j, r), capd);
            if (x >= *v)
              break; /* memory grows with j */
            for (int e = 0; e < D; e++)
              if ((V & (1u << e)) && next_allowed(c, d, e)) {
                double y = R[((size_t)j * nU + V) * D + e];
                double m = x > y ? x : y;
                if (m < *v)
                  *v = m;
              }
          }
        }
        if (i == 0 && *v < best && root_allowed(c, U, d))
          best = *v;
      }
    }
  free(R);
  *scale = best;
  return 0;
}

int bt_plan_min_mem_scale(const bt_plan_problem *p, double *scale, bt_err *err) {
  ctx c;
  int rc = ctx_init(&c, p, err);
  if (rc == 0)
    rc = min_scale_ctx(&c, scale, err);
  ctx_free(&c);
  return rc;
}

static int no_fit(const ctx *c, bt_err *err) {
  double s;
  if (min_scale_ctx(c, &s, err) < 0)
    return -1;
  if (!isfinite(s))
    return bt_err_set(err, "partition: no plan fits in memory at any scale (some layer needs "
                      "memory and no device capacity is > 0%s)",
                      c->p->device_use != BT_PLAN_ANY_DEVICES && c->L < c->D
                          ? ", or fewer layers than devices that must all be used"
                          : "");
  return bt_err_set(err, "partition: no plan fits in memory (scale %.4g); the smallest memory "
                    "scale with which some plan fits is %.6g x every device's capacity",
                    c->scale, s);
}

/* ---- exact search ---- */

typedef struct kid {
  double lb, p, x;
  int j, e;
} kid;

typedef struct bb {
  ctx *c;
  size_t nU;
  float *X, *P;
  kid *kids; /* [depth][L*D] */
  int dev[MAXD], first[MAXD + 1];
  double best;
  bt_plan plan;
  bt_plan_stats st;
  bt_err *err;
  int failed, stopped;
  long budget;
  double open_lb; /* smallest bound of a subtree skipped for the budget */
} bb;

static int cmp_kid(const void *a, const void *b) {
  double x = ((const kid *)a)->lb, y = ((const kid *)b)->lb;
  return x < y ? -1 : x > y ? 1 : 0;
}

static size_t sidx(const bb *t, int i, size_t U, int d) {
  return ((size_t)i * t->nU + U) * t->c->D + d;
}

/* Bound tables: X = min over completions of max x_k, P = min of sum p_k. */
static int fill_dp(bb *t, bt_err *err) {
  ctx *c = t->c;
  int L = c->L, D = c->D;
  size_t nU = t->nU, ns = (size_t)L * nU * D;
  if ((long)ns > MAX_DP_STATES)
    return bt_err_set(err, "partition: %d layers x 2^%d device sets x %d devices is too large "
                      "for the exact search; use fewer devices or coarser layers", L, D, D);
  t->X = malloc(ns * sizeof(float));
  t->P = malloc(ns * sizeof(float));
  if (!t->X || !t->P)
    return bt_err_set(err, "partition: out of memory for the DP table");
  for (int i = L - 1; i >= 0; i--)
    for (size_t U = 1; U < nU; U++) {
      int r = __builtin_popcount((unsigned)U);
      size_t V = U;
      for (int d = 0; d < D; d++) {
        size_t k = sidx(t, i, U, d);
        t->X[k] = t->P[k] = INFINITY;
        if (!(U & (1u << d)) || r > L - i)
          continue;
        t->st.dp_states++;
        double cd = cap(c, d), bx = INFINITY, bp = INFINITY, f, b;
        if (r == 1) {
          if (stage_mem(c, i, L, 1) <= cd) {
            stage_time(c, d, i, L, &f, &b);
            bx = stage_x(c, f, b, 1);
            bp = f + b;
          }
        } else {
          V = U & ~((size_t)1 << d);
          for (int j = i + 1; j <= L - r + 1; j++) {
            if (stage_mem(c, i, j, r) > cd)
              break;
            stage_time(c, d, i, j, &f, &b);
            double xs = stage_x(c, f, b, r), ts = f + b;
            for (int e = 0; e < D; e++) {
              if (!(V & (1u << e)))
                continue;
              size_t ck = sidx(t, j, V, e);
              double cx = t->X[ck];
              if (!isfinite(cx))
                continue;
              double a, g;
              link_time(c, d, e, j, &a, &g);
              double x = xs;
              if (a > x) x = a;
              if (g > x) x = g;
              if (cx > x) x = cx;
              if (x < bx) bx = x;
              double pp = ts + a + g + t->P[ck];
              if (pp < bp) bp = pp;
            }
          }
        }
        t->X[k] = down(bx);
        t->P[k] = down(bp);
      }
    }
  return 0;
}

/* Exact bound on a complete plan: the sum/max bound and, for every stage,
 * (everything before it, both ways) + M (f + b). */
static double full_bound(const bb *t, int S, double pp, double xx) {
  ctx *c = t->c;
  double lb = pp + (c->M - 1) * xx, left = 0.0;
  for (int s = 0; s < S; s++) {
    double f, b;
    stage_time(c, t->dev[s], t->first[s], t->first[s + 1], &f, &b);
    double v = left + c->M * (f + b);
    if (v > lb)
      lb = v;
    left += f + b;
    if (s + 1 < S) {
      double a, g;
      link_time(c, t->dev[s], t->dev[s + 1], t->first[s + 1], &a, &g);
      left += a + g;
    }
  }
  return lb;
}

static void leaf(bb *t, int S, double pp, double xx) {
  t->st.evaluated++;
  if (full_bound(t, S, pp, xx) >= t->best)
    return;
  bt_plan pl;
  memset(&pl, 0, sizeof pl);
  pl.n_stages = S;
  memcpy(pl.device, t->dev, sizeof(int) * S);
  memcpy(pl.first, t->first, sizeof(int) * (S + 1));
  int bad, r = plan_fill(t->c, &pl, &bad, t->err);
  if (r < 0) {
    t->failed = 1;
    return;
  }
  if (r == 1 && pl.iter_time < t->best) {
    t->best = pl.iter_time;
    t->plan = pl;
  }
}

/* Stage `depth` starts at layer i on device d; U: devices of this and later stages. */
static void node(bb *t, int depth, int i, size_t U, int d, double pp, double xx) {
  ctx *c = t->c;
  int L = c->L, D = c->D, r = __builtin_popcount((unsigned)U);
  t->st.nodes++;
  if (t->budget > 0 && t->st.nodes > t->budget) {
    t->stopped = 1;
    return;
  }
  t->dev[depth] = d;
  t->first[depth] = i;
  double f, b;
  if (r == 1) {
    stage_time(c, d, i, L, &f, &b);
    t->first[depth + 1] = L;
    double x = stage_x(c, f, b, 1);
    leaf(t, depth + 1, pp + f + b, xx > x ? xx : x);
    return;
  }
  kid *ks = t->kids + (size_t)depth * L * D;
  int nk = 0;
  size_t V = U & ~((size_t)1 << d);
  double cd = cap(c, d);
  for (int j = i + 1; j <= L - r + 1; j++) {
    if (stage_mem(c, i, j, r) > cd)
      break;
    stage_time(c, d, i, j, &f, &b);
    double xs = stage_x(c, f, b, r);
    for (int e = 0; e < D; e++) {
      if (!(V & (1u << e)) || !next_allowed(c, d, e))
        continue;
      size_t ck = sidx(t, j, V, e);
      if (!isfinite(t->X[ck]))
        continue;
      double a, g;
      link_time(c, d, e, j, &a, &g);
      double x = xs;
      if (a > x) x = a;
      if (g > x) x = g;
      if (xx > x) x = xx;
      double p = pp + f + b + a + g;
      double cx = t->X[ck] > x ? t->X[ck] : x;
      double lb = p + t->P[ck] + (c->M - 1) * cx;
      if (lb >= t->best)
        continue;
      ks[nk++] = (kid){lb, p, x, j, e};
    }
  }
  qsort(ks, (size_t)nk, sizeof(kid), cmp_kid);
  for (int k = 0; k < nk && !t->failed; k++) {
    if (ks[k].lb >= t->best)
      break;
    if (t->stopped) { /* children are sorted: the first skipped one bounds the rest */
      if (ks[k].lb < t->open_lb)
        t->open_lb = ks[k].lb;
      break;
    }
    node(t, depth + 1, ks[k].j, V, ks[k].e, ks[k].p, ks[k].x);
  }
}

typedef struct root {
  double lb;
  uint32_t U;
  int d;
} root;

static int cmp_root(const void *a, const void *b) {
  double x = ((const root *)a)->lb, y = ((const root *)b)->lb;
  return x < y ? -1 : x > y ? 1 : 0;
}

int bt_plan_search(const bt_plan_problem *p, bt_plan *out, bt_plan_stats *stats, bt_err *err) {
  ctx c;
  bb t;
  memset(&t, 0, sizeof t);
  root *roots = NULL;
  int rc = ctx_init(&c, p, err);
  if (rc < 0)
    goto done;
  t.c = &c;
  t.nU = (size_t)1 << c.D;
  t.best = INFINITY;
  t.err = err;
  t.open_lb = INFINITY;
  t.budget = p->max_nodes == 0 ? BT_PLAN_DEFAULT_NODES : p->max_nodes;
  if ((rc = fill_dp(&t, err)) < 0)
    goto done;
  t.kids = malloc((size_t)(MAXD + 1) * c.L * c.D * sizeof(kid));
  roots = malloc(t.nU * c.D * sizeof(root));
  if (!t.kids || !roots) {
    rc = bt_err_set(err, "partition: out of memory for the search");
    goto done;
  }
  size_t nr = 0;
  for (size_t U = 1; U < t.nU; U++)
    for (int d = 0; d < c.D; d++) {
      size_t k = sidx(&t, 0, U, d);
      if ((U & (1u << d)) && isfinite(t.X[k]) && root_allowed(&c, U, d))
        roots[nr++] = (root){(double)t.P[k] + (c.M - 1) * (double)t.X[k], (uint32_t)U, d};
    }
  if (nr == 0) {
    rc = no_fit(&c, err);
    goto done;
  }
  qsort(roots, nr, sizeof(root), cmp_root);
  for (size_t k = 0; k < nr && !t.failed; k++) {
    if (roots[k].lb >= t.best)
      break;
    if (t.stopped) {
      if (roots[k].lb < t.open_lb)
        t.open_lb = roots[k].lb;
      break;
    }
    node(&t, 0, 0, roots[k].U, roots[k].d, 0.0, 0.0);
  }
  if (t.failed) {
    rc = -1;
    goto done;
  }
  if (!isfinite(t.best)) { /* cannot happen: a finite root has a feasible completion */
    rc = no_fit(&c, err);
    goto done;
  }
  *out = t.plan;
  t.st.exact = !t.stopped;
  t.st.lower_bound = t.stopped && t.open_lb < t.best ? t.open_lb : t.best;
  if (stats)
    *stats = t.st;
  rc = 0;
done:
  free(roots);
  free(t.kids);
  free(t.X);
  free(t.P);
  ctx_free(&c);
  return rc;
}

/* ---- brute force ---- */

typedef struct brute {
  ctx *c;
  bt_plan cur, best;
  int found, failed;
  bt_err *err;
} brute;

static void brute_cuts(brute *bf, int s) {
  bt_plan *pl = &bf->cur;
  int S = pl->n_stages, L = bf->c->L;
  if (s == S) {
    int bad, r = plan_fill(bf->c, pl, &bad, bf->err);
    if (r < 0)
      bf->failed = 1;
    else if (r == 1 && (!bf->found || pl->iter_time < bf->best.iter_time)) {
      bf->best = *pl;
      bf->found = 1;
    }
    return;
  }
  /* first[s] for s in 1..S-1; first[S] = L */
  for (int f = pl->first[s - 1] + 1; f <= L - (S - s) && !bf->failed; f++) {
    pl->first[s] = f;
    brute_cuts(bf, s + 1);
  }
}

static void brute_devs(brute *bf, int s, unsigned used) {
  bt_plan *pl = &bf->cur;
  const int complete = bf->c->p->device_use == BT_PLAN_ANY_DEVICES || s == bf->c->D;
  if (s > 0 && s <= bf->c->L && complete) {
    pl->n_stages = s;
    pl->first[0] = 0;
    pl->first[s] = bf->c->L;
    if (s == 1)
      brute_cuts(bf, 1);
    else
      brute_cuts(bf, 1);
  }
  if (s == bf->c->D || s >= bf->c->L)
    return;
  for (int d = 0; d < bf->c->D && !bf->failed; d++)
    if (!(used & (1u << d)) && (s == 0 ? d == 0 || bf->c->p->device_use != BT_PLAN_DEVICES_IN_ORDER
                                       : next_allowed(bf->c, pl->device[s - 1], d))) {
      pl->device[s] = d;
      brute_devs(bf, s + 1, used | (1u << d));
    }
}

int bt_plan_brute_force(const bt_plan_problem *p, bt_plan *out, bt_err *err) {
  ctx c;
  int rc = ctx_init(&c, p, err);
  if (rc == 0) {
    brute bf;
    memset(&bf, 0, sizeof bf);
    bf.c = &c;
    bf.err = err;
    brute_devs(&bf, 0, 0);
    if (bf.failed)
      rc = -1;
    else if (!bf.found)
      rc = no_fit(&c, err);
    else
      *out = bf.best;
  }
  ctx_free(&c);
  return rc;
}

/* ---- baselines ---- */

static int baseline_start(ctx *c, const bt_plan_problem *p, int S, bt_plan *pl, bt_err *err) {
  if (ctx_init(c, p, err) < 0)
    return -1;
  if (S < 1 || S > c->D || S > c->L)
    return bt_err_set(err, "partition: %d stages; need 1..%d (devices %d, layers %d)", S,
                      c->D < c->L ? c->D : c->L, c->D, c->L);
  memset(pl, 0, sizeof *pl);
  pl->n_stages = S;
  for (int s = 0; s < S; s++)
    pl->device[s] = s;
  pl->first[0] = 0;
  pl->first[S] = c->L;
  return 0;
}

/* Cuts at the layer boundaries nearest to the cumulative targets of a
 * per-layer weight w: stage s ends where the prefix reaches share[0..s]. */
static void balance_cuts(const ctx *c, bt_plan *pl, const double *w, const double *share) {
  int S = pl->n_stages, L = c->L;
  double total = 0.0, stot = 0.0, acc = 0.0;
  for (int l = 0; l < L; l++)
    total += w ? w[l] : 1.0;
  for (int s = 0; s < S; s++)
    stot += share ? share[s] : 1.0;
  int l = 0;
  double prefix = 0.0;
  for (int s = 1; s < S; s++) {
    acc += share ? share[s - 1] : 1.0;
    double target = total * acc / stot;
    int lo = pl->first[s - 1] + 1, hi = L - (S - s);
    /* advance l to the boundary closest to target */
    while (l < lo) {
      prefix += w ? w[l] : 1.0;
      l++;
    }
    while (l < hi && fabs(prefix + (w ? w[l] : 1.0) - target) <= fabs(prefix - target)) {
      prefix += w ? w[l] : 1.0;
      l++;
    }
    pl->first[s] = l;
  }
}

static int baseline_finish(ctx *c, bt_plan *pl, bt_err *err) {
  int rc = evaluate_ctx(c, pl, err);
  ctx_free(c);
  return rc;
}

int bt_plan_even(const bt_plan_problem *p, int n_stages, bt_plan *out, bt_err *err) {
  ctx c;
  if (baseline_start(&c, p, n_stages, out, err) < 0) {
    ctx_free(&c);
    return -1;
  }
  int L = c.L, S = n_stages, q = L / S, rem = L % S;
  for (int s = 1; s < S; s++)
    out->first[s] = out->first[s - 1] + q + (s - 1 < rem ? 1 : 0);
  return baseline_finish(&c, out, err);
}

int bt_plan_params(const bt_plan_problem *p, int n_stages, bt_plan *out, bt_err *err) {
  ctx c;
  if (baseline_start(&c, p, n_stages, out, err) < 0) {
    ctx_free(&c);
    return -1;
  }
  if (!p->state_bytes) {
    ctx_free(&c);
    return bt_err_set(err, "partition: params baseline needs state_bytes per layer");
  }
  balance_cuts(&c, out, p->state_bytes, NULL);
  return baseline_finish(&c, out, err);
}

int bt_plan_flops(const bt_plan_problem *p, int n_stages, bt_plan *out, bt_err *err) {
  ctx c;
  if (baseline_start(&c, p, n_stages, out, err) < 0) {
    ctx_free(&c);
    return -1;
  }
  if (!p->layer_flops || !p->device_peak) {
    ctx_free(&c);
    return bt_err_set(err, "partition: flops baseline needs layer_flops and device_peak");
  }
  for (int s = 0; s < n_stages; s++)
    if (!(p->device_peak[s] > 0.0) || !isfinite(p->device_peak[s])) {
      ctx_free(&c);
      return bt_err_set(err, "partition: device_peak[%d] = %g; must be > 0", s,
                        p->device_peak[s]);
    }
  balance_cuts(&c, out, p->layer_flops, p->device_peak);
  return baseline_finish(&c, out, err);
}

int bt_plan_explicit(const bt_plan_problem *p, int n_stages, const int *cuts,
                     const int *devices, bt_plan *out, bt_err *err) {
  ctx c;
  if (baseline_start(&c, p, n_stages, out, err) < 0) {
    ctx_free(&c);
    return -1;
  }
  if (n_stages > 1 && !cuts) {
    ctx_free(&c);
    return bt_err_set(err, "partition: %d stages need %d cuts", n_stages, n_stages - 1);
  }
  for (int k = 0; k + 1 < n_stages; k++)
    out->first[k + 1] = cuts[k];
  if (devices)
    for (int s = 0; s < n_stages; s++)
      out->device[s] = devices[s];
  return baseline_finish(&c, out, err);
}
