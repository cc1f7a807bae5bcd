/* config: the experiment configuration; see include/baton/config.h.
 *
 * Everything is driven by the `keys` table below: defaults (each default is
 * text parsed by the same code as --set, so a default can never bypass a
 * range), YAML loading, --set, validation, help and the YAML dump all walk
 * it. Adding a key is one row there plus its field in bt_config.
 *
 * YAML is read with libyaml's document API: the whole (small) file becomes a
 * node tree whose nodes carry line/column marks for error messages. Loads and
 * --set work on a copy of the configuration and commit it only on success,
 * so a failed call leaves the caller's struct as it was. */
#include "baton/config.h"

#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

typedef enum {
  K_INT,    /* int field */
  K_I64,    /* int64_t or uint64_t field (range keeps it within 0..INT64_MAX) */
  K_DOUBLE, /* double field, finite */
  K_BOOL,   /* bool field */
  K_STRING, /* char array; imin = minimum length */
  K_ENUM,   /* char array holding one of `choices` */
  K_SHAPE,  /* char array "HxWxC" plus three consecutive ints at off_n */
  K_LIST,   /* char[max_items][size] plus an int count at off_n */
} key_kind;

typedef struct key {
  const char *name; /* dotted path; sections are the prefixes before a '.' */
  key_kind kind;
  size_t off;                 /* offsetof the field */
  size_t size;                /* arrays: bytes (lists: bytes per entry) */
  size_t off_n;               /* lists: offset of the count; shapes: offset of the ints */
  size_t max_items;           /* lists: number of entries */
  const char *def;            /* default, as --set would write it */
  long long imin, imax;       /* integers; shapes: per dimension */
  double dmin, dmax;          /* doubles */
  bool dmin_open, dmax_open;  /* doubles: bound excluded */
  const char *const *choices; /* enums: NULL-terminated */
  const char *doc;
} key;

#define FIELD(f) offsetof(bt_config, f)
#define FSIZE(f) sizeof(((bt_config *)0)->f)
/* Unevaluated operand for _Generic: a row whose field has the wrong C type
 * for its kind fails to compile instead of corrupting memory. */
#define FEXPR(f) (((bt_config *)0)->f)

#define ROW_INT(n, f, d, lo, hi, doc_)                                                             \
  {                                                                                                \
    .name = n,                                                                                     \
    .kind = _Generic(FEXPR(f), int                                                                 \
                     : K_INT, int64_t                                                              \
                     : K_I64, uint64_t                                                             \
                     : K_I64),                                                                     \
    .off = FIELD(f), .size = FSIZE(f), .def = d, .imin = lo, .imax = hi, .doc = doc_               \
  }
#define ROW_DOUBLE(n, f, d, lo, lo_open, hi, hi_open, doc_)                                        \
  {                                                                                                \
    .name = n,                                                                                     \
    .kind = _Generic(FEXPR(f), double                                                              \
                     : K_DOUBLE),                                                                  \
    .off = FIELD(f), .size = FSIZE(f), .def = d, .dmin = lo, .dmax = hi, .dmin_open = lo_open,     \
    .dmax_open = hi_open, .doc = doc_                                                              \
  }
#define ROW_BOOL(n, f, d, doc_)                                                                    \
  {                                                                                                \
    .name = n,                                                                                     \
    .kind = _Generic(FEXPR(f), bool                                                                \
                     : K_BOOL),                                                                    \
    .off = FIELD(f), .size = FSIZE(f), .def = d, .doc = doc_                                       \
  }
#define ROW_STRING(n, f, d, minlen, doc_)                                                          \
  {                                                                                                \
    .name = n,                                                                                     \
    .kind = _Generic(&FEXPR(f), char(*)[FSIZE(f)]                                                  \
                     : K_STRING),                                                                  \
    .off = FIELD(f), .size = FSIZE(f), .def = d, .imin = minlen, .doc = doc_                       \
  }
#define ROW_ENUM(n, f, d, ch, doc_)                                                                \
  {                                                                                                \
    .name = n,                                                                                     \
    .kind = _Generic(&FEXPR(f), char(*)[FSIZE(f)]                                                  \
                     : K_ENUM),                                                                    \
    .off = FIELD(f), .size = FSIZE(f), .def = d, .choices = ch, .doc = doc_                        \
  }
#define ROW_SHAPE(n, f, ints, d, lo, hi, doc_)                                                     \
  {                                                                                                \
    .name = n,                                                                                     \
    .kind = _Generic(&FEXPR(f), char(*)[FSIZE(f)]                                                  \
                     : K_SHAPE),                                                                   \
    .off = FIELD(f), .size = FSIZE(f),                                                             \
    .off_n = _Generic(FEXPR(ints), int                                                             \
                      : FIELD(ints)),                                                              \
    .def = d, .imin = lo, .imax = hi, .doc = doc_                                                  \
  }
#define ROW_LIST(n, f, count, d, doc_)                                                             \
  {                                                                                                \
    .name = n,                                                                                     \
    .kind = _Generic(&FEXPR(f)[0], char(*)[FSIZE(f[0])]                                            \
                     : K_LIST),                                                                    \
    .off = FIELD(f), .size = FSIZE(f[0]),                                                          \
    .off_n = _Generic(FEXPR(count), int                                                            \
                      : FIELD(count)),                                                             \
    .max_items = FSIZE(f) / FSIZE(f[0]), .def = d, .doc = doc_                                     \
  }

/* The shape key stores H, W, C as an int[3] starting at data_h. */
_Static_assert(FIELD(data_w) == FIELD(data_h) + sizeof(int) &&
                   FIELD(data_c) == FIELD(data_h) + 2 * sizeof(int),
               "data_h, data_w, data_c must be consecutive ints");

static const char *const data_names[] = {"fashion-mnist", "synthetic", NULL};
static const char *const optimizer_names[] = {"sgd", NULL};
static const char *const blis_archs[] = {"auto", "skx", "haswell", "sandybridge", "generic", NULL};
static const char *const progress_modes[] = {"auto", "always", "never", NULL};
static const char *const schedules[] = {"gpipe", "1f1b", NULL};
static const char *const partitions[] = {"predicted", "even",   "params",   "flops",
                                         "profiled",  "oracle", "explicit", NULL};
static const char *const device_orders[] = {"plan", "subset", "experiment", NULL};
static const char *const clocks[] = {"virtual", "wall", "none", NULL};
static const char *const plan_bounds[] = {"auto", "scalar", "pareto", "stair", NULL};

