/* Tests for schedule: op counts, the textbook GPipe and 1F1B orders written
 * out by hand, slot assignment and its minimality, peer links, the validator
 * on every small shape and on hand-corrupted schedules (each check must fire),
 * and the timing replay against the closed forms (M + S - 1)(f + b) and the
 * bubble fraction. */
#include "baton/schedule.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define assert_has(msg, needle)                                                                    \
  cr_assert(strstr((msg), (needle)) != NULL, "expected \"%s\" in: %s", (needle), (msg))

static bt_schedule build(bt_schedule_kind kind, int stages, int micro) {
  bt_schedule s;
  bt_err err = {{0}};
  cr_assert_eq(bt_schedule_build(&s, kind, stages, micro, &err), 0, "%s", err.msg);
  return s;
}

/* The compute ops of a stage as "F0 F1 B0 ...". */
static void compute_string(const bt_schedule *s, int stage, char *buf, size_t n) {
  size_t len = 0;
  buf[0] = '\0';
  for (int i = 0; i < s->n_ops[stage]; i++) {
    const bt_op *op = &s->ops[stage][i];
    if (op->kind != BT_OP_FORWARD && op->kind != BT_OP_BACKWARD)
      continue;
    len += (size_t)snprintf(buf + len, n - len, "%s%c%d", len ? " " : "",
                            op->kind == BT_OP_FORWARD ? 'F' : 'B', op->micro);
  }
}

/* Every op of a stage as "ra0 f0 sa0 rg0 b0 sg0 opt". */
static void full_string(const bt_schedule *s, int stage, char *buf, size_t n) {
  static const char *const tag[] = {"ra", "f", "sa", "rg", "b", "sg", "opt"};
  size_t len = 0;
  buf[0] = '\0';
  for (int i = 0; i < s->n_ops[stage]; i++) {
    const bt_op *op = &s->ops[stage][i];
    if (op->kind == BT_OP_OPTIM_STEP)
      len += (size_t)snprintf(buf + len, n - len, "%sopt", len ? " " : "");
    else
      len +=
          (size_t)snprintf(buf + len, n - len, "%s%s%d", len ? " " : "", tag[op->kind], op->micro);
  }
}

static void expect_compute(bt_schedule_kind kind, int stages, int micro,
                           const char *const *expected) {
  bt_schedule s = build(kind, stages, micro);
  char buf[1024];
  for (int st = 0; st < stages; st++) {
    compute_string(&s, st, buf, sizeof buf);
    cr_assert_str_eq(buf, expected[st], "%s S=%d M=%d stage %d", bt_schedule_kind_name(kind),
                     stages, micro, st);
  }
  bt_schedule_free(&s);
}

/* ---- Counts and orders ---- */

Test(schedule, op_counts) {
  for (int k = 0; k < 2; k++)
    for (int S = 1; S <= 6; S++)
      for (int M = 1; M <= 9; M++) {
        bt_schedule s = build((bt_schedule_kind)k, S, M);
        for (int st = 0; st < S; st++) {
          int count[BT_OP_KIND_COUNT] = {0};
          for (int i = 0; i < s.n_ops[st]; i++)
            count[s.ops[st][i].kind]++;
          cr_assert_eq(count[BT_OP_FORWARD], M);
          cr_assert_eq(count[BT_OP_BACKWARD], M);
          cr_assert_eq(count[BT_OP_RECV_ACT], st > 0 ? M : 0);
          cr_assert_eq(count[BT_OP_SEND_GRAD], st > 0 ? M : 0);
          cr_assert_eq(count[BT_OP_SEND_ACT], st < S - 1 ? M : 0);
          cr_assert_eq(count[BT_OP_RECV_GRAD], st < S - 1 ? M : 0);
          cr_assert_eq(count[BT_OP_OPTIM_STEP], 1);
          cr_assert_eq(s.n_ops[st], 2 * M + (st > 0) * 2 * M + (st < S - 1) * 2 * M + 1);
          cr_assert_eq(s.ops[st][s.n_ops[st] - 1].kind, BT_OP_OPTIM_STEP);
        }
        bt_schedule_free(&s);
      }
}

