/* pipeline: the MPI runtime; see include/baton/pipeline.h.
 *
 * Buffers are per activation slot (a micro-batch in flight on this stage):
 * the received input (kept until its backward), the copy of the output being
 * sent, the received output gradient and the input gradient being sent. A
 * message carries its arrival time in a trailer after the tensor, so that the
 * receiver's clock can follow the sender's link model. */
#include "baton/pipeline.h"

#include "baton/calib.h"
#include "baton/codec.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { TRAILER_FLOATS = 4 };             /* room for one double, 16-byte aligned */
enum { TRAILER_BYTES = sizeof(double) }; /* arrival time after a frame */
enum { TAG_ACT = 0, TAG_GRAD = 1 };

struct bt_pipeline {
  MPI_Comm comm;
  int rank, size;
  bt_pipeline_config cfg;
  int *cuts;
  bt_stage stage;
  bt_schedule sched;
  int mb, slots;
  size_t in_elems, out_elems;                                /* per micro-batch */
  float **in_buf, **grad_recv, **din_buf;                    /* tensors: received input, received
                                                               output gradient, computed input gradient */
  unsigned char **act_frame, **grad_frame;                   /* frames being sent */
  unsigned char **in_frame, **gradin_frame;                  /* frames being received */
  size_t cap_act_out, cap_act_in, cap_grad_out, cap_grad_in; /* frame capacities */
  /* Codecs of the two boundaries this rank touches: activations it sends
   * (out) and receives (in), gradients it sends (out) and receives (in). */
  bt_codec_spec spec_act_out, spec_act_in, spec_grad_out, spec_grad_in;
  bt_encoder **enc_act, **enc_grad; /* one stream per micro-batch index */
  MPI_Request *rq_act_recv, *rq_grad_recv, *rq_act_send, *rq_grad_send;
  const float **slot_out; /* forward output of the micro-batch in each slot */
  int **slot_seq;         /* micro-batches each slot holds, in order */
  int *slot_len, *slot_pos;
  bt_link link_next, link_prev;
  double now;                   /* this rank's clock */
  double wall_start;            /* CLOCK_MONOTONIC at creation (wall/none clocks) */
  double *cal_fwd, *cal_bwd;    /* calibrated host seconds per layer per micro-batch */
  int cal_stored, cal_measured; /* layers calibrated from the store, in this run */
  double *host_fwd, *host_bwd;  /* host seconds per layer, last step */
  double *dev_fwd, *dev_bwd;    /* device seconds per layer, last step */
  bt_event *events;
  size_t n_events, cap_events;
  long step;
  double optim_device; /* device seconds of the last optimizer step */
  /* Last step, per direction (TAG_ACT, TAG_GRAD): device seconds of encode
   * and decode on this rank, and bytes of the frames it sent. */
  double codec_device[2], frame_bytes_sent[2];
  double loss_sum;
  long correct;
  bt_pipeline_stats st;
};

/* ---- small helpers ---------------------------------------------------- */

static double mono_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double thread_cpu_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int mpi_fail(const bt_pipeline *p, bt_err *err, const char *what, int rc) {
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  return bt_err_set(err, "rank %d: %s failed: %s", p->rank, what, msg);
}

