/* schedule: GPipe and 1F1B op lists, their validator and the reference
 * timing replay; see include/baton/schedule.h for the exact specification. */
#include "baton/schedule.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- Names ---- */

static const char *const op_names[BT_OP_KIND_COUNT] = {
    "recv_act", "forward", "send_act", "recv_grad", "backward", "send_grad", "optim_step",
};

const char *bt_op_kind_name(bt_op_kind kind) {
  return (unsigned)kind < BT_OP_KIND_COUNT ? op_names[kind] : "?";
}

const char *bt_schedule_kind_name(bt_schedule_kind kind) {
  switch (kind) {
  case BT_SCHED_GPIPE:
    return "gpipe";
  case BT_SCHED_1F1B:
    return "1f1b";
  }
  return "?";
}

int bt_schedule_parse_kind(const char *name, bt_schedule_kind *out, bt_err *err) {
  if (name && strcmp(name, "gpipe") == 0)
    *out = BT_SCHED_GPIPE;
  else if (name && strcmp(name, "1f1b") == 0)
    *out = BT_SCHED_1F1B;
  else
    return bt_err_set(err,
                      "schedule: unknown schedule \"%.100s\": use \"gpipe\" (fill-drain) or "
                      "\"1f1b\" (one-forward-one-backward with a flush)",
                      name ? name : "(null)");
  return 0;
}

/* ---- Small helpers shared by build, validate and simulate ---- */

static int is_send(bt_op_kind k) { return k == BT_OP_SEND_ACT || k == BT_OP_SEND_GRAD; }
static int is_recv(bt_op_kind k) { return k == BT_OP_RECV_ACT || k == BT_OP_RECV_GRAD; }

/* The stage a comm op talks to, or -1 for compute ops. Activations flow
 * down the pipeline (s -> s+1), gradients up (s+1 -> s). */
static int peer_of(int stage, bt_op_kind k) {
  switch (k) {
  case BT_OP_RECV_ACT:
  case BT_OP_SEND_GRAD:
    return stage - 1;
  case BT_OP_SEND_ACT:
  case BT_OP_RECV_GRAD:
    return stage + 1;
  default:
    return -1;
  }
}

/* Channel index of a comm op: 0..S-2 are the activation links (indexed by
 * the sending stage), S-1..2S-3 the gradient links (indexed by the receiving
 * stage), so each direction of each link has its own counter. */
static int channel_of(int stages, int stage, bt_op_kind k) {
  switch (k) {
  case BT_OP_SEND_ACT:
    return stage;
  case BT_OP_RECV_ACT:
    return stage - 1;
  case BT_OP_SEND_GRAD:
    return stages - 1 + stage - 1;
  case BT_OP_RECV_GRAD:
    return stages - 1 + stage;
  default:
    return -1;
  }
}

/* "stage 2 op 5 (backward micro 3)": the "where" of most messages. */
static const char *where(char *buf, size_t n, int stage, int i, const bt_op *op) {
  if (op->kind == BT_OP_OPTIM_STEP)
    snprintf(buf, n, "stage %d op %d (%s)", stage, i, bt_op_kind_name(op->kind));
  else
    snprintf(buf, n, "stage %d op %d (%s micro %d)", stage, i, bt_op_kind_name(op->kind),
             op->micro);
  return buf;
}

static int ops_on_stage(int stages, int micro, int stage) {
  return 2 * micro + (stage > 0 ? 2 * micro : 0) + (stage < stages - 1 ? 2 * micro : 0) + 1;
}

/* ---- Memory ---- */

void bt_schedule_free(bt_schedule *s) {
  if (!s)
    return;
  if (s->ops)
    for (int i = 0; i < s->stages; i++)
      free(s->ops[i]);
  free(s->ops);
  free(s->n_ops);
  free(s->slots);
  memset(s, 0, sizeof *s);
}

