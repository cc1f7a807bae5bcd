/* Tests for partition: the exact search equals brute force on random small
 * problems (both schedules, several micro-batch counts, tight memory, codec
 * costs), the memory-infeasibility error and its smallest scale, a slow
 * device getting fewer layers, a very slow device left unused, the baselines
 * and explicit-cut errors, and planning times (printed, not asserted). */
#include "baton/partition.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define assert_has(msg, needle)                                                                    \
  cr_assert(strstr((msg), (needle)) != NULL, "expected \"%s\" in: %s", (needle), (msg))

enum { ML = 140, MD = 16 };

typedef struct prob {
  bt_plan_problem p;
  double fwd[MD * ML], bwd[MD * ML], optim[MD * ML], act[ML], state[ML], stash[ML], cap[MD],
      bw[MD * MD], lat[MD * MD], flops[ML], peak[MD], codec_act[MD * ML], codec_grad[MD * ML];
} prob;

static unsigned long long rs = 88172645463325252ull;
static double urand(void) { /* xorshift64 in [0, 1) */
  rs ^= rs << 13;
  rs ^= rs >> 7;
  rs ^= rs << 17;
  return (double)(rs >> 11) / 9007199254740992.0;
}

/* Uniform-ish problem: speed[d] scales device d's times. */
static void make(prob *q, int L, int D, bt_schedule_kind kind, int M, const double *speed) {
  memset(q, 0, sizeof *q);
  for (int d = 0; d < D; d++)
    for (int l = 0; l < L; l++) {
      q->fwd[d * L + l] = 1e-3 * speed[d];
      q->bwd[d * L + l] = 2e-3 * speed[d];
    }
  for (int l = 0; l < L; l++) {
    q->act[l] = 1e3;
    q->state[l] = 100;
    q->stash[l] = 10;
    q->flops[l] = 1e6;
  }
  for (int a = 0; a < D; a++) {
    q->cap[a] = 1e12;
    q->peak[a] = 1e9 / speed[a];
    for (int b = 0; b < D; b++)
      q->bw[a * D + b] = 1e9;
  }
  q->p = (bt_plan_problem){.n_layers = L,
                           .n_devices = D,
                           .fwd = q->fwd,
                           .bwd = q->bwd,
                           .act_bytes = q->act,
                           .state_bytes = q->state,
                           .stash_bytes = q->stash,
                           .mem_cap = q->cap,
                           .bandwidth = q->bw,
                           .latency = q->lat,
                           .kind = kind,
                           .micro = M,
                           .layer_flops = q->flops,
                           .device_peak = q->peak};
}

/* A stage-level optimizer step that is no sum over layers: one launch per
 * stage plus a sweep whose speed depends on its size (what baton's runtime
 * charges). */
static double optim_of_stage(const void *ctx, int d, int first, int end) {
  const prob *q = ctx;
  double bytes = 0;
  for (int l = first; l < end; l++)
    bytes += q->state[l];
  return (2e-5 + 1e-10 * bytes * (bytes < 2e6 ? 0.5 : 1.0)) * (1 + d);
}

/* Random heterogeneous problem; tight memory when `tight`. */
static void make_random(prob *q, int L, int D, bt_schedule_kind kind, int M, int tight) {
  double speed[MD] = {0};
  for (int d = 0; d < D; d++)
    speed[d] = 0.3 + 3.0 * urand();
  make(q, L, D, kind, M, speed);
  for (int l = 0; l < L; l++) {
    double w = 0.2 + urand();
    for (int d = 0; d < D; d++) {
      q->fwd[d * L + l] = 1e-3 * w * speed[d] * (0.8 + 0.4 * urand());
      q->bwd[d * L + l] = 2e-3 * w * speed[d] * (0.8 + 0.4 * urand());
      q->optim[d * L + l] = 1e-4 * urand();
    }
    q->act[l] = 1e5 * (0.1 + 2 * urand());
    q->state[l] = 1e6 * (0.1 + urand());
    q->stash[l] = 1e5 * (0.1 + urand());
  }
  double total = 0;
  for (int l = 0; l < L; l++)
    total += q->state[l] + M * q->stash[l];
  for (int a = 0; a < D; a++) {
    q->cap[a] = tight ? total * (0.3 + 0.9 * urand()) : 1e15;
    for (int b = 0; b < D; b++) {
      q->bw[a * D + b] = 1e8 * (0.2 + 5 * urand());
      q->lat[a * D + b] = a == b ? 0 : 1e-5 * urand();
    }
  }
  q->p.optim = q->optim;
  if (urand() < 0.3) {
    q->p.optim_stage = optim_of_stage;
    q->p.optim_ctx = q;
  }
  const double codec = urand();
  if (codec < 0.3) {
    q->p.codec_ratio = 0.25;
    q->p.codec_encode = 1e-10;
    q->p.codec_decode = 2e-10;
  } else if (codec < 0.6) { /* per device and cut, as baton's planner gives them */
    q->p.codec_ratio = 0.5;
    for (int d = 0; d < D; d++)
      for (int l = 0; l < L; l++) {
        q->codec_act[d * L + l] = 1e-4 * urand() * speed[d];
        q->codec_grad[d * L + l] = 1e-4 * urand() * speed[d];
      }
    q->p.codec_act = q->codec_act;
    q->p.codec_grad = q->codec_grad;
  }
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}

