/* baton bench plan: time of the exact plan search (bt_plan_search) on seeded
 * random heterogeneous problems (the generator of tests/test_partition.c:
 * device speeds 0.3..3.3, per-layer weights, random links and codec), each
 * next to the even-split baseline's predicted iteration time, in the same
 * run. Times are this thread's CPU time (other processes on the machine do
 * not count), median of --repeats runs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "baton/partition.h"
#include "cli.h"

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
  for (int a = 0; a < D; a++) {
    q->cap[a] = 1e15;
    for (int b = 0; b < D; b++) {
      q->bw[a * D + b] = 1e8 * (0.2 + 5 * urand(&r));
      q->lat[a * D + b] = a == b ? 0 : 1e-5 * urand(&r);
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
  if (urand(&r) < 0.3) {
    q->p.codec_ratio = 0.25;
    q->p.codec_encode = 1e-10;
    q->p.codec_decode = 2e-10;
  }
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: baton bench plan [options]\n\n"
          "  --repeats N      timed searches per problem, median reported (default 5)\n"
          "  --seed S         problem seed (default: the seed of tests/test_partition.c)\n"
          "  --bounds B       auto, scalar or pareto (default auto; docs/partition.md)\n"
          "  --max-nodes N    branch-and-bound node budget (default %ld; -1 = unlimited)\n"
          "  --large          also 32 layers x 16 devices (2^25 DP states, ~0.4 GB)\n",
          BT_PLAN_DEFAULT_NODES);
}

int bt_cmd_bench_plan(int argc, char **argv) {
  int repeats = 5, large = 0;
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
    } else if (strcmp(a, "--bounds") == 0) {
      if (strcmp(v, "auto") == 0)
        bounds = BT_PLAN_BOUNDS_AUTO;
      else if (strcmp(v, "scalar") == 0)
        bounds = BT_PLAN_BOUNDS_SCALAR;
      else if (strcmp(v, "pareto") == 0)
        bounds = BT_PLAN_BOUNDS_PARETO;
      else
        return bt_cli_fail("bench plan", "--bounds '%s': expected auto, scalar or pareto", v);
    } else {
      bt_cli_fail("bench plan", "unknown option '%s'; see 'baton bench plan --help'", a);
      return 2;
    }
    i++;
  }
  static const struct {
    int L, D, M;
    bt_schedule_kind kind;
    int large;
  } cases[] = {
      {50, 8, 8, BT_SCHED_GPIPE, 0}, {50, 8, 8, BT_SCHED_1F1B, 0},
      {50, 8, 2, BT_SCHED_1F1B, 0},  {16, 16, 8, BT_SCHED_GPIPE, 0},
      {16, 16, 8, BT_SCHED_1F1B, 0}, {24, 16, 8, BT_SCHED_GPIPE, 0},
      {24, 16, 8, BT_SCHED_1F1B, 0}, {32, 16, 8, BT_SCHED_GPIPE, 1},
      {32, 16, 8, BT_SCHED_1F1B, 1},
  };
  plan_prob *q = malloc(sizeof *q);
  double *t = malloc((size_t)repeats * sizeof(double));
  if (!q || !t) {
    free(q), free(t);
    return bt_cli_fail("bench plan", "out of memory");
  }
  printf("baton bench plan: exact plan search, thread CPU time (median of %d), seeded random "
         "heterogeneous problems; bounds %s, node budget %ld\n",
         repeats,
         bounds == BT_PLAN_BOUNDS_AUTO     ? "auto"
         : bounds == BT_PLAN_BOUNDS_SCALAR ? "scalar"
                                           : "pareto",
         max_nodes ? max_nodes : BT_PLAN_DEFAULT_NODES);
  printf("%-32s %11s %6s %9s %9s %7s %10s %10s %10s\n", "problem", "search", "exact", "DP states",
         "nodes", "stages", "iter (s)", "bound (s)", "even (s)");
  int rc = 0;
  for (size_t k = 0; k < sizeof cases / sizeof cases[0] && rc == 0; k++) {
    if (cases[k].large && !large)
      continue;
    make_problem(q, cases[k].L, cases[k].D, cases[k].kind, cases[k].M, seed);
    q->p.max_nodes = max_nodes;
    q->p.bounds = bounds;
    bt_plan pl, ev;
    bt_plan_stats st;
    bt_err err;
    for (int r = 0; r < repeats && rc == 0; r++) {
      double t0 = bt_cli_cpu_now();
      if (bt_plan_search(&q->p, &pl, &st, &err) < 0)
        rc = bt_cli_fail("bench plan", "%s", err.msg);
      t[r] = bt_cli_cpu_now() - t0;
    }
    int S = cases[k].D < cases[k].L ? cases[k].D : cases[k].L;
    if (rc == 0 && bt_plan_even(&q->p, S, &ev, &err) < 0)
      rc = bt_cli_fail("bench plan", "even baseline: %s", err.msg);
    if (rc)
      break;
    char name[64];
    snprintf(name, sizeof name, "%d layers x %d devices %s M=%d", cases[k].L, cases[k].D,
             bt_schedule_kind_name(cases[k].kind), cases[k].M);
    printf("%-32s %8.1f ms %6s %9ld %9ld %7d %10.4f %10.4f %10.4f\n", name,
           1e3 * bt_cli_median(t, repeats), st.exact ? "yes" : "no", st.dp_states, st.nodes,
           pl.n_stages, pl.iter_time, st.lower_bound, ev.iter_time);
    fflush(stdout);
  }
  free(q);
  free(t);
  return rc;
}
