/* partition: exact plan search (suffix DP for bounds + branch and bound on
 * the exact makespan), baselines and a brute-force reference; see
 * include/baton/partition.h and docs/partition.md. Pure: no MPI, no I/O. */
#include "baton/partition.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

enum { MAXD = BT_PLAN_MAX_DEVICES };

/* Largest DP table (states) the search accepts: three floats per state (scalar bounds). */
#define MAX_DP_STATES (1L << 26)

/* Compact DP index over the states that exist: (i, U, d) with d in U and
 * i <= L - |U| (the |U| devices left need a layer each), row (U, d) at
 * row0[U] + (rank of d in U) (L - |U| + 1). Less than half of
 * L x 2^D x D: 22 M states of 52 M at 50 layers on 16 devices. */
typedef struct dpix {
  size_t *row0; /* [2^D + 1] */
  int L;
} dpix;

static size_t row_len(int L, int r) { return r <= L ? (size_t)(L - r + 1) : 0; }

/* States of L layers on D devices, or SIZE_MAX above MAX_DP_STATES. */
static size_t dp_count(int L, int D) {
  double n = 0, choose = 1; /* C(D, r) */
  for (int r = 1; r <= D; r++) {
    choose = choose * (D - r + 1) / r;
    n += choose * r * (double)row_len(L, r);
  }
  return n > (double)MAX_DP_STATES ? SIZE_MAX : (size_t)n;
}

static int dpix_init(dpix *x, int L, int D) {
  size_t nU = (size_t)1 << D;
  x->L = L;
  x->row0 = malloc((nU + 1) * sizeof(size_t));
  if (!x->row0)
    return -1;
  x->row0[0] = 0;
  for (size_t U = 0; U < nU; U++) {
    int r = __builtin_popcount((unsigned)U);
    x->row0[U + 1] = x->row0[U] + (size_t)r * row_len(L, r);
  }
  return 0;
}

static size_t dpix_at(const dpix *x, int i, size_t U, int d) {
  int r = __builtin_popcount((unsigned)U);
  size_t rank = (size_t)__builtin_popcount((unsigned)U & ((1u << d) - 1));
  return x->row0[U] + rank * row_len(x->L, r) + (size_t)i;
}

/* Rows (0, V, e) of every e in V (others 0), ranks counted on the way. */
static void dpix_rows(const dpix *x, size_t V, int D, size_t *rows) {
  size_t len = row_len(x->L, __builtin_popcount((unsigned)V)), at = x->row0[V];
  for (int e = 0; e < D; e++)
    if (V & ((size_t)1 << e))
      rows[e] = at, at += len;
    else
      rows[e] = 0;
}

static int too_large(int L, int D, bt_err *err) {
  return bt_err_set(err,
                    "partition: %d layers on %d devices need more than 2^26 DP states, "
                    "too large for the exact search; use fewer devices or coarser layers",
                    L, D);
}

typedef struct ctx {
  const bt_plan_problem *p;
  int L, D, M;
  double ratio, scale;
  double *F, *B, *O; /* per-device prefix sums [D][L+1] */
  double *W, *A;     /* prefix sums of state and stash bytes [L+1] */
  double *pre;       /* [L+1] sum over layers < i of min over devices of fwd + bwd */
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
  c->pre = calloc((size_t)L + 1, sizeof(double));
  if (!c->F || !c->B || !c->O || !c->W || !c->A || !c->pre)
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
    double m = INFINITY;
    for (int d = 0; d < D; d++) {
      double v = p->fwd[(size_t)d * L + l] + p->bwd[(size_t)d * L + l];
      m = v < m ? v : m;
    }
    c->pre[l + 1] = c->pre[l] + m;
  }
  return 0;
}

static void ctx_free(ctx *c) {
  free(c->F);
  free(c->B);
  free(c->O);
  free(c->W);
  free(c->A);
  free(c->pre);
  for (int s = 0; s <= MAXD; s++)
    if (c->built[s])
      bt_schedule_free(&c->sched[s]);
  memset(c, 0, sizeof *c);
}

/* The optimizer step of stage [i, j) on d (a callback's negative or
 * non-finite figure counts 0: it must not steer the search). */
static double stage_optim(const ctx *c, int d, int i, int j) {
  if (c->p->optim_stage) {
    const double o = c->p->optim_stage(c->p->optim_ctx, d, i, j);
    return o > 0 && isfinite(o) ? o : 0.0;
  }
  const size_t o = (size_t)d * (c->L + 1);
  return c->O[o + j] - c->O[o + i];
}