#define MPI_TRY(p, err, call)                                                                      \
  do {                                                                                             \
    int rc_ = (call);                                                                              \
    if (rc_ != MPI_SUCCESS)                                                                        \
      return mpi_fail((p), (err), #call, rc_);                                                     \
  } while (0)

static float *alloc_msg(size_t elems) {
  size_t bytes = ((elems + TRAILER_FLOATS) * sizeof(float) + 63) & ~(size_t)63;
  float *b = aligned_alloc(64, bytes);
  if (b)
    memset(b, 0, bytes);
  return b;
}

static unsigned char *alloc_frame(size_t cap) {
  size_t bytes = (cap + TRAILER_BYTES + 63) & ~(size_t)63;
  unsigned char *b = aligned_alloc(64, bytes);
  if (b)
    memset(b, 0, bytes);
  return b;
}

static int first_stage(const bt_pipeline *p) { return p->rank == 0; }
static int last_stage(const bt_pipeline *p) { return p->rank == p->size - 1; }

static void record(bt_pipeline *p, bt_event_kind kind, int micro, int peer, double t0, double t1,
                   int64_t bytes) {
  if (p->n_events == p->cap_events) {
    size_t cap = p->cap_events ? 2 * p->cap_events : 64;
    bt_event *grown = realloc(p->events, cap * sizeof *grown);
    if (!grown)
      return; /* the timeline loses an event rather than the run failing */
    p->events = grown;
    p->cap_events = cap;
  }
  p->events[p->n_events++] = (bt_event){.iteration = p->step,
                                        .rank = p->rank,
                                        .micro = micro,
                                        .kind = kind,
                                        .peer = peer,
                                        .t_start = t0,
                                        .t_end = t1,
                                        .bytes = bytes};
}

/* Advances the clock by a compute op of device time `device`, which took
 * `host` seconds of wall time on this host. */
static void advance(bt_pipeline *p, double device, double host_wall_start) {
  switch (p->cfg.clock) {
  case BT_CLOCK_VIRTUAL:
    p->now += device;
    break;
  case BT_CLOCK_WALL: {
    /* Duty cycle: sleep so that the op lasts its device time. */
    double remaining = device - (mono_now() - host_wall_start);
    if (remaining > 0) {
      struct timespec ts = {(time_t)remaining, (long)((remaining - floor(remaining)) * 1e9)};
      nanosleep(&ts, NULL);
    }
    p->now = mono_now() - p->wall_start;
    break;
  }
  case BT_CLOCK_NONE:
    p->now = mono_now() - p->wall_start;
    break;
  }
}

/* A receive completed; the message may still be "on the wire". */
static void arrive(bt_pipeline *p, double arrival) {
  if (p->cfg.clock == BT_CLOCK_VIRTUAL) {
    p->now = arrival > p->now ? arrival : p->now;
    return;
  }
  if (p->cfg.clock == BT_CLOCK_WALL) {
    double wait = arrival - (mono_now() - p->wall_start);
    if (wait > 0) {
      struct timespec ts = {(time_t)wait, (long)((wait - floor(wait)) * 1e9)};
      nanosleep(&ts, NULL);
    }
  }
  p->now = mono_now() - p->wall_start;
}

/* Arrival time stamped on an outgoing message. */
static double depart(bt_pipeline *p, bt_link *link, size_t bytes, double *left) {
  if (p->cfg.clock == BT_CLOCK_NONE) {
    *left = p->now;
    return p->now;
  }
  return bt_link_send(link, p->now, bytes, left);
}

/* A barrier whose waiters sleep instead of spinning: Open MPI busy-polls in
 * MPI_Barrier, and a spinning rank on the core next to a measuring one
 * inflates what it measures. */
void bt_mpi_quiet_barrier(MPI_Comm comm) {
  MPI_Request rq;
  if (MPI_Ibarrier(comm, &rq) != MPI_SUCCESS) {
    MPI_Barrier(comm);
    return;
  }
  int done = 0;
  while (MPI_Test(&rq, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && !done) {
    struct timespec ts = {0, 2000000}; /* 2 ms */
    nanosleep(&ts, NULL);
  }
}

/* ---- device time ------------------------------------------------------ */

static double layer_device_time(const bt_pipeline *p, int i, int pass, double host) {
  if (!p->cfg.device_time)
    return host;
  const bt_layer *l = &p->cfg.model->layers[i];
  return p->cfg.device_time(p->cfg.device_ctx, l, i, pass, p->mb, host, p->step);
}

/* Device seconds of this stage's forward (pass 0) or backward (pass 1) of
 * one micro-batch, from the calibration when there is one; also records the
 * per-layer figures of the step. */
static double stage_device_time(bt_pipeline *p, int pass, const double *host_layers) {
  const int n = p->stage.last - p->stage.first;
  double total = 0;
  for (int k = 0; k < n; k++) {
    const int i = p->stage.first + k;
    /* The calibrated host figure (when there is one) rather than this op's
     * own measurement, which the host's load would colour; the mapping still
     * runs every time because throttling depends on the iteration. */
    const double cal = pass ? p->cal_bwd[k] : p->cal_fwd[k];
    const double d =
        layer_device_time(p, i, pass, p->cfg.calibration_repeats > 0 ? cal : host_layers[k]);
    (pass ? p->dev_bwd : p->dev_fwd)[k] += d;
    total += d;
  }
  return total;
}

/* ---- calibration ------------------------------------------------------ */

/* The stage's calibration (calib.h): each layer's store entry when there is
 * one, otherwise measured and added to the store. */
static int calibrate(bt_pipeline *p, bt_err *err) {
  bt_stage *s = &p->stage;
  const int n = s->last - s->first;
  if (p->cfg.calibration_repeats <= 0) {
    for (int k = 0; k < n; k++)
      p->cal_fwd[k] = p->cal_bwd[k] = INFINITY;
    return 0;
  }
  const bt_calib_options o = {.repeats = p->cfg.calibration_repeats,
                              .ref_seconds = p->cfg.calibration_reference_s,
                              .seed = p->cfg.seed,
                              .batch_size = p->cfg.batch_size,
                              .store = p->cfg.calibration_store,
                              .host = p->cfg.calibration_host};
  bt_calib_result res;
  if (bt_calib_stage(s, p->cfg.model, p->mb, &o, p->cal_fwd, p->cal_bwd, &res, err) < 0) {
    char msg[sizeof err->msg];
    memcpy(msg, err->msg, sizeof msg);
    return bt_err_set(err, "rank %d: %s", p->rank, msg);
  }
  p->cal_stored = res.stored;
  p->cal_measured = res.measured;
  if (res.measured > 0 && res.cpu_share < 0.8 && o.store)
    fprintf(stderr,
            "baton: warning: rank %d calibrated while its core was shared (%.0f%% of the wall "
            "time on the CPU); the store %s keeps these figures: delete it and rerun on a quiet "
            "machine if they look slow\n",
            p->rank, 100 * res.cpu_share, o.store);
  if (getenv("BATON_DEBUG_CAL")) {
    double tf = 0, tb = 0;
    for (int k = 0; k < n; k++)
      tf += p->cal_fwd[k], tb += p->cal_bwd[k];
    fprintf(stderr, "rank %d calibrated host fwd %.5f bwd %.5f s per micro-batch\n", p->rank, tf,
            tb);
    if (atoi(getenv("BATON_DEBUG_CAL")) == 2)
      for (int k = 0; k < n; k++)
        fprintf(stderr, "rank %d layer %d %s fwd %.1f bwd %.1f us\n", p->rank, s->first + k,
                p->cfg.model->layers[s->first + k].name, 1e6 * p->cal_fwd[k], 1e6 * p->cal_bwd[k]);
  }
  return 0;
}

void bt_pipeline_calibration_counts(const bt_pipeline *p, int *stored, int *measured) {
  *stored = p->cal_stored;
  *measured = p->cal_measured;
}

/* ---- creation --------------------------------------------------------- */

int bt_partition_even(int n_layers, int n_stages, int *cuts, bt_err *err) {
  if (n_stages < 1 || n_stages > n_layers)
    return bt_err_set(err, "cannot cut %d layers into %d stages; use at most %d devices", n_layers,
                      n_stages, n_layers);
  for (int s = 0; s <= n_stages; s++)
    cuts[s] = (int)((long)n_layers * s / n_stages);
  return 0;
}

static int alloc_slots(bt_pipeline *p, bt_err *err) {
  const int S = p->slots, M = p->cfg.micro_batches;
  p->in_buf = calloc((size_t)S, sizeof(float *));
  p->grad_recv = calloc((size_t)S, sizeof(float *));
  p->din_buf = calloc((size_t)S, sizeof(float *));
  p->act_frame = calloc((size_t)S, sizeof(unsigned char *));
  p->grad_frame = calloc((size_t)S, sizeof(unsigned char *));
  p->in_frame = calloc((size_t)S, sizeof(unsigned char *));
  p->gradin_frame = calloc((size_t)S, sizeof(unsigned char *));
  p->slot_out = calloc((size_t)S, sizeof(float *));
  p->enc_act = calloc((size_t)M, sizeof(bt_encoder *));
  p->enc_grad = calloc((size_t)M, sizeof(bt_encoder *));
  p->rq_act_recv = malloc((size_t)S * sizeof(MPI_Request));
  p->rq_grad_recv = malloc((size_t)S * sizeof(MPI_Request));
  p->rq_act_send = malloc((size_t)S * sizeof(MPI_Request));
  p->rq_grad_send = malloc((size_t)S * sizeof(MPI_Request));
  if (!p->in_buf || !p->grad_recv || !p->din_buf || !p->act_frame || !p->grad_frame ||
      !p->in_frame || !p->gradin_frame || !p->slot_out || !p->enc_act || !p->enc_grad ||
      !p->rq_act_recv || !p->rq_grad_recv || !p->rq_act_send || !p->rq_grad_send)
    return bt_err_set(err, "rank %d: out of memory for pipeline buffers", p->rank);
  /* Frames: activations use the activation codec on both ends of a
   * boundary, gradients the gradient codec. */
  p->cap_act_in = bt_codec_max_frame_bytes(&p->spec_act_in, p->in_elems);
  p->cap_act_out = bt_codec_max_frame_bytes(&p->spec_act_out, p->out_elems);
  p->cap_grad_out = bt_codec_max_frame_bytes(&p->spec_grad_out, p->in_elems);
  p->cap_grad_in = bt_codec_max_frame_bytes(&p->spec_grad_in, p->out_elems);
  for (int k = 0; k < S; k++) {
    p->rq_act_recv[k] = p->rq_grad_recv[k] = MPI_REQUEST_NULL;
    p->rq_act_send[k] = p->rq_grad_send[k] = MPI_REQUEST_NULL;
    if (!first_stage(p) &&
        (!(p->in_buf[k] = alloc_msg(p->in_elems)) || !(p->din_buf[k] = alloc_msg(p->in_elems)) ||
         !(p->in_frame[k] = alloc_frame(p->cap_act_in)) ||
         !(p->grad_frame[k] = alloc_frame(p->cap_grad_out))))
      return bt_err_set(err, "rank %d: out of memory for pipeline buffers", p->rank);
    if (!last_stage(p) && (!(p->grad_recv[k] = alloc_msg(p->out_elems)) ||
                           !(p->act_frame[k] = alloc_frame(p->cap_act_out)) ||
                           !(p->gradin_frame[k] = alloc_frame(p->cap_grad_in))))
      return bt_err_set(err, "rank %d: out of memory for pipeline buffers", p->rank);
  }
  for (int m = 0; m < M; m++) {
    if (!last_stage(p) && bt_encoder_create(&p->spec_act_out, &p->enc_act[m], err) < 0)
      return bt_err_prefix(err, "rank %d", p->rank);
    if (!first_stage(p) && bt_encoder_create(&p->spec_grad_out, &p->enc_grad[m], err) < 0)
      return bt_err_prefix(err, "rank %d", p->rank);
  }
  return 0;
}

/* Which micro-batches each slot holds, in the order the forwards run. */
static int build_slot_sequences(bt_pipeline *p, bt_err *err) {
  const int r = p->rank, n_ops = p->sched.n_ops[r];
  p->slot_seq = calloc((size_t)p->slots, sizeof(int *));
  p->slot_len = calloc((size_t)p->slots, sizeof(int));
  p->slot_pos = calloc((size_t)p->slots, sizeof(int));
  if (!p->slot_seq || !p->slot_len || !p->slot_pos)
    return bt_err_set(err, "rank %d: out of memory", p->rank);
  for (int k = 0; k < p->slots; k++)
    if (!(p->slot_seq[k] = calloc((size_t)p->cfg.micro_batches, sizeof(int))))
      return bt_err_set(err, "rank %d: out of memory", p->rank);
  for (int i = 0; i < n_ops; i++) {
    const bt_op *op = &p->sched.ops[r][i];
    if (op->kind == BT_OP_FORWARD)
      p->slot_seq[op->slot][p->slot_len[op->slot]++] = op->micro;
  }
  return 0;
}

static int init_links(bt_pipeline *p, bt_err *err) {
  if (p->cfg.clock == BT_CLOCK_NONE)
    return 0;
  if (!last_stage(p) &&
      bt_link_init(&p->link_next, p->cfg.link_next, p->cfg.seed, p->rank, p->rank + 1, err) < 0)
    return bt_err_prefix(err, "rank %d", p->rank);
  if (!first_stage(p) &&
      bt_link_init(&p->link_prev, p->cfg.link_prev, p->cfg.seed, p->rank, p->rank - 1, err) < 0)
    return bt_err_prefix(err, "rank %d", p->rank);
  return 0;
}

int bt_pipeline_create(bt_pipeline **out, MPI_Comm comm, const bt_pipeline_config *cfg,
                       bt_err *err) {
  *out = NULL;
  bt_pipeline *p = calloc(1, sizeof *p);
  if (!p)
    return bt_err_set(err, "out of memory creating the pipeline");
  p->comm = comm;
  p->cfg = *cfg;
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  MPI_Comm_rank(comm, &p->rank);
  MPI_Comm_size(comm, &p->size);
  const bt_model *m = cfg->model;
  int rc = -1;
  err->msg[0] = '\0';
  if (cfg->batch_size % cfg->micro_batches != 0) {
    bt_err_set(err, "micro_batches (%d) must divide batch_size (%d)", cfg->micro_batches,
               cfg->batch_size);
    goto fail;
  }
  if (cfg->root < 0 || cfg->root >= p->size) {
    bt_err_set(err, "the pipeline's root rank %d is not one of its %d ranks", cfg->root, p->size);
    goto fail;
  }
  p->cuts = malloc((size_t)(p->size + 1) * sizeof(int));
  if (!p->cuts)
    goto fail;
  memcpy(p->cuts, cfg->cuts, (size_t)(p->size + 1) * sizeof(int));
  p->cfg.cuts = p->cuts;
  p->mb = cfg->batch_size / cfg->micro_batches;
  if (bt_schedule_build(&p->sched, cfg->schedule, p->size, cfg->micro_batches, err) < 0)
    goto fail;
  p->slots = p->sched.slots[p->rank];
  const int first = p->cuts[p->rank], last = p->cuts[p->rank + 1];
  if (bt_stage_init(&p->stage, m, first, last, p->mb, p->slots, cfg->seed, err) < 0) {
    bt_err_prefix(err, "rank %d", p->rank);
    goto fail;
  }
  p->in_elems = bt_shape_elems(m->layers[first].in) * p->mb;
  p->out_elems = bt_shape_elems(m->layers[last - 1].out) * p->mb;
  const int n = last - first;
  p->cal_fwd = calloc((size_t)n, sizeof(double));
  p->cal_bwd = calloc((size_t)n, sizeof(double));
  p->host_fwd = calloc((size_t)n, sizeof(double));
  p->host_bwd = calloc((size_t)n, sizeof(double));
  p->dev_fwd = calloc((size_t)n, sizeof(double));
  p->dev_bwd = calloc((size_t)n, sizeof(double));
  if (!p->cal_fwd || !p->cal_bwd || !p->host_fwd || !p->host_bwd || !p->dev_fwd || !p->dev_bwd) {
    bt_err_set(err, "rank %d: out of memory", p->rank);
    goto fail;
  }
  const char *const names[4] = {cfg->codec_act_out, cfg->codec_act_in, cfg->codec_grad_out,
                                cfg->codec_grad_in};
  bt_codec_spec *const specs[4] = {&p->spec_act_out, &p->spec_act_in, &p->spec_grad_out,
                                   &p->spec_grad_in};
  for (int i = 0; i < 4; i++)
    if (bt_codec_parse(names[i] ? names[i] : "none", specs[i], err) < 0) {
      bt_err_prefix(err, "rank %d", p->rank);
      goto fail;
    }
  if (alloc_slots(p, err) < 0 || build_slot_sequences(p, err) < 0 || init_links(p, err) < 0)
    goto fail;
  rc = 0;
fail:
  if (rc < 0 && !err->msg[0])
    bt_err_set(err, "rank %d: out of memory creating the pipeline", p->rank);
  /* Every rank learns whether all succeeded, so that none waits forever for
   * a rank that gave up. */
  /* Ranks on one node calibrate one after the other: ranks sharing cores,
   * caches and memory bandwidth would otherwise disturb each other's figures. */
  MPI_Comm node;
  int node_rank = 0, node_size = 1;
  if (MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, p->rank, MPI_INFO_NULL, &node) ==
      MPI_SUCCESS) {
    MPI_Comm_rank(node, &node_rank);
    MPI_Comm_size(node, &node_size);
    for (int turn = 0; turn < node_size; turn++) {
      if (turn == node_rank && rc == 0 && calibrate(p, err) < 0)
        rc = -1;
      bt_mpi_quiet_barrier(node);
    }
    MPI_Comm_free(&node);
  } else if (rc == 0 && calibrate(p, err) < 0) {
    rc = -1;
  }
  int ok = rc == 0, all_ok = 0;
  MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_LAND, comm);
  if (!all_ok) {
    if (ok)
      bt_err_set(err, "rank %d: another rank failed to set up its stage", p->rank);
    bt_pipeline_free(&p);
    return -1;
  }
  p->wall_start = mono_now();
  *out = p;
  return 0;
}