static void check_plan(const prob *q, const bt_plan *pl) {
  bt_plan re = *pl;
  bt_err err = {{0}};
  cr_assert_eq(bt_plan_evaluate(&q->p, &re, &err), 0, "%s", err.msg);
  cr_assert_float_eq(re.iter_time, pl->iter_time, 1e-12 * pl->iter_time + 1e-15);
  for (int s = 0; s < pl->n_stages; s++)
    cr_assert_leq(pl->mem[s], q->cap[pl->device[s]] * (q->p.mem_scale > 0 ? q->p.mem_scale : 1));
}

Test(partition, search_equals_brute_force) {
  static const int micros[] = {1, 2, 3, 5, 8};
  int trials = 0, infeasible = 0, unused = 0;
  for (int rep = 0; rep < 60; rep++)
    for (int k = 0; k < 2; k++)
      for (int mi = 0; mi < 5; mi++) {
        prob q;
        int L = 1 + (int)(urand() * 8), D = 1 + (int)(urand() * 4);
        make_random(&q, L, D, k ? BT_SCHED_1F1B : BT_SCHED_GPIPE, micros[mi], rep % 3 == 0);
        bt_plan a, b;
        bt_err ea = {{0}}, eb = {{0}};
        bt_plan_stats st;
        int rb = bt_plan_brute_force(&q.p, &b, &eb);
        /* every kind of bound, each exact: the same optimum as brute force */
        for (int bi = 0; bi < 4; bi++) {
          q.p.bounds = (bt_plan_bounds)bi;
          int ra = bt_plan_search(&q.p, &a, &st, &ea);
          cr_assert(ra < 0 || st.exact, "search stopped on a small problem");
          cr_assert_eq(ra, rb, "L=%d D=%d bounds %d: search %d (%s) vs brute %d (%s)", L, D, bi, ra,
                       ea.msg, rb, eb.msg);
          if (ra < 0) {
            cr_assert_str_eq(ea.msg, eb.msg);
            continue;
          }
          cr_assert(fabs(a.iter_time - b.iter_time) <= 1e-9 * b.iter_time,
                    "L=%d D=%d M=%d %s bounds %d: search %.12g vs brute force %.12g", L, D,
                    micros[mi], k ? "1f1b" : "gpipe", bi, a.iter_time, b.iter_time);
          cr_assert_leq(st.lower_bound, a.iter_time);
          check_plan(&q, &a);
        }
        trials++;
        if (rb < 0) {
          infeasible++;
          continue;
        }
        if (a.n_stages < D && a.n_stages < L)
          unused++;
      }
  printf("partition: %d random problems, search = brute force (%d infeasible, %d leave a device "
         "unused)\n",
         trials, infeasible, unused);
  cr_assert_gt(infeasible, 0);
  cr_assert_lt(infeasible, trials / 2);
}

Test(partition, infeasible_memory_states_smallest_scale) {
  double speed[2] = {1, 1};
  prob q;
  make(&q, 4, 2, BT_SCHED_GPIPE, 2, speed);
  for (int l = 0; l < 4; l++) {
    q.state[l] = 60;
    q.stash[l] = 0;
  }
  q.cap[0] = q.cap[1] = 100; /* best split 2 + 2 layers: 120 bytes -> scale 1.2 */
  bt_plan pl;
  bt_err err = {{0}};
  cr_assert_lt(bt_plan_search(&q.p, &pl, NULL, &err), 0);
  assert_has(err.msg, "smallest memory scale");
  assert_has(err.msg, "1.2 x");
  double s;
  cr_assert_eq(bt_plan_min_mem_scale(&q.p, &s, &err), 0, "%s", err.msg);
  cr_assert_float_eq(s, 1.2, 1e-12);
  q.p.mem_scale = 1.2;
  cr_assert_eq(bt_plan_search(&q.p, &pl, NULL, &err), 0, "%s", err.msg);
  cr_assert_eq(pl.n_stages, 2);
  cr_assert_eq(pl.first[1], 2);
  q.p.mem_scale = 1.2 * (1 - 1e-9);
  cr_assert_lt(bt_plan_search(&q.p, &pl, NULL, &err), 0);

  /* Random infeasible problems: the stated scale is the exact threshold. */
  int checked = 0;
  for (int rep = 0; rep < 200 && checked < 20; rep++) {
    make_random(&q, 2 + rep % 6, 1 + rep % 4, rep % 2 ? BT_SCHED_1F1B : BT_SCHED_GPIPE, 1 + rep % 5,
                1);
    if (bt_plan_search(&q.p, &pl, NULL, &err) == 0)
      continue;
    cr_assert_eq(bt_plan_min_mem_scale(&q.p, &s, &err), 0, "%s", err.msg);
    cr_assert_gt(s, 1.0);
    q.p.mem_scale = s * (1 + 1e-9);
    cr_assert_eq(bt_plan_brute_force(&q.p, &pl, &err), 0, "scale %g: %s", s, err.msg);
    q.p.mem_scale = s * (1 - 1e-9);
    cr_assert_lt(bt_plan_brute_force(&q.p, &pl, &err), 0);
    checked++;
  }
  cr_assert_geq(checked, 10);

  /* No capacity at all: a clear message instead of a scale. */
  make(&q, 3, 2, BT_SCHED_GPIPE, 2, speed);
  q.cap[0] = q.cap[1] = 0;
  cr_assert_lt(bt_plan_search(&q.p, &pl, NULL, &err), 0);
  assert_has(err.msg, "at any scale");
}

