/* The run log: every record kind survives a write/read round trip; a writer
 * killed without closing leaves every flushed iteration readable (and a
 * reader can follow a live writer); bad files give one clear error. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <hdf5.h>

#include "baton/runlog.h"

static char dir[64];

static void make_dir(void) {
  snprintf(dir, sizeof dir, "/tmp/bt_runlog_XXXXXX");
  cr_assert_not_null(mkdtemp(dir));
}

static void remove_dir(void) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  cr_expect_eq(system(cmd), 0);
}

TestSuite(runlog, .init = make_dir, .fini = remove_dir);

static const char *in_dir(const char *name) {
  static char path[4][128];
  static int next;
  char *p = path[next++ % 4];
  snprintf(p, 128, "%s/%s", dir, name);
  return p;
}

static bt_runlog_meta test_meta(const char *config) {
  return (bt_runlog_meta){.baton_version = "0.1.0-test",
                          .git_describe = "v0.1-3-gdeadbee",
                          .config_yaml = config,
                          .effective_config_yaml = "model: mlp\nbatch_size: 8\n",
                          .mode = "train",
                          .clock = "virtual",
                          .world_size = 2,
                          .seed = 0xfedcba9876543210ull,
                          .blis_arch = "haswell",
                          .blis_threads = 1,
                          .schedule = "1f1b",
                          .micro_batches = 4,
                          .batch_size = 8};
}

static bt_model test_model(void) {
  bt_model m;
  bt_err err;
  cr_assert_eq(bt_zoo_build("mlp", (bt_shape){8, 8, 1}, 10, &m, &err), 0, "%s", err.msg);
  return m;
}

/* Deterministic synthetic records of iteration `it`: every event kind. */
enum { EV_PER_IT = 2 * BT_EV_KIND_COUNT };

static void events_of(int64_t it, bt_event *ev) {
  for (int k = 0; k < EV_PER_IT; k++) {
    double t0 = (double)it * 10 + k * 0.5;
    ev[k] = (bt_event){.iteration = it,
                       .rank = k % 2,
                       .micro = k / BT_EV_KIND_COUNT,
                       .kind = k % BT_EV_KIND_COUNT,
                       .peer = bt_event_kind_is_comm(k % BT_EV_KIND_COUNT) ? 1 - k % 2 : -1,
                       .t_start = t0,
                       .t_end = t0 + 0.25 + 1e-9 * k,
                       .bytes = k * 1000 + it};
  }
}

static bt_train_record train_of(int64_t it) {
  return (bt_train_record){it,   2.3 - 0.1 * (double)it, 0.1 * (double)it,
                           10.5, 0.01 * (double)it,      4096 * (it + 1)};
}

static void timing_of(int64_t it, int n, double *fwd, double *bwd) {
  for (int l = 0; l < n; l++) {
    fwd[l] = l == 1 ? NAN : 1e-3 * (double)(l + 1) + (double)it;
    bwd[l] = 2e-3 * (double)(l + 1) + (double)it;
  }
}

static void write_iteration(bt_runlog *log, int64_t it, int n_layers) {
  bt_err err;
  bt_event ev[EV_PER_IT];
  events_of(it, ev);
  double fwd[64], bwd[64];
  timing_of(it, n_layers, fwd, bwd);
  bt_train_record tr = train_of(it);
  cr_assert_eq(bt_runlog_append_events(log, EV_PER_IT, ev, &err), 0, "%s", err.msg);
  cr_assert_eq(bt_runlog_append_timing(log, it, n_layers, fwd, bwd, &err), 0, "%s", err.msg);
  cr_assert_eq(bt_runlog_append_train(log, &tr, &err), 0, "%s", err.msg);
  cr_assert_eq(bt_runlog_flush(log, &err), 0, "%s", err.msg);
}

