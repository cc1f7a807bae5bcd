/* profile: corpus, timing and HDF5 files of layer latencies; see
 * include/baton/profile.h. HDF5's openmpi flavour pulls mpi.h in through
 * hdf5.h; only the serial API is used (as in runlog.c). */
#include "baton/profile.h"

#include <ctype.h>
#include <dirent.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <hdf5.h>

#include "h5util.h"

#include "baton/calib.h"
#include "baton/gemm.h"
#include "baton/model.h"
#include "baton/rng.h"

/* ---- layer specs ---------------------------------------------------------- */

static int appendf(char *buf, size_t len, size_t *at, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int appendf(char *buf, size_t len, size_t *at, const char *fmt, ...) {
  if (*at >= len)
    return -1;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf + *at, len - *at, fmt, ap);
  va_end(ap);
  if (n < 0 || (size_t)n >= len - *at)
    return -1;
  *at += (size_t)n;
  return 0;
}

static int format_rec(const bt_layer *l, int top, char *buf, size_t len, size_t *at) {
  if (appendf(buf, len, at, "%s", bt_layer_kind_name(l->kind)) < 0)
    return -1;
  if (top && appendf(buf, len, at, "@%dx%dx%d", l->in.h, l->in.w, l->in.c) < 0)
    return -1;
  switch (l->kind) {
  case BT_CONV2D:
    return appendf(buf, len, at, ":out=%d,k=%dx%d,s=%d,p=%d", l->units, l->kh, l->kw, l->stride,
                   l->pad);
  case BT_DWCONV2D:
  case BT_MAXPOOL:
  case BT_AVGPOOL:
    return appendf(buf, len, at, ":k=%dx%d,s=%d,p=%d", l->kh, l->kw, l->stride, l->pad);
  case BT_DENSE:
    return appendf(buf, len, at, ":units=%d", l->units);
  case BT_DROPOUT:
    return appendf(buf, len, at, ":p=%g", (double)l->p);
  case BT_RESIDUAL:
    if (appendf(buf, len, at, ":post=%d{", l->post_relu ? 1 : 0) < 0)
      return -1;
    for (int j = 0; j < l->n_body + l->n_short; j++) {
      const char *sep = j == 0 ? "" : j == l->n_body ? "|" : ";";
      if (appendf(buf, len, at, "%s", sep) < 0 || format_rec(&l->sub[j], 0, buf, len, at) < 0)
        return -1;
    }
    if (l->n_body + l->n_short > 0 && l->n_short == 0 && appendf(buf, len, at, "|") < 0)
      return -1;
    return appendf(buf, len, at, "}");
  default:
    return 0;
  }
}

int bt_layer_spec_format(const bt_layer *l, char *buf, size_t len) {
  size_t at = 0;
  if (len == 0)
    return -1;
  buf[0] = '\0';
  return format_rec(l, 1, buf, len, &at) < 0 ? -1 : (int)at;
}

typedef struct spec_parser {
  const char *s, *p;
  bt_err *err;
} spec_parser;

static int spec_fail(spec_parser *q, const char *what) {
  return bt_err_set(q->err, "layer spec '%.200s': %s at column %d", q->s, what,
                    (int)(q->p - q->s) + 1);
}

static int parse_int(spec_parser *q, int *v) {
  char *end;
  long x = strtol(q->p, &end, 10);
  if (end == q->p || x < 0 || x > 1000000)
    return spec_fail(q, "expected a non-negative integer");
  *v = (int)x;
  q->p = end;
  return 0;
}

static int parse_rec(spec_parser *q, int top, bt_layer *out) {
  char kind[32];
  int n = 0;
  while ((isalnum((unsigned char)*q->p) || *q->p == '_') && n < 31)
    kind[n++] = *q->p++;
  kind[n] = '\0';
  int k = bt_layer_kind_parse(kind);
  if (k < 0)
    return spec_fail(q, "unknown layer kind");
  bt_layer l;
  memset(&l, 0, sizeof l);
  l.kind = (bt_layer_kind)k;
  l.stride = 1;
  if (*q->p == '@') {
    q->p++;
    if (parse_int(q, &l.in.h) < 0 || *q->p++ != 'x' || parse_int(q, &l.in.w) < 0 ||
        *q->p++ != 'x' || parse_int(q, &l.in.c) < 0)
      return spec_fail(q, "expected @HxWxC");
  } else if (top) {
    return spec_fail(q, "expected @HxWxC after the kind");
  }
  if (*q->p == ':') {
    q->p++;
    for (;;) {
      char key[16];
      n = 0;
      while (isalpha((unsigned char)*q->p) && n < 15)
        key[n++] = *q->p++;
      key[n] = '\0';
      if (*q->p++ != '=')
        return spec_fail(q, "expected key=value");
      if (strcmp(key, "out") == 0 || strcmp(key, "units") == 0) {
        if (parse_int(q, &l.units) < 0)
          return -1;
      } else if (strcmp(key, "k") == 0) {
        if (parse_int(q, &l.kh) < 0 || *q->p++ != 'x' || parse_int(q, &l.kw) < 0)
          return spec_fail(q, "expected k=HxW");
      } else if (strcmp(key, "s") == 0) {
        if (parse_int(q, &l.stride) < 0)
          return -1;
      } else if (strcmp(key, "p") == 0 && l.kind == BT_DROPOUT) {
        char *end;
        double v = strtod(q->p, &end);
        if (end == q->p || !(v >= 0 && v < 1))
          return spec_fail(q, "dropout p must be in [0, 1)");
        l.p = (float)v;
        q->p = end;
      } else if (strcmp(key, "p") == 0) {
        if (parse_int(q, &l.pad) < 0)
          return -1;
      } else if (strcmp(key, "post") == 0) {
        if (parse_int(q, &l.post_relu) < 0)
          return -1;
      } else {
        return spec_fail(q, "unknown key");
      }
      if (*q->p != ',')
        break;
      q->p++;
    }
  }
  if (l.kind == BT_RESIDUAL) {
    if (*q->p++ != '{')
      return spec_fail(q, "a residual needs {body|shortcut}");
    bt_layer subs[32];
    int ns = 0, nbody = -1;
    while (*q->p != '}') {
      if (*q->p == '|') {
        if (nbody >= 0)
          return spec_fail(q, "two '|' in one residual");
        nbody = ns;
        q->p++;
        continue;
      }
      if (ns == 32)
        return spec_fail(q, "more than 32 sub-layers");
      if (parse_rec(q, 0, &subs[ns]) < 0) {
        for (int j = 0; j < ns; j++)
          bt_layer_release(&subs[j]);
        return -1;
      }
      ns++;
      if (*q->p == ';')
        q->p++;
      else if (*q->p != '|' && *q->p != '}') {
        for (int j = 0; j < ns; j++)
          bt_layer_release(&subs[j]);
        return spec_fail(q, "expected ';', '|' or '}'");
      }
    }
    q->p++;
    if (nbody < 0)
      nbody = ns;
    bt_layer r = bt_residual(subs, nbody, subs + nbody, ns - nbody, l.post_relu);
    r.in = l.in;
    l = r;
  }
  *out = l;
  return 0;
}

int bt_layer_spec_parse(const char *spec, bt_layer *out, bt_err *err) {
  spec_parser q = {spec, spec, err};
  memset(out, 0, sizeof *out);
  if (parse_rec(&q, 1, out) < 0)
    return -1;
  if (*q.p != '\0') {
    bt_layer_release(out);
    return spec_fail(&q, "trailing characters");
  }
  char where[300];
  snprintf(where, sizeof where, "layer spec '%.200s'", spec);
  if (bt_layer_finalize(out, where, err) < 0) {
    bt_layer_release(out);
    return -1;
  }
  return 0;
}

/* ---- the corpus ---------------------------------------------------------- */

int bt_profile_add(bt_profile *p, bt_layer l, int batch, const char *source, bt_err *err) {
  char spec[BT_LAYER_SPEC_MAX];
  if (bt_layer_finalize(&l, "profile layer", err) < 0 ||
      bt_layer_spec_format(&l, spec, sizeof spec) < 0) {
    bt_layer_release(&l);
    return err && err->msg[0] ? -1 : bt_err_set(err, "layer spec too long");
  }
  for (int i = 0; i < p->n; i++)
    if (p->e[i].batch == batch && strcmp(p->e[i].spec, spec) == 0) {
      bt_layer_release(&l);
      return 0;
    }
  if (p->n == p->cap) {
    int cap = p->cap ? 2 * p->cap : 256;
    bt_profile_entry *g = realloc(p->e, (size_t)cap * sizeof *g);
    if (!g) {
      bt_layer_release(&l);
      return bt_err_set(err, "out of memory");
    }
    p->e = g;
    p->cap = cap;
  }
  bt_profile_entry *e = &p->e[p->n++];
  memset(e, 0, sizeof *e);
  e->layer = l;
  e->batch = batch;
  snprintf(e->spec, sizeof e->spec, "%s", spec);
  snprintf(e->source, sizeof e->source, "%s", source);
  e->host_fwd = e->host_bwd = e->fwd = e->bwd = e->host_bwd_nodin = e->bwd_nodin = NAN;
  e->host_fwd_model = e->host_bwd_model = e->fwd_model = e->bwd_model = e->spread_model = NAN;
  return 1;
}

static int pick(bt_rng *r, const int *v, int n) { return v[bt_rng_u64(r) % (uint64_t)n]; }
#define PICK(r, arr) pick((r), (arr), (int)(sizeof(arr) / sizeof(arr)[0]))

static double fwd_flops(const bt_layer *l, int batch) { return bt_layer_flops_fwd(l) * batch; }

