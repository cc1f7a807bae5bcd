/* schedule: the op lists of one synchronous pipeline iteration.
 *
 * For S stages and M micro-batches, a schedule gives each stage the ordered
 * list of operations it performs in one iteration. The MPI runtime executes
 * the lists; the simulator and the partitioner's cost model replay them. Both
 * must see exactly the same thing, so everything below is specified to the op.
 *
 * Compute order (F = forward, B = backward, numbers are micro-batches):
 *
 * - GPipe (fill-drain): every stage runs F0..F(M-1), then B(M-1)..B0.
 *   Backward runs in reverse micro-batch order, as GPipe and torchgpipe do:
 *   the last stage can start the backward of the micro-batch it finished last
 *   without waiting, and the gradient order on every link is the same.
 * - 1F1B with a flush (PipeDream-Flush, DAPPLE; Megatron-LM's formulation):
 *   stage s runs W = min(S - s - 1, M) warm-up forwards F0..F(W-1), then
 *   M - W steady-state pairs "F(W+i), B(i)" (forward first), then the W
 *   cool-down backwards. Backward runs in forward order.
 *
 * Both end with the flush: OPTIM_STEP after every backward of the iteration,
 * so a step equals single-device training with the same micro-batches.
 *
 * Communication ops are explicit and sit right next to their compute op:
 *   forward m on s:  [RECV_ACT m from s-1 if s > 0] FORWARD m [SEND_ACT m to s+1 if s < S-1]
 *   backward m on s: [RECV_GRAD m from s+1 if s < S-1] BACKWARD m [SEND_GRAD m to s-1 if s > 0]
 * so stage s has 2M compute ops, 2M comm ops per neighbour and one OPTIM_STEP.
 * Each channel (activations s -> s+1, gradients s+1 -> s) carries its M
 * messages in the same order at both ends (FIFO, as MPI's non-overtaking rule
 * gives for one source, tag and communicator).
 *
 * Activation slots: a micro-batch holds one activation-stash slot on a stage
 * from its first op there (RECV_ACT, or FORWARD on stage 0) to its last op
 * there (SEND_GRAD, or BACKWARD on stage 0), inclusive. At its first op it
 * takes the lowest slot no other micro-batch holds. Taking slots in start
 * order is optimal for intervals, so the count is the peak number of
 * micro-batches in flight: GPipe M (slot = m); 1F1B min(S - s, M)
 * (slot = m mod min(S - s, M)).
 *
 * Pure: no MPI, no I/O, no globals. Functions that can fail follow err.h. */
#ifndef BATON_SCHEDULE_H
#define BATON_SCHEDULE_H

#include "baton/err.h"

/* Limits that keep every op count and index within an int. */
#define BT_SCHED_MAX_STAGES 65536
#define BT_SCHED_MAX_MICRO (1 << 20)

typedef enum bt_schedule_kind { BT_SCHED_GPIPE, BT_SCHED_1F1B } bt_schedule_kind;

typedef enum bt_op_kind {
  BT_OP_RECV_ACT,   /* receive micro's input activations from stage s-1 */
  BT_OP_FORWARD,    /* forward of micro through the stage's layers */
  BT_OP_SEND_ACT,   /* send micro's output activations to stage s+1 */
  BT_OP_RECV_GRAD,  /* receive the gradient of micro's output from stage s+1 */
  BT_OP_BACKWARD,   /* backward of micro; accumulates parameter gradients */
  BT_OP_SEND_GRAD,  /* send the gradient of micro's input to stage s-1 */
  BT_OP_OPTIM_STEP, /* the flush: one optimizer step after all backwards */
} bt_op_kind;

#define BT_OP_KIND_COUNT 7

typedef struct bt_op {
  bt_op_kind kind;
  int micro;   /* micro-batch index in [0, M); -1 for OPTIM_STEP */
  int slot;    /* micro's activation slot on this stage (on all its ops); -1 for OPTIM_STEP */
  int peer;    /* the other stage of a comm op (s-1 or s+1); -1 otherwise */
  int peer_op; /* index in ops[peer] of the matching op: for a receive, the send that
                  produces its message (what it depends on, for runtimes that post
                  receives early); for a send, the receive that consumes it; -1 otherwise */
} bt_op;

/* All arrays are malloc'd and owned by the schedule: n_ops, slots and ops
 * have `stages` entries, and ops[s] is its own array of n_ops[s] ops, so a
 * hand-built schedule is freed by bt_schedule_free as well. */
typedef struct bt_schedule {
  bt_schedule_kind kind;
  int stages, micro;
  int *n_ops;
  bt_op **ops;
  int *slots; /* activation slots stage s needs (the peak in flight) */
} bt_schedule;

