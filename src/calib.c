/* calib: the host calibration store; see include/baton/calib.h. */
#include "baton/calib.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "baton/gemm.h"
#include "baton/rng.h"

typedef struct entry {
  char *key;
  double a, b;
} entry;

struct bt_calib_store {
  entry *e;
  size_t n, cap;
};

/* Keeps a field free of the store's separators. */
static void sanitize(char *s) {
  for (; *s; s++)
    if (*s == '\t' || *s == '\n' || *s == '\r')
      *s = ' ';
}

static void cpu_model(char *buf, size_t n) {
  snprintf(buf, n, "unknown-cpu");
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f)
    return;
  char line[512];
  while (fgets(line, sizeof line, f)) {
    const char *colon = strchr(line, ':');
    if (strncmp(line, "model name", 10) == 0 && colon) {
      snprintf(buf, n, "%s", colon + 1 + (colon[1] == ' '));
      buf[strcspn(buf, "\n")] = 0;
      break;
    }
  }
  fclose(f);
}

void bt_calib_host(const char *blis_arch, int threads, const char *version, char *buf, size_t n) {
  char cpu[256];
  cpu_model(cpu, sizeof cpu);
  snprintf(buf, n, "%s|blis-%s-t%d|%s", cpu, blis_arch, threads, version);
  sanitize(buf);
}

static size_t layer_key(const bt_layer *l, char *buf, size_t n) {
  int w = snprintf(buf, n, "%s %dx%dx%d>%dx%dx%d u%d k%dx%d s%d p%d", bt_layer_kind_name(l->kind),
                   l->in.h, l->in.w, l->in.c, l->out.h, l->out.w, l->out.c, l->units, l->kh, l->kw,
                   l->stride, l->pad);
  size_t used = w < 0 ? 0 : (size_t)w < n ? (size_t)w : n - 1;
  if (l->n_body + l->n_short > 0) {
    used += (size_t)snprintf(buf + used, n - used, "%s[", l->post_relu ? " relu" : "");
    for (int i = 0; i < l->n_body + l->n_short && used + 1 < n; i++) {
      if (i == l->n_body)
        used += (size_t)snprintf(buf + used, n - used, "|");
      used += layer_key(&l->sub[i], buf + used, n - used);
      used += (size_t)snprintf(buf + used, n - used, ";");
      used = used < n ? used : n - 1;
    }
    used += (size_t)snprintf(buf + used, n - used, "]");
  }
  return used < n ? used : n - 1;
}

void bt_calib_layer_key(const bt_layer *l, int batch, int no_input_grad, char *buf, size_t n) {
  int w = snprintf(buf, n, "b%d%s ", batch, no_input_grad ? " nodin" : "");
  if (w > 0 && (size_t)w < n)
    layer_key(l, buf + w, n - (size_t)w);
  sanitize(buf);
}

static int store_put(bt_calib_store *s, const char *key, double a, double b) {
  for (size_t i = 0; i < s->n; i++)
    if (strcmp(s->e[i].key, key) == 0) {
      s->e[i].a = fmin(s->e[i].a, a);
      s->e[i].b = fmin(s->e[i].b, b);
      return 0;
    }
  if (s->n == s->cap) {
    size_t cap = s->cap ? 2 * s->cap : 64;
    entry *e = realloc(s->e, cap * sizeof *e);
    if (!e)
      return -1;
    s->e = e, s->cap = cap;
  }
  s->e[s->n].key = strdup(key);
  if (!s->e[s->n].key)
    return -1;
  s->e[s->n].a = a, s->e[s->n].b = b;
  s->n++;
  return 0;
}

/* Splits "HOST\tKEY\tA\tB\n" in place; 0 when well formed. */
static int parse_line(char *line, char **host, char **key, double *a, double *b) {
  char *f[4];
  char *p = line;
  for (int i = 0; i < 4; i++) {
    f[i] = p;
    p = strchr(p, i < 3 ? '\t' : '\n');
    if (!p && i < 3)
      return -1;
    if (p)
      *p++ = 0;
  }
  char *end;
  *a = strtod(f[2], &end);
  if (end == f[2] || *end)
    return -1;
  *b = strtod(f[3], &end);
  if (end == f[3] || *end)
    return -1;
  if (!(isfinite(*a) && isfinite(*b) && *a > 0 && *b > 0))
    return -1;
  *host = f[0], *key = f[1];
  return 0;
}