/* Per-device codec times enter each stage as documented: decode the
 * activation in and encode it out on the forward, the gradient's codec ops on
 * the backward; a stage at either end of the chain skips that end. */
Test(partition, per_device_codec_times_enter_stages) {
  const double speed[2] = {1, 1};
  prob q;
  make(&q, 4, 2, BT_SCHED_GPIPE, 1, speed);
  for (int d = 0; d < 2; d++)
    for (int l = 0; l < 4; l++)
      q.codec_act[d * 4 + l] = 1e-5 * (1 + l + 10 * d), q.codec_grad[d * 4 + l] = 3e-5 * (1 + l);
  q.p.codec_act = q.codec_act;
  q.p.codec_grad = q.codec_grad;
  bt_plan pl = {.n_stages = 2, .device = {1, 0}, .first = {0, 2, 4}};
  bt_err err = {{0}};
  cr_assert_eq(bt_plan_evaluate(&q.p, &pl, &err), 0, "%s", err.msg);
  /* stage 0 on device 1, layers 0-1: encodes the activation at cut 1 (act row
   * 1: 1e-5 * 12), decodes its gradient (3e-5 * 2); stage 1 on device 0: the
   * same cut's decode (1e-5 * 2) and gradient encode (3e-5 * 2) */
  cr_assert_float_eq(pl.fwd[0], 2e-3 + 12e-5, 1e-12);
  cr_assert_float_eq(pl.bwd[0], 4e-3 + 6e-5, 1e-12);
  cr_assert_float_eq(pl.fwd[1], 2e-3 + 2e-5, 1e-12);
  cr_assert_float_eq(pl.bwd[1], 4e-3 + 6e-5, 1e-12);
  q.p.codec_grad = NULL;
  cr_assert_lt(bt_plan_evaluate(&q.p, &pl, &err), 0);
  assert_has(err.msg, "codec_act and codec_grad go together");
  q.p.codec_grad = q.codec_grad;
  q.codec_grad[5] = NAN;
  cr_assert_lt(bt_plan_evaluate(&q.p, &pl, &err), 0);
  assert_has(err.msg, "finite and >= 0");
}

Test(partition, slow_device_gets_fewer_layers) {
  double speed[2] = {1, 3}; /* device 1 is three times slower */
  prob q;
  make(&q, 12, 2, BT_SCHED_1F1B, 8, speed);
  bt_plan pl, ev, bf;
  bt_err err = {{0}};
  cr_assert_eq(bt_plan_search(&q.p, &pl, NULL, &err), 0, "%s", err.msg);
  cr_assert_eq(pl.n_stages, 2);
  int slow = pl.device[0] == 1 ? 0 : 1;
  int n_slow = pl.first[slow + 1] - pl.first[slow];
  printf("partition: 12 layers, devices 1x and 3x: slow device gets %d layers, fast %d; "
         "%.4f s\n",
         n_slow, 12 - n_slow, pl.iter_time);
  cr_assert_lt(n_slow, 12 - n_slow);
  cr_assert_eq(n_slow, 3); /* 3 x 3 = 9 units vs 9 x 1 */
  cr_assert_eq(bt_plan_even(&q.p, 2, &ev, &err), 0, "%s", err.msg);
  cr_assert_lt(pl.iter_time, ev.iter_time);
  cr_assert_eq(bt_plan_brute_force(&q.p, &bf, &err), 0, "%s", err.msg);
  cr_assert_float_eq(pl.iter_time, bf.iter_time, 1e-12);
  /* flops baseline with peaks 1 : 1/3 gives the same 9 / 3 split */
  cr_assert_eq(bt_plan_flops(&q.p, 2, &ev, &err), 0, "%s", err.msg);
  cr_assert_eq(ev.first[1], 9);
}