static const int plan0_first[] = {0, 2}, plan0_rank[] = {0, 1};
static const double plan0_pred[] = {0.5, 0.75};
static const int plan1_first[] = {0, 1}, plan1_rank[] = {1, 0};

/* Header, devices, layers and two plans: everything but the per-iteration
 * records. */
static bt_runlog *open_run(const char *path, const bt_model *m, const char *config) {
  bt_runlog *log;
  bt_err err;
  bt_runlog_meta meta = test_meta(config);
  cr_assert_eq(bt_runlog_create(&log, path, &meta, &err), 0, "%s", err.msg);
  bt_runlog_device dev[2] = {{0, "jetson-nano", 4e9, 100e6, 0.002},
                             {1, "raspberry-pi-4", 2e9, 50e6, 0.005}};
  cr_assert_eq(bt_runlog_write_devices(log, 2, dev, &err), 0, "%s", err.msg);
  cr_assert_eq(bt_runlog_write_layers(log, m, &err), 0, "%s", err.msg);
  bt_runlog_plan p0 = {0, 2, plan0_first, plan0_rank, plan0_pred, 1.25, "even"};
  bt_runlog_plan p1 = {3, 2, plan1_first, plan1_rank, NULL, NAN, "explicit"};
  cr_assert_eq(bt_runlog_append_plan(log, &p0, &err), 0, "%s", err.msg);
  cr_assert_eq(bt_runlog_append_plan(log, &p1, &err), 0, "%s", err.msg);
  return log;
}

static int same_double(double a, double b) { return (isnan(a) && isnan(b)) || a == b; }

static void check_iterations(const bt_runlog_data *d, int n_it, int n_layers) {
  cr_assert_eq(d->n_train, (size_t)n_it);
  cr_assert_eq(d->n_events, (size_t)n_it * EV_PER_IT);
  cr_assert_eq(d->n_timing, (size_t)n_it);
  cr_assert_eq(d->timing_layers, n_layers);
  for (int it = 0; it < n_it; it++) {
    bt_event ev[EV_PER_IT];
    events_of(it, ev);
    cr_assert_eq(memcmp(&d->events[it * EV_PER_IT], ev, sizeof ev), 0, "events of iteration %d",
                 it);
    bt_train_record tr = train_of(it);
    cr_assert_eq(memcmp(&d->train[it], &tr, sizeof tr), 0, "train row %d", it);
    double fwd[64], bwd[64];
    timing_of(it, n_layers, fwd, bwd);
    cr_assert_eq(d->timing_iteration[it], it);
    for (int l = 0; l < n_layers; l++) {
      cr_assert(same_double(d->timing_fwd[it * n_layers + l], fwd[l]), "fwd %d %d", it, l);
      cr_assert(same_double(d->timing_bwd[it * n_layers + l], bwd[l]), "bwd %d %d", it, l);
    }
  }
}

static void check_header(const bt_runlog_data *d, const char *config) {
  cr_expect_eq(d->schema_version, BT_RUNLOG_SCHEMA_VERSION);
  cr_expect_str_eq(d->baton_version, "0.1.0-test");
  cr_expect_str_eq(d->git_describe, "v0.1-3-gdeadbee");
  cr_expect_str_eq(d->config_yaml, config);
  cr_expect_str_eq(d->effective_config_yaml, "model: mlp\nbatch_size: 8\n");
  cr_expect_str_eq(d->mode, "train");
  cr_expect_str_eq(d->clock, "virtual");
  cr_expect_str_eq(d->schedule, "1f1b");
  cr_expect_str_eq(d->blis_arch, "haswell");
  cr_expect_eq(d->world_size, 2);
  cr_expect_eq(d->seed, 0xfedcba9876543210ull);
  cr_expect_eq(d->blis_threads, 1);
  cr_expect_eq(d->micro_batches, 4);
  cr_expect_eq(d->batch_size, 8);
  cr_expect_eq(strlen(d->created), 20, "ISO 8601 UTC: %s", d->created);
  cr_expect_eq(d->created[19], 'Z');
}