void bt_pipeline_free(bt_pipeline **pp) {
  bt_pipeline *p = *pp;
  if (!p)
    return;
  for (int k = 0; k < p->slots; k++) {
    if (p->rq_act_recv && p->rq_act_recv[k] != MPI_REQUEST_NULL) {
      MPI_Cancel(&p->rq_act_recv[k]);
      MPI_Request_free(&p->rq_act_recv[k]);
    }
    if (p->in_buf)
      free(p->in_buf[k]), free(p->din_buf[k]), free(p->grad_recv[k]);
    if (p->act_frame)
      free(p->act_frame[k]), free(p->grad_frame[k]), free(p->in_frame[k]), free(p->gradin_frame[k]);
    if (p->slot_seq)
      free(p->slot_seq[k]);
  }
  for (int m = 0; p->enc_act && m < p->cfg.micro_batches; m++)
    bt_encoder_free(p->enc_act[m]), bt_encoder_free(p->enc_grad[m]);
  free(p->enc_act), free(p->enc_grad);
  free(p->in_buf), free(p->din_buf), free(p->grad_recv), free(p->slot_out);
  free(p->act_frame), free(p->grad_frame), free(p->in_frame), free(p->gradin_frame);
  free(p->rq_act_recv), free(p->rq_grad_recv), free(p->rq_act_send), free(p->rq_grad_send);
  free(p->slot_seq), free(p->slot_len), free(p->slot_pos);
  free(p->cal_fwd), free(p->cal_bwd), free(p->host_fwd), free(p->host_bwd);
  free(p->dev_fwd), free(p->dev_bwd);
  free(p->events);
  if (p->sched.n_ops)
    bt_schedule_free(&p->sched);
  bt_stage_free(&p->stage);
  free(p->cuts);
  free(p);
  *pp = NULL;
}