/* Keeps host times of one layer within a few tens of milliseconds. */
static int affordable(bt_layer *l, int batch) {
  bt_err e;
  if (bt_layer_finalize(l, "x", &e) < 0)
    return 0;
  double elems = (double)bt_shape_elems(l->in) * batch + (double)bt_shape_elems(l->out) * batch;
  return fwd_flops(l, batch) <= 4e8 && elems <= 6e6 && l->out.h >= 1;
}

/* A ResNet basic block of `out` channels (stride 2 with a projecting
 * shortcut when proj), and a MobileNetV2 inverted residual (expansion 6,
 * stride 1) back to `c` channels. */
static bt_layer basic_block(int out, int proj) {
  const int st = proj ? 2 : 1;
  bt_layer body[] = {bt_conv2d(out, 3, st, 1), bt_batchnorm(), bt_relu(), bt_conv2d(out, 3, 1, 1),
                     bt_batchnorm()};
  bt_layer sc[] = {bt_conv2d(out, 1, st, 0), bt_batchnorm()};
  return bt_residual(body, 5, sc, proj ? 2 : 0, 1);
}

static bt_layer inverted_residual(int c) {
  bt_layer body[] = {bt_conv2d(6 * c, 1, 1, 0), bt_batchnorm(), bt_relu6(),
                     bt_dwconv2d(3, 1, 1),      bt_batchnorm(), bt_relu6(),
                     bt_conv2d(c, 1, 1, 0),     bt_batchnorm()};
  return bt_residual(body, 8, NULL, 0, 0);
}

static bt_layer random_layer(bt_rng *r, int kind_slot, int *batch) {
  static const int batches[] = {1, 2, 4, 8, 16, 32};
  static const int chans[] = {3, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256};
  static const int spat[] = {4, 7, 8, 14, 16, 28, 32};
  static const int ks[] = {1, 3, 3, 5};
  static const int strides[] = {1, 1, 2};
  for (;;) {
    *batch = PICK(r, batches);
    const int s = PICK(r, spat), c = PICK(r, chans);
    bt_layer l;
    switch (kind_slot) {
    case 0: { /* conv */
      const int k = PICK(r, ks), st = PICK(r, strides);
      l = bt_conv2d(PICK(r, chans), k, st, k / 2);
      break;
    }
    case 1: {
      static const int dk[] = {3, 3, 5};
      const int k = PICK(r, dk);
      l = bt_dwconv2d(k, PICK(r, strides), k / 2);
      break;
    }
    case 2: {
      static const int units[] = {10, 32, 64, 100, 128, 256, 512, 1024, 2048, 4096};
      l = bt_dense(PICK(r, units));
      const int in = PICK(r, units);
      l.in = (bt_shape){1, 1, in < 16 ? 64 : in};
      if (!affordable(&l, *batch))
        continue;
      return l;
    }
    case 3: {
      static const int pk[] = {2, 3};
      const int k = PICK(r, pk);
      const int v = (int)(bt_rng_u64(r) % 3);
      l = v == 0 ? bt_maxpool(k, 2, k == 3) : v == 1 ? bt_avgpool(2, 2, 0) : bt_global_avgpool();
      break;
    }
    case 4:
      l = bt_batchnorm();
      break;
    case 5: {
      const int v = (int)(bt_rng_u64(r) % 4);
      l = v == 0 ? bt_relu6() : v == 1 ? bt_dropout(0.5f) : bt_relu();
      break;
    }
    default: { /* residual: basic block (optionally projecting) or inverted residual */
      const int v = (int)(bt_rng_u64(r) % 3);
      if (c < 8)
        continue;
      l = v < 2 ? basic_block(v == 1 ? 2 * c : c, v == 1) : inverted_residual(c);
    }
    }
    l.in = (bt_shape){s, s, kind_slot == 0 && bt_rng_u64(r) % 5 == 0 ? 3 : c};
    if (affordable(&l, *batch))
      return l;
    bt_layer_release(&l);
  }
}

/* A layer of a network's late stages: many channels on few pixels, where
 * the weights (up to tens of MB) rather than the FLOPs set the time and the
 * backward writes a weight gradient as large again. The general generator
 * stops at 256 channels and 4 pixels, so it never reaches this regime. */
static bt_layer deep_layer(bt_rng *r, int *batch) {
  static const int batches[] = {1, 2, 4, 8, 16, 32};
  static const int chans[] = {256, 384, 512, 768, 1024};
  static const int spat[] = {1, 2, 2, 3, 4, 4, 6, 7, 8};
  static const int ks[] = {1, 3, 3};
  static const int strides[] = {1, 1, 1, 2};
  for (;;) {
    *batch = PICK(r, batches);
    const int s = PICK(r, spat), c = PICK(r, chans), v = (int)(bt_rng_u64(r) % 8);
    bt_layer l;
    if (v < 6) {
      const int k = PICK(r, ks);
      l = bt_conv2d(PICK(r, chans), k, PICK(r, strides), k / 2);
    } else if (v == 6) {
      static const int units[] = {256, 512, 1024, 2048, 4096};
      l = bt_dense(PICK(r, units));
      l.in = (bt_shape){1, 1, PICK(r, units)};
      if (!affordable(&l, *batch))
        continue;
      return l;
    } else {
      bt_layer body[] = {bt_conv2d(c, 3, 1, 1), bt_batchnorm(), bt_relu(), bt_conv2d(c, 3, 1, 1),
                         bt_batchnorm()};
      l = bt_residual(body, 5, NULL, 0, 1);
    }
    l.in = (bt_shape){s, s, c};
    if (affordable(&l, *batch))
      return l;
    bt_layer_release(&l);
  }
}

int bt_profile_source_fitted(const char *source) {
  return strcmp(source, "random") == 0 || strcmp(source, "deep") == 0 ||
         strcmp(source, "grid") == 0 || strcmp(source, "big") == 0 || strcmp(source, "odd") == 0 ||
         strcmp(source, "dense") == 0;
}

int bt_profile_add_deep(bt_profile *p, uint64_t seed, int n, bt_err *err) {
  bt_rng r;
  bt_rng_seed(&r, seed, 0xdee9);
  for (int i = 0, tries = 0; i < n && tries < 50 * n; tries++) {
    int batch = 1;
    const int rc = bt_profile_add(p, deep_layer(&r, &batch), batch, "deep", err);
    if (rc < 0)
      return -1;
    i += rc;
  }
  return 0;
}

/* The zoo models the corpus holds every layer of, at their evaluation input. */
static const struct {
  const char *name;
  bt_shape in;
  int two_batches;
} zoo_models[] = {{"mlp", {28, 28, 1}, 1},      {"lenet5", {28, 28, 1}, 1},
                  {"vgg11", {32, 32, 3}, 1},    {"vgg16", {32, 32, 3}, 0},
                  {"resnet18", {32, 32, 3}, 1}, {"mobilenetv2", {32, 32, 3}, 1}};

enum { N_ZOO_MODELS = sizeof zoo_models / sizeof *zoo_models };

/* The index in zoo_models of the model named by the n characters at s, or -1. */
static int zoo_index(const char *s, size_t n) {
  for (int z = 0; z < N_ZOO_MODELS; z++)
    if (strlen(zoo_models[z].name) == n && strncmp(s, zoo_models[z].name, n) == 0)
      return z;
  return -1;
}

/* Marks in[z] the zoo models of the comma-separated `list` (NULL: all six,
 * "none": none); an empty list or an unknown name is an error. */
static int zoo_selection(const char *list, int in[N_ZOO_MODELS], bt_err *err) {
  for (int z = 0; z < N_ZOO_MODELS; z++)
    in[z] = list == NULL;
  if (!list || strcmp(list, "none") == 0)
    return 0;
  char names[128] = "";
  for (int z = 0; z < N_ZOO_MODELS; z++)
    snprintf(names + strlen(names), sizeof names - strlen(names), "%s, ", zoo_models[z].name);
  if (!*list)
    return bt_err_set(err, "the list of zoo models is empty; give some of %sor none", names);
  for (const char *s = list; *s;) {
    const size_t n = strcspn(s, ",");
    const int z = zoo_index(s, n);
    if (z < 0)
      return bt_err_set(err,
                        "zoo model '%.*s' is not one the corpus holds; give a comma-separated "
                        "list of %sor none",
                        (int)n, s, names);
    in[z] = 1;
    s += n + (s[n] == ',');
  }
  return 0;
}

int bt_profile_corpus(bt_profile *p, uint64_t seed, int n_random, const char *zoo, bt_err *err) {
  int in_corpus[N_ZOO_MODELS];
  if (zoo_selection(zoo, in_corpus, err) < 0)
    return -1;
  /* The probe set first: held-out devices adapt from these rows. */
  if (bt_profile_probe_set(p, err) < 0)
    return -1;
  bt_rng r;
  bt_rng_seed(&r, seed, 0x9f0f11e);
  /* Shares of kinds: convolutions vary most, so they get the most samples. */
  static const int slots[] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 2, 2, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6};
  for (int i = 0, tries = 0; i < n_random && tries < 50 * n_random; tries++) {
    int batch;
    bt_layer l = random_layer(&r, PICK(&r, slots), &batch);
    int rc = bt_profile_add(p, l, batch, "random", err);
    if (rc < 0)
      return -1;
    i += rc;
  }
  for (int z = 0; z < N_ZOO_MODELS; z++) {
    if (!in_corpus[z])
      continue;
    bt_model m;
    if (bt_zoo_build(zoo_models[z].name, zoo_models[z].in, 10, &m, err) < 0)
      return -1;
    for (int b = 0; b < 1 + zoo_models[z].two_batches; b++)
      for (int i = 0; i < m.n_layers; i++) {
        char spec[BT_LAYER_SPEC_MAX];
        bt_layer copy;
        if (bt_layer_spec_format(&m.layers[i], spec, sizeof spec) < 0 ||
            bt_layer_spec_parse(spec, &copy, err) < 0 ||
            bt_profile_add(p, copy, b ? 32 : 8, zoo_models[z].name, err) < 0) {
          bt_model_free(&m);
          return err && err->msg[0] ? -1 : bt_err_set(err, "zoo layer spec too long");
        }
      }
    bt_model_free(&m);
  }
  return 0;
}