static void check_static_records(const bt_runlog_data *d, const bt_model *m) {
  cr_assert_eq(d->n_devices, 2);
  cr_expect_str_eq(d->device_profile[1], "raspberry-pi-4");
  cr_expect_eq(d->devices[1].profile, d->device_profile[1]);
  cr_expect_eq(d->devices[0].memory_capacity, 4e9);
  cr_expect_eq(d->devices[1].link_bandwidth_bps, 50e6);
  cr_expect_eq(d->devices[1].link_latency_s, 0.005);
  cr_assert_eq(d->n_layers, m->n_layers);
  for (int i = 0; i < m->n_layers; i++) {
    const bt_layer *l = &m->layers[i];
    const bt_runlog_layer *r = &d->layers[i];
    cr_expect_eq(r->index, i);
    cr_expect_str_eq(r->name, l->name);
    cr_expect_eq(r->kind, (int)l->kind);
    cr_expect_eq(memcmp(&r->in, &l->in, sizeof r->in), 0);
    cr_expect_eq(memcmp(&r->out, &l->out, sizeof r->out), 0);
    cr_expect_eq(r->params, (int64_t)l->n_params);
    cr_expect_eq(r->param_bytes, 4 * (int64_t)l->n_params);
    cr_expect_eq(r->out_bytes, 4 * (int64_t)bt_shape_elems(l->out));
    cr_expect_eq(r->flops_fwd, bt_layer_flops_fwd(l));
    cr_expect_eq(r->flops_bwd, bt_layer_flops_bwd(l));
  }
  cr_assert_eq(d->n_plans, 2);
  cr_expect_eq(d->plans[0].iteration, 0);
  cr_expect_eq(d->plans[0].first_layer[1], 2);
  cr_expect_eq(d->plans[0].device_rank[1], 1);
  cr_expect_eq(d->plans[0].predicted_stage_time[1], 0.75);
  cr_expect_eq(d->plans[0].predicted_iteration_time, 1.25);
  cr_expect_str_eq(d->plans[0].partitioner, "even");
  cr_expect_eq(d->plans[1].iteration, 3);
  cr_expect_eq(d->plans[1].device_rank[0], 1);
  cr_expect(isnan(d->plans[1].predicted_stage_time[0]));
  cr_expect(isnan(d->plans[1].predicted_iteration_time));
  cr_expect_str_eq(d->plans[1].partitioner, "explicit");
}

Test(runlog, every_record_kind_round_trips) {
  const char *path = in_dir("run.h5");
  bt_model m = test_model();
  const char *config = "# experiment\nmodel: mlp   # trailing comment\nnote: \"ünïcode ✓\"\n";
  bt_runlog *log = open_run(path, &m, config);
  bt_err err;
  /* A start-up probe and a re-plan probe, and a predictor check. */
  const bt_probe_record probes[2] = {
      {-1, 1, -1, 16, 0, 2.5e-3, 3e-3, 4e-4, "conv2d@16x16x64:out=64,k=3x3,s=1,p=1"},
      {4, 0, 2, 4, 1, 1e-4, 1.25e-4, 0, "dense@1x1x400:units=120"}};
  const bt_predictor_record check = {4, 1, 2, 1, 2e-4, 2.5e-4};
  cr_assert_eq(bt_runlog_append_probes(log, 2, probes, &err), 0, "%s", err.msg);
  cr_assert_eq(bt_runlog_append_predictor(log, 1, &check, &err), 0, "%s", err.msg);
  for (int it = 0; it < 6; it++)
    write_iteration(log, it, m.n_layers);
  cr_assert_eq(bt_runlog_close(&log, &err), 0, "%s", err.msg);
  cr_assert_null(log);
  cr_expect_eq(bt_runlog_close(&log, &err), 0, "closing NULL is a no-op");

  bt_runlog_data d;
  cr_assert_eq(bt_runlog_read(path, &d, &err), 0, "%s", err.msg);
  cr_expect_eq(d.unclosed, 0);
  check_header(&d, config);
  check_static_records(&d, &m);
  check_iterations(&d, 6, m.n_layers);
  cr_assert_eq(d.n_probes, 2);
  const bt_probe_record *q = &d.probes[1];
  cr_expect(q->iteration == 4 && q->rank == 0 && q->layer == 2 && q->batch == 4 && q->pass == 1);
  cr_expect(q->predicted == 1e-4 && q->measured == 1.25e-4 && q->host == 0);
  cr_expect_eq(d.probes[0].iteration, -1);
  cr_expect_eq(d.probes[0].host, 4e-4);
  cr_expect_str_eq(d.probes[0].spec, probes[0].spec);
  cr_expect_str_eq(d.probes[1].spec, "dense@1x1x400:units=120");
  cr_assert_eq(d.n_predictor, 1);
  const bt_predictor_record *c = &d.predictor[0];
  cr_expect(c->iteration == 4 && c->rank == 1 && c->layer == 2 && c->pass == 1);
  cr_expect(c->predicted == check.predicted && c->measured == check.measured);
  bt_runlog_data_free(&d);
  bt_runlog_data_free(&d); /* idempotent */
  bt_model_free(&m);
}