/* ---- one iteration ---------------------------------------------------- */

static int post_act_recv(bt_pipeline *p, int slot, bt_err *err) {
  if (first_stage(p) || p->slot_pos[slot] >= p->slot_len[slot])
    return 0;
  const int micro = p->slot_seq[slot][p->slot_pos[slot]];
  MPI_TRY(p, err,
          MPI_Irecv(p->in_frame[slot], (int)(p->cap_act_in + TRAILER_BYTES), MPI_BYTE, p->rank - 1,
                    2 * micro + TAG_ACT, p->comm, &p->rq_act_recv[slot]));
  return 0;
}

/* Passes an MPI call's result through, counting the host CPU it spent since
 * cpu0 as waiting (Open MPI spins while it waits), not as overhead. */
static int waited(bt_pipeline *p, int rc, double cpu0) {
  p->st.cpu_overhead -= thread_cpu_now() - cpu0;
  return rc;
}

/* Device seconds of a codec op over `bytes` (read and written), which took
 * `host` thread-CPU seconds and `wall` seconds here. */
static double codec_device_time(const bt_pipeline *p, size_t bytes, double host, double wall) {
  if (p->cfg.clock == BT_CLOCK_NONE)
    return wall;
  return p->cfg.codec_time ? p->cfg.codec_time(p->cfg.device_ctx, (double)bytes, host, p->step)
                           : host;
}

