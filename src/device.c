/* device: profiles, the device-time model, throttling and memory accounting;
 * see include/baton/device.h and docs/devices.md.
 *
 * Profiles are read like model files, with the helpers of yamldoc.c:
 * libyaml's document API gives a node tree with line/column marks, and every
 * key is checked against a table, so a typo in a profile is an error at its
 * line rather than a silently default-valued board. */
#define _POSIX_C_SOURCE 200809L /* strdup */

#include "baton/device.h"
#include "baton/yamldoc.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Profiles are a few KiB; a huge file is the wrong file. */
#define PROFILE_MAX ((size_t)1 << 20)

static const char *const class_names[BT_OP_CLASS_COUNT] = {
    [BT_OP_CONV] = "conv",           [BT_OP_DWCONV] = "dwconv",
    [BT_OP_DENSE] = "dense",         [BT_OP_ELEMENTWISE] = "elementwise",
    [BT_OP_POOL_NORM] = "pool_norm",
};

const char *bt_op_class_name(bt_op_class c) {
  return (unsigned)c < BT_OP_CLASS_COUNT ? class_names[c] : "?";
}

int bt_op_class_compute_bound(bt_op_class c) {
  return c == BT_OP_CONV || c == BT_OP_DWCONV || c == BT_OP_DENSE;
}

/* ---- reading: scalar values ---------------------------------------------- */

/* Strict number: a plain decimal scalar (sign, digits, '.', exponent), finite.
 * Rejects quoted numbers, .nan/.inf, hex. `lo` with `lo_open` bounds it from
 * below; `hint` says what the value means when it is out of range. */
