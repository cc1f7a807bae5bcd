/* baton report: a terminal summary of a run log: what ran, where each rank's
 * time went (compute, communication, idle), throughput and the loss reached.
 *
 * Definitions, over the chosen iterations:
 *   span    = the time they cover: the union over iterations of [first event
 *             start, last event end] on any rank. Not a sum of per-iteration
 *             spans: a late stage finishes iteration i early and starts
 *             waiting for i + 1 while the first stage still computes i, so
 *             consecutive iterations overlap (measured on a 4-stage 1F1B run:
 *             the sum overstated the run by 44%);
 *   compute = length of the union of the rank's compute events (forward,
 *             backward, encode, decode, optim);
 *   idle    = span - compute: the pipeline bubble plus any wait;
 *   comm    = length of the union of the rank's send/recv events. It is not a
 *             third share: a send overlaps compute (non-blocking), a receive
 *             is mostly waiting, i.e. part of idle.
 * Throughput uses /train's iteration_time (the run's clock, max over ranks);
 * without /train rows it falls back to the span. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "baton/runlog.h"
#include "cli.h"

static void report_usage(FILE *f) {
  fprintf(f, "usage: baton report RUN.h5 [--iterations FIRST:LAST] [--last N] "
             "[--per-iteration]\n\n"
             "Summarises a run log: run attributes, plans, per-rank compute, communication\n"
             "and idle (bubble) time over the logged iterations, throughput on the run's\n"
             "clock, and the mean loss of the last iterations. Works on a run in progress.\n"
             "  --iterations FIRST:LAST  only these iterations (inclusive; either side may be\n"
             "                           empty), e.g. 1: to leave out a warm-up iteration\n"
             "  --per-iteration          also one line per iteration: loss, accuracy, iteration\n"
             "                           time, bytes sent\n"
             "  --last N                 loss and accuracy: mean of the last N iterations "
             "(10)\n");
}

/* "12.345 s", "3.210 ms" or "45.6 us": runs span microseconds to hours. */
static const char *seconds(double s, char *buf, size_t len) {
  double a = fabs(s);
  if (a >= 1 || a == 0)
    snprintf(buf, len, "%.3f s", s);
  else if (a >= 1e-3)
    snprintf(buf, len, "%.3f ms", s * 1e3);
  else
    snprintf(buf, len, "%.1f us", s * 1e6);
  return buf;
}

static const char *device_of(const bt_runlog_data *d, int rank) {
  for (int i = 0; i < d->n_devices; i++)
    if (d->devices[i].rank == rank && d->device_profile[i][0])
      return d->device_profile[i];
  return "?";
}

static void print_header(const char *path, const bt_runlog_data *d) {
  printf("%s: baton %s (%s), schema %d, created %s\n", path, d->baton_version,
         d->git_describe[0] ? d->git_describe : "git unknown", d->schema_version, d->created);
  printf("  mode %s, clock %s, schedule %s, %d ranks, batch %d in %d micro-batches, seed %llu\n",
         d->mode, d->clock, d->schedule, d->world_size, d->batch_size, d->micro_batches,
         (unsigned long long)d->seed);
  printf("  BLIS %s x %d thread(s); %d layers; %d plan(s); %zu train rows, %zu timeline events\n",
         d->blis_arch[0] ? d->blis_arch : "?", d->blis_threads, d->n_layers, d->n_plans, d->n_train,
         d->n_events);
  if (d->predictor_info)
    printf("  predictor: %s\n", d->predictor_info);
  if (d->unclosed)
    printf("  note: the writer never closed this file (killed, or still running); the figures "
           "cover what it flushed\n");
}

static void print_plans(const bt_runlog_data *d) {
  int from = d->n_plans > 5 ? d->n_plans - 5 : 0; /* re-plans: the latest few */
  for (int p = from; p < d->n_plans; p++) {
    const bt_runlog_plan *pl = &d->plans[p];
    char t[32];
    printf("plan %d from iteration %ld (%s):", p, pl->iteration, pl->partitioner);
    for (int s = 0; s < pl->n_stages; s++) {
      int end = s + 1 < pl->n_stages ? pl->first_layer[s + 1] : d->n_layers;
      printf("%s stage %d = layers %d-%d on rank %d", s ? "," : "", s, pl->first_layer[s], end - 1,
             pl->device_rank[s]);
    }
    if (isfinite(pl->predicted_iteration_time))
      printf("; predicted %s per iteration", seconds(pl->predicted_iteration_time, t, sizeof t));
    /* Measured: the mean iteration time of the /train rows the plan ran. */
    const long until = p + 1 < d->n_plans ? d->plans[p + 1].iteration : INT64_MAX;
    double sum = 0;
    long n = 0;
    for (size_t i = 0; i < d->n_train; i++)
      if (d->train[i].iteration >= pl->iteration && d->train[i].iteration < until)
        sum += d->train[i].iteration_time, n++;
    if (n > 0)
      printf("; measured %s over %ld iterations", seconds(sum / n, t, sizeof t), n);
    printf("\n");
  }
}