/* Waits for a frame, follows its arrival time, decodes it into `dst`. */
static int wait_recv(bt_pipeline *p, MPI_Request *rq, unsigned char *frame, float *dst,
                     size_t elems, int micro, int peer, int tag, bt_err *err) {
  const double t0 = p->now, w0 = mono_now(), c0 = thread_cpu_now();
  MPI_Status status;
  MPI_TRY(p, err, MPI_Wait(rq, &status));
  p->st.host_overhead -= mono_now() - w0; /* waiting is not overhead */
  p->st.cpu_overhead -= thread_cpu_now() - c0;
  int got = 0;
  MPI_Get_count(&status, MPI_BYTE, &got);
  if (got < (int)TRAILER_BYTES)
    return bt_err_set(err, "rank %d: a message from rank %d of %d bytes has no frame", p->rank,
                      peer, got);
  const size_t len = (size_t)got - TRAILER_BYTES;
  double arrival;
  memcpy(&arrival, frame + len, sizeof arrival);
  arrive(p, arrival);
  p->st.comm_wait_time += p->now - t0;
  record(p, BT_EV_RECV, micro, peer, t0, p->now, (int64_t)len);
  const double d0 = p->now, dw = mono_now(), dc = thread_cpu_now();
  if (bt_codec_decode(frame, len, dst, elems, err) < 0)
    return bt_err_prefix(err, "rank %d: frame from rank %d, micro-batch %d", p->rank, peer, micro);
  const double host = thread_cpu_now() - dc;
  advance(p, codec_device_time(p, len + elems * sizeof(float), host, mono_now() - dw), dw);
  p->st.compute_time += p->now - d0;
  p->codec_device[tag] += p->now - d0;
  record(p, BT_EV_DECODE, micro, peer, d0, p->now, (int64_t)len);
  return 0;
}

/* Encodes `src` into `frame` (once its previous send has completed), then
 * sends it with its arrival time from the link model. */
static int send_tensor(bt_pipeline *p, const float *src, size_t elems, bt_encoder *enc,
                       unsigned char *frame, size_t cap, int micro, int peer, int tag,
                       bt_link *link, MPI_Request *rq, bt_err *err) {
  const double c_w = thread_cpu_now();
  MPI_TRY(p, err, waited(p, MPI_Wait(rq, MPI_STATUS_IGNORE), c_w));
  const double e0 = p->now, ew = mono_now(), ec = thread_cpu_now();
  size_t len = 0;
  if (bt_codec_encode(enc, src, elems, frame, cap, &len, err) < 0)
    return bt_err_prefix(err, "rank %d: encoding micro-batch %d for rank %d", p->rank, micro, peer);
  const double host = thread_cpu_now() - ec;
  advance(p, codec_device_time(p, len + elems * sizeof(float), host, mono_now() - ew), ew);
  p->st.compute_time += p->now - e0;
  p->codec_device[tag] += p->now - e0;
  p->frame_bytes_sent[tag] += (double)len;
  record(p, BT_EV_ENCODE, micro, peer, e0, p->now, (int64_t)len);
  double left;
  const double arrival = depart(p, link, len, &left);
  memcpy(frame + len, &arrival, sizeof arrival);
  record(p, BT_EV_SEND, micro, peer, p->now, left, (int64_t)len);
  p->st.bytes_sent += (int64_t)len;
  MPI_TRY(
      p, err,
      MPI_Isend(frame, (int)(len + TRAILER_BYTES), MPI_BYTE, peer, 2 * micro + tag, p->comm, rq));
  return 0;
}