Test(schedule, gpipe_order_s3_m4) {
  const char *const want[] = {
      "F0 F1 F2 F3 B3 B2 B1 B0",
      "F0 F1 F2 F3 B3 B2 B1 B0",
      "F0 F1 F2 F3 B3 B2 B1 B0",
  };
  expect_compute(BT_SCHED_GPIPE, 3, 4, want);
}

Test(schedule, onef1b_order_s3_m4) {
  const char *const want[] = {
      "F0 F1 F2 B0 F3 B1 B2 B3",
      "F0 F1 B0 F2 B1 F3 B2 B3",
      "F0 B0 F1 B1 F2 B2 F3 B3",
  };
  expect_compute(BT_SCHED_1F1B, 3, 4, want);
}

Test(schedule, gpipe_order_s4_m8) {
  const char *const row = "F0 F1 F2 F3 F4 F5 F6 F7 B7 B6 B5 B4 B3 B2 B1 B0";
  const char *const want[] = {row, row, row, row};
  expect_compute(BT_SCHED_GPIPE, 4, 8, want);
}

Test(schedule, onef1b_order_s4_m8) {
  const char *const want[] = {
      "F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7",
      "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 F6 B4 F7 B5 B6 B7",
      "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 F6 B5 F7 B6 B7",
      "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7",
  };
  expect_compute(BT_SCHED_1F1B, 4, 8, want);
}

/* Fewer micro-batches than stages: warm-up is capped at M, no steady state. */
Test(schedule, onef1b_order_few_micro) {
  const char *const want[] = {"F0 F1 B0 B1", "F0 F1 B0 B1", "F0 F1 B0 B1", "F0 B0 F1 B1"};
  expect_compute(BT_SCHED_1F1B, 4, 2, want);
}

Test(schedule, full_ops_with_comm_s2_m2) {
  char buf[256];
  bt_schedule g = build(BT_SCHED_GPIPE, 2, 2);
  full_string(&g, 0, buf, sizeof buf);
  cr_assert_str_eq(buf, "f0 sa0 f1 sa1 rg1 b1 rg0 b0 opt");
  full_string(&g, 1, buf, sizeof buf);
  cr_assert_str_eq(buf, "ra0 f0 ra1 f1 b1 sg1 b0 sg0 opt");
  bt_schedule_free(&g);
  bt_schedule o = build(BT_SCHED_1F1B, 2, 2);
  full_string(&o, 0, buf, sizeof buf);
  cr_assert_str_eq(buf, "f0 sa0 f1 sa1 rg0 b0 rg1 b1 opt");
  full_string(&o, 1, buf, sizeof buf);
  cr_assert_str_eq(buf, "ra0 f0 b0 sg0 ra1 f1 b1 sg1 opt");
  bt_schedule_free(&o);
}

Test(schedule, single_stage_has_no_comm) {
  char buf[256];
  bt_schedule s = build(BT_SCHED_1F1B, 1, 3);
  full_string(&s, 0, buf, sizeof buf);
  cr_assert_str_eq(buf, "f0 b0 f1 b1 f2 b2 opt");
  cr_assert_eq(bt_schedule_slots(&s, 0), 1);
  bt_schedule_free(&s);
}

/* ---- Slots ---- */

/* Peak number of micro-batches in flight, counted from the ops alone. */
static int peak_live(const bt_schedule *s, int stage) {
  int live = 0, peak = 0;
  int *first = calloc((size_t)s->micro, sizeof *first),
      *last = calloc((size_t)s->micro, sizeof *last);
  for (int m = 0; m < s->micro; m++)
    first[m] = last[m] = -1;
  for (int i = 0; i < s->n_ops[stage]; i++) {
    int m = s->ops[stage][i].micro;
    if (m < 0)
      continue;
    if (first[m] < 0)
      first[m] = i;
    last[m] = i;
  }
  for (int i = 0; i < s->n_ops[stage]; i++) {
    int m = s->ops[stage][i].micro;
    if (m >= 0 && first[m] == i)
      live++;
    peak = live > peak ? live : peak;
    if (m >= 0 && last[m] == i)
      live--;
  }
  free(first);
  free(last);
  return peak;
}