/* Attributes in the object header are limited to 64 KiB; the YAML is a
 * variable-length string (stored in the global heap), so size is free. */
Test(runlog, long_config_is_kept_verbatim) {
  size_t n = 300000;
  char *config = malloc(n + 1);
  for (size_t i = 0; i < n; i++)
    config[i] = i % 61 == 60 ? '\n' : (char)('a' + i % 26);
  config[n] = '\0';
  bt_model m = test_model();
  bt_runlog *log = open_run(in_dir("long.h5"), &m, config);
  bt_err err;
  cr_assert_eq(bt_runlog_close(&log, &err), 0, "%s", err.msg);
  bt_runlog_data d;
  cr_assert_eq(bt_runlog_read(in_dir("long.h5"), &d, &err), 0, "%s", err.msg);
  cr_expect_str_eq(d.config_yaml, config);
  cr_expect_eq(d.n_train, 0);
  cr_expect_eq(d.n_events, 0);
  cr_expect_eq(d.n_timing, 0);
  bt_runlog_data_free(&d);
  bt_model_free(&m);
  free(config);
}

/* The child is the writer, so that the reader (this process) has never had
 * the file open: HDF5 state inherited through fork would share it. */
static pid_t spawn_writer(const char *path, int n_flushed, int how) {
  fflush(NULL);
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid > 0)
    return pid;
  bt_model m = test_model();
  bt_runlog *log = open_run(path, &m, "a: 1\n");
  for (int it = 0; it < n_flushed; it++)
    write_iteration(log, it, m.n_layers);
  if (how == 0)
    _exit(0); /* no close, no atexit: HDF5 never hears of the end */
  /* Half of another iteration, never flushed, then the hardest stop. */
  bt_event ev[EV_PER_IT];
  events_of(n_flushed, ev);
  bt_runlog_append_events(log, EV_PER_IT, ev, NULL);
  raise(SIGKILL);
  _exit(3);
}

static void expect_killed_run(const char *path, int how) {
  pid_t pid = spawn_writer(path, 5, how);
  int status;
  cr_assert_eq(waitpid(pid, &status, 0), pid);
  if (how == 0)
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "writer failed: %d", status);
  else
    cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "writer status %d", status);
  bt_runlog_data d;
  bt_err err;
  cr_assert_eq(bt_runlog_read(path, &d, &err), 0, "%s", err.msg);
  cr_expect_eq(d.unclosed, 1, "the file records that its writer never closed it");
  cr_expect_eq(d.n_devices, 2);
  cr_expect_eq(d.n_plans, 2);
  cr_expect_str_eq(d.config_yaml, "a: 1\n");
  bt_model m = test_model();
  if (how == 1) { /* unflushed rows may or may not be there: drop them */
    cr_assert_geq(d.n_events, 5 * EV_PER_IT);
    d.n_events = 5 * EV_PER_IT;
  }
  check_iterations(&d, 5, m.n_layers);
  bt_runlog_data_free(&d);
  bt_model_free(&m);
}