static void compute_begin(bt_pipeline *p, double *cpu0, double *wall0) {
  bt_stage *s = &p->stage;
  s->layer_fwd_s = p->host_fwd;
  s->layer_bwd_s = p->host_bwd;
  s->timing_clock = CLOCK_THREAD_CPUTIME_ID;
  *cpu0 = thread_cpu_now();
  *wall0 = mono_now();
}

static void compute_end(bt_pipeline *p, int pass, int micro, double cpu0, double wall0,
                        const double *host_before) {
  const int n = p->stage.last - p->stage.first;
  double host_layers[n];
  const double *acc = pass ? p->host_bwd : p->host_fwd;
  for (int k = 0; k < n; k++)
    host_layers[k] = acc[k] - host_before[k];
  const double t0 = p->now;
  double device = stage_device_time(p, pass, host_layers);
  if (p->cfg.clock == BT_CLOCK_NONE)
    device = mono_now() - wall0;
  advance(p, device, wall0);
  p->st.compute_time += p->now - t0;
  p->st.host_overhead -= mono_now() - wall0; /* compute is not overhead */
  p->st.cpu_compute += thread_cpu_now() - cpu0;
  record(p, pass ? BT_EV_BACKWARD : BT_EV_FORWARD, micro, -1, t0, p->now, 0);
}

static int run_forward(bt_pipeline *p, const bt_op *op, const float *x, const int32_t *y,
                       bt_exec *ex, bt_err *err) {
  const int n = p->stage.last - p->stage.first;
  double before[n], cpu0, wall0;
  memcpy(before, p->host_fwd, sizeof before);
  const float *in = first_stage(p) ? x + (size_t)op->micro * p->in_elems : p->in_buf[op->slot];
  ex->micro = op->micro;
  ex->labels = last_stage(p) ? y + (size_t)op->micro * p->mb : NULL;
  compute_begin(p, &cpu0, &wall0);
  p->slot_out[op->slot] = bt_stage_forward(&p->stage, op->slot, in, p->mb, ex);
  compute_end(p, 0, op->micro, cpu0, wall0, before);
  if (!last_stage(p)) /* the gradient for this micro-batch can come any time now */
    MPI_TRY(p, err,
            MPI_Irecv(p->gradin_frame[op->slot], (int)(p->cap_grad_in + TRAILER_BYTES), MPI_BYTE,
                      p->rank + 1, 2 * op->micro + TAG_GRAD, p->comm, &p->rq_grad_recv[op->slot]));
  return 0;
}

static int run_backward(bt_pipeline *p, const bt_op *op, const float *x, const int32_t *y,
                        bt_exec *ex, bt_err *err) {
  const int n = p->stage.last - p->stage.first;
  double before[n], cpu0, wall0;
  memcpy(before, p->host_bwd, sizeof before);
  const float *in = first_stage(p) ? x + (size_t)op->micro * p->in_elems : p->in_buf[op->slot];
  float *din = first_stage(p) ? NULL : p->din_buf[op->slot];
  ex->micro = op->micro;
  ex->labels = last_stage(p) ? y + (size_t)op->micro * p->mb : NULL;
  compute_begin(p, &cpu0, &wall0);
  bt_stage_backward(&p->stage, op->slot, in, last_stage(p) ? NULL : p->grad_recv[op->slot], din,
                    p->mb, ex);
  compute_end(p, 1, op->micro, cpu0, wall0, before);
  p->slot_pos[op->slot]++; /* the slot is free: its next micro-batch may arrive */
  return post_act_recv(p, op->slot, err);
}

static int run_op(bt_pipeline *p, const bt_op *op, const float *x, const int32_t *y, bt_exec *ex,
                  bt_err *err) {
  const int k = op->slot;
  switch (op->kind) {
  case BT_OP_RECV_ACT:
    return wait_recv(p, &p->rq_act_recv[k], p->in_frame[k], p->in_buf[k], p->in_elems, op->micro,
                     p->rank - 1, TAG_ACT, err);
  case BT_OP_FORWARD:
    return run_forward(p, op, x, y, ex, err);
  case BT_OP_SEND_ACT:
    return send_tensor(p, p->slot_out[k], p->out_elems, p->enc_act[op->micro], p->act_frame[k],
                       p->cap_act_out, op->micro, p->rank + 1, TAG_ACT, &p->link_next,
                       &p->rq_act_send[k], err);
  case BT_OP_RECV_GRAD:
    return wait_recv(p, &p->rq_grad_recv[k], p->gradin_frame[k], p->grad_recv[k], p->out_elems,
                     op->micro, p->rank + 1, TAG_GRAD, err);
  case BT_OP_BACKWARD:
    return run_backward(p, op, x, y, ex, err);
  case BT_OP_SEND_GRAD:
    return send_tensor(p, p->din_buf[k], p->in_elems, p->enc_grad[op->micro], p->grad_frame[k],
                       p->cap_grad_out, op->micro, p->rank - 1, TAG_GRAD, &p->link_prev,
                       &p->rq_grad_send[k], err);
  case BT_OP_OPTIM_STEP: {
    const double t0 = p->now, w0 = mono_now(), c0 = thread_cpu_now();
    bt_sgd_step(&p->cfg.opt, p->stage.params, p->stage.grads, p->stage.momentum, p->stage.n_params);
    double host = thread_cpu_now() - c0;
    double device = p->cfg.device_time
                        ? p->cfg.device_time(p->cfg.device_ctx, NULL, -1, 2, p->mb, host, p->step)
                        : host;
    advance(p, p->cfg.clock == BT_CLOCK_NONE ? mono_now() - w0 : device, w0);
    p->st.compute_time += p->now - t0;
    p->st.host_overhead -= mono_now() - w0;
    p->st.cpu_compute += host;
    p->optim_device = p->now - t0;
    record(p, BT_EV_OPTIM, -1, -1, t0, p->now, 0);
    return 0;
  }
  }
  return bt_err_set(err, "rank %d: unknown schedule op %d", p->rank, (int)op->kind);
}