/* Builds the schedule of `kind` for `stages` >= 1 stages and `micro` >= 1
 * micro-batches. On failure *s is left empty (safe to free). */
int bt_schedule_build(bt_schedule *s, bt_schedule_kind kind, int stages, int micro, bt_err *err);

/* Frees everything and zeroes *s; safe on a zeroed or already freed struct. */
void bt_schedule_free(bt_schedule *s);

/* Completes a schedule whose ops have only kind and micro filled in (custom
 * orders, tests): sets peer, assigns slots as described above (filling
 * slots[]) and links peer_op (k-th send on a channel <-> k-th receive; -1
 * when unmatched). Fails on an op that is malformed on its own (bad kind,
 * micro out of range, a comm op with no neighbour); the rest is for
 * bt_schedule_validate. */
int bt_schedule_finalize(bt_schedule *s, bt_err *err);

/* Activation slots stage `stage` needs; 0 when stage is out of range. */
int bt_schedule_slots(const bt_schedule *s, int stage);

/* "gpipe" or "1f1b" (exact spelling). */
int bt_schedule_parse_kind(const char *name, bt_schedule_kind *out, bt_err *err);
const char *bt_schedule_kind_name(bt_schedule_kind kind); /* "gpipe", "1f1b", "?" */
const char *bt_op_kind_name(bt_op_kind kind);             /* "recv_act", "forward", ..., "?" */

/* Checks everything the runtime relies on and reports the first problem:
 * - shape: stages, micro, arrays, op fields (kind, micro, slot < slots[s], peer);
 * - every micro-batch has exactly one FORWARD and one BACKWARD on every stage,
 *   the comm ops its position requires and no others, in the order
 *   RECV_ACT < FORWARD < SEND_ACT, RECV_GRAD < BACKWARD < SEND_GRAD,
 *   FORWARD < BACKWARD, all with the same slot; OPTIM_STEP once, last;
 * - no slot is taken while another micro-batch holds it;
 * - on every channel the k-th send and the k-th receive are for the same
 *   micro-batch and their peer_op fields point at each other;
 * - no deadlock when sends are buffered (never block) and receives block:
 *   a token game plays the S lists until all end or none can move. */
int bt_schedule_validate(const bt_schedule *s, bt_err *err);

/* ---- Timing: replaying a schedule with op durations ----
 *
 * The reference timing model, on which the simulator builds: each stage runs
 * its ops in order, one at a time. An op starts when the stage is free and,
 * for a receive, when its message has arrived; it then occupies the stage for
 * op_time. A send's message enters its link when the send ends and the link
 * is free (one message at a time per direction, links are full duplex),
 * stays msg_time on it, and arrives at the end of that. Gaps between ops on a
 * stage are therefore idle time (the bubble). */
typedef double (*bt_sched_op_time_fn)(void *ctx, int stage, const bt_op *op);
typedef double (*bt_sched_msg_time_fn)(void *ctx, int stage, const bt_op *send);

typedef struct bt_sched_timing {
  bt_sched_op_time_fn op_time;   /* stage time of an op; NULL = 0 for every op */
  bt_sched_msg_time_fn msg_time; /* link time of a send's message; NULL = 0 */
  void *ctx;
} bt_sched_timing;

typedef struct bt_sched_timeline {
  int stages;
  double makespan;       /* end of the last op of the iteration (time starts at 0) */
  double **start, **end; /* [stage][op] */
  double **arrive;       /* [stage][op]: for a send, when its message arrives; 0 otherwise */
} bt_sched_timeline;

/* Validates `s`, then replays it. Durations must be finite and >= 0.
 * Free the result with bt_sched_timeline_free. */
int bt_schedule_simulate(const bt_schedule *s, const bt_sched_timing *timing,
                         bt_sched_timeline *out, bt_err *err);
void bt_sched_timeline_free(bt_sched_timeline *tl);

/* Per-stage costs as arrays, for the common case. fwd and bwd are required
 * ([stages]); act_comm[i] / grad_comm[i] ([stages-1]) are the link times of
 * an activation (i -> i+1) / gradient (i+1 -> i) message and optim[s] the
 * optimizer step; NULL means 0. Comm ops take no stage time. */
typedef struct bt_sched_costs {
  const double *fwd, *bwd, *act_comm, *grad_comm, *optim;
} bt_sched_costs;

int bt_schedule_makespan(const bt_schedule *s, const bt_sched_costs *costs, double *makespan,
                         bt_err *err);

/* Idle fraction of every stage with equal stages and free communication:
 * (S - 1) / (M + S - 1), for GPipe and 1F1B alike (their makespan is then
 * (M + S - 1) * (f + b)). 0 when stages or micro < 1. */
double bt_schedule_bubble_fraction(int stages, int micro);

#endif