Test(schedule, slots_minimal_and_formula) {
  for (int S = 1; S <= 8; S++)
    for (int M = 1; M <= 16; M++) {
      bt_schedule g = build(BT_SCHED_GPIPE, S, M), o = build(BT_SCHED_1F1B, S, M);
      for (int st = 0; st < S; st++) {
        int k = S - st < M ? S - st : M;
        cr_assert_eq(bt_schedule_slots(&g, st), M, "gpipe S=%d M=%d stage %d", S, M, st);
        cr_assert_eq(bt_schedule_slots(&o, st), k, "1f1b S=%d M=%d stage %d", S, M, st);
        cr_assert_eq(bt_schedule_slots(&g, st), peak_live(&g, st));
        cr_assert_eq(bt_schedule_slots(&o, st), peak_live(&o, st));
        for (int i = 0; i < g.n_ops[st]; i++)
          if (g.ops[st][i].micro >= 0)
            cr_assert_eq(g.ops[st][i].slot, g.ops[st][i].micro);
        for (int i = 0; i < o.n_ops[st]; i++)
          if (o.ops[st][i].micro >= 0)
            cr_assert_eq(o.ops[st][i].slot, o.ops[st][i].micro % k);
      }
      cr_assert_eq(bt_schedule_slots(&o, 0), S < M ? S : M);
      bt_schedule_free(&g);
      bt_schedule_free(&o);
    }
}

Test(schedule, onef1b_needs_fewer_slots_than_gpipe) {
  for (int S = 1; S <= 8; S++)
    for (int M = S + 1; M <= 16; M++) {
      bt_schedule g = build(BT_SCHED_GPIPE, S, M), o = build(BT_SCHED_1F1B, S, M);
      for (int st = 0; st < S; st++)
        cr_assert_lt(peak_live(&o, st), peak_live(&g, st), "S=%d M=%d stage %d", S, M, st);
      bt_schedule_free(&g);
      bt_schedule_free(&o);
    }
}

Test(schedule, slots_out_of_range_stage) {
  bt_schedule s = build(BT_SCHED_GPIPE, 2, 3);
  cr_assert_eq(bt_schedule_slots(&s, -1), 0);
  cr_assert_eq(bt_schedule_slots(&s, 2), 0);
  cr_assert_eq(bt_schedule_slots(NULL, 0), 0);
  bt_schedule_free(&s);
}

/* ---- Peer links (what a receive depends on) ---- */

Test(schedule, peer_ops_point_at_matching_message) {
  for (int k = 0; k < 2; k++)
    for (int S = 1; S <= 5; S++)
      for (int M = 1; M <= 7; M++) {
        bt_schedule s = build((bt_schedule_kind)k, S, M);
        for (int st = 0; st < S; st++)
          for (int i = 0; i < s.n_ops[st]; i++) {
            const bt_op *op = &s.ops[st][i];
            if (op->kind == BT_OP_FORWARD || op->kind == BT_OP_BACKWARD ||
                op->kind == BT_OP_OPTIM_STEP) {
              cr_assert_eq(op->peer, -1);
              cr_assert_eq(op->peer_op, -1);
              continue;
            }
            int up = op->kind == BT_OP_RECV_ACT || op->kind == BT_OP_SEND_GRAD;
            cr_assert_eq(op->peer, up ? st - 1 : st + 1);
            const bt_op *other = &s.ops[op->peer][op->peer_op];
            static const bt_op_kind partner[] = {[BT_OP_RECV_ACT] = BT_OP_SEND_ACT,
                                                 [BT_OP_SEND_ACT] = BT_OP_RECV_ACT,
                                                 [BT_OP_RECV_GRAD] = BT_OP_SEND_GRAD,
                                                 [BT_OP_SEND_GRAD] = BT_OP_RECV_GRAD};
            cr_assert_eq(other->kind, partner[op->kind]);
            cr_assert_eq(other->micro, op->micro);
            cr_assert_eq(other->peer, st);
            cr_assert_eq(other->peer_op, i);
          }
        bt_schedule_free(&s);
      }
}