int bt_pipeline_step(bt_pipeline *p, const float *x, const int32_t *y, long step,
                     bt_pipeline_stats *out, bt_err *err) {
  if ((first_stage(p) && !x) || (last_stage(p) && !y))
    return bt_err_set(err, "rank %d: the first stage needs inputs and the last labels", p->rank);
  const double wall0 = mono_now(), cpu0 = thread_cpu_now(), clock0 = p->now;
  memset(&p->st, 0, sizeof p->st);
  p->step = step;
  p->n_events = 0;
  const int n = p->stage.last - p->stage.first;
  memset(p->host_fwd, 0, n * sizeof(double));
  memset(p->host_bwd, 0, n * sizeof(double));
  memset(p->dev_fwd, 0, n * sizeof(double));
  memset(p->dev_bwd, 0, n * sizeof(double));
  bt_stage_zero_grad(&p->stage);
  p->codec_device[0] = p->codec_device[1] = 0;
  p->frame_bytes_sent[0] = p->frame_bytes_sent[1] = 0;
  for (int k = 0; k < p->slots; k++) {
    p->slot_pos[k] = 0;
    if (post_act_recv(p, k, err) < 0)
      return -1;
  }
  bt_exec ex = {.training = 1,
                .seed = p->cfg.seed,
                .step = step,
                .loss_scale = 1.0f / (float)p->cfg.batch_size};
  const int r = p->rank;
  for (int i = 0; i < p->sched.n_ops[r]; i++)
    if (run_op(p, &p->sched.ops[r][i], x, y, &ex, err) < 0)
      return -1;
  for (int k = 0; k < p->slots; k++) {
    const double c_w = thread_cpu_now();
    MPI_TRY(p, err, waited(p, MPI_Wait(&p->rq_act_send[k], MPI_STATUS_IGNORE), c_w));
    MPI_TRY(p, err, waited(p, MPI_Wait(&p->rq_grad_send[k], MPI_STATUS_IGNORE), c_w));
  }
  double local[2] = {ex.loss_sum, (double)ex.correct}, total[2] = {0, 0};
  const double c_r = thread_cpu_now();
  MPI_TRY(p, err,
          waited(p, MPI_Reduce(local, total, 2, MPI_DOUBLE, MPI_SUM, p->cfg.root, p->comm), c_r));
  p->st.loss = total[0] / p->cfg.batch_size;
  p->st.correct = (long)total[1];
  p->st.iter_time = p->now - clock0;
  p->st.wall_time = mono_now() - wall0;
  /* Overhead: time in neither compute nor waiting for a message. */
  p->st.host_overhead += p->st.wall_time;
  p->st.cpu_overhead += thread_cpu_now() - cpu0 - p->st.cpu_compute;
  if (out)
    *out = p->st;
  return 0;
}

bt_stage_costs bt_pipeline_stage_costs(const bt_pipeline *p) {
  bt_stage_costs c = {0};
  const int n = p->stage.last - p->stage.first, M = p->cfg.micro_batches;
  for (int k = 0; k < n; k++)
    c.fwd += p->dev_fwd[k] / M, c.bwd += p->dev_bwd[k] / M;
  /* Encoding and decoding occupy the stage like compute: activation codecs
   * belong to the forward, gradient codecs to the backward. */
  c.fwd += p->codec_device[TAG_ACT] / M;
  c.bwd += p->codec_device[TAG_GRAD] / M;
  c.optim = p->optim_device;
  if (p->cfg.clock != BT_CLOCK_NONE) { /* frames as sent, mean per micro-batch */
    if (!last_stage(p))
      c.act_comm = bt_link_ideal_time(&p->link_next.p, (size_t)(p->frame_bytes_sent[TAG_ACT] / M));
    if (!first_stage(p))
      c.grad_comm =
          bt_link_ideal_time(&p->link_prev.p, (size_t)(p->frame_bytes_sent[TAG_GRAD] / M));
  }
  return c;
}

const bt_event *bt_pipeline_events(const bt_pipeline *p, size_t *n) {
  *n = p->n_events;
  return p->events;
}

void bt_pipeline_layer_times(const bt_pipeline *p, const double **fwd, const double **bwd,
                             int *first, int *count) {
  *fwd = p->dev_fwd;
  *bwd = p->dev_bwd;
  *first = p->stage.first;
  *count = p->stage.last - p->stage.first;
}

bt_stage *bt_pipeline_stage(bt_pipeline *p) { return &p->stage; }

/* Moves one whole-model vector between the stages' slices (`count` floats
 * at global `offset` on each rank) and the root's whole copy: gathered to
 * the root (to_root) or scattered from it. Collective. */