int bt_calib_load(const char *path, const char *host, bt_calib_store **out, bt_err *err) {
  *out = calloc(1, sizeof **out);
  if (!*out)
    return bt_err_set(err, "out of memory loading calibration store %s", path);
  FILE *f = fopen(path, "r");
  if (!f) {
    if (errno == ENOENT)
      return 0;
    bt_calib_free(*out), *out = NULL;
    return bt_err_set(err, "cannot read calibration store %s: %s", path, strerror(errno));
  }
  char line[4096];
  long no = 0;
  int rc = 0;
  while (rc == 0 && fgets(line, sizeof line, f)) {
    no++;
    if (line[0] == '\n' || line[0] == '#')
      continue;
    char *h, *k;
    double a, b;
    if (strchr(line, '\n') == NULL && !feof(f))
      rc = bt_err_set(
          err,
          "calibration store %s:%ld: line longer than %zu bytes; delete the file to recalibrate",
          path, no, sizeof line - 1);
    else if (parse_line(line, &h, &k, &a, &b) < 0)
      rc = bt_err_set(
          err,
          "calibration store %s:%ld: not 'HOST<tab>KEY<tab>SECONDS<tab>SECONDS' with positive "
          "figures; delete the file (or the line) to recalibrate",
          path, no);
    else if (strcmp(h, host) == 0 && store_put(*out, k, a, b) < 0)
      rc = bt_err_set(err, "out of memory loading calibration store %s", path);
  }
  fclose(f);
  if (rc < 0)
    bt_calib_free(*out), *out = NULL;
  return rc;
}

int bt_calib_lookup(const bt_calib_store *s, const char *key, double *a, double *b) {
  for (size_t i = 0; s && i < s->n; i++)
    if (strcmp(s->e[i].key, key) == 0) {
      *a = s->e[i].a, *b = s->e[i].b;
      return 1;
    }
  return 0;
}

void bt_calib_free(bt_calib_store *s) {
  if (!s)
    return;
  for (size_t i = 0; i < s->n; i++)
    free(s->e[i].key);
  free(s->e);
  free(s);
}

/* mkdir -p of the directory part of `path`. */
static void make_parent_dirs(const char *path) {
  char dir[4096];
  snprintf(dir, sizeof dir, "%s", path);
  for (char *p = dir + 1; *p; p++)
    if (*p == '/') {
      *p = 0;
      mkdir(dir, 0777);
      *p = '/';
    }
}

int bt_calib_append(const char *path, const char *host, const char *key, double a, double b,
                    bt_err *err) {
  if (!(isfinite(a) && isfinite(b) && a > 0 && b > 0))
    return bt_err_set(err, "calibration of '%s' is not a positive time (%g, %g)", key, a, b);
  char line[4096];
  int n = snprintf(line, sizeof line, "%s\t%s\t%.9g\t%.9g\n", host, key, a, b);
  if (n < 0 || (size_t)n >= sizeof line)
    return bt_err_set(err, "calibration key too long (%zu bytes): '%.60s...'", strlen(key), key);
  make_parent_dirs(path);
  int fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0666);
  if (fd < 0)
    return bt_err_set(err,
                      "cannot write calibration store %s: %s; set calibration: to a "
                      "writable path or 'fresh'",
                      path, strerror(errno));
  ssize_t w = write(fd, line, (size_t)n);
  int saved = errno;
  close(fd);
  if (w != n)
    return bt_err_set(err, "cannot append to calibration store %s: %s", path,
                      w < 0 ? strerror(saved) : "short write");
  return 0;
}

void bt_calib_default_path(char *buf, size_t n) {
  const char *env = getenv("BATON_CALIBRATION"), *xdg = getenv("XDG_CACHE_HOME");
  const char *home = getenv("HOME");
  if (env && *env)
    snprintf(buf, n, "%s", env);
  else if (xdg && *xdg)
    snprintf(buf, n, "%s/baton/calibration.tsv", xdg);
  else
    snprintf(buf, n, "%s/.cache/baton/calibration.tsv", home && *home ? home : ".");
}

/* ---- measuring ---- */