static int sched_alloc(bt_schedule *s, bt_schedule_kind kind, int stages, int micro, bt_err *err) {
  memset(s, 0, sizeof *s);
  s->kind = kind;
  s->stages = stages;
  s->micro = micro;
  s->n_ops = calloc((size_t)stages, sizeof *s->n_ops);
  s->ops = calloc((size_t)stages, sizeof *s->ops);
  s->slots = calloc((size_t)stages, sizeof *s->slots);
  int ok = s->n_ops && s->ops && s->slots;
  for (int st = 0; ok && st < stages; st++) {
    s->n_ops[st] = ops_on_stage(stages, micro, st);
    s->ops[st] = calloc((size_t)s->n_ops[st], sizeof **s->ops);
    ok = s->ops[st] != NULL;
  }
  if (!ok) {
    bt_schedule_free(s);
    return bt_err_set(err, "schedule: out of memory for %d stages x %d micro-batches; use fewer",
                      stages, micro);
  }
  return 0;
}

/* ---- Building ---- */

/* Writes the 2M compute ops (kind and micro only) of `stage` in order. */
static void compute_order(bt_schedule_kind kind, int stages, int micro, int stage, bt_op *out) {
  int n = 0;
  if (kind == BT_SCHED_GPIPE) {
    for (int m = 0; m < micro; m++)
      out[n++] = (bt_op){.kind = BT_OP_FORWARD, .micro = m};
    for (int m = micro - 1; m >= 0; m--) /* reverse: see the header */
      out[n++] = (bt_op){.kind = BT_OP_BACKWARD, .micro = m};
    return;
  }
  int warm = stages - stage - 1 < micro ? stages - stage - 1 : micro;
  for (int m = 0; m < warm; m++)
    out[n++] = (bt_op){.kind = BT_OP_FORWARD, .micro = m};
  for (int i = 0; i < micro - warm; i++) {
    out[n++] = (bt_op){.kind = BT_OP_FORWARD, .micro = warm + i};
    out[n++] = (bt_op){.kind = BT_OP_BACKWARD, .micro = i};
  }
  for (int m = micro - warm; m < micro; m++)
    out[n++] = (bt_op){.kind = BT_OP_BACKWARD, .micro = m};
}

/* Surrounds each compute op with its comm ops and appends the flush. */
static void expand_stage(const bt_op *compute, int n_compute, int stages, int stage, bt_op *out) {
  int n = 0;
  for (int i = 0; i < n_compute; i++) {
    int m = compute[i].micro;
    int fwd = compute[i].kind == BT_OP_FORWARD;
    bt_op_kind before = fwd ? BT_OP_RECV_ACT : BT_OP_RECV_GRAD;
    bt_op_kind after = fwd ? BT_OP_SEND_ACT : BT_OP_SEND_GRAD;
    if (fwd ? stage > 0 : stage < stages - 1)
      out[n++] = (bt_op){.kind = before, .micro = m};
    out[n++] = compute[i];
    if (fwd ? stage < stages - 1 : stage > 0)
      out[n++] = (bt_op){.kind = after, .micro = m};
  }
  out[n] = (bt_op){.kind = BT_OP_OPTIM_STEP, .micro = -1};
}

int bt_schedule_build(bt_schedule *s, bt_schedule_kind kind, int stages, int micro, bt_err *err) {
  memset(s, 0, sizeof *s);
  if (kind != BT_SCHED_GPIPE && kind != BT_SCHED_1F1B)
    return bt_err_set(err,
                      "schedule: unknown schedule kind %d: use BT_SCHED_GPIPE or "
                      "BT_SCHED_1F1B",
                      (int)kind);
  if (stages < 1 || stages > BT_SCHED_MAX_STAGES)
    return bt_err_set(err, "schedule: %d stages: a pipeline needs 1 to %d stages (one per device)",
                      stages, BT_SCHED_MAX_STAGES);
  if (micro < 1 || micro > BT_SCHED_MAX_MICRO)
    return bt_err_set(err,
                      "schedule: %d micro-batches: use 1 to %d (micro_batches divides the "
                      "batch)",
                      micro, BT_SCHED_MAX_MICRO);
  if (sched_alloc(s, kind, stages, micro, err) < 0)
    return -1;
  bt_op *compute = malloc((size_t)2 * (size_t)micro * sizeof *compute);
  if (!compute) {
    bt_schedule_free(s);
    return bt_err_set(err, "schedule: out of memory for %d micro-batches; use fewer", micro);
  }
  for (int st = 0; st < stages; st++) {
    compute_order(kind, stages, micro, st, compute);
    expand_stage(compute, 2 * micro, stages, st, s->ops[st]);
  }
  free(compute);
  if (bt_schedule_finalize(s, err) < 0) {
    bt_schedule_free(s);
    return -1;
  }
  return 0;
}

