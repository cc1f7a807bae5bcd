/* baton bench plan: time of the exact plan search (bt_plan_search) on seeded
 * random heterogeneous problems (the generator of tests/test_partition.c:
 * device speeds 0.3..3.3, per-layer weights, random links and codec) and on
 * two zoo models (per-layer FLOPs, parameters and activation sizes of vgg16
 * and resnet18 on random devices), each next to the even-split baseline's
 * predicted iteration time, in the same run. Times are this thread's CPU time (other processes on
 * the machine do not count), median of --repeats runs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "baton/model.h"
#include "baton/partition.h"
#include "cli.h"
#include "planner.h"

enum { PL_MAXL = 64, PL_MAXD = BT_PLAN_MAX_DEVICES };

typedef struct plan_prob {
  bt_plan_problem p;
  double fwd[PL_MAXD * PL_MAXL], bwd[PL_MAXD * PL_MAXL], optim[PL_MAXD * PL_MAXL];
  double act[PL_MAXL], state[PL_MAXL], stash[PL_MAXL], cap[PL_MAXD];
  double bw[PL_MAXD * PL_MAXD], lat[PL_MAXD * PL_MAXD];
} plan_prob;

typedef struct rng64 {
  unsigned long long s;
} rng64;

static double urand(rng64 *r) { /* xorshift64 in [0, 1), as in the test */
  r->s ^= r->s << 13;
  r->s ^= r->s >> 7;
  r->s ^= r->s << 17;
  return (double)(r->s >> 11) / 9007199254740992.0;
}

/* Unlimited memory, random links (bandwidth bw_scale x 0.2..5.2 bytes/s,
 * latency up to 10 us) and the problem over q's arrays. */
static void links_and_problem(plan_prob *q, rng64 *r, int L, int D, double bw_scale,
                              bt_schedule_kind kind, int M) {
  for (int a = 0; a < D; a++) {
    q->cap[a] = 1e15;
    for (int b = 0; b < D; b++) {
      q->bw[a * D + b] = bw_scale * (0.2 + 5 * urand(r));
      q->lat[a * D + b] = a == b ? 0 : 1e-5 * urand(r);
    }
  }
  q->p = (bt_plan_problem){.n_layers = L,
                           .n_devices = D,
                           .fwd = q->fwd,
                           .bwd = q->bwd,
                           .optim = q->optim,
                           .act_bytes = q->act,
                           .state_bytes = q->state,
                           .stash_bytes = q->stash,
                           .mem_cap = q->cap,
                           .bandwidth = q->bw,
                           .latency = q->lat,
                           .kind = kind,
                           .micro = M};
}

/* The test's make_random (tight = 0): same seed, same problem. */
static void make_problem(plan_prob *q, int L, int D, bt_schedule_kind kind, int M,
                         unsigned long long seed) {
  rng64 r = {seed};
  double speed[PL_MAXD] = {0};
  memset(q, 0, sizeof *q);
  for (int d = 0; d < D; d++)
    speed[d] = 0.3 + 3.0 * urand(&r);
  for (int l = 0; l < L; l++) {
    double w = 0.2 + urand(&r);
    for (int d = 0; d < D; d++) {
      q->fwd[d * L + l] = 1e-3 * w * speed[d] * (0.8 + 0.4 * urand(&r));
      q->bwd[d * L + l] = 2e-3 * w * speed[d] * (0.8 + 0.4 * urand(&r));
      q->optim[d * L + l] = 1e-4 * urand(&r);
    }
    q->act[l] = 1e5 * (0.1 + 2 * urand(&r));
    q->state[l] = 1e6 * (0.1 + urand(&r));
    q->stash[l] = 1e5 * (0.1 + urand(&r));
  }
  links_and_problem(q, &r, L, D, 1e8, kind, M);
  if (urand(&r) < 0.3) {
    q->p.codec_ratio = 0.25;
    q->p.codec_encode = 1e-10;
    q->p.codec_decode = 2e-10;
  }
}

/* A zoo model on D random devices (FLOP/s 3e11 / speed, speed 0.3..3.3),
 * micro-batches of 32 samples: time = FLOPs / rate, activations and stash
 * = output floats, state = parameters x 3 (weights, gradients, momentum). */