/* ---- Validation ---- */

Test(schedule, validate_accepts_all_small_shapes) {
  bt_err err = {{0}};
  for (int k = 0; k < 2; k++)
    for (int S = 1; S <= 8; S++)
      for (int M = 1; M <= 16; M++) {
        bt_schedule s = build((bt_schedule_kind)k, S, M);
        cr_assert_eq(bt_schedule_validate(&s, &err), 0, "%s S=%d M=%d: %s",
                     bt_schedule_kind_name((bt_schedule_kind)k), S, M, err.msg);
        bt_schedule_free(&s);
      }
}

static void swap_ops(bt_op *a, bt_op *b) {
  bt_op t = *a;
  *a = *b;
  *b = t;
}

static int find_op(const bt_schedule *s, int stage, bt_op_kind kind, int micro) {
  for (int i = 0; i < s->n_ops[stage]; i++)
    if (s->ops[stage][i].kind == kind && s->ops[stage][i].micro == micro)
      return i;
  cr_assert_fail("no %s %d on stage %d", bt_op_kind_name(kind), micro, stage);
  return -1;
}

Test(schedule, validate_rejects_swapped_sends) {
  /* Stage 0 forwards 1 before 0 (both F and send move, so the stage itself
   * is consistent) while stage 1 still receives 0 first. */
  bt_schedule s = build(BT_SCHED_GPIPE, 2, 3);
  bt_op *o = s.ops[0]; /* f0 sa0 f1 sa1 ... */
  swap_ops(&o[0], &o[2]);
  swap_ops(&o[1], &o[3]);
  bt_err err = {{0}};
  cr_assert_lt(bt_schedule_validate(&s, &err), 0);
  assert_has(err.msg, "message 0 from stage 0 to stage 1");
  assert_has(err.msg, "same order");
  bt_schedule_free(&s);
}

Test(schedule, validate_rejects_send_before_forward) {
  bt_schedule s = build(BT_SCHED_1F1B, 3, 4);
  int f = find_op(&s, 1, BT_OP_FORWARD, 2), sa = find_op(&s, 1, BT_OP_SEND_ACT, 2);
  swap_ops(&s.ops[1][f], &s.ops[1][sa]);
  bt_err err = {{0}};
  cr_assert_lt(bt_schedule_validate(&s, &err), 0);
  assert_has(err.msg, "stage 1");
  assert_has(err.msg, "send_act micro 2");
  assert_has(err.msg, "runs before the forward");
  bt_schedule_free(&s);
}

Test(schedule, validate_rejects_missing_backward) {
  bt_schedule s = build(BT_SCHED_1F1B, 3, 4);
  int b = find_op(&s, 2, BT_OP_BACKWARD, 1);
  memmove(&s.ops[2][b], &s.ops[2][b + 1], (size_t)(s.n_ops[2] - b - 1) * sizeof(bt_op));
  s.n_ops[2]--;
  bt_err err = {{0}};
  cr_assert_lt(bt_schedule_validate(&s, &err), 0);
  assert_has(err.msg, "stage 2: micro-batch 1 has no backward");
  bt_schedule_free(&s);
}

Test(schedule, validate_rejects_duplicate_forward) {
  bt_schedule s = build(BT_SCHED_GPIPE, 1, 3);
  s.ops[0][1].micro = 0; /* f0 f0 f2 ... */
  bt_err err = {{0}};
  cr_assert_lt(bt_schedule_validate(&s, &err), 0);
  assert_has(err.msg, "a second forward of micro-batch 0");
  bt_schedule_free(&s);
}