/* The predictor against the runtime (/predictor): at each check, the mean
 * absolute error of each rank's stage sum (forward + backward). */
static void print_predictor(const bt_runlog_data *d) {
  if (d->n_predictor == 0)
    return;
  int checks = 0;
  double first_err = NAN, last_err = NAN;
  int64_t first_it = 0, last_it = 0;
  for (size_t i = 0; i < d->n_predictor;) {
    const int64_t it = d->predictor[i].iteration;
    double pred[64] = {0}, meas[64] = {0};
    int ranks = 0;
    for (; i < d->n_predictor && d->predictor[i].iteration == it; i++) {
      const bt_predictor_record *p = &d->predictor[i];
      if (p->rank < 0 || p->rank >= 64)
        continue;
      pred[p->rank] += p->predicted, meas[p->rank] += p->measured;
      ranks = p->rank + 1 > ranks ? p->rank + 1 : ranks;
    }
    double e = 0;
    int n = 0;
    for (int k = 0; k < ranks; k++)
      if (meas[k] > 0)
        e += fabs(pred[k] / meas[k] - 1), n++;
    if (n == 0)
      continue;
    e = 100 * e / n;
    if (checks++ == 0)
      first_err = e, first_it = it;
    last_err = e, last_it = it;
  }
  printf("predictor: %d checks; mean stage-sum error before learning %.1f%% at iteration %lld, "
         "%.1f%% at iteration %lld\n",
         checks, first_err, (long long)first_it, last_err, (long long)last_it);
}

/* The probe timings the predictor learned from (/probes): start-up probes
 * and re-plan probes, each with the mean absolute error of the prediction
 * the predictor made before learning from them. */
static void print_probes(const bt_runlog_data *d) {
  if (d->n_probes == 0)
    return;
  long n[2] = {0}, checks = 0;
  double err[2] = {0}, device_s[2] = {0};
  int64_t last = -2;
  unsigned long long ranks = 0;
  for (size_t i = 0; i < d->n_probes; i++) {
    const bt_probe_record *p = &d->probes[i];
    const int replan = p->iteration >= 0;
    if (p->measured > 0) {
      err[replan] += fabs(p->predicted / p->measured - 1);
      n[replan]++;
      device_s[replan] += p->measured;
    }
    if (!replan && p->rank >= 0 && p->rank < 64)
      ranks |= 1ull << p->rank;
    if (replan && p->iteration != last)
      checks++, last = p->iteration;
  }
  int n_ranks = 0;
  for (int k = 0; k < 64; k++)
    n_ranks += (int)((ranks >> k) & 1u);
  if (n[0])
    printf("probes at start-up: %ld timings on %d ranks (one run of each: %.3f s of device "
           "time); mean error of the prediction before learning from them %.1f%%\n",
           n[0], n_ranks, device_s[0], 100 * err[0] / (double)n[0]);
  if (n[1])
    printf("re-plan probes: %ld timings at %ld checks; mean error before learning %.1f%%\n", n[1],
           checks, 100 * err[1] / (double)n[1]);
}

/* One line per /train row in [first, last]. */
static void print_iterations(const bt_runlog_data *d, int64_t first, int64_t last) {
  printf("%9s %10s %9s %14s %12s\n", "iteration", "loss", "accuracy", "iteration s", "bytes sent");
  for (size_t i = 0; i < d->n_train; i++) {
    const bt_train_record *r = &d->train[i];
    if (r->iteration >= first && r->iteration <= last)
      printf("%9lld %10.6f %8.2f%% %14.6f %12lld\n", (long long)r->iteration, r->loss,
             100 * r->accuracy, r->iteration_time, (long long)r->bytes_sent);
  }
}

typedef struct rank_time {
  double compute, comm;
} rank_time;

typedef struct interval {
  double t0, t1;
} interval;

typedef struct totals {
  double span;     /* union of the iterations' spans */
  long iterations; /* with at least one event */
  interval *spans; /* [iterations] */
  size_t events;
  int n_ranks;
  rank_time *rank; /* [n_ranks] */
} totals;

static int by_iter_rank_class_start(const void *pa, const void *pb) {
  const bt_event *a = *(const bt_event *const *)pa, *b = *(const bt_event *const *)pb;
  if (a->iteration != b->iteration)
    return a->iteration < b->iteration ? -1 : 1;
  if (a->rank != b->rank)
    return a->rank < b->rank ? -1 : 1;
  int ca = bt_event_kind_is_comm(a->kind), cb = bt_event_kind_is_comm(b->kind);
  if (ca != cb)
    return ca - cb;
  return a->t_start < b->t_start ? -1 : a->t_start > b->t_start;
}