/* ---- Finalize: peers, slots, links ---- */

/* Checks what can be checked on one op alone; fills nothing. */
static int check_op(const bt_schedule *s, int stage, int i, bt_err *err) {
  const bt_op *op = &s->ops[stage][i];
  char w[96];
  if ((unsigned)op->kind >= BT_OP_KIND_COUNT)
    return bt_err_set(err, "schedule: stage %d op %d: unknown op kind %d; use a bt_op_kind", stage,
                      i, (int)op->kind);
  if (op->kind == BT_OP_OPTIM_STEP)
    return 0;
  if (op->micro < 0 || op->micro >= s->micro)
    return bt_err_set(err, "schedule: %s: micro-batch out of range [0, %d); fix the op",
                      where(w, sizeof w, stage, i, op), s->micro);
  int peer = peer_of(stage, op->kind);
  if (op->kind != BT_OP_FORWARD && op->kind != BT_OP_BACKWARD && (peer < 0 || peer >= s->stages))
    return bt_err_set(err,
                      "schedule: %s: stage %d has no neighbour stage %d to talk to; "
                      "remove the op (the %s stage does not %s)",
                      where(w, sizeof w, stage, i, op), stage, peer, peer < 0 ? "first" : "last",
                      is_send(op->kind) ? "send this way" : "receive this way");
  return 0;
}

/* Fills first[m] / last[m] with the index of micro m's first / last op on
 * the stage (-1 when it has none). */
static void micro_extent(const bt_op *ops, int n, int micro, int *first, int *last) {
  for (int m = 0; m < micro; m++)
    first[m] = last[m] = -1;
  for (int i = 0; i < n; i++) {
    int m = ops[i].micro;
    if (ops[i].kind == BT_OP_OPTIM_STEP)
      continue;
    if (first[m] < 0)
      first[m] = i;
    last[m] = i;
  }
}

/* Lowest-free-slot assignment in start order: optimal for intervals, and
 * deterministic so that the runtime and the simulator agree on indices. */
static int assign_slots(bt_schedule *s, int stage, int *first, int *last, int *owner) {
  bt_op *ops = s->ops[stage];
  int n = s->n_ops[stage], used = 0;
  int *slot_of = owner + s->micro; /* second half of the scratch */
  micro_extent(ops, n, s->micro, first, last);
  for (int k = 0; k < s->micro; k++)
    owner[k] = -1;
  for (int i = 0; i < n; i++) {
    int m = ops[i].micro;
    if (ops[i].kind == BT_OP_OPTIM_STEP) {
      ops[i].slot = -1;
      continue;
    }
    if (i == first[m]) {
      int k = 0;
      while (owner[k] >= 0)
        k++;
      owner[k] = m;
      slot_of[m] = k;
      used = k + 1 > used ? k + 1 : used;
    }
    ops[i].slot = slot_of[m];
    if (i == last[m])
      owner[slot_of[m]] = -1;
  }
  return used;
}

/* Pairs the k-th send with the k-th receive of each channel (FIFO). */
static void link_channel(bt_schedule *s, int sender, bt_op_kind send, int receiver,
                         bt_op_kind recv) {
  bt_op *a = s->ops[sender], *b = s->ops[receiver];
  int na = s->n_ops[sender], nb = s->n_ops[receiver];
  int i = 0, j = 0;
  for (;;) {
    while (i < na && a[i].kind != send)
      i++;
    while (j < nb && b[j].kind != recv)
      j++;
    if (i >= na || j >= nb)
      break;
    a[i++].peer_op = j;
    b[j++].peer_op = i - 1;
  }
}