Test(runlog, exited_writer_keeps_every_flushed_iteration) {
  expect_killed_run(in_dir("exited.h5"), 0);
}

Test(runlog, sigkilled_writer_keeps_every_flushed_iteration) {
  expect_killed_run(in_dir("killed.h5"), 1);
}

/* SWMR: `baton report` on a run in progress sees what has been flushed. */
Test(runlog, reader_follows_a_live_writer) {
  const char *path = in_dir("live.h5");
  int to_parent[2], to_child[2];
  cr_assert_eq(pipe(to_parent), 0);
  cr_assert_eq(pipe(to_child), 0);
  fflush(NULL);
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    bt_model m = test_model();
    bt_runlog *log = open_run(path, &m, "");
    char c = 0;
    for (int it = 0; it < 3; it++)
      write_iteration(log, it, m.n_layers);
    if (write(to_parent[1], &c, 1) != 1 || read(to_child[0], &c, 1) != 1)
      _exit(4);
    write_iteration(log, 3, m.n_layers);
    _exit(bt_runlog_close(&log, NULL) == 0 ? 0 : 5);
  }
  char c;
  cr_assert_eq(read(to_parent[0], &c, 1), 1);
  bt_runlog_data d;
  bt_err err;
  int rc = bt_runlog_read(path, &d, &err);
  cr_assert_eq(write(to_child[1], &c, 1), 1);
  int status;
  waitpid(pid, &status, 0);
  cr_assert_eq(rc, 0, "%s", err.msg);
  cr_expect_eq(d.unclosed, 1);
  check_iterations(&d, 3, d.n_layers);
  bt_runlog_data_free(&d);
  cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "writer status %d", status);
  cr_assert_eq(bt_runlog_read(path, &d, &err), 0, "%s", err.msg);
  cr_expect_eq(d.unclosed, 0);
  check_iterations(&d, 4, d.n_layers);
  bt_runlog_data_free(&d);
}

static void expect_read_error(const char *path, const char *want) {
  bt_runlog_data d;
  bt_err err = {""};
  cr_assert_lt(bt_runlog_read(path, &d, &err), 0, "reading %s should fail", path);
  cr_expect(strstr(err.msg, want) != NULL, "error '%s' lacks '%s'", err.msg, want);
  cr_expect(strstr(err.msg, path) != NULL, "error '%s' names no file", err.msg);
  cr_expect(strchr(err.msg, '\n') == NULL, "one line: '%s'", err.msg);
  cr_expect_eq(d.n_events, 0);
  cr_expect_null(d.events);
}

static void write_bytes(const char *path, const void *bytes, size_t n) {
  FILE *f = fopen(path, "wb");
  cr_assert_not_null(f);
  cr_assert_eq(fwrite(bytes, 1, n, f), n);
  fclose(f);
}

Test(runlog, missing_file_is_a_clear_error) {
  expect_read_error(in_dir("nope.h5"), "No such file");
}

Test(runlog, non_hdf5_file_is_a_clear_error) {
  const char *path = in_dir("text.h5");
  write_bytes(path, "model: mlp\n", 11);
  expect_read_error(path, "not an HDF5 file");
  write_bytes(path, "", 0);
  expect_read_error(path, "empty file");
}