/* Every key, in the order help and dumps show them. */
static const key keys[] = {
    ROW_STRING("model", model, "lenet5", 1,
               "Model-zoo name (e.g. lenet5) or path to a model file."),
    ROW_ENUM("data.name", data_name, "fashion-mnist", data_names,
             "Dataset: fashion-mnist (files in data.path) or synthetic (random, from seed)."),
    ROW_STRING("data.path", data_path, "/usr/share/datasets/fashion-mnist", 0,
               "Directory holding the fashion-mnist files."),
    ROW_BOOL("data.normalize", data_normalize, "true",
             "Scale inputs to mean 0, std 1 using training-set statistics."),
    ROW_SHAPE("data.shape", data_shape, data_h, "28x28x1", 1, 4096,
              "Input height x width x channels (synthetic data; fashion-mnist is 28x28x1)."),
    ROW_INT("data.classes", data_classes, "10", 2, 1000,
            "Number of classes (synthetic data; fashion-mnist has 10)."),
    ROW_INT("data.train_samples", data_train_samples, "60000", 1, 10000000,
            "Training samples to generate (synthetic data; fashion-mnist has 60000)."),
    ROW_INT("data.test_samples", data_test_samples, "10000", 1, 10000000,
            "Test samples to generate (synthetic data; fashion-mnist has 10000)."),
    ROW_INT("batch_size", batch_size, "64", 1, 65536, "Samples per optimizer step."),
    ROW_INT("micro_batches", micro_batches, "1", 1, 65536,
            "Micro-batches each batch is split into (pipelining); must divide batch_size."),
    ROW_ENUM("optimizer.name", optimizer_name, "sgd", optimizer_names, "Optimizer."),
    ROW_DOUBLE("optimizer.lr", optimizer_lr, "0.01", 0, true, 10, false, "Learning rate."),
    ROW_DOUBLE("optimizer.momentum", optimizer_momentum, "0.9", 0, false, 1, true,
               "Momentum factor; 0 = plain SGD."),
    ROW_DOUBLE("optimizer.weight_decay", optimizer_weight_decay, "0", 0, false, 1, true,
               "L2 penalty: weight_decay * w is added to each gradient."),
    ROW_BOOL("optimizer.nesterov", optimizer_nesterov, "false",
             "Nesterov momentum (needs optimizer.momentum > 0)."),
    ROW_INT("epochs", epochs, "2", 0, 100000, "Passes over the training set (see iterations)."),
    ROW_INT("iterations", iterations, "0", 0, 1000000000000LL,
            "0 = run `epochs` epochs; > 0 = stop after at most this many optimizer steps. "
            "epochs and iterations cannot both be 0."),
    ROW_INT("seed", seed, "1", 0, INT64_MAX,
            "Root of every random stream (initial weights, shuffling, synthetic data)."),
    ROW_STRING("output", output, "", 0, "Run file to write; empty = write none."),
    ROW_INT("threads", threads, "1", 1, 256, "BLIS threads."),
    ROW_ENUM("blis_arch", blis_arch, "auto", blis_archs, "BLIS kernel set; auto = detect the CPU."),
    ROW_ENUM("progress", progress, "auto", progress_modes,
             "Progress display; auto = only when the output is a terminal."),
    ROW_INT("eval_every", eval_every, "1", 0, 100000,
            "Evaluate on the test set every N epochs; 0 = only at the end."),
    ROW_LIST("devices", devices, n_devices, "",
             "Device names, e.g. [jetson-nano, rpi4]; empty = none."),
    ROW_ENUM("schedule", schedule, "1f1b", schedules,
             "Pipeline schedule: gpipe (fill-drain) or 1f1b (PipeDream-Flush)."),
    ROW_ENUM("partition", partition, "predicted", partitions,
             "Stage cuts: predicted (latency predictor + exact search, AccEPT), even (equal "
             "layer counts), params (balanced parameters), flops (FLOPs by device peak), "
             "profiled (every layer timed on every device first, PipeDream), oracle (true "
             "device times), explicit (see cuts). See docs/partition.md."),
    ROW_LIST("cuts", cuts, n_cuts, "",
             "With partition explicit: first layer (1-based) of stages 2..N, increasing."),
    ROW_ENUM("device_order", device_order, "plan", device_orders,
             "With a planned partition: plan (the partitioner orders the devices, each runs "
             "one stage), subset (it also picks which devices run: the others wait idle, and "
             "a re-plan may bring them in; the first device, the run's lead, always runs a "
             "stage) or experiment (stages follow the order of devices)."),
    ROW_ENUM("plan.bounds", plan_bounds, "auto", plan_bounds,
             "Bounds of the exact plan search: auto, scalar, pareto or stair (slower tables, "
             "fewer nodes: proves 32 layers on 16 devices optimal). See docs/partition.md."),
    ROW_INT("plan.max_nodes", plan_max_nodes, "0", -1, 1000000000000LL,
            "Node budget of the exact plan search: 0 = the default (1000000), -1 = unlimited; "
            "a plan from a search it stopped is the best found, not proven optimal (baton "
            "plan marks it *)."),
    ROW_LIST("throttle", throttle, n_throttle, "",
             "Per-rank slowdowns on top of the device profiles: \"RANK:ITERATION:FACTOR\" "
             "(every op class FACTOR times slower from ITERATION on), e.g. [2:20:2]."),
    ROW_INT("replan.every", replan_every, "10", 0, 1000000,
            "With partition predicted or oracle: re-plan from the measured layer times every N "
            "iterations (weights migrate when the plan changes); 0 = never."),
    ROW_DOUBLE("replan.threshold", replan_threshold, "0.05", 0, false, 10, false,
               "Re-cut only when the new plan beats the current one by more than this fraction "
               "of its iteration time, migration cost included."),
    ROW_DOUBLE("replan.caution", replan_caution, "0.1", 0, false, 10, false,
               "With partition predicted: a new plan counts every (device, layer) pair that has "
               "not run yet this fraction slower than the predictor says (its first-check error)."),
    ROW_BOOL("replan.probe", replan_probe, "true",
             "With partition predicted: before a re-plan moves layers onto a device that never "
             "ran them, that device times them (one micro-batch, forward and backward, 3 runs; "
             "the pause is charged to the run's clock) and the plan is weighed again; when the "
             "pause would be small against the plan's gain over the remaining iterations."),
    ROW_ENUM("clock", clock, "virtual", clocks,
             "virtual (emulated device time), wall (sleep to device time), none (real hardware)."),
    ROW_STRING("calibration", calibration, "auto", 1,
               "Host calibration behind the clock: auto (reuse and extend the store in "
               "~/.cache/baton, or $BATON_CALIBRATION), fresh (measure every run), or a store "
               "path (docs/devices.md)."),
    ROW_DOUBLE("links.bandwidth_mbps", links_bandwidth_mbps, "0", 0, false, 1e7, false,
               "Bandwidth of every link in Mbit/s; 0 = each sending device's default link."),
    ROW_DOUBLE("links.latency_ms", links_latency_ms, "-1", -1, false, 1e5, false,
               "Latency of every link in ms; -1 = each sending device's default."),
    ROW_DOUBLE("links.jitter_ms", links_jitter_ms, "0", 0, false, 1e5, false,
               "Standard deviation of the seeded latency jitter, ms."),
    ROW_LIST("links.pairs", link_pairs, n_link_pairs, "",
             "Per directed pair of ranks: \"SRC-DST:MBPS:MS\" bandwidth and latency, e.g. "
             "[0-1:100:5, 1-0:100:5]."),
    ROW_BOOL("links.shared_medium", links_shared_medium, "false",
             "All links share one channel (a Wi-Fi cell): each directed link of the pipeline "
             "gets an equal time share (static, TDMA-like)."),
    ROW_STRING("codec.activations", codec_activations, "none", 1,
               "Codec of the activations sent to the next stage: none, fp16, bf16, q1..q8, "
               "sparse-qK, with -ef and :block=N, :stochastic options (docs/codec.md)."),
    ROW_STRING("codec.gradients", codec_gradients, "none", 1,
               "Codec of the gradients sent to the previous stage (same names; q8-ef adds error "
               "feedback)."),
    ROW_LIST("codec.boundaries", codec_boundaries, n_codec_boundaries, "",
             "Per stage boundary: \"B=ACT/GRAD\" codecs of the boundary after stage B (1-based; "
             "'-' keeps the default), e.g. [1=sparse-q8/q8-ef, 3=q4/-]."),
    ROW_DOUBLE("memory_scale", memory_scale, "1", 0, true, 1e6, false,
               "Multiplies every device's memory capacity (small experiments)."),
};