int bt_schedule_finalize(bt_schedule *s, bt_err *err) {
  if (!s || s->stages < 1 || s->micro < 1 || !s->n_ops || !s->ops || !s->slots)
    return bt_err_set(err, "schedule: finalize needs stages >= 1, micro >= 1 and the n_ops, ops "
                           "and slots arrays; allocate them first");
  for (int st = 0; st < s->stages; st++)
    for (int i = 0; i < s->n_ops[st]; i++) {
      if (check_op(s, st, i, err) < 0)
        return -1;
      bt_op *op = &s->ops[st][i];
      if (op->kind == BT_OP_OPTIM_STEP)
        op->micro = -1;
      op->peer = peer_of(st, op->kind);
      op->peer_op = -1;
    }
  int *scratch = malloc((size_t)4 * (size_t)s->micro * sizeof *scratch);
  if (!scratch)
    return bt_err_set(err, "schedule: out of memory for %d micro-batches; use fewer", s->micro);
  for (int st = 0; st < s->stages; st++)
    s->slots[st] = assign_slots(s, st, scratch, scratch + s->micro, scratch + 2 * s->micro);
  free(scratch);
  for (int st = 0; st + 1 < s->stages; st++) {
    link_channel(s, st, BT_OP_SEND_ACT, st + 1, BT_OP_RECV_ACT);
    link_channel(s, st + 1, BT_OP_SEND_GRAD, st, BT_OP_RECV_GRAD);
  }
  return 0;
}

int bt_schedule_slots(const bt_schedule *s, int stage) {
  if (!s || !s->slots || stage < 0 || stage >= s->stages)
    return 0;
  return s->slots[stage];
}

/* ---- Validation ---- */

static int check_shape(const bt_schedule *s, bt_err *err) {
  if (!s)
    return bt_err_set(err, "schedule: no schedule given; build one with bt_schedule_build");
  if (s->stages < 1 || s->micro < 1)
    return bt_err_set(err, "schedule: %d stages x %d micro-batches: both must be >= 1", s->stages,
                      s->micro);
  if (!s->n_ops || !s->ops || !s->slots)
    return bt_err_set(err, "schedule: missing n_ops, ops or slots array; build the schedule "
                           "with bt_schedule_build");
  for (int st = 0; st < s->stages; st++) {
    if (s->n_ops[st] < 1 || !s->ops[st])
      return bt_err_set(err,
                        "schedule: stage %d has no ops; every stage needs at least its "
                        "optim_step",
                        st);
    if (s->slots[st] < 1 || s->slots[st] > s->micro)
      return bt_err_set(err,
                        "schedule: stage %d: %d slots, outside [1, %d]; run "
                        "bt_schedule_finalize to assign slots",
                        st, s->slots[st], s->micro);
    for (int i = 0; i < s->n_ops[st]; i++) {
      const bt_op *op = &s->ops[st][i];
      char w[96];
      if (check_op(s, st, i, err) < 0)
        return -1;
      if (op->peer != peer_of(st, op->kind))
        return bt_err_set(err, "schedule: %s: peer %d, expected %d; run bt_schedule_finalize",
                          where(w, sizeof w, st, i, op), op->peer, peer_of(st, op->kind));
      if (op->kind != BT_OP_OPTIM_STEP && (op->slot < 0 || op->slot >= s->slots[st]))
        return bt_err_set(err,
                          "schedule: %s: slot %d outside the stage's %d slots; run "
                          "bt_schedule_finalize",
                          where(w, sizeof w, st, i, op), op->slot, s->slots[st]);
    }
  }
  return 0;
}

