/* baton trace: a run log's /timeline as Chrome trace-event JSON, which
 * Perfetto (ui.perfetto.dev) and chrome://tracing open.
 *
 * One process per rank (pid = rank, named "rank N (device)"); compute
 * (forward, backward, encode, decode, optim) on thread 0 "compute",
 * send/recv on thread 1 "comm"; ts and dur in microseconds of the run's
 * clock. A trace viewer drops or mangles complete events that overlap on one
 * thread without nesting (a send still on the wire while the next receive
 * waits), so such an event moves to an extra lane, "comm 2" (tid 3),
 * "compute 2" (tid 2), and so on: tid = 2 * lane + (comm ? 1 : 0). */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "baton/runlog.h"
#include "cli.h"

static void trace_usage(FILE *f) {
  fprintf(f, "usage: baton trace RUN.h5 [-o TRACE.json] [--iterations FIRST:LAST]\n\n"
             "Writes the run's timeline as Chrome trace JSON; open it in https://ui.perfetto.dev\n"
             "or chrome://tracing. One process per rank, compute and comm threads, times in\n"
             "microseconds of the run's clock.\n"
             "  -o FILE                 output (default: RUN with .h5 replaced by .trace.json;\n"
             "                          '-' for stdout)\n"
             "  --iterations FIRST:LAST only these iterations (inclusive; either side may be\n"
             "                          empty); a long run's full trace can be large\n");
}

static void json_string(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\')
      fprintf(f, "\\%c", c);
    else if (c == '\n')
      fputs("\\n", f);
    else if (c < 0x20)
      fprintf(f, "\\u%04x", c);
    else
      fputc(c, f);
  }
  fputc('"', f);
}

static const char *device_of(const bt_runlog_data *d, int rank) {
  for (int i = 0; i < d->n_devices; i++)
    if (d->devices[i].rank == rank && d->device_profile[i][0])
      return d->device_profile[i];
  return "unknown device";
}

typedef struct sel {
  const bt_event *ev;
  int comm;
  int lane;
} sel;

static int by_rank_class_start(const void *pa, const void *pb) {
  const sel *a = pa, *b = pb;
  if (a->ev->rank != b->ev->rank)
    return a->ev->rank < b->ev->rank ? -1 : 1;
  if (a->comm != b->comm)
    return a->comm - b->comm;
  if (a->ev->t_start != b->ev->t_start)
    return a->ev->t_start < b->ev->t_start ? -1 : 1;
  /* Shorter first: an instant receive then fits the lane before a long op. */
  return a->ev->t_end < b->ev->t_end ? -1 : a->ev->t_end > b->ev->t_end;
}

/* Greedy interval partitioning per (rank, class): each event takes the
 * lowest lane that is free at its start (optimal: as few lanes as the most
 * events overlapping at one instant). Returns 0, or -1 out of memory. */
static int assign_lanes(sel *s, size_t n) {
  long long *end = NULL; /* ns, as printed: the JSON decides what overlaps */
  int cap = 0, used = 0;
  for (size_t i = 0; i < n; i++) {
    if (i == 0 || s[i].ev->rank != s[i - 1].ev->rank || s[i].comm != s[i - 1].comm)
      used = 0; /* a new (rank, class) group */
    int k = 0;
    while (k < used && end[k] > llround(s[i].ev->t_start * 1e9))
      k++;
    if (k == used) {
      if (used == cap) {
        cap = cap ? 2 * cap : 4;
        long long *grown = realloc(end, (size_t)cap * sizeof *end);
        if (!grown) {
          free(end);
          return -1;
        }
        end = grown;
      }
      used++;
    }
    end[k] = llround(s[i].ev->t_end * 1e9);
    s[i].lane = k;
  }
  free(end);
  return 0;
}

static int tid_of(int lane, int comm) { return 2 * lane + comm; }

/* Opens the next element of traceEvents: a comma before all but the first. */
static void next(FILE *f, int *count) { fputs((*count)++ ? ",\n" : "\n", f); }