static int make_zoo_problem(plan_prob *q, const char *model, int D, bt_schedule_kind kind, int M,
                            unsigned long long seed, int *n_layers, bt_err *err) {
  bt_model m;
  if (bt_zoo_build(model, (bt_shape){32, 32, 3}, 10, &m, err) < 0)
    return -1;
  int L = m.n_layers;
  if (L > PL_MAXL) {
    bt_model_free(&m);
    return bt_err_set(err, "%s has %d layers; the benchmark holds %d", model, L, PL_MAXL);
  }
  rng64 r = {seed};
  double speed[PL_MAXD] = {0}, mb = 32;
  memset(q, 0, sizeof *q);
  for (int d = 0; d < D; d++)
    speed[d] = 0.3 + 3.0 * urand(&r);
  for (int l = 0; l < L; l++) {
    const bt_layer *ly = &m.layers[l];
    for (int d = 0; d < D; d++) {
      double rate = 3e11 / speed[d];
      q->fwd[d * L + l] = mb * bt_layer_flops_fwd(ly) / rate;
      q->bwd[d * L + l] = mb * bt_layer_flops_bwd(ly) / rate;
      q->optim[d * L + l] = 3.0 * (double)ly->n_params / (rate / 10);
    }
    q->act[l] = 4.0 * mb * (double)bt_shape_elems(ly->out);
    q->state[l] = 12.0 * (double)ly->n_params;
    q->stash[l] = q->act[l];
  }
  links_and_problem(q, &r, L, D, 1e9, kind, M);
  *n_layers = L;
  bt_model_free(&m);
  return 0;
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: baton bench plan [options]\n\n"
          "  --repeats N      timed searches per problem, median reported (default 5)\n"
          "  --seed S         problem seed (default: the seed of tests/test_partition.c)\n"
          "  --bounds B       auto, scalar, pareto or stair (default auto; docs/partition.md)\n"
          "  --max-nodes N    branch-and-bound node budget (default %ld; -1 = unlimited)\n"
          "  --large          also 32 and 50 layers x 16 devices and vgg16 on 16 (up to 2^26\n"
          "                   DP states, ~0.8 GB)\n",
          BT_PLAN_DEFAULT_NODES);
}