/* Whether an op of `kind` must appear once per micro-batch on `stage`. */
static int required(int stages, int stage, bt_op_kind kind) {
  int p = peer_of(stage, kind);
  return kind == BT_OP_FORWARD || kind == BT_OP_BACKWARD || (p >= 0 && p < stages);
}

/* pos[k * micro + m] = index of micro m's op of kind k on the stage. */
static int collect_positions(const bt_schedule *s, int st, int *pos, bt_err *err) {
  const int nk = BT_OP_OPTIM_STEP; /* kinds that carry a micro-batch */
  const bt_op *ops = s->ops[st];
  int n = s->n_ops[st];
  char w[96];
  for (int k = 0; k < nk * s->micro; k++)
    pos[k] = -1;
  for (int i = 0; i < n; i++) {
    if (ops[i].kind == BT_OP_OPTIM_STEP) {
      if (i != n - 1)
        return bt_err_set(err,
                          "schedule: %s: the flush must come after every backward; move "
                          "the optim_step to the end of the stage's list",
                          where(w, sizeof w, st, i, &ops[i]));
      continue;
    }
    int *p = &pos[ops[i].kind * s->micro + ops[i].micro];
    if (*p >= 0)
      return bt_err_set(err,
                        "schedule: %s: a second %s of micro-batch %d (first at op %d); "
                        "each runs once per stage per iteration",
                        where(w, sizeof w, st, i, &ops[i]), bt_op_kind_name(ops[i].kind),
                        ops[i].micro, *p);
    *p = i;
  }
  if (ops[n - 1].kind != BT_OP_OPTIM_STEP)
    return bt_err_set(err, "schedule: stage %d: no optim_step at the end; append the flush", st);
  return 0;
}

/* Every required op present, in the data-flow order, on the same slot. */
static int check_micro(const bt_schedule *s, int st, int m, const int *pos, bt_err *err) {
  static const bt_op_kind order[][2] = {
      {BT_OP_RECV_ACT, BT_OP_FORWARD},   {BT_OP_FORWARD, BT_OP_SEND_ACT},
      {BT_OP_RECV_GRAD, BT_OP_BACKWARD}, {BT_OP_BACKWARD, BT_OP_SEND_GRAD},
      {BT_OP_FORWARD, BT_OP_BACKWARD},
  };
  const bt_op *ops = s->ops[st];
  char w[96];
  int slot = -1;
  for (int k = 0; k < BT_OP_OPTIM_STEP; k++) {
    int p = pos[k * s->micro + m], need = required(s->stages, st, (bt_op_kind)k);
    if (need && p < 0)
      return bt_err_set(err,
                        "schedule: stage %d: micro-batch %d has no %s; every stage must "
                        "run it once per micro-batch",
                        st, m, bt_op_kind_name((bt_op_kind)k));
    if (p < 0)
      continue;
    if (slot >= 0 && ops[p].slot != slot)
      return bt_err_set(err,
                        "schedule: %s: slot %d, but the micro-batch's other ops use slot "
                        "%d; one micro-batch keeps one slot on a stage",
                        where(w, sizeof w, st, p, &ops[p]), ops[p].slot, slot);
    slot = ops[p].slot;
  }
  for (size_t r = 0; r < sizeof order / sizeof order[0]; r++) {
    int a = pos[order[r][0] * s->micro + m], b = pos[order[r][1] * s->micro + m];
    if (a >= 0 && b >= 0 && a > b)
      return bt_err_set(err,
                        "schedule: %s runs before the %s of its micro-batch (op %d); "
                        "reorder the stage's ops",
                        where(w, sizeof w, st, b, &ops[b]), bt_op_kind_name(order[r][0]), a);
  }
  return 0;
}