#define NKEYS (sizeof keys / sizeof keys[0])

/* Echo user text in messages at most this long, so one error stays one
 * readable line. Use as '%.*s%s' with SHOW(s). */
#define SHOW_MAX 60
#define SHOW(s) SHOW_MAX, (s), (strlen(s) > SHOW_MAX ? "..." : "")

/* ---- small helpers ---------------------------------------------------- */

static void *field(bt_config *c, const key *k) { return (char *)c + k->off; }
static const void *cfield(const bt_config *c, const key *k) { return (const char *)c + k->off; }

static int *list_count(bt_config *c, const key *k) { return (int *)(void *)((char *)c + k->off_n); }
static int clist_count(const bt_config *c, const key *k) {
  int n;
  memcpy(&n, (const char *)c + k->off_n, sizeof n);
  return n;
}
static char *list_entry(bt_config *c, const key *k, size_t i) {
  return (char *)c + k->off + i * k->size;
}
static const char *clist_entry(const bt_config *c, const key *k, size_t i) {
  return (const char *)c + k->off + i * k->size;
}

static long long get_int(const bt_config *c, const key *k) {
  if (k->kind == K_INT) {
    int v;
    memcpy(&v, cfield(c, k), sizeof v);
    return v;
  }
  int64_t v;
  memcpy(&v, cfield(c, k), sizeof v);
  return v;
}

static void put_int(bt_config *c, const key *k, long long v) {
  if (k->kind == K_INT) {
    int x = (int)v;
    memcpy(field(c, k), &x, sizeof x);
  } else {
    int64_t x = (int64_t)v;
    memcpy(field(c, k), &x, sizeof x);
  }
}

static double get_double(const bt_config *c, const key *k) {
  double v;
  memcpy(&v, cfield(c, k), sizeof v);
  return v;
}

static bool get_bool(const bt_config *c, const key *k) {
  bool v;
  memcpy(&v, cfield(c, k), sizeof v);
  return v;
}

/* ASCII-only, locale-independent case-insensitive equality. */
static bool eq_nocase(const char *a, const char *b) {
  for (; *a && *b; a++, b++)
    if (tolower((unsigned char)*a) != tolower((unsigned char)*b))
      return false;
  return *a == *b;
}

/* --set values come straight from argv; YAML output must be valid UTF-8. */
static bool valid_utf8(const char *s) {
  const unsigned char *p = (const unsigned char *)s;
  while (*p) {
    unsigned char b = *p;
    int extra;
    unsigned char lo = 0x80, hi = 0xbf;
    if (b < 0x80)
      extra = 0;
    else if (b >= 0xc2 && b <= 0xdf)
      extra = 1;
    else if (b >= 0xe0 && b <= 0xef) {
      extra = 2;
      if (b == 0xe0)
        lo = 0xa0;
      if (b == 0xed)
        hi = 0x9f;
    } else if (b >= 0xf0 && b <= 0xf4) {
      extra = 3;
      if (b == 0xf0)
        lo = 0x90;
      if (b == 0xf4)
        hi = 0x8f;
    } else
      return false;
    p++;
    for (int i = 0; i < extra; i++, p++) {
      if (*p < lo || *p > hi)
        return false;
      lo = 0x80;
      hi = 0xbf;
    }
  }
  return true;
}

/* Appends to a NUL-terminated buffer, truncating silently (messages only). */
static void append(char *buf, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void append(char *buf, size_t n, const char *fmt, ...) {
  size_t used = strlen(buf);
  if (used + 1 >= n)
    return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf + used, n - used, fmt, ap);
  va_end(ap);
}

static const key *find_key(const char *name) {
  for (size_t i = 0; i < NKEYS; i++)
    if (strcmp(keys[i].name, name) == 0)
      return &keys[i];
  return NULL;
}

/* If `name` lies under `prefix` ("" = top level), returns the rest after
 * "prefix."; else NULL. */
static const char *under(const char *name, const char *prefix) {
  size_t n = strlen(prefix);
  if (n == 0)
    return name;
  if (strncmp(name, prefix, n) == 0 && name[n] == '.')
    return name + n + 1;
  return NULL;
}

/* True when `path` is a section: a proper prefix of some key's name. */
static bool is_section(const char *path) {
  if (!*path)
    return true;
  for (size_t i = 0; i < NKEYS; i++)
    if (under(keys[i].name, path))
      return true;
  return false;
}

/* True when keys[i] is the first row that introduces its next component
 * under `prefix` (so each sub-section or key is listed once). */
static bool first_component(size_t i, const char *prefix) {
  const char *rest = under(keys[i].name, prefix);
  size_t len = strcspn(rest, ".");
  for (size_t j = 0; j < i; j++) {
    const char *r = under(keys[j].name, prefix);
    if (r && strcspn(r, ".") == len && strncmp(r, rest, len) == 0)
      return false;
  }
  return true;
}

/* "name, lr, momentum": the names directly under `prefix`. */
static void children(const char *prefix, char *buf, size_t n) {
  buf[0] = '\0';
  for (size_t i = 0; i < NKEYS; i++) {
    const char *rest = under(keys[i].name, prefix);
    if (!rest || !first_component(i, prefix))
      continue;
    append(buf, n, "%s%.*s", buf[0] ? ", " : "", (int)strcspn(rest, "."), rest);
  }
}

/* "fashion-mnist, synthetic" */
static void choices_list(const key *k, char *buf, size_t n) {
  buf[0] = '\0';
  for (const char *const *ch = k->choices; *ch; ch++)
    append(buf, n, "%s%s", ch == k->choices ? "" : ", ", *ch);
}