Test(schedule, validate_rejects_reused_live_slot) {
  bt_schedule s = build(BT_SCHED_GPIPE, 2, 3);
  for (int i = 0; i < s.n_ops[1]; i++)
    if (s.ops[1][i].micro == 1)
      s.ops[1][i].slot = 0; /* micro 0 still holds slot 0 */
  bt_err err = {{0}};
  cr_assert_lt(bt_schedule_validate(&s, &err), 0);
  assert_has(err.msg, "takes slot 0 while micro-batch 0 holds it");
  bt_schedule_free(&s);
}

Test(schedule, validate_rejects_inconsistent_slot) {
  bt_schedule s = build(BT_SCHED_GPIPE, 2, 3);
  s.ops[0][find_op(&s, 0, BT_OP_BACKWARD, 2)].slot = 1;
  bt_err err = {{0}};
  cr_assert_lt(bt_schedule_validate(&s, &err), 0);
  assert_has(err.msg, "one micro-batch keeps one slot");
  bt_schedule_free(&s);
}

Test(schedule, validate_rejects_optim_not_last) {
  bt_schedule s = build(BT_SCHED_1F1B, 2, 2);
  int n = s.n_ops[0];
  swap_ops(&s.ops[0][n - 1], &s.ops[0][n - 2]);
  bt_err err = {{0}};
  cr_assert_lt(bt_schedule_validate(&s, &err), 0);
  assert_has(err.msg, "optim_step");
  assert_has(err.msg, "after every backward");
  bt_schedule_free(&s);
}

Test(schedule, validate_rejects_broken_peer_link) {
  bt_schedule s = build(BT_SCHED_1F1B, 3, 3);
  s.ops[1][find_op(&s, 1, BT_OP_RECV_ACT, 1)].peer_op = 0;
  bt_err err = {{0}};
  cr_assert_lt(bt_schedule_validate(&s, &err), 0);
  assert_has(err.msg, "peer_op");
  bt_schedule_free(&s);
}

/* A hand-built 2-stage schedule from "f0 sa0 ..." strings of kind and micro;
 * bt_schedule_finalize fills in peers, slots and links. */
static bt_schedule hand_built(int micro, const char *const *rows, int stages) {
  bt_schedule s = {.kind = BT_SCHED_1F1B, .stages = stages, .micro = micro};
  s.n_ops = calloc((size_t)stages, sizeof *s.n_ops);
  s.ops = calloc((size_t)stages, sizeof *s.ops);
  s.slots = calloc((size_t)stages, sizeof *s.slots);
  for (int st = 0; st < stages; st++) {
    s.ops[st] = calloc(64, sizeof **s.ops);
    char buf[512];
    snprintf(buf, sizeof buf, "%s", rows[st]);
    for (char *tok = strtok(buf, " "); tok; tok = strtok(NULL, " ")) {
      static const char *const tag[] = {"ra", "f", "sa", "rg", "b", "sg", "opt"};
      bt_op *op = &s.ops[st][s.n_ops[st]++];
      for (int k = BT_OP_KIND_COUNT - 1; k >= 0; k--) {
        size_t n = strlen(tag[k]);
        if (strncmp(tok, tag[k], n) == 0 && (tok[n] == '\0' || (tok[n] >= '0' && tok[n] <= '9'))) {
          op->kind = (bt_op_kind)k;
          op->micro = tok[n] ? atoi(tok + n) : -1;
          break;
        }
      }
    }
  }
  bt_err err = {{0}};
  cr_assert_eq(bt_schedule_finalize(&s, &err), 0, "%s", err.msg);
  return s;
}

Test(schedule, hand_built_textbook_equals_built) {
  const char *const rows[] = {"f0 sa0 f1 sa1 rg0 b0 rg1 b1 opt", "ra0 f0 b0 sg0 ra1 f1 b1 sg1 opt"};
  bt_schedule h = hand_built(2, rows, 2), b = build(BT_SCHED_1F1B, 2, 2);
  for (int st = 0; st < 2; st++) {
    cr_assert_eq(h.n_ops[st], b.n_ops[st]);
    cr_assert_eq(h.slots[st], b.slots[st]);
    cr_assert_eq(memcmp(h.ops[st], b.ops[st], (size_t)b.n_ops[st] * sizeof(bt_op)), 0);
  }
  bt_schedule_free(&h);
  bt_schedule_free(&b);
}