/* No micro-batch takes a slot another one still holds. */
static int check_slots(const bt_schedule *s, int st, int *first, int *last, int *owner,
                       bt_err *err) {
  const bt_op *ops = s->ops[st];
  int n = s->n_ops[st];
  char w[96];
  micro_extent(ops, n, s->micro, first, last);
  for (int k = 0; k < s->slots[st]; k++)
    owner[k] = -1;
  for (int i = 0; i < n; i++) {
    int m = ops[i].micro, k = ops[i].slot;
    if (ops[i].kind == BT_OP_OPTIM_STEP)
      continue;
    if (i == first[m] && owner[k] >= 0)
      return bt_err_set(err,
                        "schedule: %s takes slot %d while micro-batch %d holds it (until "
                        "op %d); give it a free slot or run bt_schedule_finalize",
                        where(w, sizeof w, st, i, &ops[i]), k, owner[k], last[owner[k]]);
    if (i == first[m])
      owner[k] = m;
    if (i == last[m])
      owner[k] = -1;
  }
  return 0;
}

static int check_stages(const bt_schedule *s, bt_err *err) {
  size_t n = (size_t)s->micro * BT_OP_OPTIM_STEP + (size_t)3 * (size_t)s->micro;
  int *pos = malloc(n * sizeof *pos);
  if (!pos)
    return bt_err_set(err, "schedule: out of memory checking %d micro-batches", s->micro);
  int *first = pos + (size_t)s->micro * BT_OP_OPTIM_STEP, *last = first + s->micro;
  int rc = 0;
  for (int st = 0; rc == 0 && st < s->stages; st++) {
    rc = collect_positions(s, st, pos, err);
    for (int m = 0; rc == 0 && m < s->micro; m++)
      rc = check_micro(s, st, m, pos, err);
    if (rc == 0)
      rc = check_slots(s, st, first, last, last + s->micro, err);
  }
  free(pos);
  return rc;
}

/* The k-th send and k-th receive of a channel carry the same micro-batch and
 * point at each other. Counts already match (one per micro-batch each). */
static int check_channel(const bt_schedule *s, int sender, bt_op_kind send, int receiver,
                         bt_op_kind recv, bt_err *err) {
  const bt_op *a = s->ops[sender], *b = s->ops[receiver];
  int na = s->n_ops[sender], nb = s->n_ops[receiver], i = 0, j = 0;
  char wa[96], wb[96];
  for (int k = 0;; k++, i++, j++) {
    while (i < na && a[i].kind != send)
      i++;
    while (j < nb && b[j].kind != recv)
      j++;
    if (i >= na || j >= nb)
      return 0;
    if (a[i].micro != b[j].micro)
      return bt_err_set(err,
                        "schedule: message %d from stage %d to stage %d is sent as %s but "
                        "received as %s; sends and receives of a channel must be in the "
                        "same order",
                        k, sender, receiver, where(wa, sizeof wa, sender, i, &a[i]),
                        where(wb, sizeof wb, receiver, j, &b[j]));
    if (a[i].peer_op != j || b[j].peer_op != i)
      return bt_err_set(err,
                        "schedule: %s and %s are message %d of their channel but their "
                        "peer_op fields (%d, %d) do not point at each other; run "
                        "bt_schedule_finalize",
                        where(wa, sizeof wa, sender, i, &a[i]),
                        where(wb, sizeof wb, receiver, j, &b[j]), k, a[i].peer_op, b[j].peer_op);
  }
}

static int check_channels(const bt_schedule *s, bt_err *err) {
  for (int st = 0; st + 1 < s->stages; st++) {
    if (check_channel(s, st, BT_OP_SEND_ACT, st + 1, BT_OP_RECV_ACT, err) < 0 ||
        check_channel(s, st + 1, BT_OP_SEND_GRAD, st, BT_OP_RECV_GRAD, err) < 0)
      return -1;
  }
  return 0;
}

/* ---- Token game ---- */

typedef int (*play_step_fn)(void *ctx, int stage, int i, bt_err *err);