int bt_cmd_bench_plan(int argc, char **argv) {
  int repeats = 5, large = 0;
  const char *only = NULL;
  long max_nodes = 0;
  unsigned long long seed = 88172645463325252ull;
  bt_plan_bounds bounds = BT_PLAN_BOUNDS_AUTO;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      usage(stdout);
      return 0;
    }
    if (strcmp(a, "--large") == 0) {
      large = 1;
      continue;
    }
    if (!v)
      return bt_cli_fail("bench plan", "option '%s' needs a value; see 'baton bench plan --help'",
                         a);
    char *end = NULL;
    if (strcmp(a, "--repeats") == 0) {
      repeats = (int)strtol(v, &end, 10);
      if (*end || repeats < 1 || repeats > 100)
        return bt_cli_fail("bench plan", "--repeats '%s': expected an integer in 1..100", v);
    } else if (strcmp(a, "--seed") == 0) {
      seed = strtoull(v, &end, 0);
      if (*end || seed == 0)
        return bt_cli_fail("bench plan", "--seed '%s': expected a non-zero integer", v);
    } else if (strcmp(a, "--max-nodes") == 0) {
      max_nodes = strtol(v, &end, 10);
      if (*end)
        return bt_cli_fail("bench plan", "--max-nodes '%s': expected an integer", v);
    } else if (strcmp(a, "--only") == 0) {
      only = v;
    } else if (strcmp(a, "--bounds") == 0) {
      if (cli_plan_bounds(v, &bounds) < 0)
        return bt_cli_fail("bench plan", "--bounds '%s': expected auto, scalar, pareto or stair",
                           v);
    } else {
      bt_cli_fail("bench plan", "unknown option '%s'; see 'baton bench plan --help'", a);
      return 2;
    }
    i++;
  }
  static const struct {
    const char *zoo; /* NULL: random problem of L layers */
    int L, D, M;
    bt_schedule_kind kind;
    int large;
  } cases[] = {
      {NULL, 50, 8, 8, BT_SCHED_GPIPE, 0},   {NULL, 50, 8, 8, BT_SCHED_1F1B, 0},
      {NULL, 50, 8, 2, BT_SCHED_1F1B, 0},    {NULL, 16, 16, 8, BT_SCHED_GPIPE, 0},
      {NULL, 16, 16, 8, BT_SCHED_1F1B, 0},   {NULL, 24, 16, 8, BT_SCHED_GPIPE, 0},
      {NULL, 24, 16, 8, BT_SCHED_1F1B, 0},   {NULL, 32, 16, 8, BT_SCHED_GPIPE, 1},
      {NULL, 32, 16, 8, BT_SCHED_1F1B, 1},   {NULL, 50, 16, 8, BT_SCHED_GPIPE, 1},
      {NULL, 50, 16, 8, BT_SCHED_1F1B, 1},   {"vgg16", 0, 8, 8, BT_SCHED_1F1B, 0},
      {"vgg16", 0, 16, 8, BT_SCHED_1F1B, 1}, {"resnet18", 0, 16, 8, BT_SCHED_GPIPE, 0},
  };
  plan_prob *q = malloc(sizeof *q);
  double *t = malloc(3 * (size_t)repeats * sizeof(double)), *tab = t ? t + repeats : NULL,
         *loc = t ? t + 2 * repeats : NULL;
  if (!q || !t) {
    free(q), free(t);
    return bt_cli_fail("bench plan", "out of memory");
  }
  printf("baton bench plan: exact plan search, thread CPU time (median of %d), seeded random "
         "heterogeneous problems; bounds %s, node budget %ld\n",
         repeats, cli_plan_bounds_name(bounds), max_nodes ? max_nodes : BT_PLAN_DEFAULT_NODES);
  printf("%-34s %11s %10s %10s %6s %9s %9s %7s %10s %10s %10s\n", "problem", "search", "tables",
         "local", "exact", "DP states", "nodes", "stages", "iter (s)", "bound (s)", "even (s)");
  int rc = 0;
  for (size_t k = 0; k < sizeof cases / sizeof cases[0] && rc == 0; k++) {
    if (cases[k].large && !large)
      continue;
    int L = cases[k].L;
    bt_err err;
    if (!cases[k].zoo)
      make_problem(q, L, cases[k].D, cases[k].kind, cases[k].M, seed);
    else if (make_zoo_problem(q, cases[k].zoo, cases[k].D, cases[k].kind, cases[k].M, seed, &L,
                              &err) < 0) {
      rc = bt_cli_fail("bench plan", "%s", err.msg);
      break;
    }
    char name[64];
    if (cases[k].zoo)
      snprintf(name, sizeof name, "%s (%d layers) x %d %s M=%d", cases[k].zoo, L, cases[k].D,
               bt_schedule_kind_name(cases[k].kind), cases[k].M);
    else
      snprintf(name, sizeof name, "%d layers x %d devices %s M=%d", L, cases[k].D,
               bt_schedule_kind_name(cases[k].kind), cases[k].M);
    if (only && !strstr(name, only))
      continue;
    q->p.max_nodes = max_nodes;
    q->p.bounds = bounds;
    bt_plan pl, ev;
    bt_plan_stats st;
    for (int r = 0; r < repeats && rc == 0; r++) {
      double t0 = bt_cli_cpu_now();
      if (bt_plan_search(&q->p, &pl, &st, &err) < 0)
        rc = bt_cli_fail("bench plan", "%s", err.msg);
      t[r] = bt_cli_cpu_now() - t0;
      tab[r] = st.table_cpu;
      loc[r] = st.local_cpu;
    }
    int S = cases[k].D < L ? cases[k].D : L;
    if (rc == 0 && bt_plan_even(&q->p, S, &ev, &err) < 0)
      rc = bt_cli_fail("bench plan", "even baseline: %s", err.msg);
    if (rc)
      break;
    printf("%-34s %8.1f ms %7.1f ms %7.1f ms %6s %9ld %9ld %7d %10.4f %10.4f %10.4f\n", name,
           1e3 * bt_cli_median(t, repeats), 1e3 * bt_cli_median(tab, repeats),
           1e3 * bt_cli_median(loc, repeats), st.exact ? "yes" : "no", st.dp_states, st.nodes,
           pl.n_stages, pl.iter_time, st.lower_bound, ev.iter_time);
    fflush(stdout);
  }
  free(q);
  free(t);
  return rc;
}