static void double_range(const key *k, char *buf, size_t n) {
  snprintf(buf, n, "%c%g, %g%c", k->dmin_open ? '(' : '[', k->dmin, k->dmax,
           k->dmax_open ? ')' : ']');
}

/* What a key accepts, without an article: "integer in 1..65536". */
static void describe(const key *k, char *buf, size_t n) {
  char tmp[256];
  switch (k->kind) {
  case K_INT:
  case K_I64:
    snprintf(buf, n, "integer in %lld..%lld", k->imin, k->imax);
    break;
  case K_DOUBLE:
    double_range(k, tmp, sizeof tmp);
    snprintf(buf, n, "number in %s", tmp);
    break;
  case K_BOOL:
    snprintf(buf, n, "true or false (yes/no, on/off, 1/0 also accepted)");
    break;
  case K_STRING:
    snprintf(buf, n, "%sstring of at most %zu characters", k->imin > 0 ? "non-empty " : "",
             k->size - 1);
    break;
  case K_ENUM:
    choices_list(k, tmp, sizeof tmp);
    snprintf(buf, n, "one of: %s", tmp);
    break;
  case K_SHAPE:
    snprintf(buf, n, "shape HxWxC, each in %lld..%lld (e.g. 32x32x3)", k->imin, k->imax);
    break;
  case K_LIST:
    snprintf(buf, n, "list of at most %zu names, each 1..%zu characters without ','", k->max_items,
             k->size - 1);
    break;
  }
}

static const char *article(const key *k) {
  switch (k->kind) {
  case K_INT:
  case K_I64:
    return "an ";
  case K_BOOL:
  case K_ENUM:
    return "";
  default:
    return "a ";
  }
}

/* "expected an integer in 1..65536, got '-3'" */
static int expected(const key *k, const char *got, char *why, size_t n) {
  char d[384];
  describe(k, d, sizeof d);
  snprintf(why, n, "expected %s%s, got '%.*s%s'", article(k), d, SHOW(got));
  return -1;
}

/* ---- parsing one value (shared by defaults, YAML and --set) ----------- */

/* Decimal integer, optional sign, nothing else (no spaces, hex or "1e6"). */
static bool parse_ll(const char *s, long long *out) {
  const char *d = (*s == '-' || *s == '+') ? s + 1 : s;
  if (!isdigit((unsigned char)*d))
    return false;
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno == ERANGE || *end)
    return false;
  *out = v;
  return true;
}

/* Decimal number; rejects inf/nan, hex floats and surrounding spaces.
 * strtod (and the %g of the dump) follow LC_NUMERIC: this assumes the "C"
 * numeric locale, which holds unless the program calls setlocale. */
static bool parse_double(const char *s, double *out) {
  const char *d = (*s == '-' || *s == '+') ? s + 1 : s;
  if (!isdigit((unsigned char)*d) && !(*d == '.' && isdigit((unsigned char)d[1])))
    return false;
  if (strpbrk(s, "xX"))
    return false;
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (*end || !isfinite(v))
    return false;
  *out = v;
  return true;
}

static bool parse_bool(const char *s, bool *out) {
  static const char *const yes[] = {"true", "yes", "on", "1"};
  static const char *const no[] = {"false", "no", "off", "0"};
  for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) {
    if (eq_nocase(s, yes[i])) {
      *out = true;
      return true;
    }
    if (eq_nocase(s, no[i])) {
      *out = false;
      return true;
    }
  }
  return false;
}

static bool parse_dim(const char **p, long long lo, long long hi, int *out) {
  const char *s = *p;
  long long v = 0;
  if (!isdigit((unsigned char)*s))
    return false;
  for (; isdigit((unsigned char)*s); s++)
    if (v <= hi) /* stop growing once out of range: no overflow */
      v = v * 10 + (*s - '0');
  if (v < lo || v > hi)
    return false;
  *out = (int)v;
  *p = s;
  return true;
}

static bool parse_shape(const key *k, const char *s, int dims[3]) {
  for (int i = 0; i < 3; i++) {
    if (i > 0 && *s++ != 'x')
      return false;
    if (!parse_dim(&s, k->imin, k->imax, &dims[i]))
      return false;
  }
  return *s == '\0';
}

static bool in_choices(const key *k, const char *s) {
  for (const char *const *ch = k->choices; *ch; ch++)
    if (strcmp(*ch, s) == 0)
      return true;
  return false;
}

/* Checks one list entry (len bytes at s) and appends it. */
static int list_add(const key *k, bt_config *c, const char *s, size_t len, char *why, size_t n) {
  int *count = list_count(c, k);
  if (len == 0)
    return snprintf(why, n, "entry %d is empty; every entry must be a name", *count + 1), -1;
  if (memchr(s, ',', len))
    return snprintf(why, n, "entry '%.*s' contains ','; names cannot contain commas",
                    (int)(len > SHOW_MAX ? SHOW_MAX : len), s),
           -1;
  if (len >= k->size)
    return snprintf(why, n, "entry '%.*s...' is %zu characters long; at most %zu allowed", SHOW_MAX,
                    s, len, k->size - 1),
           -1;
  if ((size_t)*count >= k->max_items)
    return snprintf(why, n, "more than %zu entries; at most %zu allowed", k->max_items,
                    k->max_items),
           -1;
  char *e = list_entry(c, k, (size_t)*count);
  memcpy(e, s, len);
  e[len] = '\0';
  ++*count;
  return 0;
}

/* Comma-separated list ("a, b,c"); "" clears it. Spaces around names are
 * dropped so a shell-quoted "a, b" works. */
static int parse_list_csv(const key *k, bt_config *c, const char *s, char *why, size_t n) {
  *list_count(c, k) = 0;
  const char *p = s;
  while (*p == ' ' || *p == '\t')
    p++;
  if (!*p)
    return 0;
  for (;;) {
    const char *end = p + strcspn(p, ",");
    const char *a = p, *b = end;
    while (a < b && (*a == ' ' || *a == '\t'))
      a++;
    while (b > a && (b[-1] == ' ' || b[-1] == '\t'))
      b--;
    if (list_add(k, c, a, (size_t)(b - a), why, n) < 0)
      return -1;
    if (!*end)
      return 0;
    p = end + 1;
  }
}

/* Parses text `s` for key k and stores it in c. Fails with a reason in why
 * (without the key name), and may then have changed c: callers work on a
 * copy. */