/* Appends the spec of every layer of `kind` in `layers` to `specs` (for a
 * residual kind the blocks themselves, for any other kind the residual
 * blocks' sub-layers too); returns the new count or -1. */
static int zoo_kind_specs(const bt_layer *layers, int n, bt_layer_kind kind,
                          char (**specs)[BT_LAYER_SPEC_MAX], int count, int *cap) {
  for (int i = 0; i < n && count >= 0; i++) {
    const bt_layer *l = &layers[i];
    if (l->kind == BT_RESIDUAL && kind != BT_RESIDUAL) {
      count = zoo_kind_specs(l->sub, l->n_body + l->n_short, kind, specs, count, cap);
      continue;
    }
    if (l->kind != kind)
      continue;
    if (count == *cap) {
      *cap = *cap ? 2 * *cap : 64;
      char(*g)[BT_LAYER_SPEC_MAX] = realloc(*specs, (size_t)*cap * sizeof **specs);
      if (!g)
        return -1;
      *specs = g;
    }
    if (bt_layer_spec_format(l, (*specs)[count], BT_LAYER_SPEC_MAX) < 0)
      return -1;
    count++;
  }
  return count;
}

/* The spec of every layer of `kind` in the zoo models (residual sub-layers
 * included, see zoo_kind_specs) into *out; returns the count or -1. */
static int zoo_layers_of(bt_layer_kind kind, char (**out)[BT_LAYER_SPEC_MAX], bt_err *err) {
  char(*zoo)[BT_LAYER_SPEC_MAX] = NULL;
  int n_zoo = 0, cap = 0;
  for (size_t z = 0; z < sizeof zoo_models / sizeof *zoo_models && n_zoo >= 0; z++) {
    bt_model m;
    if (bt_zoo_build(zoo_models[z].name, zoo_models[z].in, 10, &m, err) < 0) {
      free(zoo);
      return -1;
    }
    n_zoo = zoo_kind_specs(m.layers, m.n_layers, kind, &zoo, n_zoo, &cap);
    bt_model_free(&m);
  }
  if (n_zoo < 0) {
    free(zoo);
    return bt_err_set(err, "cannot list the zoo's layers (out of memory or a spec too long)");
  }
  *out = zoo;
  return n_zoo;
}

static int spec_listed(const char (*specs)[BT_LAYER_SPEC_MAX], int n, const char *spec) {
  for (int i = 0; i < n; i++)
    if (strcmp(specs[i], spec) == 0)
      return 1;
  return 0;
}

static int uniform(bt_rng *r, int lo, int hi) {
  return lo + (int)(bt_rng_u64(r) % (uint64_t)(hi - lo + 1));
}

/* A layer of any channel count, kernel and padding (bt_profile_add_odd);
 * half the convolutions have at most 16 input channels. */
static bt_layer odd_layer(bt_rng *r, int *batch) {
  static const int batches[] = {1, 2, 4, 8, 16, 32};
  static const int ks[] = {1, 2, 3, 3, 4, 5, 5, 7};
  for (;;) {
    *batch = PICK(r, batches);
    const int s = uniform(r, 3, 32), kind = uniform(r, 0, 19);
    int c = bt_rng_u64(r) % 2 ? uniform(r, 1, 16) : uniform(r, 1, 64);
    bt_layer l;
    if (kind < 11) {
      const int k = PICK(r, ks);
      l = bt_conv2d(uniform(r, 1, 128), k, uniform(r, 1, 3) == 3 ? 2 : 1, uniform(r, 0, k / 2));
    } else if (kind < 14) {
      l = bt_dense(uniform(r, 2, 600));
      l.in = (bt_shape){1, 1, uniform(r, 8, 1200)};
      if (affordable(&l, *batch))
        return l;
      bt_layer_release(&l);
      continue;
    } else if (kind < 16) {
      l = kind == 14 ? bt_maxpool(2, 2, 0) : bt_avgpool(2, 2, 0);
    } else if (kind < 18) {
      l = bt_relu();
    } else {
      l = bt_batchnorm();
    }
    l.in = (bt_shape){s, s, c};
    if (affordable(&l, *batch))
      return l;
    bt_layer_release(&l);
  }
}

typedef bt_layer (*layer_draw)(bt_rng *r, int *batch);

/* Adds `n` layers drawn by `draw` under `source`, never a zoo layer of one
 * of `kinds` (the zoo's rows are the evaluation's and the partitioner's
 * test cases). */
static int add_drawn(bt_profile *p, uint64_t seed, uint64_t stream, int n, layer_draw draw,
                     const char *source, const bt_layer_kind *kinds, int n_kinds, bt_err *err) {
  enum { MAX_KINDS = 8 };
  if (n_kinds > MAX_KINDS)
    return bt_err_set(err, "%s layers: at most %d kinds to keep apart from the zoo", source,
                      MAX_KINDS);
  char(*zoo[MAX_KINDS])[BT_LAYER_SPEC_MAX] = {NULL};
  int n_zoo[MAX_KINDS] = {0}, rc = 0;
  for (int k = 0; k < n_kinds; k++)
    if ((n_zoo[k] = zoo_layers_of(kinds[k], &zoo[k], err)) < 0)
      rc = -1;
  bt_rng r;
  bt_rng_seed(&r, seed, stream);
  for (int i = 0, tries = 0; rc == 0 && i < n && tries < 50 * n; tries++) {
    int batch = 1, in_zoo = 0;
    bt_layer l = draw(&r, &batch);
    char spec[BT_LAYER_SPEC_MAX];
    if (bt_layer_spec_format(&l, spec, sizeof spec) < 0) {
      bt_layer_release(&l);
      rc = bt_err_set(err, "%s layer spec too long", source);
      break;
    }
    for (int k = 0; k < n_kinds && !in_zoo; k++)
      in_zoo = l.kind == kinds[k] && spec_listed(zoo[k], n_zoo[k], spec);
    if (in_zoo) {
      bt_layer_release(&l);
      continue;
    }
    const int added = bt_profile_add(p, l, batch, source, err);
    rc = added < 0 ? -1 : 0;
    i += added > 0;
  }
  for (int k = 0; k < n_kinds; k++)
    free(zoo[k]);
  return rc;
}

int bt_profile_add_odd(bt_profile *p, uint64_t seed, int n, bt_err *err) {
  static const bt_layer_kind kinds[] = {BT_CONV2D,  BT_DENSE, BT_MAXPOOL,
                                        BT_AVGPOOL, BT_RELU,  BT_BATCHNORM};
  return add_drawn(p, seed, 0x0dd5, n, odd_layer, "odd", kinds, (int)(sizeof kinds / sizeof *kinds),
                   err);
}

/* A dense layer of any width (bt_profile_add_dense): inputs and units
 * log-uniform, so small layers (where blocking and overheads decide the
 * time) are as common as large ones (where the weights' bytes do). */
static bt_layer dense_layer(bt_rng *r, int *batch) {
  static const int batches[] = {1, 2, 4, 8, 16, 32};
  for (;;) {
    *batch = PICK(r, batches);
    bt_layer l = bt_dense((int)lround(exp(log(2.0) + bt_rng_uniform(r) * log(4096 / 2.0))));
    l.in = (bt_shape){1, 1, (int)lround(exp(log(8.0) + bt_rng_uniform(r) * log(4096 / 8.0)))};
    if (affordable(&l, *batch))
      return l;
    bt_layer_release(&l);
  }
}

int bt_profile_add_dense(bt_profile *p, uint64_t seed, int n, bt_err *err) {
  static const bt_layer_kind kinds[] = {BT_DENSE};
  return add_drawn(p, seed, 0xde45e, n, dense_layer, "dense", kinds,
                   (int)(sizeof kinds / sizeof *kinds), err);
}

/* A grid of convolutions: every combination of the given shapes, each at
 * every batch the filter `fits` accepts, except the zoo's own convolutions
 * (at any batch): their rows are the evaluation's and the partitioner's test
 * cases, so a grid covers the regime around them, never them. */
typedef struct int_list {
  const int *v;
  int n;
} int_list;
#define INT_LIST(a) ((int_list){(a), (int)(sizeof(a) / sizeof *(a))})

typedef struct conv_grid {
  int_list in_c, out_c, spat, ks, strides, batches;
  int (*fits)(bt_layer *l, int batch);
  const char *source;
} conv_grid;