/* Length of the union of intervals v[0..n) (sorted by start). */
static double union_length(const interval *v, size_t n) {
  double total = 0, s = 0, t = 0;
  for (size_t i = 0; i < n; i++) {
    if (i == 0 || v[i].t0 > t) {
      total += t - s;
      s = v[i].t0;
      t = v[i].t1;
    } else if (v[i].t1 > t) {
      t = v[i].t1;
    }
  }
  return n ? total + (t - s) : 0;
}

static int by_start(const void *pa, const void *pb) {
  const interval *a = pa, *b = pb;
  return a->t0 < b->t0 ? -1 : a->t0 > b->t0;
}

/* Union length of the events e[0..n) (sorted by start); tmp holds n. */
static double events_union(const bt_event *const *e, size_t n, interval *tmp) {
  for (size_t i = 0; i < n; i++)
    tmp[i] = (interval){e[i]->t_start, e[i]->t_end};
  return union_length(tmp, n);
}

/* Adds one iteration (events e[0..n), sorted) to the totals. */
static void add_iteration(const bt_event *const *e, size_t n, totals *tot, interval *tmp) {
  double t0 = INFINITY, t1 = -INFINITY;
  for (size_t i = 0; i < n; i++) {
    t0 = fmin(t0, e[i]->t_start);
    t1 = fmax(t1, e[i]->t_end);
  }
  tot->spans[tot->iterations++] = (interval){t0, t1};
  for (size_t i = 0, j; i < n; i = j) {
    int comm = bt_event_kind_is_comm(e[i]->kind);
    for (j = i; j < n && e[j]->rank == e[i]->rank && bt_event_kind_is_comm(e[j]->kind) == comm;)
      j++;
    rank_time *r = &tot->rank[e[i]->rank];
    *(comm ? &r->comm : &r->compute) += events_union(e + i, j - i, tmp);
  }
}

static int busy_times(const bt_runlog_data *d, int64_t first, int64_t last, totals *tot) {
  memset(tot, 0, sizeof *tot);
  tot->n_ranks = d->world_size > 0 ? d->world_size : 1;
  const bt_event **e = calloc(d->n_events + 1, sizeof *e);
  if (!e)
    return -1;
  size_t n = 0;
  for (size_t i = 0; i < d->n_events; i++) {
    const bt_event *ev = &d->events[i];
    if (ev->iteration < first || ev->iteration > last || ev->rank < 0 || !isfinite(ev->t_start) ||
        !isfinite(ev->t_end))
      continue;
    e[n++] = ev;
    tot->n_ranks = ev->rank + 1 > tot->n_ranks ? ev->rank + 1 : tot->n_ranks;
  }
  tot->events = n;
  tot->rank = calloc((size_t)tot->n_ranks, sizeof *tot->rank);
  tot->spans = calloc(n + 1, sizeof *tot->spans);
  interval *tmp = calloc(n + 1, sizeof *tmp);
  if (!tot->rank || !tot->spans || !tmp) {
    free(e);
    free(tmp);
    return -1;
  }
  qsort(e, n, sizeof *e, by_iter_rank_class_start);
  for (size_t i = 0, j; i < n; i = j) {
    for (j = i; j < n && e[j]->iteration == e[i]->iteration;)
      j++;
    add_iteration(e + i, j - i, tot, tmp);
  }
  qsort(tot->spans, (size_t)tot->iterations, sizeof *tot->spans, by_start);
  tot->span = union_length(tot->spans, (size_t)tot->iterations);
  free(e);
  free(tmp);
  return 0;
}

static double pct(double part, double whole) { return whole > 0 ? 100 * part / whole : 0; }

static void print_ranks(const bt_runlog_data *d, const totals *tot) {
  char a[32], b[32], c[32];
  printf("%-5s %-20s %12s %12s %12s %8s %8s %8s\n", "rank", "device", "compute", "comm", "idle",
         "compute", "comm", "idle");
  for (int r = 0; r < tot->n_ranks; r++) {
    const rank_time *t = &tot->rank[r];
    double idle = tot->span - t->compute;
    printf("%-5d %-20s %12s %12s %12s %7.1f%% %7.1f%% %7.1f%%\n", r, device_of(d, r),
           seconds(t->compute, a, sizeof a), seconds(t->comm, b, sizeof b),
           seconds(idle, c, sizeof c), pct(t->compute, tot->span), pct(t->comm, tot->span),
           pct(idle, tot->span));
  }
  printf("idle = span - compute (bubbles and waits); comm = time in send/recv, overlapping "
         "compute and idle\n");
}