Test(partition, very_slow_device_left_unused) {
  double speed[3] = {1, 1, 50};
  prob q;
  make(&q, 8, 3, BT_SCHED_GPIPE, 4, speed);
  bt_plan pl;
  bt_err err = {{0}};
  cr_assert_eq(bt_plan_search(&q.p, &pl, NULL, &err), 0, "%s", err.msg);
  cr_assert_eq(pl.n_stages, 2);
  for (int s = 0; s < pl.n_stages; s++)
    cr_assert_neq(pl.device[s], 2);
  check_plan(&q, &pl);
}

Test(partition, baselines) {
  double speed[4] = {1, 1, 1, 1};
  prob q;
  make(&q, 10, 4, BT_SCHED_GPIPE, 4, speed);
  bt_plan pl;
  bt_err err = {{0}};
  cr_assert_eq(bt_plan_even(&q.p, 4, &pl, &err), 0, "%s", err.msg);
  int want[5] = {0, 3, 6, 8, 10};
  for (int s = 0; s <= 4; s++)
    cr_assert_eq(pl.first[s], want[s], "first[%d] = %d", s, pl.first[s]);
  for (int s = 0; s < 4; s++)
    cr_assert_eq(pl.device[s], s);
  /* params: the first layer holds as much state as the other nine together */
  q.state[0] = 900;
  cr_assert_eq(bt_plan_params(&q.p, 2, &pl, &err), 0, "%s", err.msg);
  cr_assert_eq(pl.first[1], 1);
  /* flops: device 0 twice as fast -> 2/3 of the FLOPs */
  q.peak[0] = 2e9;
  q.peak[1] = 1e9;
  make(&q, 9, 2, BT_SCHED_GPIPE, 4, speed);
  q.peak[0] = 2e9;
  cr_assert_eq(bt_plan_flops(&q.p, 2, &pl, &err), 0, "%s", err.msg);
  cr_assert_eq(pl.first[1], 6);
  /* search never loses to a baseline */
  bt_plan best;
  cr_assert_eq(bt_plan_search(&q.p, &best, NULL, &err), 0, "%s", err.msg);
  cr_assert_leq(best.iter_time, pl.iter_time * (1 + 1e-12));
  cr_assert_lt(bt_plan_even(&q.p, 3, &pl, &err), 0);
  assert_has(err.msg, "3 stages");
}

Test(partition, explicit_cut_errors) {
  double speed[3] = {1, 1, 1};
  prob q;
  make(&q, 6, 3, BT_SCHED_1F1B, 4, speed);
  bt_plan pl;
  bt_err err = {{0}};
  int ok[2] = {2, 4}, dev[3] = {2, 0, 1};
  cr_assert_eq(bt_plan_explicit(&q.p, 3, ok, dev, &pl, &err), 0, "%s", err.msg);
  cr_assert_eq(pl.device[0], 2);
  cr_assert_eq(pl.first[2], 4);
  cr_assert_gt(pl.iter_time, 0);
  int out_hi[2] = {2, 6};
  cr_assert_lt(bt_plan_explicit(&q.p, 3, out_hi, NULL, &pl, &err), 0);
  assert_has(err.msg, "cut 1 ");
  assert_has(err.msg, "out of range");
  int out_lo[2] = {0, 3};
  cr_assert_lt(bt_plan_explicit(&q.p, 3, out_lo, NULL, &pl, &err), 0);
  assert_has(err.msg, "cut 0 ");
  assert_has(err.msg, "out of range");
  int noninc[2] = {3, 3};
  cr_assert_lt(bt_plan_explicit(&q.p, 3, noninc, NULL, &pl, &err), 0);
  assert_has(err.msg, "cut 1 ");
  assert_has(err.msg, "strictly increasing");
  int dup[3] = {0, 0, 1};
  cr_assert_lt(bt_plan_explicit(&q.p, 3, ok, dup, &pl, &err), 0);
  assert_has(err.msg, "device 0 runs two stages");
  q.cap[0] = 1; /* stage 0 cannot fit */
  cr_assert_lt(bt_plan_explicit(&q.p, 3, ok, NULL, &pl, &err), 0);
  assert_has(err.msg, "stage 0");
}

static void timed(int L, int D, bt_schedule_kind kind, int M) {
  prob *q = malloc(sizeof *q);
  make_random(q, L, D, kind, M, 0);
  bt_plan pl, ev;
  bt_plan_stats st;
  bt_err err = {{0}};
  double t0 = now();
  cr_assert_eq(bt_plan_search(&q->p, &pl, &st, &err), 0, "%s", err.msg);
  double ms = 1e3 * (now() - t0);
  check_plan(q, &pl);
  int S = D < L ? D : L;
  cr_assert_eq(bt_plan_even(&q->p, S, &ev, &err), 0, "%s", err.msg);
  cr_assert_leq(pl.iter_time, ev.iter_time * (1 + 1e-12));
  cr_assert_leq(st.lower_bound, pl.iter_time);
  printf("partition: plan %d layers x %d devices (%s, M=%d): %.1f ms, %ld DP states, %ld nodes, "
         "%ld plans replayed, %s (bound %.4g); %d stages, %.4g s (even over %d: %.4g s)\n",
         L, D, bt_schedule_kind_name(kind), M, ms, st.dp_states, st.nodes, st.evaluated,
         st.exact ? "exact" : "budget hit", st.lower_bound, pl.n_stages, pl.iter_time, S,
         ev.iter_time);
  free(q);
}