static int add_conv_grid(bt_profile *p, const conv_grid *g, bt_err *err) {
  char(*zoo)[BT_LAYER_SPEC_MAX] = NULL;
  const int n_zoo = zoo_layers_of(BT_CONV2D, &zoo, err);
  if (n_zoo < 0)
    return -1;
  int rc = 0;
  for (int a = 0; a < g->in_c.n && rc >= 0; a++)
    for (int o = 0; o < g->out_c.n && rc >= 0; o++)
      for (int s = 0; s < g->spat.n && rc >= 0; s++)
        for (int k = 0; k < g->ks.n && rc >= 0; k++)
          for (int t = 0; t < g->strides.n && rc >= 0; t++) {
            const int kernel = g->ks.v[k], side = g->spat.v[s];
            bt_layer l = bt_conv2d(g->out_c.v[o], kernel, g->strides.v[t], kernel / 2);
            l.in = (bt_shape){side, side, g->in_c.v[a]};
            char spec[BT_LAYER_SPEC_MAX];
            if (bt_layer_finalize(&l, "grid layer", err) < 0 ||
                bt_layer_spec_format(&l, spec, sizeof spec) < 0) {
              rc = err && err->msg[0] ? -1 : bt_err_set(err, "grid layer spec too long");
              break;
            }
            const int in_zoo = spec_listed(zoo, n_zoo, spec);
            for (int b = 0; b < g->batches.n && !in_zoo && rc >= 0; b++) {
              bt_layer copy = l;
              if (g->fits(&copy, g->batches.v[b]))
                rc = bt_profile_add(p, copy, g->batches.v[b], g->source, err);
            }
          }
  free(zoo);
  return rc < 0 ? -1 : 0;
}

int bt_profile_add_deep_grid(bt_profile *p, bt_err *err) {
  static const int chans[] = {256, 384, 512, 768, 1024};
  static const int spat[] = {2, 4, 8}, ks[] = {1, 3}, strides[] = {1, 2};
  static const int batches[] = {1, 2, 4, 8, 16, 32};
  const conv_grid g = {INT_LIST(chans),   INT_LIST(chans),   INT_LIST(spat), INT_LIST(ks),
                       INT_LIST(strides), INT_LIST(batches), affordable,     "grid"};
  return add_conv_grid(p, &g, err);
}

/* The random corpus stops at 4e8 FLOPs; a zoo model's convolutions at batch
 * 32 reach 2.4e9 (vgg11's 8x8x256 3x3, resnet18's 32x32x64 blocks), where
 * the host model extrapolated. */
static int big_enough(bt_layer *l, int batch) {
  bt_err e;
  if (bt_layer_finalize(l, "x", &e) < 0)
    return 0;
  double elems = (double)bt_shape_elems(l->in) * batch + (double)bt_shape_elems(l->out) * batch;
  const double f = fwd_flops(l, batch);
  return f >= 1e8 && f <= 5e9 && elems <= 1.2e7 && l->out.h >= 1;
}

int bt_profile_add_big_grid(bt_profile *p, bt_err *err) {
  static const int chans[] = {16, 32, 64, 128, 256, 512};
  static const int spat[] = {4, 8, 16, 32}, ks[] = {1, 3}, strides[] = {1, 2};
  static const int batches[] = {8, 16, 32};
  const conv_grid g = {INT_LIST(chans),   INT_LIST(chans),   INT_LIST(spat), INT_LIST(ks),
                       INT_LIST(strides), INT_LIST(batches), big_enough,     "big"};
  return add_conv_grid(p, &g, err);
}

/* Elements of a layer's largest tensor at `batch` (a residual block's
 * expanded inner tensors included). */
static double largest_tensor(const bt_layer *l, int batch) {
  double m = fmax((double)bt_shape_elems(l->in), (double)bt_shape_elems(l->out));
  for (int j = 0; j < l->n_body + l->n_short; j++)
    m = fmax(m, (double)bt_shape_elems(l->sub[j].out));
  return m * batch;
}

/* Above the random corpus's reach (its tensors stop at 6e6 elements in and
 * out together, its FLOPs at 4e8) and within a few hundred milliseconds;
 * `l` is finalized. */
static int block_big_enough(const bt_layer *l, int batch) {
  if (l->out.h < 1)
    return 0;
  const double in_out = ((double)bt_shape_elems(l->in) + (double)bt_shape_elems(l->out)) * batch;
  const double f = fwd_flops(l, batch);
  return (in_out > 3e6 || f > 4e8) && largest_tensor(l, batch) <= 1.6e7 && f <= 6e9;
}

/* Adds `l` at every batch of `batches` that block_big_enough accepts,
 * unless its spec is one of the zoo's; returns 0 or -1. */
static int add_big_layer(bt_profile *p, bt_layer l, const int_list *batches,
                         const char (*zoo)[BT_LAYER_SPEC_MAX], int n_zoo, bt_err *err) {
  char spec[BT_LAYER_SPEC_MAX];
  if (bt_layer_finalize(&l, "big layer", err) < 0 ||
      bt_layer_spec_format(&l, spec, sizeof spec) < 0) {
    bt_layer_release(&l);
    return err && err->msg[0] ? -1 : bt_err_set(err, "big layer spec too long");
  }
  const int in_zoo = spec_listed(zoo, n_zoo, spec);
  for (int b = 0; b < batches->n && !in_zoo; b++) {
    bt_layer copy;
    if (!block_big_enough(&l, batches->v[b]))
      continue;
    /* bt_profile_add owns the layer it adds: give each batch its own copy. */
    if (bt_layer_spec_parse(spec, &copy, err) < 0 ||
        bt_profile_add(p, copy, batches->v[b], "big", err) < 0) {
      bt_layer_release(&l);
      return -1;
    }
  }
  bt_layer_release(&l);
  return 0;
}

int bt_profile_add_big_blocks(bt_profile *p, bt_err *err) {
  static const bt_layer_kind kinds[] = {BT_DWCONV2D, BT_BATCHNORM, BT_RELU, BT_RELU6, BT_RESIDUAL};
  enum { N_KINDS = sizeof kinds / sizeof *kinds };
  static const int batches_v[] = {8, 16, 32};
  const int_list batches = INT_LIST(batches_v);
  char(*zoo[N_KINDS])[BT_LAYER_SPEC_MAX] = {NULL};
  int n_zoo[N_KINDS], rc = 0;
  for (int k = 0; k < N_KINDS; k++)
    if ((n_zoo[k] = zoo_layers_of(kinds[k], &zoo[k], err)) < 0)
      rc = -1;
  /* Depthwise convolutions and the element-wise layers around them. */
  static const int dw_c[] = {16, 32, 48, 64, 96, 128, 144, 192, 256, 384, 576};
  static const int spat[] = {8, 16, 32}, dk[] = {3, 5}, strides[] = {1, 2};
  for (size_t c = 0; c < sizeof dw_c / sizeof *dw_c && rc == 0; c++)
    for (size_t s = 0; s < sizeof spat / sizeof *spat && rc == 0; s++) {
      const bt_shape in = {spat[s], spat[s], dw_c[c]};
      for (size_t k = 0; k < sizeof dk / sizeof *dk && rc == 0; k++)
        for (size_t t = 0; t < sizeof strides / sizeof *strides && rc == 0; t++) {
          bt_layer l = bt_dwconv2d(dk[k], strides[t], dk[k] / 2);
          l.in = in;
          rc = add_big_layer(p, l, &batches, zoo[0], n_zoo[0], err);
        }
      bt_layer ew[] = {bt_batchnorm(), bt_relu(), bt_relu6()};
      for (int e = 0; e < 3 && rc == 0; e++) {
        ew[e].in = in;
        rc = add_big_layer(p, ew[e], &batches, zoo[1 + e], n_zoo[1 + e], err);
      }
    }
  /* Inverted residuals (expansion 6, stride 1) and basic blocks, with and
   * without a projecting shortcut. */
  static const int ir_c[] = {16, 24, 32, 48, 64, 96, 128};
  static const int bb_c[] = {32, 48, 64, 96, 128, 192, 256}, bb_s[] = {4, 8, 16, 32};
  for (size_t c = 0; c < sizeof ir_c / sizeof *ir_c && rc == 0; c++)
    for (size_t s = 0; s < sizeof spat / sizeof *spat && rc == 0; s++) {
      bt_layer l = inverted_residual(ir_c[c]);
      l.in = (bt_shape){spat[s], spat[s], ir_c[c]};
      rc = add_big_layer(p, l, &batches, zoo[4], n_zoo[4], err);
    }
  for (size_t c = 0; c < sizeof bb_c / sizeof *bb_c && rc == 0; c++)
    for (size_t s = 0; s < sizeof bb_s / sizeof *bb_s && rc == 0; s++)
      for (int proj = 0; proj < 2 && rc == 0; proj++) {
        bt_layer l = basic_block(proj ? 2 * bb_c[c] : bb_c[c], proj);
        l.in = (bt_shape){bb_s[s], bb_s[s], bb_c[c]};
        rc = add_big_layer(p, l, &batches, zoo[4], n_zoo[4], err);
      }
  for (int k = 0; k < N_KINDS; k++)
    free(zoo[k]);
  return rc < 0 ? -1 : 0;
}

int bt_profile_probe_set(bt_profile *p, bt_err *err) {
  /* conv rate; conv fill-up + overhead; depthwise; dense rate; dense at batch
   * 1 (bandwidth roof); large ReLU (DRAM bandwidth); small ReLU (overhead);
   * batch-norm (its rate); two mid-size ReLUs. The memory-bound ops step
   * through 16/24 KiB, 192/288 KiB, 768/1152 KiB, 3/4 MiB and 16/24 MiB, so
   * that a cache of 256 KiB to 12 MiB lies between two of them at most 4x
   * apart: the cache is a step, and a layer between the two probes that
   * bracket it is predicted in or out of the cache by a guess. Until 8
   * December a max-pool stood in the place of the 192 KiB ReLU and the
   * ReLU6 was 256/384 KiB: 448 KiB to 3 MiB held no probe, and half the
   * device profiles' caches (docs/predictor.md). */
  struct {
    bt_layer l;
    int in_h, in_c, batch;
  } probes[10] = {
      {bt_conv2d(64, 3, 1, 1), 16, 64, 16},
      {bt_conv2d(16, 3, 2, 1), 8, 16, 2},
      {bt_dwconv2d(3, 1, 1), 16, 96, 16},
      {bt_dense(1024), 1, 1024, 32},
      {bt_dense(512), 1, 2048, 1},
      {bt_relu(), 32, 64, 32},
      {bt_relu(), 8, 16, 2},
      {bt_batchnorm(), 16, 64, 16},
      {bt_relu(), 16, 24, 4},
      {bt_relu6(), 16, 32, 12},
  };
  for (int i = 0; i < 10; i++) {
    probes[i].l.in = (bt_shape){probes[i].in_h, probes[i].in_h, probes[i].in_c};
    if (bt_profile_add(p, probes[i].l, probes[i].batch, "probe", err) < 0)
      return -1;
  }
  return 0;
}