/* Compute of stage [i, j) on d, codec work included. */
static void stage_time(const ctx *c, int d, int i, int j, double *f, double *b) {
  size_t o = (size_t)d * (c->L + 1);
  double ff = c->F[o + j] - c->F[o + i], bb = c->B[o + j] - c->B[o + i];
  const bt_plan_problem *p = c->p;
  if (p->codec_act && p->codec_grad) {
    const size_t row = (size_t)d * c->L;
    if (i > 0) /* decode act in, encode grad out */
      ff += p->codec_act[row + i - 1], bb += p->codec_grad[row + i - 1];
    if (j < c->L) /* encode act out, decode grad in */
      ff += p->codec_act[row + j - 1], bb += p->codec_grad[row + j - 1];
  } else if (p->codec_encode > 0 || p->codec_decode > 0) {
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

/* Fills the predicted fields of plan (n_stages, device, first set, valid).
 * Returns 1 when it fits memory, 0 when stage *bad does not, -1 on error. */
static int plan_fill(ctx *c, bt_plan *pl, int *bad, bt_err *err) {
  int S = pl->n_stages;
  *bad = -1;
  for (int s = 0; s < S; s++) {
    int d = pl->device[s], i = pl->first[s], j = pl->first[s + 1];
    stage_time(c, d, i, j, &pl->fwd[s], &pl->bwd[s]);
    pl->optim[s] = stage_optim(c, d, i, j);
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
  if (p->bounds < BT_PLAN_BOUNDS_AUTO || p->bounds > BT_PLAN_BOUNDS_STAIR)
    return bt_err_set(err,
                      "partition: unknown bounds %d; use 0 (auto), 1 (scalar), 2 (pareto) or 3 "
                      "(stair)",
                      (int)p->bounds);
  if (!p->fwd || !p->bwd)
    return bt_err_set(err, "partition: fwd and bwd times [devices x layers] are required");
  if (p->required_devices >> D)
    return bt_err_set(err,
                      "partition: required_devices 0x%x names a device beyond the %d given "
                      "(bit d = device d)",
                      p->required_devices, D);
  size_t n = (size_t)D * L;
  if (!finite_nonneg(p->fwd, n) || !finite_nonneg(p->bwd, n) ||
      (p->optim && !finite_nonneg(p->optim, n)) ||
      (p->codec_act && !finite_nonneg(p->codec_act, n)) ||
      (p->codec_grad && !finite_nonneg(p->codec_grad, n)))
    return bt_err_set(err, "partition: fwd/bwd/optim/codec times must be finite and >= 0");
  if (!p->codec_act != !p->codec_grad)
    return bt_err_set(err, "partition: codec_act and codec_grad go together (both or neither)");
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
      return bt_err_set(err,
                        "partition: cut %d (first layer of stage %d) = %d is out of range; "
                        "cuts must lie in [1, %d]",
                        k - 1, k, cut, c->L - 1);
    if (cut <= pl->first[k - 1])
      return bt_err_set(err,
                        "partition: cut %d (first layer of stage %d) = %d is not greater "
                        "than the previous cut %d; cuts must be strictly increasing",
                        k - 1, k, cut, pl->first[k - 1]);
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
    return bt_err_set(err,
                      "partition: stage %d (layers %d..%d) needs %.4g bytes on device %d, "
                      "which has %.4g; move layers off it or add memory",
                      bad, pl->first[bad], pl->first[bad + 1] - 1, pl->mem[bad], pl->device[bad],
                      cap(c, pl->device[bad]));
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
  if ((U & c->p->required_devices) != c->p->required_devices)
    return 0;
  switch (c->p->device_use) {
  case BT_PLAN_ALL_DEVICES:
    return U == all;
  case BT_PLAN_DEVICES_IN_ORDER:
  case BT_PLAN_ALL_FIRST_FIXED:
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
  size_t nU = (size_t)1 << D, ns = dp_count(L, D);
  if (ns == SIZE_MAX)
    return too_large(L, D, err);
  dpix ix;
  double *R = malloc(ns * sizeof(double));
  if (!R || dpix_init(&ix, L, D) < 0) {
    free(R);
    return bt_err_set(err, "partition: out of memory for the DP table");
  }
  const double *mc = c->p->mem_cap;
  double best = INFINITY;
  for (int i = L - 1; i >= 0; i--)
    for (size_t U = 1; U < nU; U++) {
      int r = __builtin_popcount((unsigned)U);
      for (int d = 0; d < D; d++) {
        if (!(U & (1u << d)) || r > L - i)
          continue;
        double *v = &R[dpix_at(&ix, i, U, d)];
        *v = INFINITY;
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
                double y = R[dpix_at(&ix, 0, V, e) + (size_t)j];
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
  free(ix.row0);
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
    return bt_err_set(err,
                      "partition: no plan fits in memory at any scale (some layer needs "
                      "memory and no device capacity is > 0%s)",
                      c->p->device_use != BT_PLAN_ANY_DEVICES && c->L < c->D
                          ? ", or fewer layers than devices that must all be used"
                          : "");
  return bt_err_set(err,
                    "partition: no plan fits in memory (scale %.4g); the smallest memory "
                    "scale with which some plan fits is %.6g x every device's capacity",
                    c->scale, s);
}

/* ---- exact search ---- */

/* Replay program: the compute ops of bt_schedule_build(kind, S, M) in an
 * order that respects every dependency (the order bt_schedule_simulate plays
 * them in), each fused with the receive before it and the send after it
 * (a stage runs them back to back and comm ops take no stage time). A
 * plan's makespan is then one linear pass doing the same additions and
 * maxima as bt_schedule_makespan (bit-identical), with no validation or
 * allocation. */
enum { R_FWD, R_BWD, R_OPT };

typedef struct rop {
  int stage, kind;
  int in, out; /* message received before / sent after (ids), -1 if none */
  int ch;      /* link of the send: activations s -> s+1 are s, gradients s -> s-1 S + s - 1 */
} rop;

typedef struct prog {
  int n, n_msgs;
  rop *ops;
} prog;

static int op_channel(int S, int st, bt_op_kind k) {
  switch (k) {
  case BT_OP_SEND_ACT:
    return st;
  case BT_OP_RECV_ACT:
    return st - 1;
  case BT_OP_SEND_GRAD:
    return S + st - 1;
  case BT_OP_RECV_GRAD:
    return S + st;
  default:
    return -1;
  }
}

static int prog_build(prog *g, const bt_schedule *s, bt_err *err) {
  int S = s->stages, total = 0;
  for (int st = 0; st < S; st++)
    total += s->n_ops[st];
  g->ops = malloc((size_t)total * sizeof(rop));
  int *pc = calloc((size_t)S * 2 + (size_t)total + 4 * (size_t)S, sizeof(int));
  if (!g->ops || !pc) {
    free(pc);
    return bt_err_set(err, "partition: out of memory for a %d-stage replay", S);
  }
  int *base = pc + S, *msg = base + S, *sent = msg + total, *got = sent + 2 * S;
  for (int st = 1; st < S; st++)
    base[st] = base[st - 1] + s->n_ops[st - 1];
  int played = 0, pending_in[MAXD];
  for (int st = 0; st < S; st++)
    pending_in[st] = -1;
  g->n = g->n_msgs = 0;
  for (int progress = 1; progress;) {
    progress = 0;
    for (int st = 0; st < S; st++)
      while (pc[st] < s->n_ops[st]) {
        const bt_op *op = &s->ops[st][pc[st]];
        int ch = op_channel(S, st, op->kind);
        if ((op->kind == BT_OP_RECV_ACT || op->kind == BT_OP_RECV_GRAD) && sent[ch] <= got[ch])
          break;
        switch (op->kind) {
        case BT_OP_RECV_ACT:
        case BT_OP_RECV_GRAD: /* the send it matches has been played */
          pending_in[st] = msg[base[op->peer] + op->peer_op];
          got[ch]++;
          break;
        case BT_OP_SEND_ACT:
        case BT_OP_SEND_GRAD: /* fused into the compute op just before it */
          if (g->n == 0 || g->ops[g->n - 1].stage != st || g->ops[g->n - 1].out >= 0) {
            free(pc);
            return bt_err_set(err,
                              "partition: the %d-stage schedule has a send without its "
                              "compute op",
                              S);
          }
          g->ops[g->n - 1].out = msg[base[st] + pc[st]] = g->n_msgs++;
          g->ops[g->n - 1].ch = ch;
          sent[ch]++;
          break;
        default:
          g->ops[g->n++] = (rop){st,
                                 op->kind == BT_OP_FORWARD    ? R_FWD
                                 : op->kind == BT_OP_BACKWARD ? R_BWD
                                                              : R_OPT,
                                 pending_in[st], -1, -1};
          pending_in[st] = -1;
          break;
        }
        played++;
        pc[st]++;
        progress = 1;
      }
  }
  free(pc);
  if (played != total)
    return bt_err_set(err, "partition: the %d-stage schedule does not replay", S);
  return 0;
}

/* Makespan of the costs on the program; work: 3 S + n_msgs doubles. */
static double prog_run(const prog *g, int S, const double *fwd, const double *bwd,
                       const double *act, const double *grad, const double *optim, double *work) {
  double *clock = work, *link = work + S, *arrive = work + 3 * S, makespan = 0.0;
  const double *dur[3] = {fwd, bwd, optim};
  for (int k = 0; k < 3 * S; k++)
    work[k] = 0.0;
  for (int k = 0; k < g->n; k++) {
    const rop *op = &g->ops[k];
    int st = op->stage;
    double start = clock[st];
    if (op->in >= 0) {
      double arrival = arrive[op->in];
      start = arrival > start ? arrival : start;
    }
    double end = start + dur[op->kind][st];
    clock[st] = end;
    makespan = end > makespan ? end : makespan;
    if (op->out >= 0) {
      double mt = op->kind == R_FWD ? act[st] : grad[st - 1];
      double *l = &link[op->ch];
      double enter = end > *l ? end : *l;
      *l = enter + mt;
      arrive[op->out] = *l;
    }
  }
  return makespan;
}

/* Bound terms (docs/partition.md): every plan's makespan is at least
 * P + y_k + o_0 for every stage and link k, P being one micro-batch's round
 * trip (sum of all f, b, a, g) and o_0 the first stage's optimizer step.
 * A stage's y is (M-1) max(f, b) + nn min(f, b), see stage_nn. */
static double link_y(const ctx *c, double a, double g) {
  int m1 = c->M - 1;
  if (c->p->kind == BT_SCHED_GPIPE)
    return m1 * (a + g);
  return m1 * (a > g ? a : g);
}

/* A point of a state's Pareto list: every completion of the state (that can
 * still beat the incumbent, see fill_pareto) has max y_k >= y and
 * sum p_k >= p for some point of the list. Lists are sorted by y ascending,
 * p descending. */
typedef struct pt {
  float y, p;
} pt;

typedef struct dpt {
  double y, p;
} dpt;

/* Scalar state: min max y_k, min sum p_k and a lower bound z on min (y + p)
 * over the completions (see fill_scalar). */
typedef struct spt {
  float y, p, z;
} spt;

enum { KMAX = 12 }; /* points kept per list (more are merged conservatively) */
enum { KS = 4 };    /* thresholds of the staircase bounds (fill_stair) */
_Static_assert(KS % 4 == 0, "the staircase fill runs in vectors of 2 or 4 thresholds");

/* Pareto lists only when the table has at most this many entries (counted
 * as L x 2^D x D, the size of the table when both thresholds were tuned). */
#define PARETO_MAX_STATES (1L << 20)

typedef struct kid {
  double lb, p, y, lm, o;
  int j, e;
} kid;

/* Stage terms of the bound fill, transposed to [d][j][i] so that the loop
 * over first layers i of one cut j runs over contiguous memory (and
 * vectorises): f + b, max(f, b) and min(f, b) of stage [i, j) on d. */
typedef struct fillterms {
  double *fb, *mx, *mn;
} fillterms;

typedef struct bb {
  ctx *c;
  size_t nU, ns;
  /* Stage and link terms, computed once: */
  double *sf, *sb; /* [D][L+1][L+1]: f and b of stage [i, j) on d, codec included */
  double *so;      /* [D][L+1][L+1]: its optimizer step */
  double *lp, *ly; /* [D][D][L+1]: a + g and link_y of the cut before j, d -> e */
  int *jmax;       /* [D][D+1][L]: last j such that [i, j) fits d with r stages to go */
  /* Bound table, state (i, U, d) at sidx(): */
  dpix ix;
  spt *sc;       /* scalar table [ns], NULL once the Pareto lists are filled */
  pt *pts;       /* Pareto lists, one after the other */
  uint32_t *off; /* Pareto: [ns] first point of each list */
  uint8_t *cnt;  /* Pareto: [ns] points of each list, 0 = nothing under the cut */
  fillterms ft;  /* stage terms of the fills (fill_scalar, fill_stair) */
  size_t npts, cap_pts;
  kid *kids; /* [depth][L*D] */
  int dev[MAXD], first[MAXD + 1];
  double best;
  int best_S, best_dev[MAXD], best_first[MAXD + 1];
  double cost[5 * MAXD], *work; /* leaf replay: f, b, a, g, o per stage */
  prog progs[MAXD + 1];
  bt_plan_stats st;
  bt_err *err;
  int failed, stopped, dive; /* dive: stop after the first complete plan */
  long budget;
  double open_lb; /* smallest bound of a subtree skipped for the budget */
  double ub;      /* Pareto cut: no completion with pre[i] + y + p >= ub is kept */
  /* Staircase (see fill_stair): K sums per state, the least sum p_k of the
   * completions whose max y_k is at most tau[q], [ns][K] */
  float *stp;
  double tau[KS];
} bb;

static int cmp_kid(const void *a, const void *b) {
  double x = ((const kid *)a)->lb, y = ((const kid *)b)->lb;
  return x < y ? -1 : x > y ? 1 : 0;
}

static size_t sidx(const bb *t, int i, size_t U, int d) { return dpix_at(&t->ix, i, U, d); }

static size_t ij(const bb *t, int d, int i, int j) {
  return ((size_t)d * (t->c->L + 1) + i) * (t->c->L + 1) + j;
}

static size_t lk(const bb *t, int d, int e) { return ((size_t)d * t->c->D + e) * (t->c->L + 1); }

/* A stage's weight is y = (M-1) max(f, b) + nn min(f, b) with nn = M-1
 * (GPipe) or, 1F1B with r stages to go, the backwards that run before the
 * stage's last forward, max(0, M-1-W), W = min(r-1, M) warm-up forwards. */
static int stage_nn(const ctx *c, int r) {
  int m1 = c->M - 1;
  if (c->p->kind == BT_SCHED_GPIPE)
    return m1;
  int w = r - 1 < c->M ? r - 1 : c->M;
  return m1 - w > 0 ? m1 - w : 0;
}

static double thread_cpu(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int tabs_init(bb *t, bt_err *err) {
  ctx *c = t->c;
  int L = c->L, D = c->D;
  size_t nij = (size_t)D * (L + 1) * (L + 1), nl = (size_t)D * D * (L + 1);
  t->sf = malloc(nij * sizeof(double));
  t->sb = malloc(nij * sizeof(double));
  t->so = malloc(nij * sizeof(double));
  t->lp = calloc(nl, sizeof(double));
  t->ly = calloc(nl, sizeof(double));
  t->jmax = malloc((size_t)D * (D + 1) * L * sizeof(int));
  if (!t->sf || !t->sb || !t->so || !t->lp || !t->ly || !t->jmax)
    return bt_err_set(err, "partition: out of memory for the stage tables");
  for (int d = 0; d < D; d++)
    for (int i = 0; i < L; i++)
      for (int j = i + 1; j <= L; j++)
        stage_time(c, d, i, j, &t->sf[ij(t, d, i, j)], &t->sb[ij(t, d, i, j)]),
            t->so[ij(t, d, i, j)] = stage_optim(c, d, i, j);
  for (int d = 0; d < D; d++)
    for (int e = 0; e < D; e++)
      for (int j = 1; j < L && e != d; j++) {
        double a, g;
        link_time(c, d, e, j, &a, &g);
        t->lp[lk(t, d, e) + j] = a + g;
        t->ly[lk(t, d, e) + j] = link_y(c, a, g);
      }
  for (int d = 0; d < D; d++)
    for (int r = 1; r <= D; r++)
      for (int i = 0; i < L; i++) {
        int j = i;
        while (j < L && stage_mem(c, i, j + 1, r) <= cap(c, d))
          j++; /* memory grows with j */
        t->jmax[((size_t)d * (D + 1) + r) * L + i] = j;
      }
  return 0;
}

static int jmax_of(const bb *t, int d, int r, int i) {
  int j = t->jmax[((size_t)d * (t->c->D + 1) + r) * t->c->L + i];
  int lim = r == 1 ? t->c->L : t->c->L - r + 1;
  if (r == 1)
    return j == lim ? j : i; /* the last stage must reach L */
  return j < lim ? j : lim;
}

/* A table of hundreds of MB, in 2 MiB pages where the kernel allows
 * (transparent huge pages on request): touching its 4 KiB pages one by one
 * cost 0.53 s of the 0.82 s fill of 16 layers x 16 devices on the AMD
 * host (a page fault per 4 KiB). Freed with free(). */
static void *table_alloc(size_t bytes) {
  const size_t huge = (size_t)2 << 20, rounded = (bytes + huge - 1) / huge * huge;
  if (bytes < huge)
    return malloc(bytes);
  void *p = NULL;
  if (posix_memalign(&p, huge, rounded) != 0)
    return NULL;
#ifdef MADV_HUGEPAGE
  madvise(p, rounded, MADV_HUGEPAGE); /* advice: failure is harmless */
#endif
  return p;
}

static int fillterms_init(const bb *t, fillterms *ft) {
  int L = t->c->L, D = t->c->D;
  size_t n = (size_t)D * (L + 1) * (L + 1);
  ft->fb = malloc(3 * n * sizeof(double));
  if (!ft->fb)
    return -1;
  ft->mx = ft->fb + n, ft->mn = ft->mx + n;
  for (size_t k = 0; k < 3 * n; k++)
    ft->fb[k] = 0;
  for (int d = 0; d < D; d++)
    for (int i = 0; i < L; i++)
      for (int j = i + 1; j <= L; j++) {
        double f = t->sf[ij(t, d, i, j)], b = t->sb[ij(t, d, i, j)];
        size_t k = ij(t, d, j, i);
        ft->fb[k] = f + b;
        ft->mx[k] = f > b ? f : b;
        ft->mn[k] = f > b ? b : f;
      }
  return 0;
}

/* The first stages of one state (V + d, d) for every first layer i < n:
 * stage terms of [i, j) on d at fb/mx/mn + j (L + 1) + i (fillterms),
 * continuations g* at j, jm[i] the last j that fits; minima into b*. */
typedef struct fillrow {
  int n, L1;
  double m1, nn;
  const double *fb, *mx, *mn, *jm, *gp, *gy, *gz;
  double *bp, *by, *bz;
} fillrow;

/* fill_cuts in lanes of GCC's vector extension: written this way the
 * compare-and-select stays branch-free (as plain C the compiler must assume
 * that comparisons may trap, and branches). Instantiated with 2 lanes (one
 * SSE2 or NEON register) and, on x86-64, 4 lanes for AVX2 (one register;
 * 4 lanes without AVX2 are split badly: 6.4 s instead of 2.2 s of tables at
 * 50 x 16). The tail is the same arithmetic one lane at a time. */
#define PICK(vd, vl, m, a, b) ((vd)(((m) & (vl)(a)) | (~(m) & (vl)(b)))) /* m ? a : b */
#define DEFINE_FILL_CUTS(name, attr, vd, vl)                                                       \
  attr static void name(const fillrow *w) {                                                        \
    const vd zero = {0}, m1 = zero + w->m1, nn = zero + w->nn, inf = zero + INFINITY;              \
    for (int j = 1; j <= w->n; j++) {                                                              \
      double gp = w->gp[j], gy = w->gy[j], gz = w->gz[j], dj = j;                                  \
      if (!(gp < INFINITY)) /* no continuation from j */                                           \
        continue;                                                                                  \
      const double *fb = w->fb + (size_t)j * w->L1, *mx = w->mx + (size_t)j * w->L1,               \
                   *mn = w->mn + (size_t)j * w->L1;                                                \
      const vd vgp = zero + gp, vgy = zero + gy, vgz = zero + gz, vj = zero + dj;                  \
      const int lanes = (int)(sizeof(vd) / sizeof(double));                                        \
      int i = 0;                                                                                   \
      for (; i + lanes <= j; i += lanes) {                                                         \
        vd f, x, y, jm, p, q, z;                                                                   \
        memcpy(&f, fb + i, sizeof f), memcpy(&x, mx + i, sizeof x);                                \
        memcpy(&y, mn + i, sizeof y), memcpy(&jm, w->jm + i, sizeof jm);                           \
        vd ys = m1 * x + nn * y, vz = ys + vgp, vp = f + vgp;                                      \
        vd vy = PICK(vd, vl, ys > vgy, ys, vgy);                                                   \
        vz = f + PICK(vd, vl, vz > vgz, vz, vgz);                                                  \
        vl ok = vj <= jm;                                                                          \
        vp = PICK(vd, vl, ok, vp, inf), vy = PICK(vd, vl, ok, vy, inf);                            \
        vz = PICK(vd, vl, ok, vz, inf);                                                            \
        memcpy(&p, w->bp + i, sizeof p), memcpy(&q, w->by + i, sizeof q);                          \
        memcpy(&z, w->bz + i, sizeof z);                                                           \
        p = PICK(vd, vl, vp < p, vp, p), q = PICK(vd, vl, vy < q, vy, q);                          \
        z = PICK(vd, vl, vz < z, vz, z);                                                           \
        memcpy(w->bp + i, &p, sizeof p), memcpy(w->by + i, &q, sizeof q);                          \
        memcpy(w->bz + i, &z, sizeof z);                                                           \
      }                                                                                            \
      for (; i < j; i++) {                                                                         \
        if (!(dj <= w->jm[i]))                                                                     \
          continue;                                                                                \
        double ys = w->m1 * mx[i] + w->nn * mn[i];                                                 \
        double vp = fb[i] + gp, vy = ys > gy ? ys : gy, vz = ys + gp;                              \
        vz = fb[i] + (vz > gz ? vz : gz);                                                          \
        w->bp[i] = vp < w->bp[i] ? vp : w->bp[i];                                                  \
        w->by[i] = vy < w->by[i] ? vy : w->by[i];                                                  \
        w->bz[i] = vz < w->bz[i] ? vz : w->bz[i];                                                  \
      }                                                                                            \
    }                                                                                              \
  }

/* G(j), j = 1..n, of state (V + d, d): enter layer j with set V after a
 * stage on d, the next device e of V: per e, the link d -> e at j (lp, ly)
 * then row (j, V, e) (qp, qy, qz, in doubles); the minimum of each term
 * over e on its own (call once per e on the same g*). */
#define DEFINE_FILL_ENTER(name, attr, vd, vl)                                                      \
  attr static void name(int n, const double *lp, const double *ly, const double *qp,               \
                        const double *qy, const double *qz, double *gp, double *gy, double *gz) {  \
    const int lanes = (int)(sizeof(vd) / sizeof(double));                                          \
    int j = 1;                                                                                     \
    for (; j + lanes <= n + 1; j += lanes) {                                                       \
      vd a, b, p, y, z, g, h, k;                                                                   \
      memcpy(&a, lp + j, sizeof a), memcpy(&b, ly + j, sizeof b);                                  \
      memcpy(&p, qp + j, sizeof p), memcpy(&y, qy + j, sizeof y), memcpy(&z, qz + j, sizeof z);    \
      vd vp = a + p, vy = PICK(vd, vl, b > y, b, y), vz = b + p;                                   \
      vz = a + PICK(vd, vl, vz > z, vz, z);                                                        \
      memcpy(&g, gp + j, sizeof g), memcpy(&h, gy + j, sizeof h), memcpy(&k, gz + j, sizeof k);    \
      g = PICK(vd, vl, vp < g, vp, g), h = PICK(vd, vl, vy < h, vy, h);                            \
      k = PICK(vd, vl, vz < k, vz, k);                                                             \
      memcpy(gp + j, &g, sizeof g), memcpy(gy + j, &h, sizeof h), memcpy(gz + j, &k, sizeof k);    \
    }                                                                                              \
    for (; j <= n; j++) {                                                                          \
      double vp = lp[j] + qp[j], vy = ly[j] > qy[j] ? ly[j] : qy[j], vz = ly[j] + qp[j];           \
      vz = lp[j] + (vz > qz[j] ? vz : qz[j]);                                                      \
      gp[j] = vp < gp[j] ? vp : gp[j];                                                             \
      gy[j] = vy < gy[j] ? vy : gy[j];                                                             \
      gz[j] = vz < gz[j] ? vz : gz[j];                                                             \
    }                                                                                              \
  }

typedef double v2d __attribute__((vector_size(16)));
typedef long long v2l __attribute__((vector_size(16)));
DEFINE_FILL_CUTS(fill_cuts_2, , v2d, v2l)
DEFINE_FILL_ENTER(fill_enter_2, , v2d, v2l)

#if defined(__x86_64__) && defined(__GNUC__)
#define FILL_AVX2 1
typedef double v4d __attribute__((vector_size(32)));
typedef long long v4l __attribute__((vector_size(32)));
DEFINE_FILL_CUTS(fill_cuts_4, __attribute__((target("avx2"))), v4d, v4l)
DEFINE_FILL_ENTER(fill_enter_4, __attribute__((target("avx2"))), v4d, v4l)
#endif

typedef struct fillops {
  void (*cuts)(const fillrow *w);
  void (*enter)(int n, const double *lp, const double *ly, const double *qp, const double *qy,
                const double *qz, double *gp, double *gy, double *gz);
} fillops;

/* The 4-lane code where the CPU has AVX2; BATON_PLAN_LANES=2 forces the
 * 2-lane code (a test checks that both give the same tables). */
static int fill_avx2(void) {
#ifdef FILL_AVX2
  const char *lanes = getenv("BATON_PLAN_LANES");
  return __builtin_cpu_supports("avx2") && !(lanes && strcmp(lanes, "2") == 0);
#else
  return 0;
#endif
}

static fillops fill_ops(void) {
#ifdef FILL_AVX2
  if (fill_avx2())
    return (fillops){fill_cuts_4, fill_enter_4};
#endif
  return (fillops){fill_cuts_2, fill_enter_2};
}

/* A float of the table no larger than v (v >= 0 or infinite). */
static float down(double v) {
  float f = (float)v;
  if ((double)f > v) {
    if (f > 0 && f < INFINITY) { /* the next float below: one less in its bits */
      uint32_t u;
      memcpy(&u, &f, sizeof u);
      u--;
      memcpy(&f, &u, sizeof f);
    } else
      f = nextafterf(f, -INFINITY);
  }
  return f;
}

/* down() of n values >= 0 (or infinite), two at a time: the fill's rows
 * are sums of non-negative times. Same results as down(): a float that
 * rounded up loses one in its bits (infinity becomes FLT_MAX, as
 * nextafterf gives). */
typedef float v2f __attribute__((vector_size(8)));
typedef int v2i __attribute__((vector_size(8)));
static void down_many(const double *in, float *out, size_t n) {
  size_t k = 0;
  for (; k + 2 <= n; k += 2) {
    v2d v;
    memcpy(&v, in + k, sizeof v);
    v2f f = __builtin_convertvector(v, v2f);
    v2l up = __builtin_convertvector(f, v2d) > v;
    v2i u;
    memcpy(&u, &f, sizeof u);
    u += __builtin_convertvector(up, v2i); /* -1 where it rounded up */
    memcpy(out + k, &u, sizeof u);
  }
  for (; k < n; k++)
    out[k] = down(in[k]);
}

_Static_assert(sizeof(spt) == 3 * sizeof(float), "spt rows are copied as floats");

/* Scalar table: per state (i, U, d), Y = min over completions of max y_k,
 * P = min of sum p_k, and Z <= min of (max y_k + sum p_k): a completion is a
 * first stage (or link) with terms (ys, ps) and a rest c, and
 * ps + P_c + max(ys, Y_c) = ps + max(ys + P_c, Y_c + P_c)
 *   >= ps + max(ys + P(rest), Z(rest)),
 * so Z = min over first stages of that is a lower bound by induction.
 * State (V + d, d) only reads the rows (j, V, e), so the fill walks the sets
 * V in increasing order (V \ e < V: its rows are done), copies V's rows
 * once into doubles, and fills every (V + d, d) from that copy (before,
 * every state re-read its rows from a table of hundreds of MB). */
static int fill_scalar(bb *t, bt_err *err) {
  ctx *c = t->c;
  int L = c->L, D = c->D;
  double m1 = c->M - 1;
  size_t nU = t->nU, L1 = (size_t)L + 1;
  const fillops ops = fill_ops();
  t->sc = table_alloc(t->ns * sizeof(spt));
  double *gp = malloc((7 + 3 * (size_t)D) * L1 * sizeof(double)), *gy = gp + L1, *gz = gy + L1;
  double *bp = gz + L1, *by = bp + L1, *bz = by + L1, *jm = bz + L1;
  double *qp = jm + L1, *qy = qp + D * L1, *qz = qy + D * L1; /* rows of V, [e][j] */
  double *qd = malloc(3 * L1 * sizeof(double));               /* one row out, (y, p, z) */
  float *qf = malloc(3 * L1 * sizeof(float));
  if (!t->sc || !gp || !qd || !qf || fillterms_init(t, &t->ft) < 0) {
    free(gp), free(qd), free(qf);
    return bt_err_set(err, "partition: out of memory for the DP table");
  }
  /* every entry of the compact table is one state's row, written once below */
  for (size_t V = 0; V + 1 < nU; V++) {
    int r = __builtin_popcount((unsigned)V) + 1, nn = stage_nn(c, r), n = L - r + 1;
    if (r > L)
      continue;
    for (int e = 0; e < D && r > 1; e++) /* V's rows j = 0..n, once for every d */
      if (V & (1u << e)) {
        const spt *q = t->sc + sidx(t, 0, V, e);
        for (int j = 0; j <= n; j++)
          qp[e * L1 + j] = q[j].p, qy[e * L1 + j] = q[j].y, qz[e * L1 + j] = q[j].z;
      }
    for (int d = 0; d < D; d++) {
      if (V & (1u << d))
        continue;
      size_t U = V | ((size_t)1 << d);
      t->st.dp_states += n;
      for (int i = 0; i < n; i++)
        bp[i] = by[i] = bz[i] = INFINITY, jm[i] = jmax_of(t, d, r, i);
      if (r == 1) {
        const double *fb = t->ft.fb + ij(t, d, L, 0), *mx = t->ft.mx + ij(t, d, L, 0),
                     *mn = t->ft.mn + ij(t, d, L, 0);
        for (int i = 0; i < n; i++)
          if (jm[i] == L)
            by[i] = m1 * mx[i] + nn * mn[i], bp[i] = fb[i], bz[i] = by[i] + bp[i];
      } else {
        for (int j = 0; j <= L; j++)
          gp[j] = gy[j] = gz[j] = INFINITY;
        for (int e = 0; e < D; e++)
          if ((V & (1u << e)) && next_allowed(c, d, e))
            ops.enter(n, t->lp + lk(t, d, e), t->ly + lk(t, d, e), qp + e * L1, qy + e * L1,
                      qz + e * L1, gp, gy, gz);
        ops.cuts(&(fillrow){n, L + 1, m1, nn, t->ft.fb + ij(t, d, 0, 0), t->ft.mx + ij(t, d, 0, 0),
                            t->ft.mn + ij(t, d, 0, 0), jm, gp, gy, gz, bp, by, bz});
      }
      for (int i = 0; i < n; i++) /* as the row's (y, p, z), then to floats */
        qd[3 * i] = by[i], qd[3 * i + 1] = bp[i], qd[3 * i + 2] = bz[i];
      down_many(qd, qf, 3 * (size_t)n);
      memcpy(t->sc + sidx(t, 0, U, d), qf, (size_t)n * sizeof(spt));
    }
  }
  free(gp), free(qd), free(qf);
  return 0;
}

/* Staircase table: for each state and threshold tau[a] (KS of them), the
 * least sum p_k over the completions whose every y_k (stages and links) is
 * at most tau[a]: the same recursion as P with the terms above tau[a] left
 * out. Vectorised across the thresholds ([j][KS] rows of doubles). */
typedef struct stairrow {
  int n, r1; /* first layers i < n; r1: the last stage (the stage must reach L) */
  const double *fb, *mx,
      *mn;               /* [j][i] of this state's device: f + b, max and min of stage [i, j) */
  double m1, nn;         /* y = m1 max + nn min */
  const int *jm;         /* last j that fits, per i */
  const double *tau, *g; /* [KS], [j][KS] */
  double *b;             /* out: [i][KS] */
  int L1;
} stairrow;

#define DEFINE_STAIR(name, attr, vd, vl)                                                           \
  attr static void name##_row(const stairrow *w) {                                                 \
    const int lanes = (int)(sizeof(vd) / sizeof(double));                                          \
    const vd zero = {0}, inf = zero + INFINITY;                                                    \
    vd tv[KS * sizeof(double) / sizeof(vd)];                                                       \
    for (int h = 0; h < KS; h += lanes)                                                            \
      memcpy(&tv[h / lanes], w->tau + h, sizeof(vd));                                              \
    for (int i = 0; i < w->n; i++) {                                                               \
      vd best[KS * sizeof(double) / sizeof(vd)];                                                   \
      for (int h = 0; h < KS / lanes; h++)                                                         \
        best[h] = inf;                                                                             \
      const double *fb = w->fb + i, *mx = w->mx + i, *mn = w->mn + i; /* stride L1 in j */         \
      for (int j = w->r1 ? w->L1 - 1 : i + 1; j <= w->jm[i]; j++) {                                \
        const size_t at = (size_t)j * w->L1;                                                       \
        const vd y = zero + (w->m1 * mx[at] + w->nn * mn[at]), f = zero + fb[at];                  \
        const double *g = w->g + (size_t)j * KS;                                                   \
        for (int h = 0; h < KS / lanes; h++) {                                                     \
          vd gv, v;                                                                                \
          if (w->r1)                                                                               \
            gv = zero;                                                                             \
          else                                                                                     \
            memcpy(&gv, g + h * lanes, sizeof gv);                                                 \
          v = PICK(vd, vl, y <= tv[h], f + gv, inf);                                               \
          best[h] = PICK(vd, vl, v < best[h], v, best[h]);                                         \
        }                                                                                          \
      }                                                                                            \
      memcpy(w->b + (size_t)i * KS, best, sizeof best);                                            \
    }                                                                                              \
  }                                                                                                \
  attr static void name##_enter(int n, const double *lp, const double *ly, const double *tau,      \
                                const double *q, double *g) {                                      \
    const int lanes = (int)(sizeof(vd) / sizeof(double));                                          \
    const vd zero = {0}, inf = zero + INFINITY;                                                    \
    for (int j = 1; j <= n; j++) {                                                                 \
      const vd a = zero + lp[j], y = zero + ly[j];                                                 \
      for (int h = 0; h < KS / lanes; h++) {                                                       \
        vd tv, qv, gv;                                                                             \
        memcpy(&tv, tau + h * lanes, sizeof tv);                                                   \
        memcpy(&qv, q + (size_t)j * KS + h * lanes, sizeof qv);                                    \
        memcpy(&gv, g + (size_t)j * KS + h * lanes, sizeof gv);                                    \
        vd v = PICK(vd, vl, y <= tv, a + qv, inf);                                                 \
        gv = PICK(vd, vl, v < gv, v, gv);                                                          \
        memcpy(g + (size_t)j * KS + h * lanes, &gv, sizeof gv);                                    \
      }                                                                                            \
    }                                                                                              \
  }

DEFINE_STAIR(stair_2, , v2d, v2l)
#ifdef FILL_AVX2
DEFINE_STAIR(stair_4, __attribute__((target("avx2"))), v4d, v4l)
#endif

static int fill_stair(bb *t, bt_err *err) {
  ctx *c = t->c;
  int L = c->L, D = c->D, m1 = c->M - 1;
  size_t nU = t->nU, L1 = (size_t)L + 1;
  void (*row_fn)(const stairrow *) = stair_2_row;
  void (*enter_fn)(int, const double *, const double *, const double *, const double *, double *) =
      stair_2_enter;
#ifdef FILL_AVX2
  if (fill_avx2())
    row_fn = stair_4_row, enter_fn = stair_4_enter;
#endif
  t->stp = table_alloc(t->ns * KS * sizeof(float));
  double *g = malloc(L1 * KS * sizeof(double)), *b = malloc(L1 * KS * sizeof(double));
  double *qv = malloc((size_t)D * L1 * KS * sizeof(double));
  int *jm = malloc(L1 * sizeof(int));
  if (!t->stp || !g || !b || !qv || !jm) {
    free(g), free(b), free(qv), free(jm);
    return bt_err_set(err, "partition: out of memory for the staircase table");
  }
  for (size_t V = 0; V + 1 < nU; V++) {
    int r = __builtin_popcount((unsigned)V) + 1, nn = stage_nn(c, r), n = L - r + 1;
    if (r > L)
      continue;
    for (int e = 0; e < D && r > 1; e++)
      if (V & (1u << e)) {
        const float *row = t->stp + sidx(t, 0, V, e) * KS;
        for (size_t x = 0; x < (size_t)(n + 1) * KS; x++)
          qv[(size_t)e * L1 * KS + x] = row[x];
      }
    for (int d = 0; d < D; d++) {
      if (V & (1u << d))
        continue;
      size_t U = V | ((size_t)1 << d);
      for (int i = 0; i < n; i++)
        jm[i] = jmax_of(t, d, r, i);
      if (r > 1) {
        for (size_t x = 0; x < L1 * KS; x++)
          g[x] = INFINITY;
        for (int e = 0; e < D; e++)
          if ((V & (1u << e)) && next_allowed(c, d, e))
            enter_fn(n, t->lp + lk(t, d, e), t->ly + lk(t, d, e), t->tau, qv + (size_t)e * L1 * KS,
                     g);
      }
      row_fn(&(stairrow){n, r == 1, t->ft.fb + ij(t, d, 0, 0), t->ft.mx + ij(t, d, 0, 0),
                         t->ft.mn + ij(t, d, 0, 0), m1, nn, jm, t->tau, g, b, (int)L1});
      down_many(b, t->stp + sidx(t, 0, U, d) * KS, (size_t)n * KS);
    }
  }
  free(g), free(b), free(qv), free(jm);
  return 0;
}

/* Thresholds of the staircase between the least bottleneck of any root and
 * the largest one that can still beat the incumbent (best - least sum). */
static void stair_taus(bb *t) {
  double ylo = INFINITY, plo = INFINITY;
  for (size_t U = 1; U < t->nU; U++)
    for (int d = 0; d < t->c->D; d++)
      if ((U & (1u << d)) && __builtin_popcount((unsigned)U) <= t->c->L &&
          root_allowed(t->c, U, d)) {
        const spt *q = t->sc + sidx(t, 0, U, d);
        ylo = q->y < ylo ? q->y : ylo;
        plo = q->p < plo ? q->p : plo;
      }
  double hi = t->best - plo;
  for (int a = 0; a < KS; a++)
    t->tau[a] = ylo + (hi - ylo) * (a + 1) / KS;
}

/* Merges Pareto list b into a (both sorted); result in out (may not alias). */
static int pareto_merge(const dpt *a, int na, const dpt *b, int nb, dpt *out) {
  int i = 0, j = 0, n = 0;
  while (i < na || j < nb) {
    dpt v;
    if (j >= nb || (i < na && (a[i].y < b[j].y || (a[i].y == b[j].y && a[i].p <= b[j].p))))
      v = a[i++];
    else
      v = b[j++];
    if (n > 0 && v.p >= out[n - 1].p)
      continue; /* dominated: y not smaller, p not smaller */
    if (n > 0 && v.y == out[n - 1].y)
      out[n - 1] = v;
    else
      out[n++] = v;
  }
  return n;
}

/* The completions of list a entered through a stage or link with terms
 * (ys, ps): y -> max(y, ys), p -> p + ps; points with y + p >= cut dropped. */
static int shift_f(const pt *a, int na, double ys, double ps, double cut, dpt *out) {
  int k = 0, n = 0;
  while (k + 1 < na && a[k + 1].y <= ys)
    k++;
  if (a[k].y <= ys) {
    if (ys + a[k].p + ps < cut)
      out[n++] = (dpt){ys, (double)a[k].p + ps};
    k++;
  }
  for (; k < na; k++)
    if (a[k].y + a[k].p + ps < cut)
      out[n++] = (dpt){a[k].y, (double)a[k].p + ps};
  return n;
}

static int shift_d(const dpt *a, int na, double ys, double ps, double cut, dpt *out) {
  int k = 0, n = 0;
  while (k + 1 < na && a[k + 1].y <= ys)
    k++;
  if (a[k].y <= ys) {
    if (ys + a[k].p + ps < cut)
      out[n++] = (dpt){ys, a[k].p + ps};
    k++;
  }
  for (; k < na; k++)
    if (a[k].y + a[k].p + ps < cut)
      out[n++] = (dpt){a[k].y, a[k].p + ps};
  return n;
}

/* Keeps at most KMAX points: merging neighbours (y1, p1), (y2, p2) into
 * (y1, p2) keeps a point below both, so the list stays a valid bound. */
static int reduce(dpt *a, int n) {
  while (n > KMAX) {
    int best = 0;
    double bl = INFINITY;
    for (int k = 0; k + 1 < n; k++) {
      double dp = a[k].p - a[k + 1].p, dy = a[k + 1].y - a[k].y;
      double l = dp > dy ? dp : dy;
      if (l < bl)
        bl = l, best = k;
    }
    a[best].p = a[best + 1].p;
    memmove(a + best + 1, a + best + 2, (size_t)(n - best - 2) * sizeof(dpt));
    n--;
  }
  return n;
}

/* Appends a list (rounded down to floats) as state k's list. */
static int store(bb *t, size_t k, const dpt *a, int n, bt_err *err) {
  if (t->npts + (size_t)n > t->cap_pts) {
    size_t nc = t->cap_pts ? 2 * t->cap_pts : (size_t)1 << 16;
    while (nc < t->npts + (size_t)n)
      nc *= 2;
    if (nc > UINT32_MAX)
      return bt_err_set(err, "partition: DP point pool overflow");
    pt *np = realloc(t->pts, nc * sizeof(pt));
    if (!np)
      return bt_err_set(err, "partition: out of memory for the DP table");
    t->pts = np;
    t->cap_pts = nc;
  }
  pt *o = t->pts + t->npts;
  int m = 0;
  for (int q = 0; q < n; q++) {
    pt v = {down(a[q].y), down(a[q].p)};
    if (m > 0 && v.p >= o[m - 1].p)
      continue;
    if (m > 0 && v.y <= o[m - 1].y)
      o[m - 1] = v;
    else
      o[m++] = v;
  }
  t->off[k] = (uint32_t)t->npts;
  t->cnt[k] = (uint8_t)m;
  t->npts += (size_t)m;
  return 0;
}

/* Pareto lists of (max y_k, sum p_k), same recursion as fill_scalar. A plan
 * through state (i, U, d) has a prefix of at least pre[i], so a completion
 * with pre[i] + y + p >= ub cannot beat the incumbent ub: it is dropped. */
static int fill_pareto(bb *t, bt_err *err) {
  ctx *c = t->c;
  int L = c->L, D = c->D, m1 = c->M - 1;
  size_t nU = t->nU;
  t->pts = NULL;
  t->npts = t->cap_pts = 0;
  t->off = malloc(t->ns * sizeof(uint32_t));
  t->cnt = calloc(t->ns, 1);
  dpt *g = malloc(((size_t)L + 1) * KMAX * sizeof(dpt)); /* G lists, KMAX each */
  int *gn = calloc((size_t)L + 1, sizeof(int));
  size_t big = (size_t)(3 * KMAX + 1);
  dpt *buf = malloc(3 * big * sizeof(dpt));
  int rc = 0;
  if (!t->off || !t->cnt || !g || !gn || !buf) {
    free(g), free(gn), free(buf);
    return bt_err_set(err, "partition: out of memory for the DP table");
  }
  dpt *a = buf, *b = buf + big, *sh = buf + 2 * big;
  for (size_t U = 1; U < nU && rc == 0; U++) {
    int r = __builtin_popcount((unsigned)U), nn = stage_nn(c, r);
    if (r > L)
      continue;
    for (int d = 0; d < D && rc == 0; d++) {
      if (!(U & (1u << d)))
        continue;
      size_t V = U & ~((size_t)1 << d), vrow[MAXD];
      dpix_rows(&t->ix, V, D, vrow);
      if (r > 1)
        for (int j = 1; j <= L - r + 1; j++) {
          int na = 0;
          for (int e = 0; e < D; e++) {
            if (!(V & (1u << e)) || !next_allowed(c, d, e))
              continue;
            size_t ck = vrow[e] + (size_t)j;
            if (!t->cnt[ck])
              continue;
            size_t l = lk(t, d, e) + j;
            int n2 =
                shift_f(t->pts + t->off[ck], t->cnt[ck], t->ly[l], t->lp[l], t->ub - c->pre[j], sh);
            na = pareto_merge(a, na, sh, n2, b);
            dpt *tmp = a;
            a = b, b = tmp;
            if (na > 2 * KMAX)
              na = reduce(a, na);
          }
          na = reduce(a, na);
          memcpy(g + (size_t)j * KMAX, a, (size_t)na * sizeof(dpt));
          gn[j] = na;
        }
      size_t od = (size_t)d * (L + 1);
      for (int i = L - r; i >= 0 && rc == 0; i--) {
        t->st.dp_states++;
        int jm = jmax_of(t, d, r, i), na = 0;
        const double *sf = t->sf + ij(t, d, i, 0), *sb = t->sb + ij(t, d, i, 0);
        double cut = t->ub - c->pre[i];
        if (r == 1) {
          double f = sf[L], bw = sb[L];
          double ys = m1 * (f > bw ? f : bw) + nn * (f > bw ? bw : f);
          if (jm == L && ys + f + bw < cut)
            a[na++] = (dpt){ys, f + bw};
        } else
          for (int j = i + 1; j <= jm; j++) {
            /* codec-free compute only grows with j: once it alone reaches the cut, stop */
            double f0 = c->F[od + j] - c->F[od + i], b0 = c->B[od + j] - c->B[od + i];
            if (m1 * (f0 > b0 ? f0 : b0) + nn * (f0 > b0 ? b0 : f0) + f0 + b0 >= cut)
              break;
            if (!gn[j])
              continue;
            double f = sf[j], bw = sb[j];
            double ys = m1 * (f > bw ? f : bw) + nn * (f > bw ? bw : f);
            int n2 = shift_d(g + (size_t)j * KMAX, gn[j], ys, f + bw, cut, sh);
            na = pareto_merge(a, na, sh, n2, b);
            dpt *tmp = a;
            a = b, b = tmp;
            if (na > 2 * KMAX)
              na = reduce(a, na);
          }
        na = reduce(a, na);
        rc = store(t, sidx(t, i, U, d), a, na, err);
      }
    }
  }
  free(g), free(gn), free(buf);
  return rc;
}

/* min over the points of state k of pp + p + max(yy, y); INFINITY if none. */
static double state_bound(const bb *t, size_t k, double pp, double yy) {
  if (t->sc) { /* pp + P_c + max(yy, Y_c) >= pp + max(P + max(yy, Y), Z) */
    const spt *q = t->sc + k;
    double v = q->p + (q->y > yy ? q->y : yy);
    return pp + (v > q->z ? v : q->z);
  }
  const pt *q = t->pts + t->off[k];
  double lb = INFINITY;
  for (int m = 0; m < t->cnt[k]; m++) {
    double y = q[m].y > yy ? q[m].y : yy, v = pp + q[m].p + y;
    if (v < lb)
      lb = v;
  }
  return lb;
}

/* The staircase's bound of state k (or 0 without one), to be maxed with
 * state_bound: completions with Y_c in (tau[a-1], tau[a]] have P_c >=
 * stp[a] and Y_c > tau[a-1]; those above the last threshold P_c >= P.
 * Asked only where state_bound alone does not prune: its rows are a second
 * table, a second cache miss. */
static double stair_bound(const bb *t, size_t k, double pp, double yy) {
  if (!t->stp)
    return 0.0;
  const spt *q = t->sc + k;
  const float *sp = t->stp + k * KS;
  double lo = q->y, w = INFINITY;
  for (int a = 0; a < KS; a++) {
    double x = sp[a] + (lo > yy ? lo : yy);
    w = x < w ? x : w;
    lo = t->tau[a] > lo ? t->tau[a] : lo;
  }
  double x = q->p + (lo > yy ? lo : yy);
  return pp + (x < w ? x : w);
}

/* Lower bound on the makespan of a complete plan (docs/partition.md):
 * GPipe P + (M-1) (max forward-side term + max backward-side term);
 * 1F1B P + for every stage the larger of (M-1) f + n b + max(0, (M-1-n) b - R)
 * and n f + (M-1) b + max(0, (M-1-n) f - R), n = max(0, M-1-W), R the round
 * trip right of the stage; every link (M-1) max(a, g); all plus o_0. */
static double plan_bound(const ctx *c, int S, const double *f, const double *b, const double *a,
                         const double *g, const double *o) {
  int m1 = c->M - 1;
  double P = 0.0, x = 0.0;
  for (int s = 0; s < S; s++)
    P += f[s] + b[s] + a[s] + g[s];
  if (c->p->kind == BT_SCHED_GPIPE) {
    double xf = 0.0, xb = 0.0;
    for (int s = 0; s < S; s++) {
      double u = f[s] > a[s] ? f[s] : a[s], v = b[s] > g[s] ? b[s] : g[s];
      xf = u > xf ? u : xf;
      xb = v > xb ? v : xb;
    }
    return P + m1 * (xf + xb) + o[0];
  }
  double R = P;
  for (int s = 0; s < S; s++) {
    R -= f[s] + b[s]; /* R: the round trip right of stage s, link s included */
    int w = S - s - 1 < c->M ? S - s - 1 : c->M, n = m1 - w > 0 ? m1 - w : 0;
    double u = m1 * f[s] + n * b[s] + fmax(0.0, (m1 - n) * b[s] - R);
    double v = n * f[s] + m1 * b[s] + fmax(0.0, (m1 - n) * f[s] - R);
    double l = m1 * (a[s] > g[s] ? a[s] : g[s]);
    u = u > v ? u : v;
    u = u > l ? u : l;
    x = u > x ? u : x;
    R -= a[s] + g[s];
  }
  return P + x + o[0];
}

/* The compiled replay of S stages, built on first use. */
static const prog *prog_for(bb *t, int S) {
  ctx *c = t->c;
  if (!t->progs[S].ops) {
    if (!c->built[S]) {
      if (bt_schedule_build(&c->sched[S], c->p->kind, S, c->M, t->err) < 0) {
        t->failed = 1;
        return NULL;
      }
      c->built[S] = 1;
    }
    if (prog_build(&t->progs[S], &c->sched[S], t->err) < 0) {
      t->failed = 1;
      return NULL;
    }
  }
  return &t->progs[S];
}

/* Makespan of the plan (S, dev, first) from the stage and link tables, or
 * INFINITY if the complete-plan bound says it cannot beat `cutoff` (or its
 * replay cannot be built: t->failed). */
static double replay_plan(bb *t, int S, const int *dev, const int *first, double cutoff) {
  double *f = t->cost, *b = f + MAXD, *a = b + MAXD, *g = a + MAXD, *o = g + MAXD;
  for (int s = 0; s < S; s++) {
    size_t k = ij(t, dev[s], first[s], first[s + 1]);
    f[s] = t->sf[k], b[s] = t->sb[k], o[s] = t->so[k];
    a[s] = g[s] = 0.0;
    if (s + 1 < S)
      link_time(t->c, dev[s], dev[s + 1], first[s + 1], &a[s], &g[s]);
  }
  if (plan_bound(t->c, S, f, b, a, g, o) >= cutoff)
    return INFINITY;
  const prog *pg = prog_for(t, S);
  return pg ? prog_run(pg, S, f, b, a, g, o, t->work) : INFINITY;
}

/* replay_plan() of a plan the local search built outside the tree, which
 * must first be checked: INFINITY if it breaks a device-use rule or a
 * memory cap. */
static double plan_cost(bb *t, int S, const int *dev, const int *first, double cutoff) {
  ctx *c = t->c;
  size_t U = 0;
  for (int s = 0; s < S; s++) {
    U |= (size_t)1 << dev[s];
    if (first[s + 1] > jmax_of(t, dev[s], S - s, first[s]))
      return INFINITY;
    if (s > 0 && !next_allowed(c, dev[s - 1], dev[s]))
      return INFINITY;
  }
  if (!root_allowed(c, U, dev[0]))
    return INFINITY;
  return replay_plan(t, S, dev, first, cutoff);
}

/* A plan of the local search and its makespan. */
typedef struct nbr {
  int S, dev[MAXD], first[MAXD + 1];
  double cost;
} nbr;

/* Takes n as the current plan *cur if it is faster. */
static int take_if_faster(bb *t, const nbr *n, nbr *cur) {
  double mk = plan_cost(t, n->S, n->dev, n->first, cur->cost);
  if (!(mk < cur->cost))
    return 0;
  *cur = *n;
  cur->cost = mk;
  return 1;
}

/* The neighbourhood of the local search, in three sweeps; each returns 1 at
 * the first neighbour faster than *cur (which then is *cur). Cuts: one cut
 * to any other position between its neighbours, or two neighbouring cuts
 * together. */
static int sweep_cuts(bb *t, nbr *cur) {
  const nbr base = *cur;
  nbr n;
  for (int s = 1; s < base.S; s++)
    for (int j = base.first[s - 1] + 1; j < base.first[s + 1]; j++) {
      if (j == base.first[s])
        continue;
      n = base;
      n.first[s] = j;
      if (take_if_faster(t, &n, cur))
        return 1;
    }
  for (int s = 1; s + 1 < base.S; s++)
    for (int j = base.first[s - 1] + 1; j < base.first[s + 2]; j++)
      for (int k = j + 1; k < base.first[s + 2]; k++) {
        if (j == base.first[s] || k == base.first[s + 1])
          continue;
        n = base;
        n.first[s] = j, n.first[s + 1] = k;
        if (take_if_faster(t, &n, cur))
          return 1;
      }
  return 0;
}

static size_t devices_used(const nbr *n) {
  size_t used = 0;
  for (int s = 0; s < n->S; s++)
    used |= (size_t)1 << n->dev[s];
  return used;
}

/* Devices: two stages swap theirs, or a stage moves to an unused one. */
static int sweep_devices(bb *t, nbr *cur) {
  const nbr base = *cur;
  const size_t used = devices_used(&base);
  nbr n;
  for (int s = 0; s < base.S; s++)
    for (int u = s + 1; u < base.S; u++) {
      n = base;
      n.dev[s] = base.dev[u], n.dev[u] = base.dev[s];
      if (take_if_faster(t, &n, cur))
        return 1;
    }
  for (int s = 0; s < base.S; s++)
    for (int e = 0; e < t->c->D; e++) {
      if (used & ((size_t)1 << e))
        continue;
      n = base;
      n.dev[s] = e;
      if (take_if_faster(t, &n, cur))
        return 1;
    }
  return 0;
}

/* Stages: two neighbours merged (on either's device), or one split in two
 * with an unused device before or after it. */
static int sweep_stages(bb *t, nbr *cur) {
  const nbr base = *cur;
  const int S = base.S, L = t->c->L;
  const size_t used = devices_used(&base);
  nbr n;
  for (int s = 1; s < S; s++) /* merge stages s-1 and s */
    for (int keep = 0; keep < 2; keep++) {
      n.S = S - 1;
      for (int q = 0, w = 0; q < S; q++) {
        if (q == s)
          continue;
        n.dev[w] = base.dev[q];
        n.first[w++] = base.first[q];
      }
      n.first[S - 1] = L;
      n.dev[s - 1] = keep ? base.dev[s] : base.dev[s - 1];
      if (take_if_faster(t, &n, cur))
        return 1;
    }
  if (S == MAXD || S == L)
    return 0;
  for (int s = 0; s < S; s++) /* split stage s at j, device e before or after */
    for (int j = base.first[s] + 1; j < base.first[s + 1]; j++)
      for (int e = 0; e < t->c->D; e++) {
        if (used & ((size_t)1 << e))
          continue;
        for (int after = 0; after < 2; after++) {
          n.S = S + 1;
          memcpy(n.dev, base.dev, sizeof(int) * s);
          memcpy(n.first, base.first, sizeof(int) * (s + 1));
          n.first[s + 1] = j;
          n.dev[s] = after ? base.dev[s] : e;
          n.dev[s + 1] = after ? e : base.dev[s];
          memcpy(n.dev + s + 2, base.dev + s + 1, sizeof(int) * (S - s - 1));
          memcpy(n.first + s + 2, base.first + s + 1, sizeof(int) * (S - s));
          if (take_if_faster(t, &n, cur))
            return 1;
        }
      }
  return 0;
}

static int sweep(bb *t, nbr *cur) {
  return sweep_cuts(t, cur) || sweep_devices(t, cur) || sweep_stages(t, cur);
}

/* Steps from *cur to a faster neighbour until none is (at most
 * DESCENT_STEPS steps); the result becomes the incumbent if it beats it. A
 * better incumbent prunes more of the tree; the search stays exact, since
 * every incumbent is a feasible plan's exact makespan. */
#define DESCENT_STEPS 200

static void descend(bb *t, nbr *cur) {
  for (int k = 0; k < DESCENT_STEPS && !t->failed; k++)
    if (!sweep(t, cur))
      break;
  if (cur->cost < t->best) {
    t->best = cur->cost;
    t->best_S = cur->S;
    memcpy(t->best_dev, cur->dev, sizeof(int) * cur->S);
    memcpy(t->best_first, cur->first, sizeof(int) * (cur->S + 1));
    t->st.polished++;
  }
}

static nbr incumbent(const bb *t) {
  nbr n;
  n.S = t->best_S;
  memcpy(n.dev, t->best_dev, sizeof(int) * n.S);
  memcpy(n.first, t->best_first, sizeof(int) * (n.S + 1));
  n.cost = t->best;
  return n;
}

/* Local search from a new incumbent. */
static void polish(bb *t) {
  const double t0 = thread_cpu();
  nbr cur = incumbent(t);
  descend(t, &cur);
  t->st.local_cpu += thread_cpu() - t0;
}

/* Iterated local search once the budget has stopped the tree: KICKS times,
 * the incumbent with two random changes (a cut moved, two devices swapped or
 * a stage moved to an unused device; fixed seed, so searches repeat), then
 * a descent from there. */
#define KICKS 100

static unsigned kick_rand(unsigned long long *x, unsigned n) {
  *x ^= *x << 13, *x ^= *x >> 7, *x ^= *x << 17;
  return (unsigned)(*x % n);
}

static void kick_search(bb *t) {
  const double t0 = thread_cpu();
  unsigned long long x = 0x9e3779b97f4a7c15ull;
  const int D = t->c->D;
  for (int r = 0; r < KICKS && !t->failed; r++) {
    nbr n = incumbent(t);
    for (int m = 0; m < 2; m++) {
      int S = n.S, s = (int)kick_rand(&x, (unsigned)S);
      switch (kick_rand(&x, 3)) {
      case 0: /* a cut to any position between its neighbours */
        if (S > 1) {
          s = 1 + (int)kick_rand(&x, (unsigned)(S - 1));
          int lo = n.first[s - 1] + 1, hi = n.first[s + 1] - 1;
          n.first[s] = lo + (int)kick_rand(&x, (unsigned)(hi - lo + 1));
        }
        break;
      case 1: { /* two stages swap devices */
        int u = (int)kick_rand(&x, (unsigned)S), d = n.dev[s];
        n.dev[s] = n.dev[u], n.dev[u] = d;
        break;
      }
      default: { /* a stage to an unused device */
        int e = (int)kick_rand(&x, (unsigned)D);
        if (!(devices_used(&n) & ((size_t)1 << e)))
          n.dev[s] = e;
      }
      }
    }
    n.cost = plan_cost(t, n.S, n.dev, n.first, INFINITY);
    if (isfinite(n.cost))
      descend(t, &n);
  }
  t->st.local_cpu += thread_cpu() - t0;
}

static void leaf(bb *t, int S) {
  double mk = replay_plan(t, S, t->dev, t->first, t->best);
  if (!isfinite(mk))
    return;
  t->st.evaluated++;
  if (t->dive)
    t->stopped = 1;
  if (mk < t->best) {
    t->best = mk;
    t->best_S = S;
    memcpy(t->best_dev, t->dev, sizeof(int) * S);
    memcpy(t->best_first, t->first, sizeof(int) * (S + 1));
    polish(t);
  }
}

/* Stage `depth` starts at layer i on device d; U: devices of this and later
 * stages. Prefix (stages before): pp = sum of p_k, yy = max of y_k, lm = max
 * of left_k + M (f_k + b_k), oo = the first stage's optimizer step; own_lb:
 * this subtree's bound (kept in open_lb if the budget stops the search here). */
static void node(bb *t, int depth, int i, size_t U, int d, double pp, double yy, double lm,
                 double oo, double own_lb) {
  ctx *c = t->c;
  int L = c->L, D = c->D, r = __builtin_popcount((unsigned)U), m1 = c->M - 1;
  t->st.nodes++;
  if (t->budget > 0 && t->st.nodes > t->budget) {
    t->stopped = 1;
    t->open_lb = own_lb < t->open_lb ? own_lb : t->open_lb;
    return;
  }
  t->dev[depth] = d;
  t->first[depth] = i;
  if (r == 1) {
    t->first[depth + 1] = L;
    leaf(t, depth + 1);
    return;
  }
  kid *ks = t->kids + (size_t)depth * L * D;
  int nk = 0, nn = stage_nn(c, r), jm = jmax_of(t, d, r, i);
  size_t V = U & ~((size_t)1 << d), vrow[MAXD];
  dpix_rows(&t->ix, V, D, vrow);
  for (int j = i + 1; j <= jm; j++) {
    double f = t->sf[ij(t, d, i, j)], b = t->sb[ij(t, d, i, j)];
    double ys = m1 * (f > b ? f : b) + nn * (f > b ? b : f);
    double lmj = pp + c->M * (f + b);
    lmj = lm > lmj ? lm : lmj;
    double o = depth == 0 ? t->so[ij(t, d, i, j)] : oo;
    ys = yy > ys ? yy : ys;
    for (int e = 0; e < D; e++) {
      if (!(V & (1u << e)) || !next_allowed(c, d, e))
        continue;
      size_t ck = vrow[e] + (size_t)j, l = lk(t, d, e) + j;
      double y = t->ly[l] > ys ? t->ly[l] : ys, p = pp + f + b + t->lp[l];
      double lb = state_bound(t, ck, p, y);
      lb = (lb > lmj ? lb : lmj) + o;
      if (!(lb < t->best))
        continue;
      if (t->stp) {
        const double ls = stair_bound(t, ck, p, y) + o;
        lb = ls > lb ? ls : lb;
        if (!(lb < t->best))
          continue;
      }
      ks[nk++] = (kid){lb, p, y, lmj, o, j, e};
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
    node(t, depth + 1, ks[k].j, V, ks[k].e, ks[k].p, ks[k].y, ks[k].lm, ks[k].o, ks[k].lb);
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

/* Runs the branch and bound from every root (device set and first device)
 * on the current bound table: first the root of smallest bound alone (its
 * first plan usually rules out most roots), then the others that can still
 * win, best bound first. */
static void search_roots(bb *t, root *roots) {
  ctx *c = t->c;
  size_t nr = 0, first = 0;
  for (size_t U = 1; U < t->nU; U++) {
    if (__builtin_popcount((unsigned)U) > c->L)
      continue;
    for (int d = 0; d < c->D; d++) {
      double lb = INFINITY;
      if ((U & (1u << d)) && root_allowed(c, U, d)) {
        const size_t k = sidx(t, 0, U, d);
        const double ls = stair_bound(t, k, 0.0, 0.0);
        lb = state_bound(t, k, 0.0, 0.0);
        lb = ls > lb ? ls : lb;
      }
      if (lb < t->best) {
        if (nr > 0 && lb < roots[first].lb)
          first = nr;
        roots[nr++] = (root){lb, (uint32_t)U, d};
      }
    }
  }
  if (nr == 0)
    return;
  root r0 = roots[first];
  roots[first] = roots[--nr];
  node(t, 0, 0, r0.U, r0.d, 0.0, 0.0, 0.0, 0.0, r0.lb);
  size_t n = 0;
  for (size_t k = 0; k < nr; k++)
    if (roots[k].lb < t->best)
      roots[n++] = roots[k];
  qsort(roots, n, sizeof(root), cmp_root);
  for (size_t k = 0; k < n && !t->failed; k++) {
    if (roots[k].lb >= t->best)
      break;
    if (t->stopped) {
      if (roots[k].lb < t->open_lb)
        t->open_lb = roots[k].lb;
      break;
    }
    node(t, 0, 0, roots[k].U, roots[k].d, 0.0, 0.0, 0.0, 0.0, roots[k].lb);
  }
}

/* The scalar-bound search gets this many nodes per entry (of L x 2^D x D,
 * see PARETO_MAX_STATES) before a
 * small table is refilled with Pareto lists (which cost about as much to
 * fill as a scalar search of that many nodes). */
#define SCALAR_NODES_PER_STATE 2L

/* Staircase bounds: the scalar search gets at most this many nodes first
 * (most searches that finish at all finish within it; 16 x 16 needs 13 k). */
#define STAIR_PASS1_NODES 50000L

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
  t.ns = dp_count(c.L, c.D);
  t.best = INFINITY;
  t.err = err;
  t.open_lb = INFINITY;
  long budget = p->max_nodes == 0 ? BT_PLAN_DEFAULT_NODES : p->max_nodes;
  if (t.ns == SIZE_MAX) {
    rc = too_large(c.L, c.D, err);
    goto done;
  }
  t.kids = malloc((size_t)(MAXD + 1) * c.L * c.D * sizeof(kid));
  t.work = malloc((size_t)(3 * MAXD + 2 * MAXD * c.M + 8) * sizeof(double));
  roots = malloc(t.nU * c.D * sizeof(root));
  if (!t.kids || !t.work || !roots || dpix_init(&t.ix, c.L, c.D) < 0) {
    rc = bt_err_set(err, "partition: out of memory for the search");
    goto done;
  }
  double t0 = thread_cpu();
  if ((rc = tabs_init(&t, err)) < 0 || (rc = fill_scalar(&t, err)) < 0)
    goto done;
  t.st.table_cpu = thread_cpu() - t0;
  long full = (long)c.L * (long)t.nU * c.D;
  int pareto = p->bounds == BT_PLAN_BOUNDS_PARETO ||
               (p->bounds == BT_PLAN_BOUNDS_AUTO && full <= PARETO_MAX_STATES);
  /* Pass 1, scalar bounds: the whole search, or (auto, small tables) the
   * search up to SCALAR_NODES_PER_STATE nodes per entry, or (Pareto) a dive
   * to the first complete plan: an incumbent for the Pareto cut, or
   * (staircase) the search up to STAIR_PASS1_NODES. */
  const int stair = p->bounds == BT_PLAN_BOUNDS_STAIR;
  long n1 = SCALAR_NODES_PER_STATE * full;
  if (stair && n1 > STAIR_PASS1_NODES)
    n1 = STAIR_PASS1_NODES;
  t.budget = (pareto || stair) && (budget < 0 || budget > n1) ? n1 : budget;
  t.dive = p->bounds == BT_PLAN_BOUNDS_PARETO;
  search_roots(&t, roots);
  if (!t.failed && stair && t.stopped && !isfinite(t.best) && (budget < 0 || t.st.nodes < budget)) {
    t.stopped = 0, t.dive = 1; /* no plan yet: the staircase needs an incumbent */
    t.budget = budget;
    search_roots(&t, roots);
  }
  if (!t.failed && (pareto || (stair && isfinite(t.best))) && t.stopped &&
      (budget < 0 || t.st.nodes < budget)) {
    /* Pass 2: Pareto lists cut at the incumbent, or the staircase under
     * it, and a fresh search with the rest of the budget. */
    double t1 = thread_cpu();
    if (stair) {
      stair_taus(&t);
      rc = fill_stair(&t, err);
    } else {
      long dps = t.st.dp_states;
      free(t.sc);
      t.sc = NULL;
      t.ub = t.best;
      rc = fill_pareto(&t, err);
      t.st.dp_states = dps;
    }
    if (rc < 0)
      goto done;
    t.st.table_cpu += thread_cpu() - t1;
    t.st.refined = 1;
    t.stopped = t.dive = 0;
    t.open_lb = INFINITY;
    t.budget = budget;
    search_roots(&t, roots);
  }
  if (!t.failed && t.stopped && isfinite(t.best))
    kick_search(&t);
  if (t.failed) {
    rc = -1;
    goto done;
  }
  if (!isfinite(t.best)) {
    if (t.stopped)
      rc = bt_err_set(err,
                      "partition: the node budget (%ld) ran out before any complete plan "
                      "was found; raise max_nodes",
                      budget);
    else /* no root's completion can be run in this device order, or nothing fits */
      rc = no_fit(&c, err);
    goto done;
  }
  memset(out, 0, sizeof *out);
  out->n_stages = t.best_S;
  memcpy(out->device, t.best_dev, sizeof(int) * t.best_S);
  memcpy(out->first, t.best_first, sizeof(int) * (t.best_S + 1));
  int bad;
  if ((rc = plan_fill(&c, out, &bad, err)) < 0)
    goto done;
  t.st.exact = !t.stopped;
  t.st.lower_bound = t.stopped && t.open_lb < out->iter_time ? t.open_lb : out->iter_time;
  if (stats)
    *stats = t.st;
  rc = 0;
done:
  for (int s = 0; s <= MAXD; s++)
    free(t.progs[s].ops);
  free(roots);
  free(t.ix.row0);
  free(t.kids);
  free(t.work);
  free(t.off);
  free(t.cnt);
  free(t.pts);
  free(t.sc);
  free(t.stp);
  free(t.ft.fb);
  free(t.sf);
  free(t.so);
  free(t.sb);
  free(t.lp);
  free(t.ly);
  free(t.jmax);
  ctx_free(&c);
  return rc;
}

int bt_plan_unmeasured_runs(const bt_plan *p, int n_layers, int n_devices,
                            const unsigned char *measured, int max_runs, int *n, int *first,
                            int *end, bt_err *err) {
  if (max_runs < 1)
    return bt_err_set(err, "partition: max_runs must be at least 1 (got %d)", max_runs);
  for (int d = 0; d < n_devices; d++)
    n[d] = 0;
  int pairs = 0;
  for (int s = 0; s < p->n_stages; s++) {
    const int d = p->device[s];
    if (d < 0 || d >= n_devices)
      return bt_err_set(err, "partition: stage %d's device %d is not in 0..%d", s, d,
                        n_devices - 1);
    for (int l = p->first[s]; l < p->first[s + 1] && l < n_layers; l++) {
      if (measured[(size_t)d * n_layers + l])
        continue;
      int *f = first + (size_t)d * max_runs, *e = end + (size_t)d * max_runs;
      if (n[d] > 0 && (e[n[d] - 1] == l || n[d] == max_runs))
        e[n[d] - 1] = l + 1; /* extends the last run (over a gap when full) */
      else
        f[n[d]] = l, e[n[d]] = l + 1, n[d]++;
      pairs++;
    }
  }
  return pairs;
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
  const unsigned need = bf->c->p->required_devices;
  const int complete =
      (bf->c->p->device_use == BT_PLAN_ANY_DEVICES && (used & need) == need) || s == bf->c->D;
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
    if (!(used & (1u << d)) &&
        (s == 0 ? d == 0 || (bf->c->p->device_use != BT_PLAN_DEVICES_IN_ORDER &&
                             bf->c->p->device_use != BT_PLAN_ALL_FIRST_FIXED)
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
      return bt_err_set(err, "partition: device_peak[%d] = %g; must be > 0", s, p->device_peak[s]);
    }
  balance_cuts(&c, out, p->layer_flops, p->device_peak);
  return baseline_finish(&c, out, err);
}

int bt_plan_explicit(const bt_plan_problem *p, int n_stages, const int *cuts, const int *devices,
                     bt_plan *out, bt_err *err) {
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