Test(partition, plan_50x8_gpipe) { timed(50, 8, BT_SCHED_GPIPE, 8); }
Test(partition, plan_50x8_1f1b) { timed(50, 8, BT_SCHED_1F1B, 8); }
Test(partition, plan_50x8_1f1b_m2) { timed(50, 8, BT_SCHED_1F1B, 2); }
Test(partition, plan_16x16_1f1b) { timed(16, 16, BT_SCHED_1F1B, 8); }
Test(partition, plan_16x16_gpipe) { timed(16, 16, BT_SCHED_GPIPE, 8); }

/* The device-use restrictions: search = brute force, and the plan obeys them. */
Test(partition, device_use_restrictions_equal_brute_force) {
  static const bt_plan_device_use uses[] = {BT_PLAN_ALL_DEVICES, BT_PLAN_DEVICES_IN_ORDER,
                                            BT_PLAN_ALL_FIRST_FIXED};
  int trials = 0, infeasible = 0;
  for (int rep = 0; rep < 40; rep++)
    for (int u = 0; u < 3; u++) {
      prob q;
      int L = 2 + (int)(urand() * 7), D = 1 + (int)(urand() * 4);
      make_random(&q, L, D, rep % 2 ? BT_SCHED_1F1B : BT_SCHED_GPIPE, 1 + rep % 5, rep % 3 == 0);
      q.p.device_use = uses[u];
      bt_plan a, b;
      bt_err ea = {{0}}, eb = {{0}};
      int rb = bt_plan_brute_force(&q.p, &b, &eb);
      trials++;
      infeasible += rb < 0;
      for (int bi = 0; bi < 4; bi++) {
        q.p.bounds = (bt_plan_bounds)bi;
        int ra = bt_plan_search(&q.p, &a, NULL, &ea);
        cr_assert_eq(ra, rb, "L=%d D=%d use %d bounds %d: search %d (%s) vs brute %d (%s)", L, D, u,
                     bi, ra, ea.msg, rb, eb.msg);
        if (ra < 0) {
          cr_assert_str_eq(ea.msg, eb.msg);
          continue;
        }
        cr_assert(fabs(a.iter_time - b.iter_time) <= 1e-9 * b.iter_time,
                  "L=%d D=%d use %d bounds %d: search %.12g vs brute force %.12g", L, D, u, bi,
                  a.iter_time, b.iter_time);
        check_plan(&q, &a);
        if (L >= D)
          cr_assert_eq(a.n_stages, D, "a device was left unused");
        for (int s = 0; uses[u] == BT_PLAN_DEVICES_IN_ORDER && s < a.n_stages; s++)
          cr_assert_eq(a.device[s], s, "stage %d runs on device %d", s, a.device[s]);
        if (uses[u] == BT_PLAN_ALL_FIRST_FIXED)
          cr_assert_eq(a.device[0], 0, "stage 0 runs on device %d", a.device[0]);
      }
    }
  cr_assert_lt(infeasible, trials / 2);
}

/* Required devices (baton train's lead keeps a stage): any subset that
 * holds them, search = brute force, and the plan uses each of them. */
Test(partition, required_devices_equal_brute_force) {
  int trials = 0, left_out = 0;
  for (int rep = 0; rep < 60; rep++) {
    prob q;
    int L = 2 + (int)(urand() * 7), D = 2 + (int)(urand() * 3);
    make_random(&q, L, D, rep % 2 ? BT_SCHED_1F1B : BT_SCHED_GPIPE, 1 + rep % 5, rep % 3 == 0);
    /* make the required device the slowest, so that leaving it out would pay */
    const int need = rep % D;
    for (int l = 0; l < L; l++)
      q.fwd[need * L + l] *= 20, q.bwd[need * L + l] *= 20;
    q.p.device_use = BT_PLAN_ANY_DEVICES;
    bt_plan free_plan;
    bt_err ef = {{0}};
    const int rf = bt_plan_search(&q.p, &free_plan, NULL, &ef);
    q.p.required_devices = 1u << need;
    bt_plan a, b;
    bt_err ea = {{0}}, eb = {{0}};
    int rb = bt_plan_brute_force(&q.p, &b, &eb);
    int ra = bt_plan_search(&q.p, &a, NULL, &ea);
    cr_assert_eq(ra, rb, "L=%d D=%d: search %d (%s) vs brute %d (%s)", L, D, ra, ea.msg, rb,
                 eb.msg);
    if (ra < 0)
      continue;
    trials++;
    cr_assert(fabs(a.iter_time - b.iter_time) <= 1e-9 * b.iter_time,
              "L=%d D=%d: search %.12g vs brute force %.12g", L, D, a.iter_time, b.iter_time);
    check_plan(&q, &a);
    int uses_it = 0;
    for (int s = 0; s < a.n_stages; s++)
      uses_it |= a.device[s] == need;
    cr_assert(uses_it, "L=%d D=%d: the plan leaves required device %d out", L, D, need);
    if (rf == 0) {
      cr_assert_geq(a.iter_time, free_plan.iter_time * (1 - 1e-12));
      int free_uses = 0;
      for (int s = 0; s < free_plan.n_stages; s++)
        free_uses |= free_plan.device[s] == need;
      left_out += !free_uses;
    }
  }
  cr_assert_gt(trials, 30);
  cr_assert_gt(left_out, 0, "no problem where the free search drops the required device");
  prob q;
  make_random(&q, 4, 3, BT_SCHED_GPIPE, 2, 0);
  q.p.required_devices = 1u << 3;
  bt_plan pl;
  bt_err err = {{0}};
  cr_assert_lt(bt_plan_search(&q.p, &pl, NULL, &err), 0);
  cr_assert(strstr(err.msg, "required_devices"), "%s", err.msg);
}