/* A run log cut short (disk full, partial copy) is refused, not misread. */
Test(runlog, truncated_file_is_a_clear_error) {
  const char *path = in_dir("cut.h5");
  bt_model m = test_model();
  bt_runlog *log = open_run(path, &m, "");
  for (int it = 0; it < 3; it++)
    write_iteration(log, it, m.n_layers);
  cr_assert_eq(bt_runlog_close(&log, NULL), 0);
  bt_model_free(&m);
  FILE *f = fopen(path, "rb");
  static char buf[1 << 20];
  size_t n = fread(buf, 1, sizeof buf, f);
  fclose(f);
  write_bytes(path, buf, n / 2);
  expect_read_error(path, "cannot open the run log");
}

Test(runlog, hdf5_file_that_is_not_a_run_log_is_refused) {
  const char *path = in_dir("other.h5");
  hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  cr_assert_geq(f, 0);
  H5Fclose(f);
  expect_read_error(path, "not a baton run log");
}

Test(runlog, wrong_schema_version_is_refused) {
  const char *path = in_dir("future.h5");
  bt_model m = test_model();
  bt_runlog *log = open_run(path, &m, "");
  cr_assert_eq(bt_runlog_close(&log, NULL), 0);
  bt_model_free(&m);
  hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
  cr_assert_geq(f, 0);
  hid_t a = H5Aopen(f, "schema_version", H5P_DEFAULT);
  int32_t v = 99;
  cr_assert_geq(H5Awrite(a, H5T_NATIVE_INT32, &v), 0);
  H5Aclose(a);
  H5Fclose(f);
  expect_read_error(path, "schema_version 99");
}

Test(runlog, bad_writer_arguments_are_errors) {
  bt_model m = test_model();
  bt_runlog *log = open_run(in_dir("args.h5"), &m, "");
  bt_err err;
  bt_event ev = {.kind = BT_EV_KIND_COUNT};
  cr_expect_lt(bt_runlog_append_events(log, 1, &ev, &err), 0);
  cr_expect(strstr(err.msg, "kind") != NULL, "%s", err.msg);
  double t[2] = {1, 2};
  cr_expect_lt(bt_runlog_append_timing(log, 0, 2, t, t, &err), 0, "the model has more layers");
  cr_expect(strstr(err.msg, "layers") != NULL, "%s", err.msg);
  bt_runlog_plan empty = {0, 0, NULL, NULL, NULL, NAN, "even"};
  cr_expect_lt(bt_runlog_append_plan(log, &empty, &err), 0);
  const int backwards[] = {0, 3, 2}, ranks[] = {0, 1, 2};
  bt_runlog_plan bad = {0, 3, backwards, ranks, NULL, NAN, "even"};
  cr_expect_lt(bt_runlog_append_plan(log, &bad, &err), 0);
  cr_expect(strstr(err.msg, "stage 1") != NULL, "%s", err.msg);
  cr_expect_lt(bt_runlog_write_layers(log, &m, &err), 0, "layers are written once");
  cr_assert_eq(bt_runlog_close(&log, &err), 0, "%s", err.msg);
  bt_runlog_meta meta = test_meta("");
  cr_expect_lt(bt_runlog_create(&log, in_dir("no/such/dir.h5"), &meta, &err), 0);
  cr_expect(strstr(err.msg, "cannot create") != NULL, "%s", err.msg);
  cr_expect_null(log);
  bt_model_free(&m);
}

Test(runlog, event_kind_names) {
  const char *want[] = {"forward", "backward", "send", "recv", "encode", "decode", "optim"};
  for (int k = 0; k < BT_EV_KIND_COUNT; k++)
    cr_expect_str_eq(bt_event_kind_name((bt_event_kind)k), want[k]);
  cr_expect_str_eq(bt_event_kind_name(BT_EV_KIND_COUNT), "unknown");
  cr_expect(bt_event_kind_is_comm(BT_EV_SEND) && bt_event_kind_is_comm(BT_EV_RECV));
  cr_expect(!bt_event_kind_is_comm(BT_EV_OPTIM));
}