static int parse_value(const key *k, const char *s, bt_config *c, char *why, size_t n) {
  switch (k->kind) {
  case K_INT:
  case K_I64: {
    long long v;
    if (!parse_ll(s, &v) || v < k->imin || v > k->imax)
      return expected(k, s, why, n);
    put_int(c, k, v);
    return 0;
  }
  case K_DOUBLE: {
    double v;
    if (!parse_double(s, &v) || (k->dmin_open ? v <= k->dmin : v < k->dmin) ||
        (k->dmax_open ? v >= k->dmax : v > k->dmax))
      return expected(k, s, why, n);
    memcpy(field(c, k), &v, sizeof v);
    return 0;
  }
  case K_BOOL: {
    bool v;
    if (!parse_bool(s, &v))
      return expected(k, s, why, n);
    memcpy(field(c, k), &v, sizeof v);
    return 0;
  }
  case K_STRING: {
    size_t len = strlen(s);
    if (len < (size_t)k->imin)
      return snprintf(why, n, "must not be empty"), -1;
    if (len >= k->size)
      return snprintf(why, n, "'%.*s...' is %zu characters long; at most %zu allowed", SHOW_MAX, s,
                      len, k->size - 1),
             -1;
    if (!valid_utf8(s))
      return snprintf(why, n, "'%.*s%s' is not valid UTF-8", SHOW(s)), -1;
    memcpy(field(c, k), s, len + 1);
    return 0;
  }
  case K_ENUM: {
    if (!in_choices(k, s) || strlen(s) >= k->size) {
      char ch[256];
      choices_list(k, ch, sizeof ch);
      return snprintf(why, n, "'%.*s%s' is not allowed; choose one of: %s", SHOW(s), ch), -1;
    }
    memcpy(field(c, k), s, strlen(s) + 1);
    return 0;
  }
  case K_SHAPE: {
    int dims[3];
    if (!parse_shape(k, s, dims))
      return expected(k, s, why, n);
    snprintf(field(c, k), k->size, "%dx%dx%d", dims[0], dims[1], dims[2]);
    memcpy((char *)c + k->off_n, dims, sizeof dims);
    return 0;
  }
  case K_LIST:
    if (!valid_utf8(s))
      return snprintf(why, n, "'%.*s%s' is not valid UTF-8", SHOW(s)), -1;
    return parse_list_csv(k, c, s, why, n);
  }
  return snprintf(why, n, "internal error: unknown key kind"), -1;
}

/* ---- unknown keys ------------------------------------------------------ */

/* "unknown key 'optimizer.lrr'; keys under 'optimizer' are: name, lr, ..."
 * The listing is for the deepest section that `path` lies in. */
static void unknown_key_msg(const char *path, char *buf, size_t n) {
  char section[256];
  snprintf(section, sizeof section, "%s", path);
  for (;;) {
    char *dot = strrchr(section, '.');
    if (!dot) {
      section[0] = '\0';
      break;
    }
    *dot = '\0';
    if (is_section(section))
      break;
  }
  char list[768];
  children(section, list, sizeof list);
  if (section[0])
    snprintf(buf, n, "unknown key '%.*s%s'; keys under '%s' are: %s", SHOW(path), section, list);
  else
    snprintf(buf, n, "unknown key '%.*s%s'; top-level keys are: %s", SHOW(path), list);
}

/* ---- YAML ---------------------------------------------------------------- */

typedef struct walker {
  yaml_document_t *doc;
  const char *name; /* file name for messages */
  bt_config *c;
  bt_err *err;
} walker;