Test(schedule, validate_rejects_deadlock) {
  /* Every per-stage and per-channel rule holds, yet stage 1 waits for
   * activation 1 before sending gradient 0, which stage 0 needs before it
   * forwards micro-batch 1: a cycle. */
  const char *const rows[] = {"f0 sa0 rg0 b0 f1 sa1 rg1 b1 opt", "ra0 ra1 f0 f1 b0 sg0 b1 sg1 opt"};
  bt_schedule s = hand_built(2, rows, 2);
  bt_err err = {{0}};
  cr_assert_lt(bt_schedule_validate(&s, &err), 0);
  assert_has(err.msg, "deadlock");
  assert_has(err.msg, "stage 0 op 2 (recv_grad micro 0) from stage 1");
  assert_has(err.msg, "stage 1 op 1 (recv_act micro 1) from stage 0");
  bt_schedule_free(&s);
}

Test(schedule, validate_rejects_receive_before_own_send) {
  /* Stage 0 waits for the gradient of micro 0 before sending its
   * activations: the smallest possible deadlock. */
  const char *const rows[] = {"f0 rg0 sa0 b0 opt", "ra0 f0 b0 sg0 opt"};
  bt_schedule s = hand_built(1, rows, 2);
  bt_err err = {{0}};
  cr_assert_lt(bt_schedule_validate(&s, &err), 0);
  assert_has(err.msg, "deadlock: 2 stage(s)");
  bt_schedule_free(&s);
}

Test(schedule, finalize_rejects_comm_without_neighbour) {
  bt_schedule s = {.stages = 1, .micro = 1};
  s.n_ops = calloc(1, sizeof *s.n_ops);
  s.ops = calloc(1, sizeof *s.ops);
  s.slots = calloc(1, sizeof *s.slots);
  s.ops[0] = calloc(4, sizeof **s.ops);
  s.ops[0][0] = (bt_op){.kind = BT_OP_RECV_ACT, .micro = 0};
  s.n_ops[0] = 1;
  bt_err err = {{0}};
  cr_assert_lt(bt_schedule_finalize(&s, &err), 0);
  assert_has(err.msg, "stage 0 op 0 (recv_act micro 0)");
  assert_has(err.msg, "first stage");
  bt_schedule_free(&s);
}

/* ---- Errors and names ---- */

Test(schedule, build_rejects_bad_sizes) {
  bt_schedule s;
  bt_err err = {{0}};
  cr_assert_lt(bt_schedule_build(&s, BT_SCHED_GPIPE, 0, 4, &err), 0);
  assert_has(err.msg, "0 stages");
  cr_assert_null(s.ops);
  cr_assert_lt(bt_schedule_build(&s, BT_SCHED_1F1B, 2, 0, &err), 0);
  assert_has(err.msg, "0 micro-batches");
  cr_assert_lt(bt_schedule_build(&s, BT_SCHED_1F1B, 2, -3, &err), 0);
  assert_has(err.msg, "-3 micro-batches");
  cr_assert_lt(bt_schedule_build(&s, (bt_schedule_kind)7, 2, 2, &err), 0);
  assert_has(err.msg, "unknown schedule kind 7");
  bt_schedule_free(&s); /* safe on the emptied struct */
}