static int move_vector(bt_pipeline *p, int to_root, float *all, float *mine, int count, int offset,
                       bt_err *err) {
  int *counts = NULL, *displs = NULL;
  const int root = p->cfg.root;
  if (p->rank == root) {
    counts = malloc((size_t)p->size * sizeof(int));
    displs = malloc((size_t)p->size * sizeof(int));
    if (!counts || !displs) {
      free(counts), free(displs);
      return bt_err_set(err, "rank %d: out of memory moving parameters", root);
    }
  }
  int rc = MPI_Gather(&count, 1, MPI_INT, counts, 1, MPI_INT, root, p->comm);
  if (rc == MPI_SUCCESS)
    rc = MPI_Gather(&offset, 1, MPI_INT, displs, 1, MPI_INT, root, p->comm);
  if (rc == MPI_SUCCESS)
    rc = to_root
             ? MPI_Gatherv(mine, count, MPI_FLOAT, all, counts, displs, MPI_FLOAT, root, p->comm)
             : MPI_Scatterv(all, counts, displs, MPI_FLOAT, mine, count, MPI_FLOAT, root, p->comm);
  free(counts), free(displs);
  return rc == MPI_SUCCESS
             ? 0
             : mpi_fail(p, err, to_root ? "MPI_Gatherv (parameters)" : "MPI_Scatterv (parameters)",
                        rc);
}

static int gather_vector(bt_pipeline *p, float *mine, int count, int offset, float *all,
                         bt_err *err) {
  return move_vector(p, 1, all, mine, count, offset, err);
}

int bt_pipeline_gather_params(bt_pipeline *p, float *params, float *state, bt_err *err) {
  bt_stage *s = &p->stage;
  if (gather_vector(p, s->params, (int)s->n_params, (int)s->param_base, params, err) < 0)
    return -1;
  /* Collective on every rank, whatever the root asked for. */
  float *sink = NULL;
  if (p->rank == p->cfg.root && !state &&
      !(sink = malloc((p->cfg.model->n_state + 1) * sizeof(float))))
    return bt_err_set(err, "rank %d: out of memory gathering state", p->rank);
  int rc =
      gather_vector(p, s->state, (int)s->n_state, (int)s->state_base, state ? state : sink, err);
  free(sink);
  if (rc < 0)
    return -1;
  return 0;
}

static int scatter_vector(bt_pipeline *p, const float *all, float *mine, int count, int offset,
                          bt_err *err) {
  return move_vector(p, 0, (float *)all, mine, count, offset, err); /* read-only on this path */
}

int bt_pipeline_export_state(bt_pipeline *p, float *params, float *momentum, float *state,
                             bt_err *err) {
  bt_stage *s = &p->stage;
  const int np = (int)s->n_params, ns = (int)s->n_state;
  const int po = (int)s->param_base, so = (int)s->state_base;
  if (gather_vector(p, s->params, np, po, params, err) < 0 ||
      gather_vector(p, s->momentum, np, po, momentum, err) < 0 ||
      gather_vector(p, s->state, ns, so, state, err) < 0)
    return -1;
  return 0;
}

int bt_pipeline_import_state(bt_pipeline *p, const float *params, const float *momentum,
                             const float *state, bt_err *err) {
  bt_stage *s = &p->stage;
  const int np = (int)s->n_params, ns = (int)s->n_state;
  const int po = (int)s->param_base, so = (int)s->state_base;
  if (scatter_vector(p, params, s->params, np, po, err) < 0 ||
      scatter_vector(p, momentum, s->momentum, np, po, err) < 0 ||
      scatter_vector(p, state, s->state, ns, so, err) < 0)
    return -1;
  return 0;
}

double bt_pipeline_clock(const bt_pipeline *p) { return p->now; }

void bt_pipeline_set_clock(bt_pipeline *p, double t) {
  p->now = t;
  p->wall_start = mono_now() - t; /* wall and none clocks read the host from here on */
}

int bt_pipeline_evaluate(bt_pipeline *p, const float *x, const int32_t *y, long n, double *loss,
                         long *correct, bt_err *err) {
  bt_exec ex = {.training = 0};
  const size_t in_per = p->in_elems / p->mb, out_per = p->out_elems / p->mb;
  float *buf = first_stage(p) ? NULL : alloc_msg(p->in_elems);
  if (!first_stage(p) && !buf)
    return bt_err_set(err, "rank %d: out of memory for evaluation", p->rank);
  for (long i = 0; i < n; i += p->mb) {
    const int b = (int)(n - i < p->mb ? n - i : p->mb);
    const float *in = x ? x + (size_t)i * in_per : NULL;
    if (!first_stage(p)) {
      MPI_TRY(
          p, err,
          MPI_Recv(buf, (int)(b * in_per), MPI_FLOAT, p->rank - 1, 7, p->comm, MPI_STATUS_IGNORE));
      in = buf;
    }
    ex.labels = last_stage(p) ? y + i : NULL;
    const float *out = bt_stage_forward(&p->stage, 0, in, b, &ex);
    if (!last_stage(p))
      MPI_TRY(p, err, MPI_Send(out, (int)(b * out_per), MPI_FLOAT, p->rank + 1, 7, p->comm));
  }
  free(buf);
  double local[2] = {ex.loss_sum, (double)ex.correct}, total[2] = {0, 0};
  MPI_TRY(p, err, MPI_Reduce(local, total, 2, MPI_DOUBLE, MPI_SUM, p->cfg.root, p->comm));
  *loss = n ? total[0] / (double)n : 0;
  *correct = (long)total[1];
  return 0;
}