static double thread_cpu_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double clock_resolution(void) {
  struct timespec ts;
  if (clock_getres(CLOCK_THREAD_CPUTIME_ID, &ts) != 0)
    return 1e-9;
  return fmax(1e-9, (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec);
}

static double mono_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The smaller of `best` and a clock reading, skipping readings that are not
 * positive: a thread-CPU clock that stalls (seen once on a CI machine: a
 * 1-microsecond dense backward read 0 in one of 20 runs) gives no time, and
 * a minimum over it would be 0. */
static double min_reading(double best, double reading) {
  return reading > 0 ? fmin(best, reading) : best;
}

double bt_calib_reference(int repeats) {
  enum { n = 256 };
  static float a[n * n], b[n * n], c[n * n];
  double best = INFINITY;
  for (int r = 0; r < repeats; r++) {
    const double t0 = thread_cpu_now();
    bt_sgemm(false, false, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
    best = min_reading(best, thread_cpu_now() - t0);
  }
  return best;
}

void bt_calib_measure_host_rates(double *sgemm_gflops, double *mem_gbs) {
  *sgemm_gflops = BT_CALIB_REFERENCE_FLOPS / bt_calib_reference(20) / 1e9;
  const size_t bytes = (size_t)16 << 20;
  char *src = malloc(bytes), *dst = malloc(bytes);
  double best = INFINITY;
  for (int k = 0; k < 16 && src && dst; k++) {
    memset(src, k, bytes);
    const double t0 = thread_cpu_now();
    memcpy(dst, src, bytes);
    best = min_reading(best, thread_cpu_now() - t0);
  }
  *mem_gbs = 2.0 * (double)bytes / best / 1e9; /* read + write */
  free(src), free(dst);
}

int bt_calib_host_rates(const char *store, const char *host, double *sgemm_gflops, double *mem_gbs,
                        bt_err *err) {
  bt_calib_store *s = NULL;
  if (store && bt_calib_load(store, host, &s, err) < 0)
    return -1;
  const int found = bt_calib_lookup(s, BT_CALIB_HOST_RATES, sgemm_gflops, mem_gbs);
  bt_calib_free(s);
  if (found)
    return 0;
  bt_calib_measure_host_rates(sgemm_gflops, mem_gbs);
  bt_err werr;
  if (store &&
      bt_calib_append(store, host, BT_CALIB_HOST_RATES, *sgemm_gflops, *mem_gbs, &werr) < 0)
    fprintf(stderr, "baton: warning: %s\n", werr.msg);
  return 0;
}

static float *zeroed_floats(size_t n) {
  size_t bytes = ((n + 16) * sizeof(float) + 63) & ~(size_t)63;
  float *b = aligned_alloc(64, bytes);
  if (b)
    memset(b, 0, bytes);
  return b;
}

/* Times every layer of the stage `repeats` times and keeps the minimum host
 * thread-CPU seconds: the minimum moves by under 2% when another process
 * shares the core, the mean by 20%. The host core's clock speed moves by
 * 100 MHz steps (3% here) with the load of the machine, so with a reference
 * time each pass is also expressed in units of the reference kernel timed
 * just before and after it. */
static int measure_stage(bt_stage *s, const bt_model *m, int mb, const bt_calib_options *o,
                         double *fwd, double *bwd, double *cpu_share, bt_err *err) {
  const int n = s->last - s->first;
  const bt_shape in_shape = s->first == 0 ? m->input : m->layers[s->first - 1].out;
  const size_t in_elems = bt_shape_elems(in_shape) * (size_t)mb;
  const size_t out_elems = bt_shape_elems(bt_stage_out_shape(s)) * (size_t)mb;
  const int first = s->first == 0, last = s->last == m->n_layers;
  float *state = malloc((s->n_state + 1) * sizeof(float));
  float *in = zeroed_floats(in_elems), *dout = zeroed_floats(out_elems);
  float *din = zeroed_floats(in_elems);
  int32_t *labels = calloc((size_t)mb, sizeof(int32_t));
  double *f = calloc((size_t)n, sizeof(double)), *b = calloc((size_t)n, sizeof(double));
  if (!state || !in || !dout || !din || !labels || !f || !b) {
    free(state), free(in), free(dout), free(din), free(labels), free(f), free(b);
    return bt_err_set(err, "out of memory for calibration");
  }
  for (int k = 0; k < n; k++)
    fwd[k] = bwd[k] = INFINITY;
  memcpy(state, s->state, s->n_state * sizeof(float));
  bt_rng rng;
  bt_rng_seed(&rng, o->seed, 0xca1);
  for (size_t i = 0; i < in_elems; i++)
    in[i] = bt_rng_normal(&rng);
  for (size_t i = 0; i < out_elems; i++)
    dout[i] = 1e-3f * bt_rng_normal(&rng);
  s->layer_fwd_s = f;
  s->layer_bwd_s = b;
  const int saved_clock = s->timing_clock;
  s->timing_clock = o->wall_clock ? CLOCK_MONOTONIC : CLOCK_THREAD_CPUTIME_ID;
  const double wall0 = mono_now(), cpu0 = thread_cpu_now();
  for (int r = 0; r < o->repeats + 1; r++) { /* +1: warm-up */
    memset(f, 0, n * sizeof(double));
    memset(b, 0, n * sizeof(double));
    bt_exec x = {.training = 1,
                 .seed = o->seed,
                 .labels = labels,
                 .loss_scale = 1.0f / (float)(o->batch_size > 0 ? o->batch_size : mb)};
    const double ref_before = o->ref_seconds > 0 ? bt_calib_reference(3) : 0;
    bt_stage_forward(s, 0, in, mb, &x);
    bt_stage_backward(s, 0, in, last ? NULL : dout, first ? NULL : din, mb, &x);
    const double ref_after = o->ref_seconds > 0 ? bt_calib_reference(3) : 0;
    const double scale = o->ref_seconds > 0 ? 2 * o->ref_seconds / (ref_before + ref_after) : 1;
    for (int k = 0; r > 0 && k < n; k++) {
      fwd[k] = min_reading(fwd[k], f[k] * scale);
      bwd[k] = min_reading(bwd[k], b[k] * scale);
    }
  }
  /* A layer no run could time is faster than the clock resolves. */
  for (int k = 0; k < n; k++) {
    fwd[k] = isfinite(fwd[k]) ? fwd[k] : clock_resolution();
    bwd[k] = isfinite(bwd[k]) ? bwd[k] : clock_resolution();
  }
  const double wall = mono_now() - wall0, cpu = thread_cpu_now() - cpu0;
  *cpu_share = wall > 0 ? cpu / wall : 1;
  s->timing_clock = saved_clock;
  s->layer_fwd_s = s->layer_bwd_s = NULL;
  memcpy(s->state, state, s->n_state * sizeof(float));
  bt_stage_zero_grad(s);
  free(state), free(in), free(dout), free(din), free(labels), free(f), free(b);
  return 0;
}

/* Equal layers of one stage (vgg11's two 2x2x512 convolutions) are measured
 * apart and differ by up to 20% with their neighbours' cache traffic; the
 * store keeps one figure per key, the minimum (store_put). Every measured
 * layer takes that figure now, so the run that measures agrees with every
 * later run that reads the store. */
static void merge_equal_layers(char (*keys)[1024], int n, const double *sf, double *fwd,
                               double *bwd) {
  for (int k = 0; k < n; k++) {
    if (!isnan(sf[k]))
      continue;
    for (int j = k + 1; j < n; j++)
      if (isnan(sf[j]) && strcmp(keys[k], keys[j]) == 0) {
        fwd[k] = fwd[j] = fmin(fwd[k], fwd[j]);
        bwd[k] = bwd[j] = fmin(bwd[k], bwd[j]);
      }
  }
}

int bt_calib_stage(bt_stage *s, const bt_model *m, int micro_batch, const bt_calib_options *o,
                   double *fwd, double *bwd, bt_calib_result *res, bt_err *err) {
  const int n = s->last - s->first;
  memset(res, 0, sizeof *res);
  res->cpu_share = 1;
  if (o->repeats < 1)
    return bt_err_set(err, "calibration needs at least 1 repeat (got %d)", o->repeats);
  bt_calib_store *store = NULL;
  char(*keys)[1024] = calloc((size_t)n, sizeof *keys);
  double *sf = calloc((size_t)n, sizeof(double)), *sb = calloc((size_t)n, sizeof(double));
  int rc = keys && sf && sb ? 0 : bt_err_set(err, "out of memory for calibration");
  if (rc == 0 && o->store && bt_calib_load(o->store, o->host, &store, err) < 0)
    rc = -1;
  int found = 0;
  for (int k = 0; rc == 0 && k < n; k++) {
    const int i = s->first + k;
    bt_calib_layer_key(&m->layers[i], micro_batch, i == 0, keys[k], sizeof keys[k]);
    sf[k] = sb[k] = NAN;
    found += bt_calib_lookup(store, keys[k], &sf[k], &sb[k]);
  }
  if (rc == 0 && found < n)
    rc = measure_stage(s, m, micro_batch, o, fwd, bwd, &res->cpu_share, err);
  if (rc == 0 && found < n)
    merge_equal_layers(keys, n, sf, fwd, bwd);
  for (int k = 0; rc == 0 && k < n; k++) {
    if (!isnan(sf[k])) { /* stored figures win: every run that reuses them agrees */
      fwd[k] = sf[k], bwd[k] = sb[k];
      res->stored++;
      continue;
    }
    res->measured++;
    if (o->store && bt_calib_append(o->store, o->host, keys[k], fwd[k], bwd[k], err) < 0)
      rc = -1;
  }
  bt_calib_free(store);
  free(keys), free(sf), free(sb);
  return rc;
}