/* The exact search's table has layers x 2^devices x devices states: 64
 * layers on 16 devices (2^26) is the largest it takes; beyond, a clear
 * error before any table is allocated, and so for the memory-scale DP. */
Test(partition, a_table_too_large_is_a_clear_error) {
  prob *q = malloc(sizeof *q);
  make_random(q, 140, 16, BT_SCHED_1F1B, 8, 0);
  bt_plan pl;
  bt_err err = {{0}};
  cr_assert_lt(bt_plan_search(&q->p, &pl, NULL, &err), 0);
  assert_has(err.msg, "140 layers on 16 devices need more than 2^26 DP states");
  double scale;
  cr_assert_lt(bt_plan_min_mem_scale(&q->p, &scale, &err), 0);
  assert_has(err.msg, "too large");
  free(q);
}

/* A re-plan probe times only the layers a device has not measured: runs
 * of them per device, the last run stretched when there are too many. */
Test(partition, unmeasured_runs) {
  enum { L = 12, D = 3, R = 2 };
  unsigned char measured[D * L] = {0};
  for (int l = 4; l < 7; l++)
    measured[1 * L + l] = 1; /* device 1 ran layers 4-6 */
  measured[1 * L + 9] = 1;   /* and layer 9 */
  for (int l = 0; l < 3; l++)
    measured[2 * L + l] = 1; /* device 2 ran layers 0-2 */
  bt_plan p = {.n_stages = 2, .device = {1, 2}, .first = {0, 11, 12}};
  int n[D], first[D * R], end[D * R];
  bt_err err = {{0}};
  /* device 1 gets 0-10: new runs 0-3, 7-8 and 10 (the last two merged); device 2 gets 11 */
  cr_assert_eq(bt_plan_unmeasured_runs(&p, L, D, measured, R, n, first, end, &err), 8);
  cr_assert_eq(n[0], 0);
  cr_assert_eq(n[1], 2);
  cr_assert(first[R] == 0 && end[R] == 4, "run 0: %d-%d", first[R], end[R]);
  cr_assert(first[R + 1] == 7 && end[R + 1] == 11, "run 1: %d-%d", first[R + 1], end[R + 1]);
  cr_assert(n[2] == 1 && first[2 * R] == 11 && end[2 * R] == 12);
  /* with room for three runs, layer 9 is not timed again */
  int n3[D], f3[D * 3], e3[D * 3];
  cr_assert_eq(bt_plan_unmeasured_runs(&p, L, D, measured, 3, n3, f3, e3, &err), 8);
  cr_assert(n3[1] == 3 && f3[3 + 1] == 7 && e3[3 + 1] == 9 && f3[3 + 2] == 10 && e3[3 + 2] == 11);
  /* nothing new: 0 pairs, no runs */
  bt_plan q = {.n_stages = 1, .device = {2}, .first = {0, 3}};
  cr_assert_eq(bt_plan_unmeasured_runs(&q, L, D, measured, R, n, first, end, &err), 0);
  cr_assert_eq(n[2], 0);
  q.device[0] = 5;
  cr_assert_lt(bt_plan_unmeasured_runs(&q, L, D, measured, R, n, first, end, &err), 0);
  assert_has(err.msg, "stage 0's device 5");
}

/* The bound fill has a 2-lane and (on AVX2 hosts) a 4-lane version: both
 * give the same table, so the same search, node for node. Tight memory
 * exercises the mask of stages that do not fit; odd layer counts the tails. */