/* ---- timing ---------------------------------------------------------------- */

static double now_s(int wall) {
  struct timespec ts;
  clock_gettime(wall ? CLOCK_MONOTONIC : CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void bt_profile_host_rates(bt_host_rates *h, int wall) {
  memset(h, 0, sizeof *h);
  const int n = 384;
  float *a = calloc((size_t)n * n, sizeof(float)), *b = calloc((size_t)n * n, sizeof(float));
  float *c = calloc((size_t)n * n, sizeof(float));
  double best = INFINITY;
  for (int r = 0; r < 20 && a && b && c; r++) {
    double t0 = now_s(wall);
    bt_sgemm(false, false, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
    const double t = now_s(wall) - t0;
    best = t > 0 ? fmin(best, t) : best;
  }
  h->sgemm_gflops = 2.0 * n * n * (double)n / best / 1e9;
  const size_t bytes = (size_t)16 << 20;
  char *src = malloc(bytes), *dst = malloc(bytes);
  best = INFINITY;
  for (int r = 0; r < 16 && src && dst; r++) {
    memset(src, r, bytes);
    double t0 = now_s(wall);
    memcpy(dst, src, bytes);
    const double t = now_s(wall) - t0;
    best = t > 0 ? fmin(best, t) : best;
  }
  h->mem_gbs = 2.0 * (double)bytes / best / 1e9;
  free(a), free(b), free(c), free(src), free(dst);
}

static void *falloc(size_t floats) {
  size_t bytes = ((floats + 16) * sizeof(float) + 63) & ~(size_t)63;
  float *f = aligned_alloc(64, bytes);
  if (f)
    memset(f, 0, bytes);
  return f;
}

/* Readings that are not positive are skipped: a stalled thread-CPU clock
 * gives no time (see calib.c's min_reading). */
static void keep_two_smallest(double t, double *t1, double *t2) {
  if (!(t > 0))
    return;
  if (t < *t1)
    *t2 = *t1, *t1 = t;
  else if (t < *t2)
    *t2 = t;
}

/* One layer's tensors at batch B, as the training step holds them. */
typedef struct layer_buffers {
  int B;
  size_t nin, nout, nws;
  float *P, *S, *in, *out, *aux, *ws, *dout, *din, *dP;
  int32_t *labels;
} layer_buffers;

static void buffers_free(layer_buffers *t) {
  free(t->P), free(t->S), free(t->in), free(t->out), free(t->aux), free(t->ws), free(t->dout);
  free(t->din), free(t->dP), free(t->labels);
}

/* Allocates `l`'s buffers at batch B, weights initialised and a random
 * input and output gradient; returns 0 or -1 (out of memory: all freed). */
static int buffers_alloc(const bt_layer *l, int B, layer_buffers *t) {
  memset(t, 0, sizeof *t);
  t->B = B;
  t->nin = bt_shape_elems(l->in) * B, t->nout = bt_shape_elems(l->out) * B;
  t->nws = bt_layer_ws_floats(l, B);
  t->P = falloc(l->n_params), t->S = falloc(l->n_state), t->in = falloc(t->nin);
  t->out = falloc(t->nout), t->aux = falloc(bt_layer_aux_floats(l, B)), t->ws = falloc(t->nws);
  t->dout = falloc(t->nout), t->din = falloc(t->nin), t->dP = falloc(l->n_params);
  t->labels = calloc((size_t)B, sizeof(int32_t));
  if (!t->P || !t->S || !t->in || !t->out || !t->aux || !t->ws || !t->dout || !t->din || !t->dP ||
      !t->labels) {
    buffers_free(t);
    return -1;
  }
  bt_layer_init(l, t->P, t->S, 7);
  bt_rng r;
  bt_rng_seed(&r, 11, 0x11);
  for (size_t i = 0; i < t->nin; i++)
    t->in[i] = bt_rng_normal(&r);
  for (size_t i = 0; i < t->nout; i++)
    t->dout[i] = 1e-3f * bt_rng_normal(&r);
  return 0;
}

/* The two smallest forward and backward seconds of `repeats` runs after a
 * warm-up, each backward with the input gradient (without it when !din)
 * right after its forward; a layer whose two smallest runs disagree by > 5%
 * gets up to 3 more rounds. Returns that spread. */
static double time_pairs(const bt_layer *l, layer_buffers *t, int din, int repeats, int wall,
                         double f[2], double b[2]) {
  double spread = 0;
  f[0] = f[1] = b[0] = b[1] = INFINITY;
  for (int round = 0; round < 4; round++) {
    for (int k = round == 0 ? -1 : 0; k < repeats; k++) {
      bt_exec x = {.training = 1,
                   .seed = 1,
                   .ws = t->ws,
                   .ws_floats = t->nws,
                   .labels = t->labels,
                   .loss_scale = 1.0f / (float)t->B};
      double t0 = now_s(wall);
      bt_layer_forward(l, t->P, t->S, t->in, t->out, t->aux, t->B, &x);
      double t1 = now_s(wall);
      bt_layer_backward(l, t->P, t->in, t->out, t->aux, t->dout, din ? t->din : NULL, t->dP, t->B,
                        &x);
      double t2 = now_s(wall);
      if (k < 0)
        continue;
      keep_two_smallest(t1 - t0, &f[0], &f[1]);
      keep_two_smallest(t2 - t1, &b[0], &b[1]);
    }
    spread = repeats > 1 ? fmax((f[1] - f[0]) / f[0], (b[1] - b[0]) / b[0]) : 0;
    if (spread <= 0.05)
      break;
  }
  return spread;
}

/* Minimum forward and backward seconds (time_pairs); with `nodin`, of a
 * convolution or dense layer, also the backward without the input gradient
 * (a model's first layer), in runs of its own: run between the others, its
 * extra pass over the weight gradient evicted part of a dense layer's
 * weights from L2 before the next forward (a 64 x 4096 layer at batch 1
 * took 1.55x as long as in a set profiled without it, 7 December). */
static int time_layer(bt_profile_entry *e, int repeats, int wall, int nodin, bt_err *err) {
  const bt_layer *l = &e->layer;
  layer_buffers t;
  if (buffers_alloc(l, e->batch, &t) < 0)
    return bt_err_set(err, "out of memory timing %s", e->spec);
  double f[2], b[2], nf[2], nb[2];
  e->spread = time_pairs(l, &t, 1, repeats, wall, f, b);
  nodin = nodin && bt_pass_backward_of(l, 0) == BT_PASS_BWD_NODIN;
  if (nodin)
    e->spread = fmax(e->spread, time_pairs(l, &t, 0, repeats, wall, nf, nb));
  /* No positive reading in any run: faster than the clock resolves. */
  e->host_fwd = isfinite(f[0]) ? f[0] : 1e-9;
  e->host_bwd = isfinite(b[0]) ? b[0] : 1e-9;
  e->host_bwd_nodin = nodin ? (isfinite(nb[0]) ? nb[0] : 1e-9) : NAN;
  buffers_free(&t);
  return 0;
}

int bt_profile_find(const bt_profile *p, const bt_layer *l, int batch) {
  char spec[BT_LAYER_SPEC_MAX];
  if (bt_layer_spec_format(l, spec, sizeof spec) < 0)
    return -1;
  for (int i = 0; i < p->n; i++)
    if (p->e[i].batch == batch && strcmp(p->e[i].spec, spec) == 0)
      return i;
  return -1;
}

/* Times zoo model `z` whole at `batch`, as the runtime's calibration does
 * (bt_calib_stage: forward through every layer, then backward, the minimum
 * of `repeats` runs), and keeps each held row's minimum in fwd/bwd. A
 * model's first layer computes no input gradient there, so its row keeps
 * the back-to-back backward. */
static int time_model_rows(const bt_profile *p, size_t z, int batch, int repeats, int wall,
                           double *fwd, double *bwd, bt_err *err) {
  bt_model m;
  if (bt_zoo_build(zoo_models[z].name, zoo_models[z].in, 10, &m, err) < 0)
    return -1;
  int *rows = malloc((size_t)m.n_layers * sizeof *rows), held = 0;
  double *f = malloc((size_t)m.n_layers * sizeof *f), *b = malloc((size_t)m.n_layers * sizeof *b);
  int rc = rows && f && b ? 0 : bt_err_set(err, "out of memory timing %s", zoo_models[z].name);
  for (int i = 0; rc == 0 && i < m.n_layers; i++)
    held += (rows[i] = bt_profile_find(p, &m.layers[i], batch)) >= 0;
  bt_stage s;
  if (rc == 0 && held > 0 && bt_stage_init(&s, &m, 0, m.n_layers, batch, 1, 7, err) == 0) {
    const bt_calib_options o = {
        .repeats = repeats, .seed = 1, .batch_size = batch, .wall_clock = wall};
    bt_calib_result res;
    rc = bt_calib_stage(&s, &m, batch, &o, f, b, &res, err);
    for (int i = 0; rc == 0 && i < m.n_layers; i++) {
      if (rows[i] < 0)
        continue;
      fwd[rows[i]] = fmin(fwd[rows[i]], f[i]);
      if (i > 0)
        bwd[rows[i]] = fmin(bwd[rows[i]], b[i]);
    }
    bt_stage_free(&s);
  } else if (rc == 0 && held > 0) {
    rc = -1;
  }
  free(rows), free(f), free(b);
  bt_model_free(&m);
  return rc;
}

/* One in-model pass over every zoo model and batch the profile holds rows
 * of: fwd/bwd per row, INFINITY where no model ran it. Back to back a layer
 * finds its weights and stashed tensors in the caches; inside its model the
 * other layers have pushed them out, and the runtime's calibration, the
 * emulated devices' truth, times it there (docs/predictor.md, item 5). */
static int time_zoo_in_model(const bt_profile *p, int repeats, int wall, double *fwd, double *bwd,
                             bt_err *err) {
  for (int i = 0; i < p->n; i++)
    fwd[i] = bwd[i] = INFINITY;
  for (size_t z = 0; z < sizeof zoo_models / sizeof *zoo_models; z++)
    for (int k = 0; k < 1 + zoo_models[z].two_batches; k++)
      if (time_model_rows(p, z, k ? 32 : 8, repeats, wall, fwd, bwd, err) < 0)
        return -1;
  return 0;
}

/* Keeps the smallest (best) and second smallest (second) of each row's
 * finite readings. */
static void keep_best(int n, const double *t, double *best, double *second) {
  for (int i = 0; i < n; i++) {
    if (!isfinite(t[i]))
      continue;
    second[i] = fmin(second[i], fmax(best[i], t[i]));
    best[i] = fmin(best[i], t[i]);
  }
}

/* Host seconds `t` of `pass` mapped to `dev` (NULL: the host keeps them);
 * NaN stays NaN. */
static double map_pass(const bt_device *dev, const bt_device *host, const bt_profile_entry *e,
                       bt_pass pass, double t) {
  if (!isfinite(t) || !dev)
    return t;
  return bt_device_layer_mapped(dev, host, &e->layer, e->batch, pass, t, 0).total;
}

int bt_profile_measure(bt_profile *p, const bt_device *dev, const bt_device *host, int repeats,
                       int wall, bt_profile_progress progress, void *ctx, bt_err *err) {
  if (repeats < 1)
    return bt_err_set(err, "repeats must be >= 1 (got %d)", repeats);
  if (p->passes < 1)
    p->passes = 1;
  if (p->passes > 100)
    return bt_err_set(err, "passes must be in 1..100 (got %d)", p->passes);
  p->repeats = repeats;
  snprintf(p->clock, sizeof p->clock, "%s", wall ? "wall" : "thread");
  snprintf(p->device, sizeof p->device, "%s", dev ? dev->name : "host");
  /* Passes over the whole corpus, minimum per layer over the passes: the load
   * of a shared host comes in bursts that slow down runs of consecutive
   * layers (within one pass neighbouring rows' errors correlate), and a
   * later pass finds most of those layers in a quiet moment. */
  const int n = p->n, P = p->passes;
  double *best = malloc((size_t)(12 * n + 1) * sizeof *best);
  if (!best)
    return bt_err_set(err, "out of memory");
  double *bf = best, *bb = best + n, *sf = best + 2 * n, *sb = best + 3 * n;
  double *bn = best + 4 * n, *sn = best + 5 * n;
  /* In-model readings of the zoo rows (p->in_model): best, second, one pass. */
  double *mf = best + 6 * n, *mb = best + 7 * n, *msf = best + 8 * n, *msb = best + 9 * n;
  double *tf = best + 10 * n, *tb = best + 11 * n;
  for (int i = 0; i < 12 * n; i++)
    best[i] = INFINITY;
  /* The host rates behind the mapping are kept the same way: measured again
   * before every later pass, the best figures kept (a load burst during the
   * one measurement at the start otherwise skews every mapped time). */
  bt_device host_best = *host;
  bt_err e0;
  if (P > 1 && bt_host_as_device(&p->host, &host_best, &e0) < 0)
    host_best = *host;
  for (int pass = 0; pass < P; pass++) {
    if (pass > 0) {
      bt_host_rates r;
      bt_profile_host_rates(&r, wall);
      if (r.sgemm_gflops > p->host.sgemm_gflops || r.mem_gbs > p->host.mem_gbs) {
        bt_host_rates m = p->host;
        m.sgemm_gflops = fmax(m.sgemm_gflops, r.sgemm_gflops);
        m.mem_gbs = fmax(m.mem_gbs, r.mem_gbs);
        bt_err e2;
        if (bt_host_as_device(&m, &host_best, &e2) == 0)
          p->host = m;
      }
    }
    for (int i = 0; i < n; i++) {
      bt_profile_entry *e = &p->e[i];
      if (time_layer(e, repeats, wall, p->nodin, err) < 0) {
        free(best);
        return -1;
      }
      sf[i] = fmin(sf[i], fmax(bf[i], e->host_fwd));
      bf[i] = fmin(bf[i], e->host_fwd);
      sb[i] = fmin(sb[i], fmax(bb[i], e->host_bwd));
      bb[i] = fmin(bb[i], e->host_bwd);
      if (isfinite(e->host_bwd_nodin)) {
        sn[i] = fmin(sn[i], fmax(bn[i], e->host_bwd_nodin));
        bn[i] = fmin(bn[i], e->host_bwd_nodin);
      }
      if (progress)
        progress(ctx, pass * n + i + 1, P * n);
    }
    if (p->in_model) {
      if (time_zoo_in_model(p, repeats, wall, tf, tb, err) < 0) {
        free(best);
        return -1;
      }
      keep_best(n, tf, mf, msf);
      keep_best(n, tb, mb, msb);
    }
  }
  for (int i = 0; i < n; i++) {
    bt_profile_entry *e = &p->e[i];
    e->host_fwd = bf[i], e->host_bwd = bb[i];
    /* A zoo row's in-model figures (a model's first layer has no backward
     * with the input gradient there). */
    e->host_fwd_model = isfinite(mf[i]) ? mf[i] : NAN;
    e->host_bwd_model = isfinite(mb[i]) ? mb[i] : NAN;
    e->spread_model = isfinite(mf[i]) && isfinite(msf[i]) ? (msf[i] - mf[i]) / mf[i] : NAN;
    if (isfinite(mb[i]) && isfinite(msb[i]))
      e->spread_model =
          fmax(isfinite(e->spread_model) ? e->spread_model : 0, (msb[i] - mb[i]) / mb[i]);
    e->host_bwd_nodin = isfinite(bn[i]) ? bn[i] : NAN;
    /* Several passes: the spread is that of the two best passes. */
    if (P > 1)
      e->spread = fmax((sf[i] - bf[i]) / bf[i], (sb[i] - bb[i]) / bb[i]);
    if (P > 1 && isfinite(bn[i]) && isfinite(sn[i]))
      e->spread = fmax(e->spread, (sn[i] - bn[i]) / bn[i]);
    e->fwd_model = map_pass(dev, &host_best, e, BT_PASS_FWD, e->host_fwd_model);
    e->bwd_model = map_pass(dev, &host_best, e, BT_PASS_BWD, e->host_bwd_model);
    e->fwd = map_pass(dev, &host_best, e, BT_PASS_FWD, e->host_fwd);
    e->bwd = map_pass(dev, &host_best, e, BT_PASS_BWD, e->host_bwd);
    e->bwd_nodin = map_pass(dev, &host_best, e, BT_PASS_BWD_NODIN, e->host_bwd_nodin);
  }
  free(best);
  return 0;
}

/* ---- HDF5 ------------------------------------------------------------------ */

static herr_t attr_str(hid_t loc, const char *name, const char *v) {
  hid_t t = H5Tcopy(H5T_C_S1);
  H5Tset_size(t, H5T_VARIABLE);
  H5Tset_cset(t, H5T_CSET_UTF8);
  hid_t s = H5Screate(H5S_SCALAR);
  hid_t a = H5Acreate2(loc, name, t, s, H5P_DEFAULT, H5P_DEFAULT);
  herr_t rc = a < 0 ? -1 : H5Awrite(a, t, &v);
  if (a >= 0)
    H5Aclose(a);
  H5Sclose(s);
  H5Tclose(t);
  return rc;
}

static herr_t attr_num(hid_t loc, const char *name, hid_t ftype, hid_t mtype, const void *v) {
  hid_t s = H5Screate(H5S_SCALAR);
  hid_t a = H5Acreate2(loc, name, ftype, s, H5P_DEFAULT, H5P_DEFAULT);
  herr_t rc = a < 0 ? -1 : H5Awrite(a, mtype, v);
  if (a >= 0)
    H5Aclose(a);
  H5Sclose(s);
  return rc;
}

static herr_t write_ds(hid_t f, const char *name, hid_t ftype, hid_t mtype, hsize_t n,
                       const void *data) {
  hid_t s = H5Screate_simple(1, &n, NULL);
  hid_t d = H5Dcreate2(f, name, ftype, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  herr_t rc = d < 0 ? -1 : H5Dwrite(d, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, data);
  if (d >= 0)
    H5Dclose(d);
  H5Sclose(s);
  return rc;
}

int bt_profile_write(const bt_profile *p, const char *path, bt_err *err) {
  const hsize_t n = (hsize_t)p->n;
  bt_h5_quiet q = bt_h5_quiet_begin();
  hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  if (f < 0) {
    bt_h5_quiet_end(q);
    return bt_err_set(err,
                      "%s: cannot create the profile file (directory missing or not "
                      "writable?)",
                      path);
  }
  double *v = malloc((n + 1) * sizeof(double) * 5);
  int32_t *bi = malloc((n + 1) * sizeof(int32_t));
  const char **specs = malloc((n + 1) * sizeof(char *)), **srcs = malloc((n + 1) * sizeof(char *));
  herr_t rc = v && bi && specs && srcs ? 0 : -1;
  const int32_t ver = BT_PROFILE_VERSION, thr = p->threads, rep = p->repeats,
                pas = p->passes > 0 ? p->passes : 1;
  const uint64_t seed = p->seed;
  rc |= attr_str(f, "format", BT_PROFILE_FORMAT);
  rc |= attr_num(f, "version", H5T_STD_I32LE, H5T_NATIVE_INT32, &ver);
  rc |= attr_str(f, "device", p->device);
  rc |= attr_str(f, "blis_arch", p->blis_arch);
  rc |= attr_num(f, "threads", H5T_STD_I32LE, H5T_NATIVE_INT32, &thr);
  rc |= attr_str(f, "clock", p->clock);
  rc |= attr_num(f, "repeats", H5T_STD_I32LE, H5T_NATIVE_INT32, &rep);
  rc |= attr_num(f, "passes", H5T_STD_I32LE, H5T_NATIVE_INT32, &pas);
  rc |= attr_num(f, "seed", H5T_STD_U64LE, H5T_NATIVE_UINT64, &seed);
  if (p->host_key[0])
    rc |= attr_str(f, "host_key", p->host_key);
  const int32_t in_model = p->in_model;
  rc |= attr_num(f, "zoo_in_model", H5T_STD_I32LE, H5T_NATIVE_INT32, &in_model);
  rc |= attr_num(f, "host_sgemm_gflops", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &p->host.sgemm_gflops);
  rc |= attr_num(f, "host_mem_gbs", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &p->host.mem_gbs);
  if (rc == 0) {
    hid_t st = H5Tcopy(H5T_C_S1);
    H5Tset_size(st, H5T_VARIABLE);
    H5Tset_cset(st, H5T_CSET_UTF8);
    for (int i = 0; i < p->n; i++) {
      specs[i] = p->e[i].spec;
      srcs[i] = p->e[i].source;
      bi[i] = p->e[i].batch;
    }
    rc |= write_ds(f, "spec", st, st, n, specs);
    rc |= write_ds(f, "source", st, st, n, srcs);
    rc |= write_ds(f, "batch", H5T_STD_I32LE, H5T_NATIVE_INT32, n, bi);
    H5Tclose(st);
    static const char *names[] = {"host_fwd", "host_bwd", "fwd", "bwd", "spread"};
    for (int k = 0; k < 5; k++) {
      for (int i = 0; i < p->n; i++) {
        const bt_profile_entry *e = &p->e[i];
        const double x[] = {e->host_fwd, e->host_bwd, e->fwd, e->bwd, e->spread};
        v[i] = x[k];
      }
      rc |= write_ds(f, names[k], H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, n, v);
    }
    /* Optional: sets profiled with --in-model (NaN where a layer was not). */
    int any_model = 0;
    for (int i = 0; i < p->n; i++)
      any_model = any_model || isfinite(p->e[i].host_fwd_model);
    static const char *mnames[] = {"host_fwd_model", "host_bwd_model", "fwd_model", "bwd_model",
                                   "spread_model"};
    for (int k = 0; any_model && k < 5; k++) {
      for (int i = 0; i < p->n; i++) {
        const bt_profile_entry *e = &p->e[i];
        const double x[] = {e->host_fwd_model, e->host_bwd_model, e->fwd_model, e->bwd_model,
                            e->spread_model};
        v[i] = x[k];
      }
      rc |= write_ds(f, mnames[k], H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, n, v);
    }
    /* Optional: sets profiled with --nodin (NaN where a layer was not). */
    int any = 0;
    for (int i = 0; i < p->n; i++)
      any = any || isfinite(p->e[i].host_bwd_nodin);
    for (int k = 0; any && k < 2; k++) {
      for (int i = 0; i < p->n; i++)
        v[i] = k ? p->e[i].bwd_nodin : p->e[i].host_bwd_nodin;
      rc |=
          write_ds(f, k ? "bwd_nodin" : "host_bwd_nodin", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, n, v);
    }
  }
  free(v), free(bi), free(specs), free(srcs);
  if (H5Fclose(f) < 0)
    rc = -1;
  bt_h5_quiet_end(q);
  return rc < 0 ? bt_err_set(err, "%s: writing the profile failed", path) : 0;
}

static int read_attr_str(hid_t f, const char *name, char *buf, size_t len) {
  hid_t a = H5Aopen(f, name, H5P_DEFAULT);
  if (a < 0)
    return -1;
  hid_t t = H5Tcopy(H5T_C_S1);
  H5Tset_size(t, H5T_VARIABLE);
  H5Tset_cset(t, H5T_CSET_UTF8);
  char *s = NULL;
  int rc = H5Aread(a, t, &s) < 0 || !s ? -1 : 0;
  if (rc == 0)
    snprintf(buf, len, "%s", s);
  if (s)
    H5free_memory(s);
  H5Tclose(t);
  H5Aclose(a);
  return rc;
}

static int read_attr(hid_t f, const char *name, hid_t mtype, void *v) {
  hid_t a = H5Aopen(f, name, H5P_DEFAULT);
  if (a < 0)
    return -1;
  int rc = H5Aread(a, mtype, v) < 0 ? -1 : 0;
  H5Aclose(a);
  return rc;
}

/* Reads a 1-D dataset of exactly n rows (n < 0: learns n). */
static int read_ds(hid_t f, const char *name, hid_t mtype, long *n, void **out, size_t elem) {
  hid_t d = H5Dopen2(f, name, H5P_DEFAULT);
  if (d < 0)
    return -1;
  hid_t s = H5Dget_space(d);
  hsize_t dims[2] = {0, 0};
  int rank = H5Sget_simple_extent_ndims(s);
  int rc = -1;
  if (rank == 1 && H5Sget_simple_extent_dims(s, dims, NULL) == 1 &&
      (*n < 0 || (hsize_t)*n == dims[0]) && dims[0] < 10000000) {
    *out = calloc(dims[0] + 1, elem);
    if (*out && H5Dread(d, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, *out) >= 0) {
      *n = (long)dims[0];
      rc = 0;
    }
  }
  H5Sclose(s);
  H5Dclose(d);
  return rc;
}

int bt_profile_read(const char *path, bt_profile *p, bt_err *err) {
  memset(p, 0, sizeof *p);
  bt_h5_quiet q = bt_h5_quiet_begin();
  hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0) {
    bt_h5_quiet_end(q);
    FILE *probe = fopen(path, "rb");
    if (!probe)
      return bt_err_set(err, "%s: no such profile file", path);
    fclose(probe);
    return bt_err_set(err,
                      "%s: not an HDF5 file (corrupt or truncated?); regenerate it with "
                      "'baton profile'",
                      path);
  }
  char fmt[64] = "";
  int32_t ver = 0, thr = 1, rep = 0, pas = 1;
  int rc = 0;
  if (read_attr_str(f, "format", fmt, sizeof fmt) < 0 || strcmp(fmt, BT_PROFILE_FORMAT) != 0)
    rc = bt_err_set(err, "%s: not a baton profiling set (format attribute '%s', expected '%s')",
                    path, fmt, BT_PROFILE_FORMAT);
  else if (read_attr(f, "version", H5T_NATIVE_INT32, &ver) < 0 || ver != BT_PROFILE_VERSION)
    rc = bt_err_set(err, "%s: profiling set version %d, this baton reads version %d", path,
                    (int)ver, BT_PROFILE_VERSION);
  else if (read_attr_str(f, "device", p->device, sizeof p->device) < 0 || !p->device[0] ||
           read_attr(f, "host_sgemm_gflops", H5T_NATIVE_DOUBLE, &p->host.sgemm_gflops) < 0 ||
           read_attr(f, "host_mem_gbs", H5T_NATIVE_DOUBLE, &p->host.mem_gbs) < 0)
    rc = bt_err_set(err, "%s: missing device or host-rate attributes", path);
  else if (!(p->host.sgemm_gflops > 0) || !isfinite(p->host.sgemm_gflops) ||
           !(p->host.mem_gbs > 0) || !isfinite(p->host.mem_gbs))
    rc = bt_err_set(err,
                    "%s: host rates must be positive and finite (sgemm %g GFLOP/s, "
                    "memory %g GB/s)",
                    path, p->host.sgemm_gflops, p->host.mem_gbs);
  if (rc == 0) {
    read_attr_str(f, "blis_arch", p->blis_arch, sizeof p->blis_arch);
    read_attr_str(f, "clock", p->clock, sizeof p->clock);
    read_attr(f, "threads", H5T_NATIVE_INT32, &thr);
    read_attr(f, "repeats", H5T_NATIVE_INT32, &rep);
    read_attr(f, "passes", H5T_NATIVE_INT32, &pas); /* optional: sets before it had 1 */
    read_attr(f, "seed", H5T_NATIVE_UINT64, &p->seed);
    if (read_attr_str(f, "host_key", p->host_key, sizeof p->host_key) < 0)
      p->host_key[0] = 0; /* optional: sets before it have none */
    int32_t in_model = 0; /* optional: sets before it timed every row back to back */
    read_attr(f, "zoo_in_model", H5T_NATIVE_INT32, &in_model);
    p->in_model = in_model != 0;
    p->threads = thr;
    p->repeats = rep;
    p->passes = pas >= 1 ? pas : 1;
  }
  long n = -1;
  char **specs = NULL, **srcs = NULL;
  int32_t *bi = NULL;
  double *v[5] = {0};
  static const char *names[] = {"host_fwd", "host_bwd", "fwd", "bwd", "spread"};
  hid_t st = H5Tcopy(H5T_C_S1);
  H5Tset_size(st, H5T_VARIABLE);
  H5Tset_cset(st, H5T_CSET_UTF8);
  if (rc == 0 && (read_ds(f, "spec", st, &n, (void **)&specs, sizeof(char *)) < 0 ||
                  read_ds(f, "source", st, &n, (void **)&srcs, sizeof(char *)) < 0 ||
                  read_ds(f, "batch", H5T_NATIVE_INT32, &n, (void **)&bi, sizeof(int32_t)) < 0))
    rc = bt_err_set(err, "%s: datasets spec, source and batch must exist with one row per layer",
                    path);
  for (int k = 0; rc == 0 && k < 5; k++)
    if (read_ds(f, names[k], H5T_NATIVE_DOUBLE, &n, (void **)&v[k], sizeof(double)) < 0)
      rc = bt_err_set(err, "%s: dataset %s is missing or has another length than spec (%ld rows)",
                      path, names[k], n);
  if (rc == 0 && n == 0)
    rc = bt_err_set(err, "%s: the profiling set has no layers", path);
  /* Optional pair (--nodin): both or neither, NaN or positive. */
  double *vn[2] = {0};
  const int has_nodin = rc == 0 && H5Lexists(f, "host_bwd_nodin", H5P_DEFAULT) > 0;
  if (rc == 0 && (has_nodin || H5Lexists(f, "bwd_nodin", H5P_DEFAULT) > 0) &&
      (read_ds(f, "host_bwd_nodin", H5T_NATIVE_DOUBLE, &n, (void **)&vn[0], sizeof(double)) < 0 ||
       read_ds(f, "bwd_nodin", H5T_NATIVE_DOUBLE, &n, (void **)&vn[1], sizeof(double)) < 0))
    rc = bt_err_set(err,
                    "%s: datasets host_bwd_nodin and bwd_nodin must both exist with one row per "
                    "layer, or neither",
                    path);
  /* Optional (--in-model): all five or none, NaN or positive. */
  double *vm[5] = {0};
  static const char *mnames[] = {"host_fwd_model", "host_bwd_model", "fwd_model", "bwd_model",
                                 "spread_model"};
  int has_model = 0;
  for (int k = 0; rc == 0 && k < 5; k++)
    has_model += H5Lexists(f, mnames[k], H5P_DEFAULT) > 0;
  for (int k = 0; rc == 0 && has_model && k < 5; k++)
    if (read_ds(f, mnames[k], H5T_NATIVE_DOUBLE, &n, (void **)&vm[k], sizeof(double)) < 0)
      rc = bt_err_set(err,
                      "%s: dataset %s is missing or has another length than spec (%ld rows); "
                      "an in-model set has host_fwd_model, host_bwd_model, fwd_model, "
                      "bwd_model and spread_model",
                      path, mnames[k], n);
  for (long i = 0; rc == 0 && i < n; i++) {
    if (!specs[i] || !srcs[i]) {
      rc = bt_err_set(err, "%s: row %ld has no spec", path, i);
      break;
    }
    for (int k = 0; k < 4; k++)
      if (!(v[k][i] > 0) || !isfinite(v[k][i])) {
        rc = bt_err_set(err, "%s: row %ld (%.200s): %s = %g; times must be positive and finite",
                        path, i, specs[i], names[k], v[k][i]);
        break;
      }
    for (int k = 0; rc == 0 && vn[0] && k < 2; k++)
      if (!isnan(vn[k][i]) && !(vn[k][i] > 0 && isfinite(vn[k][i])))
        rc = bt_err_set(err,
                        "%s: row %ld (%.200s): %s = %g; times must be positive and finite "
                        "(NaN: not timed)",
                        path, i, specs[i], k ? "bwd_nodin" : "host_bwd_nodin", vn[k][i]);
    for (int k = 0; rc == 0 && vm[0] && k < 4; k++)
      if (!isnan(vm[k][i]) && !(vm[k][i] > 0 && isfinite(vm[k][i])))
        rc = bt_err_set(err,
                        "%s: row %ld (%.200s): %s = %g; times must be positive and finite "
                        "(NaN: not timed)",
                        path, i, specs[i], mnames[k], vm[k][i]);
    if (rc == 0 && (bi[i] < 1 || bi[i] > 1 << 20))
      rc = bt_err_set(err, "%s: row %ld: batch %d out of range", path, i, (int)bi[i]);
    if (rc < 0)
      break;
    bt_layer l;
    if (bt_layer_spec_parse(specs[i], &l, err) < 0) {
      rc = bt_err_prefix(err, "%s: row %ld", path, i);
      break;
    }
    int added = bt_profile_add(p, l, bi[i], srcs[i], err);
    if (added < 0) {
      rc = -1;
      break;
    }
    if (added == 0) {
      rc = bt_err_set(err, "%s: row %ld (%.200s, batch %d) repeats an earlier row", path, i,
                      specs[i], (int)bi[i]);
      break;
    }
    bt_profile_entry *e = &p->e[p->n - 1];
    e->host_fwd = v[0][i], e->host_bwd = v[1][i], e->fwd = v[2][i], e->bwd = v[3][i];
    e->spread = isfinite(v[4][i]) ? v[4][i] : 0;
    if (vn[0])
      e->host_bwd_nodin = vn[0][i], e->bwd_nodin = vn[1][i];
    if (vm[0]) {
      e->host_fwd_model = vm[0][i], e->host_bwd_model = vm[1][i];
      e->fwd_model = vm[2][i], e->bwd_model = vm[3][i], e->spread_model = vm[4][i];
    }
  }
  if (specs) { /* variable-length strings were allocated by HDF5 */
    for (long i = 0; i < n; i++)
      if (specs[i])
        H5free_memory(specs[i]);
  }
  if (srcs)
    for (long i = 0; i < n; i++)
      if (srcs[i])
        H5free_memory(srcs[i]);
  free(specs), free(srcs), free(bi);
  for (int k = 0; k < 5; k++)
    free(v[k]);
  free(vn[0]), free(vn[1]);
  for (int k = 0; k < 5; k++)
    free(vm[k]);
  H5Tclose(st);
  H5Fclose(f);
  bt_h5_quiet_end(q);
  if (rc < 0)
    bt_profile_free(p);
  return rc;
}

void bt_profile_free(bt_profile *p) {
  for (int i = 0; i < p->n; i++)
    bt_layer_release(&p->e[i].layer);
  free(p->e);
  memset(p, 0, sizeof *p);
}

/* ---- directories of profiling sets ------------------------------------------ */

static int cmp_file_name(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static bt_profile_role role_of(const char *name, const bt_profile *p) {
  if (strncmp(name, "corpus-", 7) == 0)
    return BT_PROFILE_CORPUS;
  if (strcmp(p->device, "host") == 0 && strcmp(name, "host") != 0)
    return BT_PROFILE_VARIANT;
  return BT_PROFILE_DEVICE;
}

int bt_profile_dir_read(const char *dir, bt_profile_dir *out, bt_err *err) {
  memset(out, 0, sizeof *out);
  DIR *d = opendir(dir);
  if (!d)
    return bt_err_set(err, "%s: no such directory of profiling sets", dir);
  char *files[256];
  int nf = 0;
  struct dirent *de;
  while ((de = readdir(d)) && nf < 256) {
    size_t len = strlen(de->d_name);
    if (len > 3 && strcmp(de->d_name + len - 3, ".h5") == 0 && (files[nf] = strdup(de->d_name)))
      nf++;
  }
  closedir(d);
  qsort(files, (size_t)nf, sizeof *files, cmp_file_name);
  out->sets = calloc((size_t)nf + 1, sizeof *out->sets);
  out->names = calloc((size_t)nf + 1, sizeof *out->names);
  out->role = calloc((size_t)nf + 1, sizeof *out->role);
  int rc = out->sets && out->names && out->role ? 0 : bt_err_set(err, "out of memory");
  int n_dev = 0;
  for (int i = 0; i < nf; i++) {
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", dir, files[i]);
    if (rc == 0 && bt_profile_read(path, &out->sets[out->n], err) == 0) {
      files[i][strlen(files[i]) - 3] = '\0';
      out->names[out->n] = files[i];
      out->role[out->n] = role_of(files[i], &out->sets[out->n]);
      n_dev += out->role[out->n] == BT_PROFILE_DEVICE;
      out->n++;
    } else {
      rc = -1;
      free(files[i]);
    }
  }
  if (rc == 0 && n_dev == 0)
    rc = bt_err_set(err,
                    "%s: no device profiling sets (*.h5); make them with 'baton profile' or "
                    "experiments/predictor/profile-all.sh",
                    dir);
  if (rc < 0)
    bt_profile_dir_free(out);
  return rc;
}

int bt_profile_dir_select(const bt_profile_dir *d, bt_profile_role role, bt_profile *sets,
                          const char **names, int max) {
  int m = 0;
  for (int i = 0; i < d->n && m < max; i++)
    if (d->role[i] == role) {
      if (sets)
        sets[m] = d->sets[i];
      if (names)
        names[m] = d->names[i];
      m++;
    }
  return m;
}

void bt_profile_dir_free(bt_profile_dir *d) {
  for (int i = 0; i < d->n; i++) {
    bt_profile_free(&d->sets[i]);
    free(d->names[i]);
  }
  free(d->sets), free(d->names), free(d->role);
  memset(d, 0, sizeof *d);
}