static void print_throughput(const bt_runlog_data *d, const totals *tot, int64_t first,
                             int64_t last) {
  double time = 0;
  long n = 0;
  for (size_t i = 0; i < d->n_train; i++)
    if (d->train[i].iteration >= first && d->train[i].iteration <= last) {
      time += d->train[i].iteration_time;
      n++;
    }
  const char *source = "/train iteration_time";
  if (n == 0) {
    time = tot->span;
    n = tot->iterations;
    source = "the timeline span";
  }
  char t[32];
  if (n == 0 || time <= 0) {
    printf("throughput: no timed iterations\n");
    return;
  }
  printf("throughput: %.4g samples/s (%ld iterations x %d samples in %s on the %s clock, from "
         "%s)\n",
         (double)n * d->batch_size / time, n, d->batch_size, seconds(time, t, sizeof t), d->clock,
         source);
}

static void print_loss(const bt_runlog_data *d, int64_t first, int64_t last, long window) {
  double loss = 0, acc = 0;
  long n = 0;
  int64_t lo = 0, hi = 0;
  for (size_t i = d->n_train; i-- > 0 && n < window;) {
    const bt_train_record *r = &d->train[i];
    if (r->iteration < first || r->iteration > last)
      continue;
    loss += r->loss;
    acc += r->accuracy;
    hi = n == 0 ? r->iteration : hi;
    lo = r->iteration;
    n++;
  }
  if (n == 0) {
    printf("loss: no /train rows in the chosen iterations\n");
    return;
  }
  printf("loss: %.4f, accuracy %.1f%% (mean of the last %ld iterations, %lld..%lld)\n", loss / n,
         100 * acc / n, n, (long long)lo, (long long)hi);
}

/* The evaluations on the test set, one line each (schema 2's /eval). */
static void print_evals(const bt_runlog_data *d) {
  for (size_t i = 0; i < d->n_eval; i++)
    printf("test: epoch %d (after %lld iterations): loss %.4f, accuracy %.2f%% of %lld samples\n",
           d->eval[i].epoch, (long long)d->eval[i].iteration, d->eval[i].loss,
           100 * d->eval[i].accuracy, (long long)d->eval[i].samples);
}

static int report(const char *path, int64_t first, int64_t last, long window, int per_iter) {
  bt_runlog_data d;
  bt_err err;
  if (bt_runlog_read(path, &d, &err) < 0)
    return bt_cli_fail("report", "%s", err.msg);
  totals tot;
  if (busy_times(&d, first, last, &tot) < 0) {
    free(tot.rank);
    free(tot.spans);
    bt_runlog_data_free(&d);
    return bt_cli_fail("report", "out of memory");
  }
  char t[32];
  print_header(path, &d);
  print_plans(&d);
  printf("\n");
  if (tot.iterations == 0)
    printf("timeline: no events in the chosen iterations\n");
  else
    printf("timeline: %ld iterations, %zu events, span %s\n", tot.iterations, tot.events,
           seconds(tot.span, t, sizeof t));
  if (tot.iterations > 0)
    print_ranks(&d, &tot);
  print_throughput(&d, &tot, first, last);
  print_loss(&d, first, last, window);
  print_evals(&d);
  print_predictor(&d);
  print_probes(&d);
  if (per_iter)
    print_iterations(&d, first, last);
  free(tot.rank);
  free(tot.spans);
  bt_runlog_data_free(&d);
  return 0;
}

int bt_cmd_report(int argc, char **argv) {
  const char *path = NULL;
  int64_t first = 0, last = INT64_MAX;
  long window = 10;
  int per_iter = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      report_usage(stdout);
      return 0;
    } else if (strcmp(argv[i], "--iterations") == 0 && i + 1 < argc) {
      if (bt_cli_parse_range(argv[++i], &first, &last) < 0)
        return bt_cli_fail("report", "--iterations '%s': expected FIRST:LAST, e.g. 1:", argv[i]);
    } else if (strcmp(argv[i], "--per-iteration") == 0) {
      per_iter = 1;
    } else if (strcmp(argv[i], "--last") == 0 && i + 1 < argc) {
      char *end;
      window = strtol(argv[++i], &end, 10);
      if (*end || window < 1)
        return bt_cli_fail("report", "--last '%s': expected a positive count", argv[i]);
    } else if (argv[i][0] == '-' && argv[i][1] != '\0') {
      return bt_cli_fail("report", "unknown option '%s'; see 'baton report --help'", argv[i]);
    } else if (!path) {
      path = argv[i];
    } else {
      return bt_cli_fail("report", "one run log at a time ('%s' and '%s')", path, argv[i]);
    }
  }
  if (!path) {
    report_usage(stderr);
    return 2;
  }
  return report(path, first, last, window, per_iter);
}