Test(partition, fill_lanes_agree) {
  prob *q = malloc(sizeof *q);
  for (int rep = 0; rep < 16; rep++) {
    int L = 9 + (int)(urand() * 22), D = 3 + (int)(urand() * 6);
    make_random(q, L, D, rep % 2 ? BT_SCHED_1F1B : BT_SCHED_GPIPE, 1 + rep % 8, rep % 3 == 0);
    q->p.bounds = BT_PLAN_BOUNDS_SCALAR;
    q->p.max_nodes = 20000;
    bt_plan a, b;
    bt_plan_stats sa, sb;
    bt_err ea = {{0}}, eb = {{0}};
    unsetenv("BATON_PLAN_LANES");
    int ra = bt_plan_search(&q->p, &a, &sa, &ea);
    setenv("BATON_PLAN_LANES", "2", 1);
    int rb = bt_plan_search(&q->p, &b, &sb, &eb);
    unsetenv("BATON_PLAN_LANES");
    cr_assert_eq(ra, rb, "L=%d D=%d: %s vs %s", L, D, ea.msg, eb.msg);
    if (ra < 0)
      continue;
    cr_assert_eq(sa.nodes, sb.nodes, "L=%d D=%d: %ld vs %ld nodes", L, D, sa.nodes, sb.nodes);
    cr_assert_eq(sa.lower_bound, sb.lower_bound);
    cr_assert_eq(a.iter_time, b.iter_time);
    cr_assert_eq(a.n_stages, b.n_stages);
    for (int s = 0; s < a.n_stages; s++)
      cr_assert(a.device[s] == b.device[s] && a.first[s] == b.first[s]);
  }
  /* and the staircase's fill, on problems that build it */
  int refined = 0;
  for (int k = 0; k < 8 && refined < 2; k++) {
    make_random(q, 40 + k, 8, BT_SCHED_1F1B, 8, 0);
    q->p.bounds = BT_PLAN_BOUNDS_STAIR;
    q->p.max_nodes = -1;
    bt_plan a, b;
    bt_plan_stats sa, sb;
    bt_err ea = {{0}}, eb = {{0}};
    cr_assert_eq(bt_plan_search(&q->p, &a, &sa, &ea), 0, "%s", ea.msg);
    setenv("BATON_PLAN_LANES", "2", 1);
    cr_assert_eq(bt_plan_search(&q->p, &b, &sb, &eb), 0, "%s", eb.msg);
    unsetenv("BATON_PLAN_LANES");
    cr_assert(sa.refined == sb.refined && sa.exact && sb.exact);
    cr_assert_eq(sa.nodes, sb.nodes, "%ld vs %ld nodes", sa.nodes, sb.nodes);
    cr_assert_eq(a.iter_time, b.iter_time);
    refined += sa.refined;
  }
  cr_assert_geq(refined, 1, "no problem built the staircase");
  free(q);
}

/* Problems too large for brute force: the scalar, Pareto and staircase bounds,
 * each run to the end, prove the same optimum; a search stopped by its node
 * budget reports a valid lower bound; a budget too small for any complete
 * plan says so. */