/* Describes the stages stuck at a receive; called when none can move. */
static int report_deadlock(const bt_schedule *s, const int *pc, bt_err *err) {
  char list[700] = "";
  size_t len = 0;
  int shown = 0, stuck = 0;
  for (int st = 0; st < s->stages; st++) {
    if (pc[st] >= s->n_ops[st])
      continue;
    stuck++;
    if (shown >= 4 || len >= sizeof list - 160)
      continue;
    const bt_op *op = &s->ops[st][pc[st]];
    char w[96];
    len += (size_t)snprintf(list + len, sizeof list - len, "%s%s from stage %d", shown ? ", " : "",
                            where(w, sizeof w, st, pc[st], op), op->peer);
    shown++;
  }
  return bt_err_set(err,
                    "schedule: deadlock: %d stage(s) wait forever: %s%s; a receive waits "
                    "for a send its peer only reaches after a receive of its own - reorder "
                    "the ops",
                    stuck, list, stuck > shown ? ", ..." : "");
}

/* Plays the lists with buffered sends and blocking receives, calling `step`
 * (when not NULL) on each op in an order that respects every dependency.
 * Assumes the FIFO matching checked by check_channels. */
static int play(const bt_schedule *s, play_step_fn step, void *ctx, bt_err *err) {
  int nch = 2 * (s->stages - 1);
  int *pc = calloc((size_t)s->stages + 2 * (size_t)nch, sizeof *pc);
  if (!pc)
    return bt_err_set(err, "schedule: out of memory replaying %d stages", s->stages);
  int *sent = pc + s->stages, *got = sent + nch;
  int progress = 1, rc = 0;
  while (progress && rc == 0) {
    progress = 0;
    for (int st = 0; st < s->stages && rc == 0; st++) {
      while (pc[st] < s->n_ops[st] && rc == 0) {
        const bt_op *op = &s->ops[st][pc[st]];
        int ch = channel_of(s->stages, st, op->kind);
        if (is_recv(op->kind) && sent[ch] <= got[ch])
          break; /* blocks until the peer sends */
        if (step)
          rc = step(ctx, st, pc[st], err);
        if (is_send(op->kind))
          sent[ch]++;
        if (is_recv(op->kind))
          got[ch]++;
        pc[st]++;
        progress = 1;
      }
    }
  }
  for (int st = 0; st < s->stages && rc == 0; st++)
    if (pc[st] < s->n_ops[st])
      rc = report_deadlock(s, pc, err);
  free(pc);
  return rc;
}

int bt_schedule_validate(const bt_schedule *s, bt_err *err) {
  if (check_shape(s, err) < 0 || check_stages(s, err) < 0 || check_channels(s, err) < 0)
    return -1;
  return play(s, NULL, NULL, err);
}

/* ---- Timing ---- */

void bt_sched_timeline_free(bt_sched_timeline *tl) {
  if (!tl)
    return;
  double **arrays[] = {tl->start, tl->end, tl->arrive};
  for (size_t i = 0; i < sizeof arrays / sizeof arrays[0]; i++) {
    if (arrays[i])
      free(arrays[i][0]);
    free(arrays[i]);
  }
  memset(tl, 0, sizeof *tl);
}

/* One [stage][op] array of doubles in one block, rows pointing into it. */
static double **alloc_rows(const bt_schedule *s, size_t total) {
  double **rows = calloc((size_t)s->stages, sizeof *rows);
  double *block = calloc(total, sizeof *block);
  if (!rows || !block) {
    free(rows);
    free(block);
    return NULL;
  }
  for (int st = 0, off = 0; st < s->stages; off += s->n_ops[st], st++)
    rows[st] = block + off;
  return rows;
}

typedef struct sim_state {
  const bt_schedule *s;
  const bt_sched_timing *t;
  bt_sched_timeline *tl;
  double *clock;     /* [stages]: when each stage is next free */
  double *link_free; /* [2 (S-1)]: when each link direction is next free */
} sim_state;

static int duration(double d, const char *what, int stage, int i, const bt_op *op, bt_err *err) {
  char w[96];
  if (!isfinite(d) || d < 0)
    return bt_err_set(err, "schedule: %s: %s %g; durations must be finite and >= 0",
                      where(w, sizeof w, stage, i, op), what, d);
  return 0;
}