static int number(const bt_yaml_reader *r, const yaml_node_t *v, const char *what, double lo,
                  int lo_open, const char *hint, double *out) {
  char got[96];
  if (v->type != YAML_SCALAR_NODE || bt_yaml_is_null(v)) {
    bt_yaml_describe(v, got, sizeof got);
    return bt_yaml_at(r, v->start_mark, "%s: expected a number, got %s", what, got);
  }
  const char *s = bt_yaml_text(v);
  if (v->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
    return bt_yaml_at(r, v->start_mark,
                      "%s: expected a number, got the quoted string '%.*s%s'; remove the quotes",
                      what, BT_YAML_SHOW(s));
  char *end;
  errno = 0;
  double x = strtod(s, &end);
  if (!*s || *end || strspn(s, "0123456789+-.eE") != strlen(s))
    return bt_yaml_at(r, v->start_mark, "%s: expected a number, got '%.*s%s'", what,
                      BT_YAML_SHOW(s));
  if (!isfinite(x) || errno == ERANGE)
    return bt_yaml_at(r, v->start_mark, "%s: %.*s%s is not a finite number", what, BT_YAML_SHOW(s));
  if (x < lo || (lo_open && x == lo))
    return bt_yaml_at(r, v->start_mark, "%s: %.*s%s is out of range; it must be %s %g (%s)", what,
                      BT_YAML_SHOW(s), lo_open ? ">" : ">=", lo, hint);
  *out = x;
  return 0;
}

/* A string value: a scalar (quoted or not), 1..max-1 bytes, no NULs. */
static int string(const bt_yaml_reader *r, const yaml_node_t *v, const char *what, char *out,
                  size_t max) {
  char got[96];
  if (v->type != YAML_SCALAR_NODE || bt_yaml_is_null(v)) {
    bt_yaml_describe(v, got, sizeof got);
    return bt_yaml_at(r, v->start_mark, "%s: expected text, got %s", what, got);
  }
  size_t len = v->data.scalar.length;
  if (strlen(bt_yaml_text(v)) != len || len < 1 || len >= max)
    return bt_yaml_at(r, v->start_mark, "%s: must be 1 to %zu characters without NULs", what,
                      max - 1);
  memcpy(out, bt_yaml_text(v), len + 1);
  return 0;
}

/* ---- reading: the profile ------------------------------------------------ */

/* One numeric key of a section: where it goes and what it may hold. */
typedef struct num_key {
  const char *key;
  size_t off; /* offsetof in bt_device */
  double lo;
  int lo_open;
  int required;
  double def;
  const char *hint;
} num_key;

#define DEV(f) offsetof(bt_device, f)
#define RATE(c) (offsetof(bt_device, rate) + (size_t)(c) * sizeof(double))

static const num_key compute_keys[] = {
    {"conv_gflops", RATE(BT_OP_CONV), 0, 1, 1, 0, "sustained GFLOP/s of convolutions"},
    {"dwconv_gflops", RATE(BT_OP_DWCONV), 0, 1, 1, 0, "GFLOP/s of depthwise convolutions"},
    {"dense_gflops", RATE(BT_OP_DENSE), 0, 1, 1, 0, "GFLOP/s of fully connected layers"},
    {"elementwise_gbs", RATE(BT_OP_ELEMENTWISE), 0, 1, 1, 0, "GB/s of streaming ops"},
    {"pool_norm_gbs", RATE(BT_OP_POOL_NORM), 0, 1, 1, 0, "GB/s of pooling and batch-norm"},
    {"op_overhead_us", DEV(op_overhead_us), 0, 0, 1, 0, "microseconds per op"},
    {"half_util_flops", DEV(half_util_flops), 0, 0, 1, 0, "FLOPs at 50% utilisation; 0 = none"},
};
static const num_key memory_keys[] = {
    {"capacity_mib", DEV(capacity_mib), 0, 1, 1, 0, "MiB a training process can use"},
    {"bandwidth_gbs", DEV(bandwidth_gbs), 0, 1, 1, 0, "DRAM GB/s"},
    {"cache_kib", DEV(cache_kib), 0, 0, 1, 0, "last-level cache KiB"},
    {"cache_speedup", DEV(cache_speedup), 1, 0, 0, 1, "bandwidth gain inside the cache"},
};
static const num_key link_keys[] = {
    {"bandwidth_mbps", DEV(link_bandwidth_mbps), 0, 1, 1, 0, "Mbit/s"},
    {"latency_ms", DEV(link_latency_ms), 0, 0, 1, 0, "one-way milliseconds"},
};

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* Parses section `sec` (the node of key `secname`) of numeric keys. */
static int parse_section(const bt_yaml_reader *r, const yaml_node_t *sec, const char *secname,
                         const num_key *keys, int n, bt_device *d) {
  const char *names[16];
  for (int i = 0; i < n; i++)
    names[i] = keys[i].key;
  if (bt_yaml_check_keys(r, sec, secname, "key", names, n, BT_YAML_BAD_KEY_IN_CONTEXT) < 0)
    return -1;
  for (int i = 0; i < n; i++) {
    double *field = (double *)(void *)((char *)d + keys[i].off);
    yaml_node_t *v = bt_yaml_lookup(r, sec, keys[i].key);
    if (!v) {
      if (keys[i].required)
        return bt_yaml_at(r, sec->start_mark, "%s: missing '%s' (%s)", secname, keys[i].key,
                          keys[i].hint);
      *field = keys[i].def;
      continue;
    }
    char what[64];
    snprintf(what, sizeof what, "%s.%s", secname, keys[i].key);
    if (number(r, v, what, keys[i].lo, keys[i].lo_open, keys[i].hint, field) < 0)
      return -1;
  }
  return 0;
}

static const char *const throttle_keys[] = {"after_iteration", "conv",      "dwconv", "dense",
                                            "elementwise",     "pool_norm", "all"};

static int parse_throttle(const bt_yaml_reader *r, const yaml_node_t *seq, bt_device *d) {
  char got[96];
  if (bt_yaml_is_null(seq))
    return 0;
  if (seq->type != YAML_SEQUENCE_NODE) {
    bt_yaml_describe(seq, got, sizeof got);
    return bt_yaml_at(
        r, seq->start_mark,
        "throttle: expected a list such as [{after_iteration: 50, conv: 2.0}], got %s", got);
  }
  long prev = -1;
  for (yaml_node_item_t *it = seq->data.sequence.items.start; it < seq->data.sequence.items.top;
       it++) {
    yaml_node_t *e = bt_yaml_node(r, *it);
    if (d->n_throttle == BT_DEVICE_THROTTLE_MAX)
      return bt_yaml_at(r, e->start_mark, "throttle: more than %d entries", BT_DEVICE_THROTTLE_MAX);
    if (bt_yaml_check_keys(r, e, "throttle entry", "key", throttle_keys, COUNT(throttle_keys),
                           BT_YAML_BAD_KEY_IN_CONTEXT) < 0)
      return -1;
    bt_throttle *t = &d->throttle[d->n_throttle];
    yaml_node_t *v = bt_yaml_lookup(r, e, "after_iteration");
    if (!v)
      return bt_yaml_at(
          r, e->start_mark,
          "throttle entry: missing 'after_iteration' (the first iteration it applies to)");
    double x;
    if (number(r, v, "throttle.after_iteration", 0, 0, "an iteration number", &x) < 0)
      return -1;
    if (x != floor(x) || x > 1e15)
      return bt_yaml_at(r, v->start_mark,
                        "throttle.after_iteration: expected a whole iteration number");
    t->after_iteration = (long)x;
    if (t->after_iteration <= prev)
      return bt_yaml_at(
          r, v->start_mark,
          "throttle.after_iteration: %ld does not come after the previous entry's %ld; "
          "list the entries in increasing order",
          t->after_iteration, prev);
    prev = t->after_iteration;
    double all = 1.0;
    yaml_node_t *a = bt_yaml_lookup(r, e, "all");
    if (a && number(r, a, "throttle.all", 0, 1, "a slow-down factor", &all) < 0)
      return -1;
    int any = a != NULL;
    for (int c = 0; c < BT_OP_CLASS_COUNT; c++) {
      t->factor[c] = all;
      yaml_node_t *f = bt_yaml_lookup(r, e, class_names[c]);
      if (!f)
        continue;
      char what[48];
      snprintf(what, sizeof what, "throttle.%s", class_names[c]);
      double k;
      if (number(r, f, what, 0, 1, "a slow-down factor: 2 = half speed", &k) < 0)
        return -1;
      t->factor[c] = all * k;
      any = 1;
    }
    if (!any)
      return bt_yaml_at(
          r, e->start_mark,
          "throttle entry: give at least one factor (conv, dwconv, dense, elementwise, "
          "pool_norm or all)");
    d->n_throttle++;
  }
  return 0;
}

static const char *const top_keys[] = {"name",   "description", "kind",    "compute",
                                       "memory", "link",        "throttle"};

/* Fills the bt_device `dev` from the document root (a bt_yaml_root_fn). */
static int load_root(const bt_yaml_reader *r, const yaml_node_t *root, void *dev) {
  bt_device *d = dev;
  char got[96];
  if (!root || bt_yaml_is_null(root))
    return bt_err_set(r->err,
                      "%.200s: empty device profile; it needs name, kind, compute, memory and "
                      "link (see docs/devices.md)",
                      r->name);
  if (root->type != YAML_MAPPING_NODE) {
    bt_yaml_describe(root, got, sizeof got);
    return bt_yaml_at(r, root->start_mark,
                      "expected a mapping with keys name, kind, compute, ...; got %s", got);
  }
  if (bt_yaml_check_keys(r, root, "device profile", "key", top_keys, COUNT(top_keys),
                         BT_YAML_BAD_KEY_IN_CONTEXT) < 0)
    return -1;
  static const char *const required[] = {"name", "kind", "compute", "memory", "link"};
  for (int i = 0; i < COUNT(required); i++)
    if (!bt_yaml_lookup(r, root, required[i]))
      return bt_yaml_at(r, root->start_mark, "device profile: missing '%s' (see docs/devices.md)",
                        required[i]);
  if (string(r, bt_yaml_lookup(r, root, "name"), "name", d->name, sizeof d->name) < 0)
    return -1;
  if (strspn(d->name, "abcdefghijklmnopqrstuvwxyz0123456789-_.") != strlen(d->name) ||
      d->name[0] == '.')
    return bt_yaml_at(r, bt_yaml_lookup(r, root, "name")->start_mark,
                      "name: '%.*s%s' may hold only lower-case letters, digits, '-', '_' and '.'",
                      BT_YAML_SHOW(d->name));
  yaml_node_t *desc = bt_yaml_lookup(r, root, "description");
  if (desc && string(r, desc, "description", d->description, sizeof d->description) < 0)
    return -1;
  yaml_node_t *kind = bt_yaml_lookup(r, root, "kind");
  if (kind->type != YAML_SCALAR_NODE ||
      (strcmp(bt_yaml_text(kind), "gpu") != 0 && strcmp(bt_yaml_text(kind), "cpu") != 0)) {
    bt_yaml_describe(kind, got, sizeof got);
    return bt_yaml_at(r, kind->start_mark, "kind: expected gpu or cpu, got %s", got);
  }
  d->kind = strcmp(bt_yaml_text(kind), "gpu") == 0 ? BT_DEVICE_GPU : BT_DEVICE_CPU;
  if (parse_section(r, bt_yaml_lookup(r, root, "compute"), "compute", compute_keys,
                    COUNT(compute_keys), d) < 0 ||
      parse_section(r, bt_yaml_lookup(r, root, "memory"), "memory", memory_keys, COUNT(memory_keys),
                    d) < 0 ||
      parse_section(r, bt_yaml_lookup(r, root, "link"), "link", link_keys, COUNT(link_keys), d) < 0)
    return -1;
  yaml_node_t *thr = bt_yaml_lookup(r, root, "throttle");
  if (thr && parse_throttle(r, thr, d) < 0)
    return -1;
  return 0;
}

int bt_device_load_string(const char *yaml, const char *name_for_errors, bt_device *d,
                          bt_err *err) {
  memset(d, 0, sizeof *d);
  bt_yaml_reader r = {
      .doc = NULL, .name = name_for_errors ? name_for_errors : "<string>", .err = err};
  if (!yaml)
    return bt_err_set(err, "%.200s: no YAML text", r.name);
  int rc = bt_yaml_load(&r, yaml, load_root, d, "a profile file holds one device");
  if (rc < 0)
    memset(d, 0, sizeof *d);
  return rc;
}

int bt_device_load(const char *path, bt_device *d, bt_err *err) {
  memset(d, 0, sizeof *d);
  FILE *f = fopen(path, "rb");
  if (!f)
    return bt_err_set(err, "cannot open device profile '%.300s': %s", path, strerror(errno));
  char *buf = malloc(PROFILE_MAX + 1);
  if (!buf) {
    fclose(f);
    return bt_err_set(err, "%.300s: out of memory", path);
  }
  size_t n = fread(buf, 1, PROFILE_MAX + 1, f);
  int bad = ferror(f);
  fclose(f);
  int rc;
  if (bad) {
    rc = bt_err_set(err, "cannot read device profile '%.300s'; is it a regular file?", path);
  } else if (n > PROFILE_MAX) {
    rc = bt_err_set(err, "%.300s: larger than %zu bytes; is it really a device profile?", path,
                    PROFILE_MAX);
  } else {
    buf[n] = '\0';
    const char *nul = memchr(buf, '\0', n);
    if (nul) {
      bt_yaml_reader r = {.name = path, .err = err};
      rc = bt_yaml_at(&r, bt_yaml_offset_mark(buf, (size_t)(nul - buf)),
                      "NUL byte in the file; a device profile is text (UTF-8)");
    } else {
      rc = bt_device_load_string(buf, path, d, err);
    }
  }
  free(buf);
  return rc;
}

/* ---- finding profiles --------------------------------------------------- */

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

void bt_device_names_free(bt_device_names *n) {
  for (int i = 0; i < n->count; i++)
    free(n->names[i]);
  free(n->names);
  n->names = NULL;
  n->count = 0;
}

int bt_device_list(const char *data_dir, bt_device_names *out, bt_err *err) {
  out->names = NULL;
  out->count = 0;
  char dir[1024];
  int len = snprintf(dir, sizeof dir, "%s/devices", data_dir ? data_dir : ".");
  if (len < 0 || (size_t)len >= sizeof dir)
    return bt_err_set(err, "data directory path too long");
  DIR *dh = opendir(dir);
  if (!dh)
    return bt_err_set(err,
                      "cannot list device profiles in '%.300s': %s; set BATON_DATA to the "
                      "directory holding devices/",
                      dir, strerror(errno));
  int cap = 0;
  struct dirent *e;
  while ((e = readdir(dh)) != NULL) {
    size_t l = strlen(e->d_name);
    if (e->d_name[0] == '.' || l <= 5 || strcmp(e->d_name + l - 5, ".yaml") != 0)
      continue;
    if (out->count == cap) {
      cap = cap ? 2 * cap : 16;
      char **g = realloc(out->names, (size_t)cap * sizeof *g);
      if (!g)
        goto oom;
      out->names = g;
    }
    char *name = strdup(e->d_name);
    if (!name)
      goto oom;
    name[l - 5] = '\0';
    out->names[out->count++] = name;
  }
  closedir(dh);
  if (out->count > 1)
    qsort(out->names, (size_t)out->count, sizeof *out->names, cmp_str);
  return 0;
oom:
  closedir(dh);
  bt_device_names_free(out);
  return bt_err_set(err, "out of memory listing '%.300s'", dir);
}

/* "jetson-nano, rpi4, ..." (or a note that there are none). */
static void names_text(const char *data_dir, char *buf, size_t n) {
  bt_device_names names;
  bt_err e;
  buf[0] = '\0';
  if (bt_device_list(data_dir, &names, &e) < 0 || names.count == 0) {
    snprintf(buf, n, "none found in %.300s/devices", data_dir);
    return;
  }
  for (int i = 0; i < names.count; i++)
    snprintf(buf + strlen(buf), n - strlen(buf), "%s%s", i ? ", " : "", names.names[i]);
  bt_device_names_free(&names);
}

int bt_device_find(const char *name, const char *data_dir, bt_device *d, bt_err *err) {
  memset(d, 0, sizeof *d);
  char known[600];
  /* A name is a file name, never a path: refuse '/' and anything odd so a
   * config value cannot reach outside devices/. */
  if (!name || !*name || name[0] == '.' ||
      strspn(name, "abcdefghijklmnopqrstuvwxyz0123456789-_.") != strlen(name) ||
      strlen(name) >= BT_DEVICE_NAME_MAX) {
    names_text(data_dir, known, sizeof known);
    return bt_err_set(err, "device name '%.*s%s' is not a profile name; known devices: %s",
                      BT_YAML_SHOW(name ? name : ""), known);
  }
  char path[1200];
  snprintf(path, sizeof path, "%s/devices/%s.yaml", data_dir, name);
  FILE *f = fopen(path, "rb");
  if (!f) {
    names_text(data_dir, known, sizeof known);
    return bt_err_set(err, "unknown device '%s' (no %.300s); known devices: %s", name, path, known);
  }
  fclose(f);
  if (bt_device_load(path, d, err) < 0)
    return -1;
  if (strcmp(d->name, name) != 0) {
    char got[BT_DEVICE_NAME_MAX];
    snprintf(got, sizeof got, "%s", d->name);
    memset(d, 0, sizeof *d);
    return bt_err_set(err, "%.300s: the profile is named '%s'; its file must be %s.yaml", path, got,
                      got);
  }
  return 0;
}

/* ---- the model ------------------------------------------------------------ */

int bt_host_as_device(const bt_host_rates *h, bt_device *out, bt_err *err) {
  memset(out, 0, sizeof *out);
  if (!(h->sgemm_gflops > 0) || !(h->mem_gbs > 0) || !isfinite(h->sgemm_gflops) ||
      !isfinite(h->mem_gbs))
    return bt_err_set(err,
                      "host calibration needs sgemm_gflops > 0 and mem_gbs > 0 (got %g and %g)",
                      h->sgemm_gflops, h->mem_gbs);
  const double *opt[] = {&h->conv_gflops, &h->dense_gflops,  &h->dwconv_gflops,  &h->pool_norm_gbs,
                         &h->cache_kib,   &h->cache_speedup, &h->half_util_flops};
  for (size_t i = 0; i < sizeof opt / sizeof *opt; i++)
    if (!(*opt[i] >= 0) || !isfinite(*opt[i]))
      return bt_err_set(err, "host calibration: rates must be finite and >= 0");
  snprintf(out->name, sizeof out->name, "host");
  snprintf(out->description, sizeof out->description, "the machine running the emulation");
  out->kind = BT_DEVICE_CPU;
  out->rate[BT_OP_CONV] = h->conv_gflops > 0 ? h->conv_gflops : h->sgemm_gflops;
  out->rate[BT_OP_DENSE] = h->dense_gflops > 0 ? h->dense_gflops : h->sgemm_gflops;
  /* A depthwise conv is a strided dot product per channel, not a GEMM; an
   * eighth of the GEMM rate is the usual gap on CPUs. Only the ratio to the
   * device matters, and the roofline makes it bandwidth-bound anyway. */
  out->rate[BT_OP_DWCONV] = h->dwconv_gflops > 0 ? h->dwconv_gflops : h->sgemm_gflops / 8;
  out->rate[BT_OP_ELEMENTWISE] = h->mem_gbs;
  out->rate[BT_OP_POOL_NORM] = h->pool_norm_gbs > 0 ? h->pool_norm_gbs : h->mem_gbs;
  out->half_util_flops = h->half_util_flops;
  out->capacity_mib = 1;
  out->bandwidth_gbs = h->mem_gbs;
  out->cache_kib = h->cache_kib;
  out->cache_speedup = h->cache_speedup >= 1 ? h->cache_speedup : 1;
  out->link_bandwidth_mbps = 1;
  return 0;
}

double bt_device_util(const bt_device *d, double flops) {
  if (!(d->half_util_flops > 0))
    return 1.0;
  if (!(flops > 0))
    return 0.0;
  return flops / (flops + d->half_util_flops);
}

double bt_device_throttle(const bt_device *d, bt_op_class c, long iteration) {
  double f = 1.0;
  for (int i = 0; i < d->n_throttle && d->throttle[i].after_iteration <= iteration; i++)
    f = d->throttle[i].factor[c];
  return f;
}

/* Bandwidth in bytes/s of a stream of `bytes` bytes at base rate `gbs`:
 * faster when the whole working set sits in the last-level cache. */
static double stream_bw(const bt_device *d, double gbs, double bytes) {
  double speed = bytes <= d->cache_kib * 1024.0 && d->cache_speedup > 1 ? d->cache_speedup : 1.0;
  return gbs * 1e9 * speed;
}

double bt_device_op_busy(const bt_device *d, const bt_device_op *op, long iteration) {
  if ((unsigned)op->cls >= BT_OP_CLASS_COUNT)
    return 0.0;
  double bytes = op->bytes > 0 ? op->bytes : 0.0, flops = op->flops > 0 ? op->flops : 0.0;
  double t;
  if (bt_op_class_compute_bound(op->cls)) {
    /* Roofline: a GEMM with a tiny batch dimension (dense layer, batch 1)
     * streams its weights and is limited by bandwidth, not FLOPs. Work
     * (w + half_util) / rate: small ops leave cores idle. */
    double compute = flops > 0 ? (flops + d->half_util_flops) / (d->rate[op->cls] * 1e9) : 0.0;
    double memory = bytes / stream_bw(d, d->rate[BT_OP_ELEMENTWISE], bytes);
    t = compute > memory ? compute : memory;
  } else {
    t = bytes / stream_bw(d, d->rate[op->cls], bytes);
  }
  return t * bt_device_throttle(d, op->cls, iteration);
}

double bt_device_op_analytic(const bt_device *d, const bt_device_op *op, long iteration) {
  return d->op_overhead_us * 1e-6 + bt_device_op_busy(d, op, iteration);
}

double bt_device_op_mapped(const bt_device *d, const bt_device *host, const bt_device_op *op,
                           double host_seconds, long iteration) {
  double td = bt_device_op_busy(d, op, iteration), th = bt_device_op_busy(host, op, 0);
  /* Memory-bound ops keep their analytic time, as in bt_device_layer_mapped. */
  double busy = bt_op_class_compute_bound(op->cls) && th > 0 && host_seconds > 0
                    ? host_seconds * td / th
                    : td;
  return d->op_overhead_us * 1e-6 + busy;
}

/* ---- layers --------------------------------------------------------------- */

typedef struct op_list {
  bt_device_op *ops;
  int n, max;
} op_list;

static void push(op_list *o, bt_op_class c, double flops, double bytes) {
  if (o->n < o->max)
    o->ops[o->n] = (bt_device_op){c, flops, bytes};
  o->n++;
}

static bt_op_class layer_class(bt_layer_kind k) {
  switch (k) {
  case BT_CONV2D:
    return BT_OP_CONV;
  case BT_DWCONV2D:
    return BT_OP_DWCONV;
  case BT_DENSE:
    return BT_OP_DENSE;
  case BT_MAXPOOL:
  case BT_AVGPOOL:
  case BT_GLOBAL_AVGPOOL:
  case BT_BATCHNORM:
    return BT_OP_POOL_NORM;
  default:
    return BT_OP_ELEMENTWISE;
  }
}

/* The kinds whose backward without the input gradient is a weight gradient
 * alone; for the others it is the whole backward. */
static int weight_gradient_only(const bt_layer *l) {
  return l->kind == BT_CONV2D || l->kind == BT_DWCONV2D || l->kind == BT_DENSE;
}

bt_pass bt_pass_backward_of(const bt_layer *l, int index) {
  return index == 0 && weight_gradient_only(l) ? BT_PASS_BWD_NODIN : BT_PASS_BWD;
}

/* Bytes read and written, following what the kernels in layers.c touch:
 * forward reads the input (and weights) and writes the output and aux;
 * backward reads the output gradient and what forward saved and writes the
 * input gradient (and adds into the weight gradient). */
static void layer_ops(const bt_layer *l, int batch, bt_pass pass, op_list *o) {
  const double b = batch > 0 ? batch : 0, f = sizeof(float);
  if (pass == BT_PASS_BWD_NODIN && !weight_gradient_only(l))
    pass = BT_PASS_BWD;
  const double in = (double)bt_shape_elems(l->in) * b * f,
               out = (double)bt_shape_elems(l->out) * b * f;
  const double aux = (double)bt_layer_aux_floats(l, batch) * f, par = (double)l->n_params * f;
  const int fwd = pass == BT_PASS_FWD;
  const double flops = b * (fwd ? bt_layer_flops_fwd(l) : bt_layer_flops_bwd(l));
  switch (l->kind) {
  case BT_RESIDUAL: {
    if (fwd) {
      for (int j = 0; j < l->n_body + l->n_short; j++)
        layer_ops(&l->sub[j], batch, pass, o);
      push(o, BT_OP_ELEMENTWISE, b * (double)bt_shape_elems(l->out), 3 * out); /* y = body + sc */
      if (l->post_relu)
        push(o, BT_OP_ELEMENTWISE, b * (double)bt_shape_elems(l->out), 2 * out);
    } else {
      if (l->post_relu)
        push(o, BT_OP_ELEMENTWISE, b * (double)bt_shape_elems(l->out), 3 * out);
      for (int j = l->n_body + l->n_short - 1; j >= 0; j--)
        layer_ops(&l->sub[j], batch, pass, o);
      /* The input gradient is the sum of the body's and the shortcut's. */
      push(o, BT_OP_ELEMENTWISE, b * (double)bt_shape_elems(l->in), 3 * in);
    }
    return;
  }
  case BT_CONV2D:
  case BT_DWCONV2D:
  case BT_DENSE:
    if (pass == BT_PASS_BWD_NODIN) /* the weight gradient: as many FLOPs as forward */
      push(o, layer_class(l->kind), b * bt_layer_flops_fwd(l), in + out + 2 * par);
    else
      push(o, layer_class(l->kind), flops, fwd ? in + out + par : 2 * in + out + 2 * par);
    return;
  case BT_BATCHNORM:
    /* Forward: a statistics pass and a normalising pass over the input;
     * backward: two reductions then the input gradient. */
    push(o, BT_OP_POOL_NORM, flops, fwd ? 2 * in + out + aux : 3 * out + in + aux);
    return;
  default:
    push(o, layer_class(l->kind), flops, fwd ? in + out + aux : in + out + aux + out);
    return;
  }
}

int bt_device_layer_ops(const bt_layer *l, int batch, bt_pass pass, bt_device_op *ops, int max) {
  op_list o = {ops, 0, max > 0 ? max : 0};
  layer_ops(l, batch, pass, &o);
  return o.n;
}

bt_layer_time bt_device_layer_analytic(const bt_device *d, const bt_layer *l, int batch,
                                       bt_pass pass, long iteration) {
  bt_device_op ops[BT_DEVICE_LAYER_OPS_MAX];
  int n = bt_device_layer_ops(l, batch, pass, ops, BT_DEVICE_LAYER_OPS_MAX);
  bt_layer_time t = {0};
  t.n_ops = n;
  t.overhead = n * d->op_overhead_us * 1e-6;
  t.total = t.overhead;
  for (int i = 0; i < n && i < BT_DEVICE_LAYER_OPS_MAX; i++) {
    double s = bt_device_op_busy(d, &ops[i], iteration);
    t.by_class[ops[i].cls] += s;
    t.total += s;
  }
  return t;
}

bt_layer_time bt_device_layer_mapped(const bt_device *d, const bt_device *host, const bt_layer *l,
                                     int batch, bt_pass pass, double host_seconds, long iteration) {
  bt_layer_time t = bt_device_layer_analytic(d, l, batch, pass, iteration);
  bt_layer_time h = bt_device_layer_analytic(host, l, batch, pass, 0);
  double busy_d = t.total - t.overhead, busy_h = h.total - h.overhead;
  if (!(busy_h > 0) || !(host_seconds > 0))
    return t;
  /* A layer the host model finds memory-bound (ReLU, pooling, batch-norm,
   * the add of a residual) keeps its analytic device time: its host time
   * says more about the host's caches and its neighbours' memory traffic
   * than about the device, whose bandwidth model already decides it. */
  double h_compute = 0;
  for (int c = 0; c < BT_OP_CLASS_COUNT; c++)
    if (bt_op_class_compute_bound((bt_op_class)c))
      h_compute += h.by_class[c];
  if (h_compute < 0.5 * busy_h)
    return t;
  double scale = host_seconds / busy_h; /* measured over modelled host time */
  for (int c = 0; c < BT_OP_CLASS_COUNT; c++)
    t.by_class[c] *= scale;
  t.total = t.overhead + busy_d * scale;
  return t;
}

/* ---- memory accounting ------------------------------------------------------ */

double bt_mem_need_total(const bt_mem_need *n) {
  return n->params + n->grads + n->optim + n->state + n->act_per_micro * n->in_flight + n->buffers;
}

int bt_mem_need_stage(const bt_model *m, int first, int last, int micro_batch, int in_flight,
                      bt_mem_need *out, bt_err *err) {
  memset(out, 0, sizeof *out);
  if (first < 0 || last > m->n_layers || first >= last)
    return bt_err_set(err, "stage [%d, %d) is not a layer range of model '%s' (%d layers)", first,
                      last, m->name, m->n_layers);
  if (micro_batch < 1 || in_flight < 1)
    return bt_err_set(err, "micro-batch size (%d) and micro-batches in flight (%d) must be >= 1",
                      micro_batch, in_flight);
  const bt_layer *L = m->layers;
  const double f = sizeof(float);
  size_t p0 = L[first].param_off, p1 = last < m->n_layers ? L[last].param_off : m->n_params;
  size_t s0 = L[first].state_off, s1 = last < m->n_layers ? L[last].state_off : m->n_state;
  /* The same layout as bt_stage_init (64-byte aligned tensors in a slot),
   * so the estimate and the allocation agree. */
  size_t slot = 0, grad = bt_shape_elems(L[first].in), ws = 0;
  for (int i = first; i < last; i++) {
    slot += (bt_shape_elems(L[i].out) * (size_t)micro_batch + 15) & ~(size_t)15;
    slot += (bt_layer_aux_floats(&L[i], micro_batch) + 15) & ~(size_t)15;
    size_t e = bt_shape_elems(L[i].out), w = bt_layer_ws_floats(&L[i], micro_batch);
    grad = e > grad ? e : grad;
    ws = w > ws ? w : ws;
  }
  out->params = (double)(p1 - p0) * f;
  out->grads = out->params;
  out->optim = out->params; /* SGD momentum: one buffer like the weights */
  out->state = (double)(s1 - s0) * f;
  out->act_per_micro = (double)slot * f;
  out->in_flight = in_flight;
  /* Ping-pong activation gradients and the scratch, as in the stage, plus a
   * pipeline stage's receive buffer (input or its gradient) and send buffer
   * (output or its gradient). */
  double comm =
      (double)(bt_shape_elems(L[first].in) + bt_shape_elems(L[last - 1].out)) * micro_batch * f;
  out->buffers = 2.0 * (double)grad * micro_batch * f + (double)ws * f + comm;
  return 0;
}

static const char *human(double bytes, char *buf, size_t n) {
  const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int i = 0;
  while (bytes >= 1024.0 && i < 4)
    bytes /= 1024.0, i++;
  snprintf(buf, n, i ? "%.1f %s" : "%.0f %s", bytes, u[i]);
  return buf;
}

int bt_device_check_memory(const bt_device *d, const bt_mem_need *need, double memory_scale,
                           bt_err *err) {
  if (!(memory_scale > 0) || !isfinite(memory_scale))
    return bt_err_set(err, "memory_scale must be a finite number > 0, got %g", memory_scale);
  double cap = d->capacity_mib * 1024.0 * 1024.0 * memory_scale, total = bt_mem_need_total(need);
  if (total <= cap)
    return 0;
  char a[32], b[32], c[32], e[32], g[32];
  return bt_err_set(err,
                    "device %s: the stage needs %s (%.0f bytes: weights+grads+momentum+state %s, "
                    "activations %s x %d micro-batches in flight, buffers %s) but the device has "
                    "%s (%.0f MiB x memory_scale %g); use more stages, fewer micro-batches in "
                    "flight or a smaller micro-batch",
                    d->name, human(total, a, sizeof a), total,
                    human(need->params + need->grads + need->optim + need->state, b, sizeof b),
                    human(need->act_per_micro, c, sizeof c), need->in_flight,
                    human(need->buffers, e, sizeof e), human(cap, g, sizeof g), d->capacity_mib,
                    memory_scale);
}