Test(partition, scalar_and_pareto_bounds_agree) {
  prob *q = malloc(sizeof *q);
  int stair_refined = 0; /* searches that built the staircase (past pass 1) */
  for (int rep = 0; rep < 24; rep++) {
    int L = 10 + (int)(urand() * 14), D = 3 + (int)(urand() * 4);
    make_random(q, L, D, rep % 2 ? BT_SCHED_1F1B : BT_SCHED_GPIPE, 1 + rep % 8, rep % 4 == 0);
    q->p.device_use = (bt_plan_device_use)(rep % 3);
    q->p.max_nodes = -1;
    bt_plan a, b;
    bt_plan_stats sa, sb;
    bt_err ea = {{0}}, eb = {{0}};
    q->p.bounds = BT_PLAN_BOUNDS_SCALAR;
    int ra = bt_plan_search(&q->p, &a, &sa, &ea);
    q->p.bounds = BT_PLAN_BOUNDS_PARETO;
    int rb = bt_plan_search(&q->p, &b, &sb, &eb);
    cr_assert_eq(ra, rb, "L=%d D=%d: scalar %d (%s) vs pareto %d (%s)", L, D, ra, ea.msg, rb,
                 eb.msg);
    if (ra < 0)
      continue;
    cr_assert(sa.exact && sb.exact);
    cr_assert(fabs(a.iter_time - b.iter_time) <= 1e-9 * b.iter_time,
              "L=%d D=%d: scalar %.12g vs pareto %.12g", L, D, a.iter_time, b.iter_time);
    check_plan(q, &a);
    check_plan(q, &b);
    bt_plan s;
    bt_plan_stats ss;
    q->p.bounds = BT_PLAN_BOUNDS_STAIR;
    cr_assert_eq(bt_plan_search(&q->p, &s, &ss, &ea), 0, "%s", ea.msg);
    cr_assert(ss.exact);
    cr_assert(fabs(s.iter_time - a.iter_time) <= 1e-9 * a.iter_time,
              "L=%d D=%d: scalar %.12g vs stair %.12g", L, D, a.iter_time, s.iter_time);
    check_plan(q, &s);
    stair_refined += ss.refined;
    /* stopped early: the plan is no better than the optimum, the bound no higher */
    for (int bi = 0; bi < 4; bi++) {
      q->p.bounds = (bt_plan_bounds)bi;
      q->p.max_nodes = 5 + 13 * rep;
      bt_plan c;
      bt_plan_stats sc;
      if (bt_plan_search(&q->p, &c, &sc, &ea) < 0) {
        assert_has(ea.msg, "node budget");
        continue;
      }
      cr_assert_geq(c.iter_time, a.iter_time * (1 - 1e-12));
      cr_assert_leq(sc.lower_bound, a.iter_time * (1 + 1e-12), "bounds %d: bound %.12g > %.12g", bi,
                    sc.lower_bound, a.iter_time);
      cr_assert(sc.exact || sc.nodes > q->p.max_nodes);
    }
  }
  /* harder ones (50 x 8 1F1B takes the scalar bounds 120 k nodes): the
   * staircase is built and proves the same optimum */
  for (int rep = 0; rep < 4; rep++) {
    make_random(q, 40 + 3 * rep, 8, BT_SCHED_1F1B, 8, 0);
    q->p.max_nodes = -1;
    bt_plan a, s;
    bt_plan_stats sa, ss;
    bt_err ea = {{0}};
    q->p.bounds = BT_PLAN_BOUNDS_SCALAR;
    cr_assert_eq(bt_plan_search(&q->p, &a, &sa, &ea), 0, "%s", ea.msg);
    q->p.bounds = BT_PLAN_BOUNDS_STAIR;
    cr_assert_eq(bt_plan_search(&q->p, &s, &ss, &ea), 0, "%s", ea.msg);
    cr_assert(sa.exact && ss.exact);
    cr_assert(fabs(s.iter_time - a.iter_time) <= 1e-9 * a.iter_time,
              "L=%d: scalar %.12g (%ld nodes) vs stair %.12g (%ld nodes)", 40 + 3 * rep,
              a.iter_time, sa.nodes, s.iter_time, ss.nodes);
    check_plan(q, &s);
    stair_refined += ss.refined;
  }
  cr_assert_geq(stair_refined, 2, "the staircase was built %d times", stair_refined);
  make_random(q, 20, 4, BT_SCHED_1F1B, 4, 0);
  q->p.max_nodes = 2;
  bt_plan pl;
  bt_err err = {{0}};
  cr_assert_lt(bt_plan_search(&q->p, &pl, NULL, &err), 0);
  assert_has(err.msg, "node budget");
  q->p.bounds = (bt_plan_bounds)7;
  cr_assert_lt(bt_plan_search(&q->p, &pl, NULL, &err), 0);
  assert_has(err.msg, "unknown bounds");
  free(q);
}

/* A neighbour of plan pl (cut s moved to j, or stages s and u's devices
 * swapped, or stage s moved to device e) is no faster than pl, if it fits. */
static void assert_no_better(const prob *q, const bt_plan *pl, bt_plan *n) {
  bt_err err = {{0}};
  if (bt_plan_evaluate(&q->p, n, &err) < 0)
    return; /* does not fit */
  cr_assert_geq(n->iter_time, pl->iter_time * (1 - 1e-12),
                "a neighbour (%d stages) beats the returned plan: %.9g < %.9g", n->n_stages,
                n->iter_time, pl->iter_time);
}

/* The search polishes every new incumbent by local search, so even a plan
 * the node budget stopped at is a local optimum: no single cut move, device
 * swap or move to an unused device is faster. */
Test(partition, budget_stopped_plans_are_local_optima) {
  prob *q = malloc(sizeof *q);
  long polished = 0;
  for (int rep = 0; rep < 12; rep++) {
    int L = 20 + (int)(urand() * 20), D = 5 + (int)(urand() * 4);
    make_random(q, L, D, rep % 2 ? BT_SCHED_1F1B : BT_SCHED_GPIPE, 2 + rep % 7, rep % 3 == 0);
    q->p.max_nodes = 120;
    bt_plan pl;
    bt_plan_stats st;
    bt_err err = {{0}};
    if (bt_plan_search(&q->p, &pl, &st, &err) < 0) {
      assert_has(err.msg, "node budget");
      continue;
    }
    polished += st.polished;
    int S = pl.n_stages, used = 0;
    for (int s = 0; s < S; s++)
      used |= 1 << pl.device[s];
    for (int s = 1; s < S; s++)
      for (int j = pl.first[s - 1] + 1; j < pl.first[s + 1]; j++) {
        bt_plan n = pl;
        n.first[s] = j;
        assert_no_better(q, &pl, &n);
      }
    for (int s = 0; s < S; s++) {
      for (int u = s + 1; u < S; u++) {
        bt_plan n = pl;
        n.device[s] = pl.device[u], n.device[u] = pl.device[s];
        assert_no_better(q, &pl, &n);
      }
      for (int e = 0; e < D; e++)
        if (!(used & (1 << e))) {
          bt_plan n = pl;
          n.device[s] = e;
          assert_no_better(q, &pl, &n);
        }
    }
  }
  cr_assert_gt(polished, 0, "the local search never improved an incumbent");
  free(q);
}