static void thread_meta(FILE *f, int *count, int pid, int tid, int lane, int comm) {
  char name[32];
  if (lane == 0)
    snprintf(name, sizeof name, "%s", comm ? "comm" : "compute");
  else
    snprintf(name, sizeof name, "%s %d", comm ? "comm" : "compute", lane + 1);
  next(f, count);
  fprintf(f,
          "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":", pid,
          tid);
  json_string(f, name);
  fputs("}}", f);
  next(f, count);
  fprintf(f,
          "{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,"
          "\"args\":{\"sort_index\":%d}}",
          pid, tid, tid);
}

/* lanes[0], lanes[1]: compute and comm lanes this rank uses (at least 1). */
static void process_meta(FILE *f, int *count, const bt_runlog_data *d, int rank,
                         const int lanes[2]) {
  char name[128];
  snprintf(name, sizeof name, "rank %d (%s)", rank, device_of(d, rank));
  next(f, count);
  fprintf(f, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"name\":", rank);
  json_string(f, name);
  fputs("}}", f);
  next(f, count);
  fprintf(f,
          "{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%d,"
          "\"args\":{\"sort_index\":%d}}",
          rank, rank);
  for (int comm = 0; comm < 2; comm++)
    for (int lane = 0; lane < (lanes[comm] > 0 ? lanes[comm] : 1); lane++)
      thread_meta(f, count, rank, tid_of(lane, comm), lane, comm);
}

/* Microseconds with 3 decimals, from whole nanoseconds: exact decimal text,
 * so that back-to-back ops (end == next start) stay exactly adjacent in the
 * JSON instead of overlapping by a rounding error. */
static void print_us(FILE *f, long long ns) {
  unsigned long long a = ns < 0 ? 0ull - (unsigned long long)ns : (unsigned long long)ns;
  fprintf(f, "%s%llu.%03llu", ns < 0 ? "-" : "", a / 1000, a % 1000);
}

static void event_json(FILE *f, int *count, const sel *s) {
  const bt_event *e = s->ev;
  long long t0 = llround(e->t_start * 1e9), t1 = llround(e->t_end * 1e9);
  next(f, count);
  fprintf(f, "{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":",
          bt_event_kind_name((bt_event_kind)e->kind), s->comm ? "comm" : "compute", e->rank,
          tid_of(s->lane, s->comm));
  print_us(f, t0);
  fputs(",\"dur\":", f);
  print_us(f, t1 > t0 ? t1 - t0 : 0);
  fprintf(f, ",\"args\":{\"micro_batch\":%d,\"iteration\":%lld,\"bytes\":%lld,\"peer\":%d}}",
          e->micro, (long long)e->iteration, (long long)e->bytes, e->peer);
}

static void run_info(FILE *f, const bt_runlog_data *d, const char *path) {
  const char *keys[] = {"source", "baton_version", "git_describe", "mode",
                        "clock",  "schedule",      "created"};
  const char *vals[] = {path,     d->baton_version, d->git_describe, d->mode,
                        d->clock, d->schedule,      d->created};
  fputs("\"otherData\":{", f);
  for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) {
    fprintf(f, "\"%s\":", keys[i]);
    json_string(f, vals[i]);
    fputc(',', f);
  }
  fprintf(f, "\"world_size\":%d,\"micro_batches\":%d,\"batch_size\":%d,\"time_unit\":\"us\"}",
          d->world_size, d->micro_batches, d->batch_size);
}

static int write_trace(FILE *f, const bt_runlog_data *d, const char *path, const sel *s, size_t n) {
  int max_rank = d->world_size - 1;
  for (size_t i = 0; i < n; i++)
    max_rank = s[i].ev->rank > max_rank ? s[i].ev->rank : max_rank;
  int(*lanes)[2] = calloc((size_t)max_rank + 2, sizeof *lanes);
  if (!lanes)
    return -1;
  for (size_t i = 0; i < n; i++) {
    int *l = &lanes[s[i].ev->rank][s[i].comm];
    *l = s[i].lane + 1 > *l ? s[i].lane + 1 : *l;
  }
  fputs("{\"displayTimeUnit\":\"ms\",\n", f);
  run_info(f, d, path);
  fputs(",\n\"traceEvents\":[", f);
  int count = 0;
  for (int r = 0; r <= max_rank; r++)
    process_meta(f, &count, d, r, lanes[r]);
  for (size_t i = 0; i < n; i++)
    event_json(f, &count, &s[i]);
  fputs("\n]}\n", f);
  free(lanes);
  return 0;
}