Test(schedule, parse_kind_and_names) {
  bt_schedule_kind k;
  bt_err err = {{0}};
  cr_assert_eq(bt_schedule_parse_kind("gpipe", &k, &err), 0);
  cr_assert_eq(k, BT_SCHED_GPIPE);
  cr_assert_eq(bt_schedule_parse_kind("1f1b", &k, &err), 0);
  cr_assert_eq(k, BT_SCHED_1F1B);
  cr_assert_lt(bt_schedule_parse_kind("pipedream", &k, &err), 0);
  assert_has(err.msg, "unknown schedule \"pipedream\"");
  assert_has(err.msg, "\"gpipe\"");
  assert_has(err.msg, "\"1f1b\"");
  cr_assert_lt(bt_schedule_parse_kind(NULL, &k, &err), 0);
  cr_assert_str_eq(bt_schedule_kind_name(BT_SCHED_1F1B), "1f1b");
  cr_assert_str_eq(bt_schedule_kind_name((bt_schedule_kind)9), "?");
  cr_assert_str_eq(bt_op_kind_name(BT_OP_RECV_GRAD), "recv_grad");
  cr_assert_str_eq(bt_op_kind_name(BT_OP_OPTIM_STEP), "optim_step");
  cr_assert_str_eq(bt_op_kind_name((bt_op_kind)42), "?");
}

/* ---- Timing ---- */

/* Local max: keeps the test free of libm. */
static double max2(double a, double b) { return a > b ? a : b; }

static double equal_makespan(bt_schedule_kind kind, int S, int M, double f, double b, double c) {
  double fwd[8], bwd[8], comm[8];
  for (int i = 0; i < 8; i++) {
    fwd[i] = f;
    bwd[i] = b;
    comm[i] = c;
  }
  bt_schedule s = build(kind, S, M);
  bt_sched_costs costs = {.fwd = fwd, .bwd = bwd, .act_comm = comm, .grad_comm = comm};
  double t = -1;
  bt_err err = {{0}};
  cr_assert_eq(bt_schedule_makespan(&s, &costs, &t, &err), 0, "%s", err.msg);
  bt_schedule_free(&s);
  return t;
}

Test(schedule, makespan_equal_stages_closed_form) {
  const double fb[][2] = {{1, 1}, {1, 2}, {0.5, 1.25}};
  for (int k = 0; k < 2; k++)
    for (size_t j = 0; j < sizeof fb / sizeof fb[0]; j++)
      for (int S = 1; S <= 8; S++)
        for (int M = 1; M <= 16; M++) {
          double f = fb[j][0], b = fb[j][1];
          double t = equal_makespan((bt_schedule_kind)k, S, M, f, b, 0);
          cr_assert_float_eq(t, (M + S - 1) * (f + b), 1e-9, "%s S=%d M=%d f=%g b=%g: %g",
                             bt_schedule_kind_name((bt_schedule_kind)k), S, M, f, b, t);
        }
}

/* With a link time c <= f, b each hop adds c once on the way down and once on
 * the way back up; the link never queues. */
Test(schedule, makespan_gpipe_with_comm) {
  for (int S = 1; S <= 6; S++)
    for (int M = 1; M <= 10; M++) {
      double t = equal_makespan(BT_SCHED_GPIPE, S, M, 1.0, 2.0, 0.25);
      cr_assert_float_eq(t, (M + S - 1) * 3.0 + 2 * (S - 1) * 0.25, 1e-9, "S=%d M=%d", S, M);
    }
}

/* A slow link serialises messages: M activations at c > f each leave the
 * first stage no faster than one per c. */
Test(schedule, makespan_link_serialises_messages) {
  double t = equal_makespan(BT_SCHED_GPIPE, 2, 4, 1.0, 1.0, 3.0);
  /* activation 3 arrives at 1 + 4*3 = 13; F3 ends 14; B3 B2 B1 B0 on stage 1
   * end 18; gradients leave at 15..18, each link-bound: the last (B0's)
   * arrives at max(18, 15 + 3*3) + 3 = 27; stage 0's B0 ends 28. */
  cr_assert_float_eq(t, 28.0, 1e-9, "%g", t);
}

Test(schedule, bubble_fraction_matches_simulation) {
  for (int k = 0; k < 2; k++)
    for (int S = 1; S <= 8; S++)
      for (int M = 1; M <= 16; M++) {
        double t = equal_makespan((bt_schedule_kind)k, S, M, 1.0, 2.0, 0);
        double idle = (t - M * 3.0) / t;
        cr_assert_float_eq(idle, bt_schedule_bubble_fraction(S, M), 1e-12);
      }
  cr_assert_float_eq(bt_schedule_bubble_fraction(4, 8), 3.0 / 11.0, 1e-15);
  cr_assert_eq(bt_schedule_bubble_fraction(0, 8), 0.0);
}