static int sim_step(void *ctx, int stage, int i, bt_err *err) {
  sim_state *st = ctx;
  const bt_op *op = &st->s->ops[stage][i];
  double d = st->t->op_time ? st->t->op_time(st->t->ctx, stage, op) : 0.0;
  if (duration(d, "op time", stage, i, op, err) < 0)
    return -1;
  double start = st->clock[stage];
  if (is_recv(op->kind)) {
    double arrival = st->tl->arrive[op->peer][op->peer_op];
    start = arrival > start ? arrival : start;
  }
  double end = start + d;
  st->tl->start[stage][i] = start;
  st->tl->end[stage][i] = end;
  st->clock[stage] = end;
  st->tl->makespan = end > st->tl->makespan ? end : st->tl->makespan;
  if (is_send(op->kind)) {
    double mt = st->t->msg_time ? st->t->msg_time(st->t->ctx, stage, op) : 0.0;
    if (duration(mt, "message time", stage, i, op, err) < 0)
      return -1;
    double *link = &st->link_free[channel_of(st->s->stages, stage, op->kind)];
    double enter = end > *link ? end : *link;
    *link = enter + mt;
    st->tl->arrive[stage][i] = *link;
  }
  return 0;
}

int bt_schedule_simulate(const bt_schedule *s, const bt_sched_timing *timing,
                         bt_sched_timeline *out, bt_err *err) {
  memset(out, 0, sizeof *out);
  if (bt_schedule_validate(s, err) < 0)
    return bt_err_prefix(err, "simulate");
  static const bt_sched_timing zero = {0};
  size_t total = 0;
  for (int st = 0; st < s->stages; st++)
    total += (size_t)s->n_ops[st];
  out->stages = s->stages;
  out->start = alloc_rows(s, total);
  out->end = alloc_rows(s, total);
  out->arrive = alloc_rows(s, total);
  double *clock = calloc((size_t)s->stages * 3, sizeof *clock); /* >= 2 (S-1) link slots */
  if (!out->start || !out->end || !out->arrive || !clock) {
    free(clock);
    bt_sched_timeline_free(out);
    return bt_err_set(err, "simulate: out of memory for %zu ops", total);
  }
  sim_state state = {s, timing ? timing : &zero, out, clock, clock + s->stages};
  int rc = play(s, sim_step, &state, err);
  free(clock);
  if (rc < 0) {
    bt_sched_timeline_free(out);
    return bt_err_prefix(err, "simulate");
  }
  return 0;
}

static double cost_op_time(void *ctx, int stage, const bt_op *op) {
  const bt_sched_costs *c = ctx;
  switch (op->kind) {
  case BT_OP_FORWARD:
    return c->fwd[stage];
  case BT_OP_BACKWARD:
    return c->bwd[stage];
  case BT_OP_OPTIM_STEP:
    return c->optim ? c->optim[stage] : 0.0;
  default:
    return 0.0;
  }
}

static double cost_msg_time(void *ctx, int stage, const bt_op *send) {
  const bt_sched_costs *c = ctx;
  if (send->kind == BT_OP_SEND_ACT)
    return c->act_comm ? c->act_comm[stage] : 0.0;
  return c->grad_comm ? c->grad_comm[stage - 1] : 0.0;
}

int bt_schedule_makespan(const bt_schedule *s, const bt_sched_costs *costs, double *makespan,
                         bt_err *err) {
  if (!costs || !costs->fwd || !costs->bwd)
    return bt_err_set(err, "simulate: forward and backward times per stage are required; fill "
                           "costs->fwd and costs->bwd");
  bt_sched_timing t = {cost_op_time, cost_msg_time, (void *)costs};
  bt_sched_timeline tl;
  if (bt_schedule_simulate(s, &t, &tl, err) < 0)
    return -1;
  *makespan = tl.makespan;
  bt_sched_timeline_free(&tl);
  return 0;
}

double bt_schedule_bubble_fraction(int stages, int micro) {
  if (stages < 1 || micro < 1)
    return 0.0;
  return (double)(stages - 1) / (double)(micro + stages - 1);
}