/* Error at a libyaml mark (0-based) printed 1-based: "file:line:col: ..." */
static int at(walker *w, yaml_mark_t m, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int at(walker *w, yaml_mark_t m, const char *fmt, ...) {
  char msg[BT_ERR_MSG_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return bt_err_set(w->err, "%s:%zu:%zu: %s", w->name, m.line + 1, m.column + 1, msg);
}

static const char *scalar(const yaml_node_t *nd) { return (const char *)nd->data.scalar.value; }

/* YAML's null: an empty plain value ("key:"), "~" or "null". */
static bool is_null(const yaml_node_t *nd) {
  if (nd->type != YAML_SCALAR_NODE || nd->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
    return false;
  const char *s = scalar(nd);
  return !*s || strcmp(s, "~") == 0 || strcmp(s, "null") == 0 || strcmp(s, "Null") == 0 ||
         strcmp(s, "NULL") == 0;
}

/* "a mapping", "a list" or "'text'", for "expected X, got Y". */
static void node_desc(const yaml_node_t *nd, char *buf, size_t n) {
  if (nd->type == YAML_MAPPING_NODE)
    snprintf(buf, n, "a mapping");
  else if (nd->type == YAML_SEQUENCE_NODE)
    snprintf(buf, n, "a list");
  else
    snprintf(buf, n, "'%.*s%s'", SHOW(scalar(nd)));
}

static bool has_nul(const yaml_node_t *nd) { return strlen(scalar(nd)) != nd->data.scalar.length; }

static int apply_list(walker *w, const key *k, yaml_node_t *v) {
  char why[512], got[128], d[384];
  *list_count(w->c, k) = 0;
  if (is_null(v))
    return 0;
  if (v->type == YAML_SCALAR_NODE)
    return at(w, v->start_mark, "%s: expected a list, e.g. [%.*s%s]; got '%.*s%s'", k->name,
              SHOW(scalar(v)), SHOW(scalar(v)));
  if (v->type != YAML_SEQUENCE_NODE) {
    describe(k, d, sizeof d);
    node_desc(v, got, sizeof got);
    return at(w, v->start_mark, "%s: expected a %s, written [a, b]; got %s", k->name, d, got);
  }
  for (yaml_node_item_t *it = v->data.sequence.items.start; it < v->data.sequence.items.top; it++) {
    yaml_node_t *e = yaml_document_get_node(w->doc, *it);
    if (!e)
      return at(w, v->start_mark, "%s: broken YAML list", k->name);
    if (e->type != YAML_SCALAR_NODE) {
      node_desc(e, got, sizeof got);
      return at(w, e->start_mark, "%s: entry %d: expected a name, got %s", k->name,
                (int)(it - v->data.sequence.items.start) + 1, got);
    }
    if (has_nul(e))
      return at(w, e->start_mark, "%s: entry contains a NUL character", k->name);
    const char *s = is_null(e) ? "" : scalar(e);
    if (list_add(k, w->c, s, strlen(s), why, sizeof why) < 0)
      return at(w, e->start_mark, "%s: %s", k->name, why);
  }
  return 0;
}

static int apply(walker *w, const key *k, yaml_node_t *v) {
  if (k->kind == K_LIST)
    return apply_list(w, k, v);
  char why[512], got[128], d[384];
  if (v->type != YAML_SCALAR_NODE) {
    describe(k, d, sizeof d);
    node_desc(v, got, sizeof got);
    return at(w, v->start_mark, "%s: expected %s%s, got %s", k->name, article(k), d, got);
  }
  if (has_nul(v))
    return at(w, v->start_mark, "%s: value contains a NUL character", k->name);
  const char *s = scalar(v);
  bool typed = k->kind == K_INT || k->kind == K_I64 || k->kind == K_DOUBLE || k->kind == K_BOOL;
  if (is_null(v)) {
    if (k->kind != K_STRING) {
      describe(k, d, sizeof d);
      return at(w, v->start_mark, "%s: no value given; expected %s%s", k->name, article(k), d);
    }
    s = "";
  } else if (typed && v->data.scalar.style != YAML_PLAIN_SCALAR_STYLE) {
    /* Strict: "64" in quotes is a string in YAML; say so rather than guess. */
    describe(k, d, sizeof d);
    return at(w, v->start_mark,
              "%s: expected %s%s, got the quoted string '%.*s%s'; remove the quotes", k->name,
              article(k), d, SHOW(s));
  }
  if (parse_value(k, s, w->c, why, sizeof why) < 0)
    return at(w, v->start_mark, "%s: %s", k->name, why);
  return 0;
}

/* Applies the mapping `m` whose keys live under `prefix` ("" = top). */
static int walk(walker *w, yaml_node_t *m, const char *prefix) {
  yaml_node_pair_t *start = m->data.mapping.pairs.start;
  for (yaml_node_pair_t *p = start; p < m->data.mapping.pairs.top; p++) {
    yaml_node_t *kn = yaml_document_get_node(w->doc, p->key);
    yaml_node_t *vn = yaml_document_get_node(w->doc, p->value);
    if (!kn || !vn)
      return at(w, m->start_mark, "broken YAML mapping");
    char got[128];
    if (kn->type != YAML_SCALAR_NODE) {
      node_desc(kn, got, sizeof got);
      return at(w, kn->start_mark, "keys must be plain names, got %s", got);
    }
    if (has_nul(kn))
      return at(w, kn->start_mark, "key contains a NUL character");
    const char *kt = scalar(kn);
    char path[256];
    int len = snprintf(path, sizeof path, "%s%s%s", prefix, *prefix ? "." : "", kt);
    if (len < 0 || (size_t)len >= sizeof path)
      snprintf(path, sizeof path, "%s", kt); /* too long to be a key: reported as unknown */

    for (yaml_node_pair_t *q = start; q < p; q++) {
      yaml_node_t *k2 = yaml_document_get_node(w->doc, q->key);
      if (k2 && k2->type == YAML_SCALAR_NODE && strcmp(scalar(k2), kt) == 0)
        return at(w, kn->start_mark,
                  "duplicate key '%.*s%s' (first set at line %zu, column %zu); keep one",
                  SHOW(path), k2->start_mark.line + 1, k2->start_mark.column + 1);
    }

    if (strchr(kt, '.')) {
      /* Only nesting in files: one spelling per key keeps files diffable. */
      if (find_key(path) || is_section(path)) {
        const char *dot = strrchr(path, '.');
        return at(w, kn->start_mark,
                  "key '%.*s%s': dotted names are for --set; in a file nest them: '%.*s: {%s: "
                  "...}'",
                  SHOW(kt), (int)(dot - path), path, dot + 1);
      }
      char msg[BT_ERR_MSG_MAX];
      unknown_key_msg(path, msg, sizeof msg);
      return at(w, kn->start_mark, "%s", msg);
    }

    const key *k = find_key(path);
    if (k) {
      if (apply(w, k, vn) < 0)
        return -1;
      continue;
    }
    if (is_section(path)) {
      if (is_null(vn)) /* "data:" with every entry commented out */
        continue;
      if (vn->type != YAML_MAPPING_NODE) {
        char list[512];
        children(path, list, sizeof list);
        node_desc(vn, got, sizeof got);
        return at(w, vn->start_mark, "%s: expected a mapping with keys among: %s; got %s", path,
                  list, got);
      }
      if (walk(w, vn, path) < 0)
        return -1;
      continue;
    }
    char msg[BT_ERR_MSG_MAX];
    unknown_key_msg(path, msg, sizeof msg);
    return at(w, kn->start_mark, "%s", msg);
  }
  return 0;
}

/* Reader errors carry a byte offset, not a mark: turn it into line:col. */
static void offset_to_mark(const char *text, size_t offset, yaml_mark_t *m) {
  m->line = 0;
  m->column = 0;
  for (size_t i = 0; i < offset && text[i]; i++) {
    if (text[i] == '\n') {
      m->line++;
      m->column = 0;
    } else {
      m->column++;
    }
  }
}

static int yaml_error(walker *w, const yaml_parser_t *p, const char *text) {
  const char *problem = p->problem ? p->problem : "unknown problem";
  switch (p->error) {
  case YAML_MEMORY_ERROR:
    return bt_err_set(w->err, "%s: out of memory while parsing YAML", w->name);
  case YAML_READER_ERROR: {
    yaml_mark_t m;
    offset_to_mark(text, p->problem_offset, &m);
    return at(w, m, "not readable as YAML text: %s; save the file as UTF-8", problem);
  }
  default:
    if (p->context)
      return at(w, p->problem_mark, "invalid YAML: %s (%s at line %zu, column %zu)", problem,
                p->context, p->context_mark.line + 1, p->context_mark.column + 1);
    return at(w, p->problem_mark, "invalid YAML: %s", problem);
  }
}

int bt_config_load_string(bt_config *c, const char *yaml, const char *name_for_errors,
                          bt_err *err) {
  const char *name = name_for_errors ? name_for_errors : "<string>";
  if (!yaml)
    return bt_err_set(err, "%s: no YAML text", name);
  /* Heap, not stack: bt_config is several KiB and this may run on small
   * threads. */
  bt_config *tmp = malloc(sizeof *tmp);
  if (!tmp)
    return bt_err_set(err, "%s: out of memory", name);
  *tmp = *c;
  walker w = {.doc = NULL, .name = name, .c = tmp, .err = err};

  yaml_parser_t parser;
  if (!yaml_parser_initialize(&parser)) {
    free(tmp);
    return bt_err_set(err, "%s: out of memory", name);
  }
  yaml_parser_set_input_string(&parser, (const unsigned char *)yaml, strlen(yaml));

  int rc = 0;
  yaml_document_t doc;
  if (!yaml_parser_load(&parser, &doc)) {
    rc = yaml_error(&w, &parser, yaml);
  } else {
    w.doc = &doc;
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    bool more = root != NULL; /* an empty stream has no second document */
    char got[128];
    if (root && !is_null(root)) {
      if (root->type != YAML_MAPPING_NODE) {
        node_desc(root, got, sizeof got);
        rc = at(&w, root->start_mark,
                "expected a mapping of keys at the top level (e.g. 'model: lenet5'), got %s", got);
      } else {
        rc = walk(&w, root, "");
      }
    }
    yaml_document_delete(&doc);

    if (rc == 0 && more) {
      yaml_document_t doc2;
      if (!yaml_parser_load(&parser, &doc2)) {
        rc = yaml_error(&w, &parser, yaml);
      } else {
        if (yaml_document_get_root_node(&doc2))
          rc = at(&w, doc2.start_mark,
                  "a second YAML document starts here; an experiment file holds one (remove the "
                  "'---' line)");
        yaml_document_delete(&doc2);
      }
    }
  }
  yaml_parser_delete(&parser);
  if (rc == 0)
    *c = *tmp;
  free(tmp);
  return rc;
}

/* Experiment files are a few hundred bytes; a huge one is the wrong file. */
#define BT_CONFIG_FILE_MAX (1u << 20)

int bt_config_load_file(bt_config *c, const char *path, bt_err *err) {
  if (strlen(path) >= sizeof c->path)
    return bt_err_set(err, "experiment file name '%.*s%s' is too long (at most %zu characters)",
                      SHOW(path), sizeof c->path - 1);
  FILE *f = fopen(path, "rb");
  if (!f)
    return bt_err_set(err, "cannot open '%s': %s", path, strerror(errno));
  size_t cap = 4096, len = 0;
  char *buf = malloc(cap);
  if (!buf) {
    fclose(f);
    return bt_err_set(err, "cannot read '%s': out of memory", path);
  }
  for (;;) {
    if (len + 1 == cap) {
      if (cap > BT_CONFIG_FILE_MAX) {
        free(buf);
        fclose(f);
        return bt_err_set(err, "'%s' is larger than %u bytes; is it really an experiment file?",
                          path, BT_CONFIG_FILE_MAX);
      }
      char *nb = realloc(buf, cap * 2);
      if (!nb) {
        free(buf);
        fclose(f);
        return bt_err_set(err, "cannot read '%s': out of memory", path);
      }
      buf = nb;
      cap *= 2;
    }
    size_t got = fread(buf + len, 1, cap - 1 - len, f);
    len += got;
    if (got == 0)
      break;
  }
  int read_errno = errno;
  bool bad = ferror(f);
  fclose(f);
  if (bad) {
    free(buf);
    return bt_err_set(err, "cannot read '%s': %s", path, strerror(read_errno));
  }
  buf[len] = '\0';
  const char *nul = memchr(buf, '\0', len);
  if (nul) {
    walker w = {.name = path, .err = err};
    yaml_mark_t m;
    offset_to_mark(buf, (size_t)(nul - buf), &m);
    free(buf);
    return at(&w, m, "NUL byte in the file; an experiment file must be UTF-8 text");
  }
  if (bt_config_load_string(c, buf, path, err) < 0) {
    free(buf);
    return -1;
  }
  free(c->yaml_text);
  c->yaml_text = buf;
  memcpy(c->path, path, strlen(path) + 1);
  return 0;
}

/* ---- defaults, --set, validation ---------------------------------------- */

void bt_config_defaults(bt_config *c) {
  memset(c, 0, sizeof *c);
  for (size_t i = 0; i < NKEYS; i++) {
    char why[512];
    int rc = parse_value(&keys[i], keys[i].def, c, why, sizeof why);
    (void)rc;
    assert(rc == 0 && "a default in the key table does not parse");
  }
  c->path[0] = '\0';
  c->yaml_text = NULL;
}

int bt_config_set(bt_config *c, const char *assignment, bt_err *err) {
  const char *a = assignment;
  const char *eq = strchr(a, '=');
  if (!eq)
    return bt_err_set(err, "--set %.*s%s: expected key=value, e.g. --set optimizer.lr=0.05",
                      SHOW(a));
  char name[256];
  size_t klen = (size_t)(eq - a);
  if (klen >= sizeof name)
    klen = sizeof name - 1; /* cannot match any key; reported as unknown */
  memcpy(name, a, klen);
  name[klen] = '\0';

  const key *k = find_key(name);
  if (!k) {
    char msg[BT_ERR_MSG_MAX];
    if (*name && is_section(name)) {
      char list[768];
      children(name, list, sizeof list);
      return bt_err_set(err, "--set %.*s%s: '%s' is a group of keys; set one of %s.{%s}", SHOW(a),
                        name, name, list);
    }
    unknown_key_msg(name, msg, sizeof msg);
    return bt_err_set(err, "--set %.*s%s: %s", SHOW(a), msg);
  }

  bt_config *tmp = malloc(sizeof *tmp);
  if (!tmp)
    return bt_err_set(err, "--set %.*s%s: out of memory", SHOW(a));
  *tmp = *c;
  char why[512];
  int rc = parse_value(k, eq + 1, tmp, why, sizeof why);
  if (rc == 0)
    *c = *tmp;
  else
    bt_err_set(err, "--set %.*s%s: %s", SHOW(a), why);
  free(tmp);
  return rc;
}

/* Range check of a stored value (fields may have been set by code). */
static int check_stored(const bt_config *c, const key *k, char *why, size_t n) {
  switch (k->kind) {
  case K_INT:
  case K_I64: {
    long long v = get_int(c, k);
    if (v < k->imin || v > k->imax)
      return snprintf(why, n, "is %lld; allowed: %lld..%lld", v, k->imin, k->imax), -1;
    return 0;
  }
  case K_DOUBLE: {
    double v = get_double(c, k);
    if (!isfinite(v) || (k->dmin_open ? v <= k->dmin : v < k->dmin) ||
        (k->dmax_open ? v >= k->dmax : v > k->dmax)) {
      char r[128];
      double_range(k, r, sizeof r);
      return snprintf(why, n, "is %g; allowed: %s", v, r), -1;
    }
    return 0;
  }
  case K_BOOL:
    return 0;
  case K_STRING:
  case K_ENUM:
  case K_SHAPE: {
    const char *s = cfield(c, k);
    if (!memchr(s, '\0', k->size))
      return snprintf(why, n, "is not NUL-terminated"), -1;
    if (k->kind == K_STRING && strlen(s) < (size_t)k->imin)
      return snprintf(why, n, "must not be empty"), -1;
    if (k->kind == K_ENUM && !in_choices(k, s)) {
      char ch[256];
      choices_list(k, ch, sizeof ch);
      return snprintf(why, n, "'%.*s%s' is not allowed; choose one of: %s", SHOW(s), ch), -1;
    }
    if (k->kind == K_SHAPE) {
      int dims[3], ints[3];
      memcpy(ints, (const char *)c + k->off_n, sizeof ints);
      if (!parse_shape(k, s, dims) || memcmp(dims, ints, sizeof dims) != 0)
        return snprintf(why, n, "'%.*s%s' does not match the parsed sizes %dx%dx%d", SHOW(s),
                        ints[0], ints[1], ints[2]),
               -1;
    }
    return 0;
  }
  case K_LIST: {
    int count = clist_count(c, k);
    if (count < 0 || (size_t)count > k->max_items)
      return snprintf(why, n, "has %d entries; allowed: 0..%zu", count, k->max_items), -1;
    for (int i = 0; i < count; i++) {
      const char *e = clist_entry(c, k, (size_t)i);
      if (!memchr(e, '\0', k->size) || !*e || strchr(e, ','))
        return snprintf(why, n, "entry %d is empty, too long or contains ','", i + 1), -1;
    }
    return 0;
  }
  }
  return 0;
}

/* "4 or 8": the divisors of n nearest to d, for a fix suggestion. */
static void nearest_divisors(int n, int d, char *buf, size_t len) {
  int lo = d < n ? d : n, hi = d;
  while (lo > 1 && n % lo)
    lo--;
  while (hi < n && n % hi)
    hi++;
  if (hi > n || hi == lo)
    snprintf(buf, len, "%d", lo);
  else
    snprintf(buf, len, "%d or %d", lo, hi);
}

int bt_config_validate(const bt_config *c, bt_err *err) {
  for (size_t i = 0; i < NKEYS; i++) {
    char why[512];
    if (check_stored(c, &keys[i], why, sizeof why) < 0)
      return bt_err_set(err, "%s %s", keys[i].name, why);
  }
  if (c->batch_size % c->micro_batches != 0) {
    char sug[64];
    nearest_divisors(c->batch_size, c->micro_batches, sug, sizeof sug);
    return bt_err_set(err,
                      "micro_batches (%d) must divide batch_size (%d); set micro_batches to a "
                      "divisor of %d such as %s, or batch_size to a multiple of %d",
                      c->micro_batches, c->batch_size, c->batch_size, sug, c->micro_batches);
  }
  if (c->epochs == 0 && c->iterations == 0)
    return bt_err_set(err, "epochs and iterations are both 0, so nothing would be trained; set "
                           "epochs >= 1 (whole passes) or iterations >= 1 (optimizer steps)");
  if (c->optimizer_nesterov && c->optimizer_momentum == 0)
    return bt_err_set(err, "optimizer.nesterov is true but optimizer.momentum is 0; Nesterov "
                           "needs momentum: set optimizer.momentum (e.g. 0.9) or "
                           "optimizer.nesterov: false");
  if (strcmp(c->data_name, "fashion-mnist") == 0) {
    /* The synthetic-only keys must not silently disagree with the real
     * dataset. */
    const char *fix = "remove it or set data.name: synthetic";
    if (c->data_h != 28 || c->data_w != 28 || c->data_c != 1)
      return bt_err_set(err, "data.shape is %s but fashion-mnist images are 28x28x1; %s",
                        c->data_shape, fix);
    if (c->data_classes != 10)
      return bt_err_set(err, "data.classes is %d but fashion-mnist has 10 classes; %s",
                        c->data_classes, fix);
    if (c->data_train_samples != 60000)
      return bt_err_set(err,
                        "data.train_samples is %d but fashion-mnist has 60000 training images; %s",
                        c->data_train_samples, fix);
    if (c->data_test_samples != 10000)
      return bt_err_set(err, "data.test_samples is %d but fashion-mnist has 10000 test images; %s",
                        c->data_test_samples, fix);
    if (!c->data_path[0])
      return bt_err_set(err, "data.path is empty; set it to the directory holding the "
                             "fashion-mnist files");
  }
  return 0;
}

/* ---- help and dump ------------------------------------------------------ */

void bt_config_print_help(FILE *f) {
  fputs("Experiment configuration keys.\n"
        "In an experiment file (YAML), a dotted key is written nested; optimizer.lr is\n"
        "  optimizer:\n"
        "    lr: 0.05\n"
        "On the command line, use the dotted name: --set optimizer.lr=0.05\n"
        "(lists: --set devices=jetson-nano,rpi4; --set devices= empties the list).\n\n",
        f);
  for (size_t i = 0; i < NKEYS; i++) {
    const key *k = &keys[i];
    char d[384];
    describe(k, d, sizeof d);
    fprintf(f, "%s\n    %s; default: ", k->name, d);
    if (k->kind == K_LIST)
      fprintf(f, "[%s]", k->def);
    else if (!*k->def)
      fputs("\"\"", f);
    else
      fputs(k->def, f);
    fprintf(f, "\n    %s\n", k->doc);
  }
}

static void put_quoted(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    unsigned char ch = (unsigned char)*s;
    if (ch == '"' || ch == '\\')
      fprintf(f, "\\%c", ch);
    else if (ch < 0x20 || ch == 0x7f)
      fprintf(f, "\\x%02x", ch);
    else
      fputc(ch, f);
  }
  fputc('"', f);
}

/* Shortest %g text that reads back as exactly v. */
static void put_double(FILE *f, double v) {
  char buf[64];
  for (int prec = 1; prec <= 17; prec++) {
    snprintf(buf, sizeof buf, "%.*g", prec, v);
    if (strtod(buf, NULL) == v)
      break;
  }
  fputs(buf, f);
}

static void dump_value(const bt_config *c, const key *k, FILE *f) {
  switch (k->kind) {
  case K_INT:
  case K_I64:
    fprintf(f, "%lld", get_int(c, k));
    break;
  case K_DOUBLE:
    put_double(f, get_double(c, k));
    break;
  case K_BOOL:
    fputs(get_bool(c, k) ? "true" : "false", f);
    break;
  case K_ENUM:
  case K_STRING:
  case K_SHAPE:
    /* Choices are plain YAML words; quote anything else (an enum field set
     * to junk by code included) so the output stays YAML. */
    if (k->kind == K_ENUM && memchr(cfield(c, k), '\0', k->size) && in_choices(k, cfield(c, k)))
      fputs(cfield(c, k), f);
    else if (memchr(cfield(c, k), '\0', k->size))
      put_quoted(f, cfield(c, k));
    else
      fputs("\"\"", f);
    break;
  case K_LIST: {
    int n = clist_count(c, k);
    fputc('[', f);
    for (int i = 0; i < n && (size_t)i < k->max_items; i++) {
      fputs(i ? ", " : "", f);
      put_quoted(f, clist_entry(c, k, (size_t)i));
    }
    fputc(']', f);
    break;
  }
  }
}

static void dump_section(const bt_config *c, FILE *f, const char *prefix, int indent) {
  for (size_t i = 0; i < NKEYS; i++) {
    const char *rest = under(keys[i].name, prefix);
    if (!rest || !first_component(i, prefix))
      continue;
    size_t len = strcspn(rest, ".");
    if (!rest[len]) {
      fprintf(f, "%*s%s: ", indent, "", rest);
      dump_value(c, &keys[i], f);
      fputc('\n', f);
    } else {
      char sub[256];
      snprintf(sub, sizeof sub, "%.*s", (int)((size_t)(rest - keys[i].name) + len), keys[i].name);
      fprintf(f, "%*s%.*s:\n", indent, "", (int)len, rest);
      dump_section(c, f, sub, indent + 2);
    }
  }
}

void bt_config_dump_yaml(const bt_config *c, FILE *f) { dump_section(c, f, "", 0); }

void bt_config_free(bt_config *c) {
  free(c->yaml_text);
  c->yaml_text = NULL;
}