static int select_events(const bt_runlog_data *d, int64_t first, int64_t last, sel **out,
                         size_t *n) {
  *out = calloc(d->n_events + 1, sizeof **out);
  if (!*out)
    return -1;
  *n = 0;
  for (size_t i = 0; i < d->n_events; i++) {
    const bt_event *e = &d->events[i];
    if (e->iteration < first || e->iteration > last || !isfinite(e->t_start) ||
        !isfinite(e->t_end) || e->rank < 0)
      continue;
    (*out)[(*n)++] = (sel){e, bt_event_kind_is_comm(e->kind), 0};
  }
  qsort(*out, *n, sizeof **out, by_rank_class_start);
  return 0;
}

static void default_output(const char *in, char *out, size_t len) {
  size_t n = strlen(in);
  if (n > 3 && strcmp(in + n - 3, ".h5") == 0)
    n -= 3;
  snprintf(out, len, "%.*s.trace.json", (int)n, in);
}

static int export(const char *path, const char *out_path, int64_t first, int64_t last) {
  bt_runlog_data d;
  bt_err err;
  if (bt_runlog_read(path, &d, &err) < 0)
    return bt_cli_fail("trace", "%s", err.msg);
  sel *s;
  size_t n;
  if (select_events(&d, first, last, &s, &n) < 0 || assign_lanes(s, n) < 0) {
    bt_runlog_data_free(&d);
    return bt_cli_fail("trace", "out of memory");
  }
  int to_stdout = strcmp(out_path, "-") == 0;
  FILE *f = to_stdout ? stdout : fopen(out_path, "w");
  int rc = 0;
  if (!f) {
    rc = bt_cli_fail("trace", "%s: cannot write: %s", out_path, strerror(errno));
  } else {
    int bad = write_trace(f, &d, path, s, n) < 0;
    bad |= ferror(f);
    bad |= to_stdout ? fflush(f) : fclose(f);
    if (bad)
      rc = bt_cli_fail("trace", "%s: write failed", out_path);
  }
  if (rc == 0)
    fprintf(to_stdout ? stderr : stdout, "wrote %s: %zu events on %d ranks%s\n",
            to_stdout ? "stdout" : out_path, n, d.world_size,
            n == 0 ? " (no events in the chosen iterations)" : "");
  free(s);
  bt_runlog_data_free(&d);
  return rc;
}

int bt_cmd_trace(int argc, char **argv) {
  const char *path = NULL, *out = NULL;
  int64_t first = 0, last = INT64_MAX;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      trace_usage(stdout);
      return 0;
    } else if (strcmp(argv[i], "-o") == 0 && i + 1 < argc) {
      out = argv[++i];
    } else if (strcmp(argv[i], "--iterations") == 0 && i + 1 < argc) {
      if (bt_cli_parse_range(argv[++i], &first, &last) < 0)
        return bt_cli_fail("trace", "--iterations '%s': expected FIRST:LAST, e.g. 10:19", argv[i]);
    } else if (argv[i][0] == '-' && argv[i][1] != '\0') {
      return bt_cli_fail("trace", "unknown option '%s'; see 'baton trace --help'", argv[i]);
    } else if (!path) {
      path = argv[i];
    } else {
      return bt_cli_fail("trace", "one run log at a time ('%s' and '%s')", path, argv[i]);
    }
  }
  if (!path) {
    trace_usage(stderr);
    return 2;
  }
  char def[4096];
  default_output(path, def, sizeof def);
  return export(path, out ? out : def, first, last);
}