/* Stage- and op-dependent durations through the callback interface: the
 * timeline must respect program order, message arrival and link timing. */
static double weird_op_time(void *ctx, int stage, const bt_op *op) {
  (void)ctx;
  return 0.1 * (stage + 1) + 0.01 * op->kind + 0.001 * (op->micro + 1);
}
static double weird_msg_time(void *ctx, int stage, const bt_op *send) {
  (void)ctx;
  return 0.3 + 0.05 * stage + 0.01 * send->micro;
}

Test(schedule, timeline_respects_dependencies) {
  bt_sched_timing timing = {weird_op_time, weird_msg_time, NULL};
  for (int k = 0; k < 2; k++)
    for (int S = 1; S <= 5; S++)
      for (int M = 1; M <= 9; M++) {
        bt_schedule s = build((bt_schedule_kind)k, S, M);
        bt_sched_timeline tl;
        bt_err err = {{0}};
        cr_assert_eq(bt_schedule_simulate(&s, &timing, &tl, &err), 0, "%s", err.msg);
        double last = 0;
        for (int st = 0; st < S; st++) {
          double clock = 0;
          for (int i = 0; i < s.n_ops[st]; i++) {
            const bt_op *op = &s.ops[st][i];
            cr_assert_geq(tl.start[st][i], clock);
            cr_assert_float_eq(tl.end[st][i] - tl.start[st][i], weird_op_time(NULL, st, op), 1e-12);
            if (op->kind == BT_OP_RECV_ACT || op->kind == BT_OP_RECV_GRAD) {
              double arr = tl.arrive[op->peer][op->peer_op];
              cr_assert_geq(tl.start[st][i], arr);
              /* receives wait for nothing else: start is exactly the later of the two */
              cr_assert_float_eq(tl.start[st][i], max2(clock, arr), 1e-12);
            } else {
              cr_assert_float_eq(tl.start[st][i], clock, 1e-12);
            }
            if (op->kind == BT_OP_SEND_ACT || op->kind == BT_OP_SEND_GRAD)
              cr_assert_geq(tl.arrive[st][i], tl.end[st][i] + weird_msg_time(NULL, st, op) - 1e-12);
            clock = tl.end[st][i];
          }
          last = max2(last, clock);
        }
        cr_assert_float_eq(tl.makespan, last, 1e-12);
        bt_sched_timeline_free(&tl);
        bt_schedule_free(&s);
      }
}

static double negative_time(void *ctx, int stage, const bt_op *op) {
  (void)ctx;
  return stage == 1 && op->kind == BT_OP_BACKWARD ? -1.0 : 1.0;
}

Test(schedule, simulate_rejects_bad_input) {
  bt_schedule s = build(BT_SCHED_GPIPE, 2, 2);
  bt_sched_timing timing = {negative_time, NULL, NULL};
  bt_sched_timeline tl;
  bt_err err = {{0}};
  cr_assert_lt(bt_schedule_simulate(&s, &timing, &tl, &err), 0);
  assert_has(err.msg, "simulate");
  assert_has(err.msg, "stage 1 op 4 (backward micro 1): op time -1");
  cr_assert_null(tl.start);

  double fwd[2] = {1, 1};
  bt_sched_costs costs = {.fwd = fwd};
  double t;
  cr_assert_lt(bt_schedule_makespan(&s, &costs, &t, &err), 0);
  assert_has(err.msg, "costs->bwd");

  s.ops[0][0].micro = 1; /* broken schedules are refused before any timing */
  costs.bwd = fwd;
  cr_assert_lt(bt_schedule_makespan(&s, &costs, &t, &err), 0);
  assert_has(err.msg, "simulate: schedule:");
  bt_schedule_free(&s);
}
