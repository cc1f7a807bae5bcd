/* modelfile: reading and writing model files (YAML); see include/baton/modelfile.h.
 *
 * Reading uses libyaml's document API through yamldoc.c: the whole file
 * becomes a node tree whose nodes keep line/column marks. The layers are
 * parsed into a bt_model with the same descriptor builders the zoo uses (so
 * defaults cannot drift), then shapes are checked by walking the layers and
 * their nodes side by side, so that a shape error points at the layer's own
 * line instead of a layer number. bt_model_finalize then does the real work
 * on a model known to fit.
 *
 * Writing emits one line per layer in flow style ("- conv2d: {out: 6, ...}"),
 * every hyper-parameter spelled out, so that diffs between model files read
 * like diffs between architectures. */
#include "baton/modelfile.h"
#include "baton/yamldoc.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Generous bounds that keep every derived size inside an int, which is how
 * layers.c stores shapes. */
enum { DIM_MAX = 65535, UNITS_MAX = 1 << 20, WINDOW_MAX = 65535, NAME_MAX_LEN = 63 };
/* Model files are a few KiB; a huge one is the wrong file. */
#define MODELFILE_MAX ((size_t)16 << 20)

/* Parameters each kind accepts, in the order the writer emits them, and an
 * example used by "missing parameter" hints. Kinds without parameters have
 * an empty list. */
typedef struct kind_info {
  const char *params[4];
  const char *example;
} kind_info;

static const kind_info kinds[BT_LAYER_KIND_COUNT] = {
    [BT_CONV2D] = {{"out", "kernel", "stride", "pad"},
                   "conv2d: {out: 64, kernel: 3, stride: 1, pad: 1}"},
    [BT_DWCONV2D] = {{"kernel", "stride", "pad"}, "dwconv2d: {kernel: 3, stride: 1, pad: 1}"},
    [BT_DENSE] = {{"units"}, "dense: {units: 128}"},
    [BT_MAXPOOL] = {{"kernel", "stride", "pad"}, "maxpool: {kernel: 2, stride: 2}"},
    [BT_AVGPOOL] = {{"kernel", "stride", "pad"}, "avgpool: {kernel: 2, stride: 2}"},
    [BT_DROPOUT] = {{"p"}, "dropout: {p: 0.5}"},
    [BT_RESIDUAL] = {{"body", "shortcut", "post"},
                     "residual: {post: relu, body: [conv2d: {out: 64, kernel: 3, pad: 1}], "
                     "shortcut: []}"},
};

static const char *const top_keys[] = {"name", "input", "classes", "layers"};
enum { N_TOP_KEYS = sizeof top_keys / sizeof top_keys[0] };

static void kind_list(char *buf, size_t n) {
  buf[0] = '\0';
  for (int k = 0; k < BT_LAYER_KIND_COUNT; k++)
    snprintf(buf + strlen(buf), n - strlen(buf), "%s%s", k ? ", " : "",
             bt_layer_kind_name((bt_layer_kind)k));
}

static void zoo_list(char *buf, size_t n) {
  buf[0] = '\0';
  for (int i = 0; i < bt_zoo_count; i++)
    snprintf(buf + strlen(buf), n - strlen(buf), "%s%s", i ? ", " : "", bt_zoo_names[i]);
}

/* ---- reading: YAML helpers ------------------------------------------------ */

/* yamldoc's reader, plus what model files add to it. */
typedef struct reader {
  bt_yaml_reader y;
  int classes; /* what the word `classes` stands for */
} reader;

/* Strict integer: a plain (unquoted) scalar of digits with an optional sign,
 * within [lo, hi]; with `classes_ok`, the word "classes" stands for the
 * class count. `what` names the value in messages ("conv2d.kernel"). */
static int int_value(const reader *r, const yaml_node_t *v, const char *what, long lo, long hi,
                     int classes_ok, int *out) {
  char got[96];
  if (v->type != YAML_SCALAR_NODE || bt_yaml_is_null(v)) {
    bt_yaml_describe(v, got, sizeof got);
    return bt_yaml_at(&r->y, v->start_mark, "%s: expected an integer%s, got %s", what,
                      classes_ok ? " or 'classes'" : "", got);
  }
  const char *s = bt_yaml_text(v);
  if (v->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
    return bt_yaml_at(&r->y, v->start_mark,
                      "%s: expected an integer, got the quoted string '%.*s%s'; remove "
                      "the quotes",
                      what, BT_YAML_SHOW(s));
  if (classes_ok && strcmp(s, "classes") == 0) {
    *out = r->classes;
    return 0;
  }
  const char *d = s + (*s == '-' || *s == '+');
  if (!*d || strspn(d, "0123456789") != strlen(d))
    return bt_yaml_at(&r->y, v->start_mark, "%s: expected an integer%s, got '%.*s%s'", what,
                      classes_ok ? " or 'classes'" : "", BT_YAML_SHOW(s));
  errno = 0;
  long x = strtol(s, NULL, 10);
  if (errno == ERANGE || x < lo || x > hi)
    return bt_yaml_at(&r->y, v->start_mark, "%s: %.*s%s is out of range; use %ld to %ld", what,
                      BT_YAML_SHOW(s), lo, hi);
  *out = (int)x;
  return 0;
}

/* An optional or required integer parameter of a layer (see int_value). */
static int int_param(const reader *r, const yaml_node_t *kind_node, const yaml_node_t *params,
                     bt_layer_kind kind, const char *key, int required, int def, long lo, long hi,
                     int classes_ok, int *out) {
  const char *kname = bt_layer_kind_name(kind);
  yaml_node_t *v = bt_yaml_lookup(&r->y, params, key);
  if (!v) {
    if (required)
      return bt_yaml_at(&r->y, kind_node->start_mark, "%s: missing parameter '%s'; write e.g. %s",
                        kname, key, kinds[kind].example);
    *out = def;
    return 0;
  }
  char what[64];
  snprintf(what, sizeof what, "%s.%s", kname, key);
  return int_value(r, v, what, lo, hi, classes_ok, out);
}

/* kernel: an integer (square) or [height, width]. */
static int kernel_param(const reader *r, const yaml_node_t *kind_node, const yaml_node_t *params,
                        bt_layer_kind kind, int *kh, int *kw) {
  const char *kname = bt_layer_kind_name(kind);
  yaml_node_t *v = bt_yaml_lookup(&r->y, params, "kernel");
  char what[64];
  snprintf(what, sizeof what, "%s.kernel", kname);
  if (!v)
    return bt_yaml_at(&r->y, kind_node->start_mark, "%s: missing parameter 'kernel'; write e.g. %s",
                      kname, kinds[kind].example);
  if (v->type != YAML_SEQUENCE_NODE) {
    if (int_value(r, v, what, 1, WINDOW_MAX, 0, kh) < 0)
      return -1;
    *kw = *kh;
    return 0;
  }
  yaml_node_item_t *it = v->data.sequence.items.start;
  if (v->data.sequence.items.top - it != 2)
    return bt_yaml_at(&r->y, v->start_mark,
                      "%s: expected one integer or [height, width], got a list of %d", what,
                      (int)(v->data.sequence.items.top - it));
  if (int_value(r, bt_yaml_node(&r->y, it[0]), what, 1, WINDOW_MAX, 0, kh) < 0 ||
      int_value(r, bt_yaml_node(&r->y, it[1]), what, 1, WINDOW_MAX, 0, kw) < 0)
    return -1;
  return 0;
}

/* Strict probability in [0, 1): a plain decimal number. */
static int prob_param(const reader *r, const yaml_node_t *params, const char *what, float def,
                      float *out) {
  yaml_node_t *v = bt_yaml_lookup(&r->y, params, "p");
  if (!v) {
    *out = def;
    return 0;
  }
  char got[96];
  if (v->type != YAML_SCALAR_NODE || bt_yaml_is_null(v)) {
    bt_yaml_describe(v, got, sizeof got);
    return bt_yaml_at(&r->y, v->start_mark, "%s: expected a number in [0, 1), got %s", what, got);
  }
  const char *s = bt_yaml_text(v);
  if (v->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
    return bt_yaml_at(&r->y, v->start_mark,
                      "%s: expected a number, got the quoted string '%.*s%s'; remove "
                      "the quotes",
                      what, BT_YAML_SHOW(s));
  char *end;
  /* strtof, not strtod: the writer prints the shortest text that strtof
   * maps back to the same float, so the round trip is exact. */
  float x = strtof(s, &end);
  if (!*s || *end || strspn(s, "0123456789+-.eE") != strlen(s))
    return bt_yaml_at(&r->y, v->start_mark, "%s: expected a number in [0, 1), got '%.*s%s'", what,
                      BT_YAML_SHOW(s));
  if (!(x >= 0.0f && x < 1.0f))
    return bt_yaml_at(&r->y, v->start_mark,
                      "%s: %.*s%s is out of range; use a probability in [0, 1)", what,
                      BT_YAML_SHOW(s));
  *out = x;
  return 0;
}

/* ---- reading: layers -------------------------------------------------------- */

typedef struct layer_vec {
  bt_layer *v;
  int n, cap;
} layer_vec;

static int vec_push(layer_vec *a, bt_layer l) {
  if (a->n == a->cap) {
    int cap = a->cap ? 2 * a->cap : 8;
    bt_layer *g = realloc(a->v, (size_t)cap * sizeof *g);
    if (!g)
      return -1;
    a->v = g;
    a->cap = cap;
  }
  a->v[a->n++] = l;
  return 0;
}

/* Layers inside a residual are never residual themselves (rejected by the
 * parser), so freeing the array is enough. */
static void vec_free(layer_vec *a) {
  free(a->v);
  memset(a, 0, sizeof *a);
}

static int parse_layer(const reader *r, const yaml_node_t *item, int nested, bt_layer *out);

/* A list of layers inside a residual block; null or [] is empty. */
static int parse_sub_list(const reader *r, const yaml_node_t *v, const char *what, layer_vec *out) {
  if (!v || bt_yaml_is_null(v))
    return 0;
  if (v->type != YAML_SEQUENCE_NODE) {
    char got[96];
    bt_yaml_describe(v, got, sizeof got);
    return bt_yaml_at(&r->y, v->start_mark,
                      "residual.%s: expected a list of layers (- conv2d: {...}), got %s", what,
                      got);
  }
  for (yaml_node_item_t *it = v->data.sequence.items.start; it < v->data.sequence.items.top; it++) {
    bt_layer l;
    if (parse_layer(r, bt_yaml_node(&r->y, *it), 1, &l) < 0)
      return -1;
    if (vec_push(out, l) < 0)
      return bt_err_set(r->y.err, "%s: out of memory", r->y.name);
  }
  return 0;
}

static int parse_residual(const reader *r, const yaml_node_t *kind_node, const yaml_node_t *params,
                          bt_layer *out) {
  if (!params)
    return bt_yaml_at(&r->y, kind_node->start_mark, "residual: missing 'body'; write e.g. %s",
                      kinds[BT_RESIDUAL].example);
  int post_relu = 0;
  yaml_node_t *post = bt_yaml_lookup(&r->y, params, "post");
  if (post) {
    if (post->type != YAML_SCALAR_NODE ||
        (strcmp(bt_yaml_text(post), "relu") != 0 && strcmp(bt_yaml_text(post), "none") != 0)) {
      char got[96];
      bt_yaml_describe(post, got, sizeof got);
      return bt_yaml_at(&r->y, post->start_mark, "residual.post: expected relu or none, got %s",
                        got);
    }
    post_relu = strcmp(bt_yaml_text(post), "relu") == 0;
  }
  yaml_node_t *body_node = bt_yaml_lookup(&r->y, params, "body");
  if (!body_node)
    return bt_yaml_at(&r->y, kind_node->start_mark, "residual: missing 'body'; write e.g. %s",
                      kinds[BT_RESIDUAL].example);
  layer_vec body = {0}, shortcut = {0};
  int rc = parse_sub_list(r, body_node, "body", &body);
  if (rc == 0 && body.n == 0)
    rc = bt_yaml_at(&r->y, body_node->start_mark,
                    "residual.body: is empty; give it at least one layer");
  if (rc == 0)
    rc = parse_sub_list(r, bt_yaml_lookup(&r->y, params, "shortcut"), "shortcut", &shortcut);
  if (rc == 0)
    *out = bt_residual(body.v, body.n, shortcut.v, shortcut.n, post_relu);
  vec_free(&body);
  vec_free(&shortcut);
  return rc;
}

/* Parses one entry of a layer list: "kind" or "kind: {parameters}".
 * `nested`: inside a residual block. */
static int parse_layer(const reader *r, const yaml_node_t *item, int nested, bt_layer *out) {
  char got[96], list[256];
  if (!item)
    return bt_err_set(r->y.err, "%s: broken YAML list", r->y.name);
  const yaml_node_t *kn = item, *params = NULL;
  if (item->type == YAML_MAPPING_NODE) {
    yaml_node_pair_t *p = item->data.mapping.pairs.start;
    long n = item->data.mapping.pairs.top - p;
    if (n == 0)
      return bt_yaml_at(&r->y, item->start_mark,
                        "empty layer {}; write a layer kind, e.g. relu or %s",
                        kinds[BT_CONV2D].example);
    kn = bt_yaml_node(&r->y, p[0].key);
    if (!kn || !bt_yaml_node(&r->y, p[0].value))
      return bt_yaml_at(&r->y, item->start_mark, "broken YAML mapping");
    if (n > 1) {
      const yaml_node_t *k2 = bt_yaml_node(&r->y, p[1].key);
      return bt_yaml_at(&r->y, k2 ? k2->start_mark : item->start_mark,
                        "a layer has one key, its kind, but this one also has '%.*s%s'; indent the "
                        "parameters under the kind or write them as %s",
                        BT_YAML_SHOW(k2 && k2->type == YAML_SCALAR_NODE ? bt_yaml_text(k2) : "?"),
                        kinds[BT_CONV2D].example);
    }
    params = bt_yaml_node(&r->y, p[0].value);
  } else if (item->type != YAML_SCALAR_NODE) {
    return bt_yaml_at(&r->y, item->start_mark, "expected a layer (e.g. relu or %s), got a list",
                      kinds[BT_CONV2D].example);
  }
  if (bt_yaml_name(&r->y, kn, "a layer kind") < 0)
    return -1;
  int kind = bt_layer_kind_parse(bt_yaml_text(kn));
  if (kind < 0) {
    kind_list(list, sizeof list);
    return bt_yaml_at(&r->y, kn->start_mark, "unknown layer kind '%.*s%s'; kinds are: %s",
                      BT_YAML_SHOW(bt_yaml_text(kn)), list);
  }
  if (nested && (kind == BT_RESIDUAL || kind == BT_SOFTMAX_CE))
    return bt_yaml_at(&r->y, kn->start_mark,
                      "a %s cannot sit inside a residual block; move it out%s", bt_yaml_text(kn),
                      kind == BT_RESIDUAL ? " (blocks follow each other, they do not nest)" : "");
  const char *kname = bt_layer_kind_name((bt_layer_kind)kind);
  if (params && bt_yaml_is_null(params))
    params = NULL; /* "relu:" */
  if (params && params->type != YAML_MAPPING_NODE) {
    bt_yaml_describe(params, got, sizeof got);
    if (!kinds[kind].params[0])
      return bt_yaml_at(&r->y, params->start_mark,
                        "%s takes no parameters, got %s; write just '- %s'", kname, got, kname);
    return bt_yaml_at(&r->y, params->start_mark,
                      "%s: expected a mapping of parameters, got %s; write e.g. %s", kname, got,
                      kinds[kind].example);
  }
  int n_allowed = 0;
  while (n_allowed < 4 && kinds[kind].params[n_allowed])
    n_allowed++;
  if (params && bt_yaml_check_keys(&r->y, params, kname, "parameter", kinds[kind].params, n_allowed,
                                   BT_YAML_BAD_KEY_AS_NAME) < 0)
    return -1;

  int units = 0, kh = 1, kw = 1, stride = 1, pad = 0;
  float p = 0.5f;
  if (kind == BT_CONV2D &&
      int_param(r, kn, params, BT_CONV2D, "out", 1, 0, 1, UNITS_MAX, 1, &units) < 0)
    return -1;
  switch ((bt_layer_kind)kind) {
  case BT_CONV2D:
  case BT_DWCONV2D:
  case BT_MAXPOOL:
  case BT_AVGPOOL: {
    if (kernel_param(r, kn, params, (bt_layer_kind)kind, &kh, &kw) < 0)
      return -1;
    /* Pools default to non-overlapping windows, as in PyTorch; a
     * non-square pool has no single such stride, so it must say. */
    int pool = kind == BT_MAXPOOL || kind == BT_AVGPOOL;
    int def_stride = pool ? kh : 1;
    if (pool && kh != kw && !bt_yaml_lookup(&r->y, params, "stride"))
      return bt_yaml_at(&r->y, kn->start_mark, "%s: a %dx%d window needs an explicit 'stride'",
                        kname, kh, kw);
    if (int_param(r, kn, params, (bt_layer_kind)kind, "stride", 0, def_stride, 1, WINDOW_MAX, 0,
                  &stride) < 0 ||
        int_param(r, kn, params, (bt_layer_kind)kind, "pad", 0, 0, 0, WINDOW_MAX, 0, &pad) < 0)
      return -1;
    if (kind == BT_CONV2D)
      *out = bt_conv2d(units, kh, stride, pad);
    else if (kind == BT_DWCONV2D)
      *out = bt_dwconv2d(kh, stride, pad);
    else if (kind == BT_MAXPOOL)
      *out = bt_maxpool(kh, stride, pad);
    else
      *out = bt_avgpool(kh, stride, pad);
    out->kw = kw;
    return 0;
  }
  case BT_DENSE:
    if (int_param(r, kn, params, BT_DENSE, "units", 1, 0, 1, UNITS_MAX, 1, &units) < 0)
      return -1;
    *out = bt_dense(units);
    return 0;
  case BT_DROPOUT:
    if (prob_param(r, params, "dropout.p", 0.5f, &p) < 0)
      return -1;
    *out = bt_dropout(p);
    return 0;
  case BT_RESIDUAL:
    return parse_residual(r, kn, params, out);
  case BT_RELU:
    *out = bt_relu();
    return 0;
  case BT_RELU6:
    *out = bt_relu6();
    return 0;
  case BT_GLOBAL_AVGPOOL:
    *out = bt_global_avgpool();
    return 0;
  case BT_BATCHNORM:
    *out = bt_batchnorm();
    return 0;
  case BT_FLATTEN:
    *out = bt_flatten();
    return 0;
  case BT_SOFTMAX_CE:
    *out = bt_softmax_ce();
    return 0;
  case BT_LAYER_KIND_COUNT:
    break;
  }
  return bt_yaml_at(&r->y, kn->start_mark, "layer kind '%s' is not supported in model files",
                    kname);
}

/* ---- reading: shapes ------------------------------------------------------- */

/* The node of sub-layer j of the residual whose entry is `item`. */
static const yaml_node_t *sub_node(const reader *r, const yaml_node_t *item, const bt_layer *l,
                                   int j) {
  const yaml_node_t *params = bt_yaml_node(&r->y, item->data.mapping.pairs.start[0].value);
  const yaml_node_t *seq = bt_yaml_lookup(&r->y, params, j < l->n_body ? "body" : "shortcut");
  return bt_yaml_node(&r->y, seq->data.sequence.items.start[j < l->n_body ? j : j - l->n_body]);
}

/* Finalizes one layer at input `in`, naming it by its position in the file.
 * `where_tail` is "layer 7 (conv2d)" or the like. */
static int finalize_at(const reader *r, bt_layer *l, bt_shape in, yaml_mark_t mark,
                       const char *where_tail) {
  char where[320];
  snprintf(where, sizeof where, "%.150s:%zu:%zu: %.120s", r->y.name, mark.line + 1, mark.column + 1,
           where_tail);
  if (bt_shape_elems(in) > INT_MAX)
    return bt_err_set(r->y.err,
                      "%s: input %dx%dx%d has more than %d values; shrink the layers before", where,
                      in.h, in.w, in.c, INT_MAX);
  l->in = in;
  return bt_layer_finalize(l, where, r->y.err);
}

/* Walks the layers with their file entries (items; an appended softmax_ce
 * has none and is reported at `tail`) so that any shape error names the
 * line of the layer at fault. bt_model_finalize repeats the work (cheap) and
 * stays the single source of the final shapes, sizes and offsets. */
static int check_shapes(const reader *r, bt_model *m, const yaml_node_t *seq, yaml_mark_t tail) {
  yaml_node_item_t *items = seq->data.sequence.items.start;
  int n_items = (int)(seq->data.sequence.items.top - items);
  bt_shape shape = m->input;
  for (int i = 0; i < m->n_layers; i++) {
    bt_layer *l = &m->layers[i];
    const yaml_node_t *item = i < n_items ? bt_yaml_node(&r->y, items[i]) : NULL;
    yaml_mark_t mark = item ? item->start_mark : tail;
    const char *kname = bt_layer_kind_name(l->kind);
    char tail_txt[96];
    snprintf(tail_txt, sizeof tail_txt, "layer %d (%s)", i + 1, kname);
    if (l->kind == BT_SOFTMAX_CE && i != m->n_layers - 1)
      return bt_yaml_at(&r->y, mark,
                        "%s must be the last layer (it turns the class scores into the loss); "
                        "move it to the end or remove it",
                        tail_txt);
    if (l->kind == BT_RESIDUAL && item) {
      /* Sub-layers first, each at its own line; then the block as a whole
       * (body/shortcut agreement, size limits) at the block's line. */
      bt_shape body = shape, shortcut = shape;
      for (int j = 0; j < l->n_body + l->n_short; j++) {
        bt_layer *s = &l->sub[j];
        const yaml_node_t *sn = sub_node(r, item, l, j);
        int in_body = j < l->n_body;
        char sub_txt[192];
        snprintf(sub_txt, sizeof sub_txt, "layer %d (residual), %s layer %d (%s)", i + 1,
                 in_body ? "body" : "shortcut", in_body ? j + 1 : j - l->n_body + 1,
                 bt_layer_kind_name(s->kind));
        if (finalize_at(r, s, in_body ? body : shortcut, sn->start_mark, sub_txt) < 0)
          return -1;
        *(in_body ? &body : &shortcut) = s->out;
      }
    }
    if (finalize_at(r, l, shape, mark, tail_txt) < 0)
      return -1;
    shape = l->out;
  }
  /* The classifier width: say where to fix it and mention `classes`. */
  const bt_layer *last = &m->layers[m->n_layers - 1];
  if (last->in.c != m->classes) {
    int k = m->n_layers - 2;
    if (k < 0) /* softmax_ce alone: the input itself holds the scores */
      return bt_yaml_at(&r->y, tail,
                        "the input gives %d class scores but the model has %d classes; add "
                        "'- dense: {units: classes}'",
                        last->in.c, m->classes);
    while (k > 0 && m->layers[k].kind != BT_DENSE && m->layers[k].kind != BT_CONV2D)
      k--;
    yaml_mark_t mark = k < n_items ? bt_yaml_node(&r->y, items[k])->start_mark : tail;
    bt_layer_kind kk = m->layers[k].kind;
    if (kk != BT_DENSE && kk != BT_CONV2D)
      return bt_yaml_at(&r->y, mark,
                        "layer %d (%s) gives %d class scores but the model has %d classes; end "
                        "the layers with '- dense: {units: classes}'",
                        k + 1, bt_layer_kind_name(kk), last->in.c, m->classes);
    return bt_yaml_at(&r->y, mark,
                      "layer %d (%s) gives %d class scores but the model has %d classes; write "
                      "'%s: classes' so that it follows the data",
                      k + 1, bt_layer_kind_name(kk), last->in.c, m->classes,
                      kk == BT_CONV2D ? "out" : "units");
  }
  return 0;
}

/* ---- reading: the document ------------------------------------------------ */

static int parse_shape(const reader *r, const yaml_node_t *v, bt_shape *out) {
  char got[96];
  if (v->type != YAML_SCALAR_NODE || bt_yaml_is_null(v)) {
    bt_yaml_describe(v, got, sizeof got);
    return bt_yaml_at(&r->y, v->start_mark, "input: expected HxWxC, e.g. 32x32x3; got %s", got);
  }
  const char *s = bt_yaml_text(v);
  int dims[3];
  const char *p = s;
  for (int i = 0; i < 3; i++) {
    size_t nd = strspn(p, "0123456789");
    if (nd == 0 || nd > 6 || (i < 2 && p[nd] != 'x') || (i == 2 && p[nd] != '\0'))
      return bt_yaml_at(&r->y, v->start_mark, "input: expected HxWxC, e.g. 32x32x3; got '%.*s%s'",
                        BT_YAML_SHOW(s));
    dims[i] = atoi(p);
    if (dims[i] < 1 || dims[i] > DIM_MAX)
      return bt_yaml_at(&r->y, v->start_mark, "input: %.*s%s: each dimension must be 1 to %d",
                        BT_YAML_SHOW(s), DIM_MAX);
    p += nd + 1;
  }
  *out = (bt_shape){dims[0], dims[1], dims[2]};
  if (bt_shape_elems(*out) > INT_MAX)
    return bt_yaml_at(&r->y, v->start_mark, "input: %s has more than %d values", s, INT_MAX);
  return 0;
}

/* The model name: the `name` key, else the file name without directory and
 * extension. */
static int model_name(const reader *r, const yaml_node_t *v, char *out, size_t n) {
  if (v) {
    char got[96];
    if (v->type != YAML_SCALAR_NODE || bt_yaml_is_null(v)) {
      bt_yaml_describe(v, got, sizeof got);
      return bt_yaml_at(&r->y, v->start_mark, "name: expected a model name, got %s", got);
    }
    size_t len = v->data.scalar.length;
    if (strlen(bt_yaml_text(v)) != len || len < 1 || len > NAME_MAX_LEN)
      return bt_yaml_at(&r->y, v->start_mark, "name: must be 1 to %d characters without NULs",
                        NAME_MAX_LEN);
    snprintf(out, n, "%s", bt_yaml_text(v));
    return 0;
  }
  const char *base = strrchr(r->y.name, '/');
  base = base ? base + 1 : r->y.name;
  size_t len = strlen(base);
  const char *dot = strrchr(base, '.');
  if (dot && (strcmp(dot, ".yaml") == 0 || strcmp(dot, ".yml") == 0))
    len = (size_t)(dot - base);
  snprintf(out, n, "%.*s", (int)(len < n - 1 ? len : n - 1), base);
  return 0;
}

/* Fills m from the document root; m is initialised once the header keys
 * are read (before that it is all zero). */
static int load_root(reader *r, const yaml_node_t *root, bt_shape input, int classes, bt_model *m) {
  char got[96];
  if (!root || bt_yaml_is_null(root))
    return bt_err_set(r->y.err,
                      "%.200s: empty model file; it needs the keys input, classes and "
                      "layers (see include/baton/modelfile.h)",
                      r->y.name);
  if (root->type != YAML_MAPPING_NODE) {
    bt_yaml_describe(root, got, sizeof got);
    return bt_yaml_at(&r->y, root->start_mark,
                      "expected a mapping with keys name, input, classes, layers; got "
                      "%s",
                      got);
  }
  if (bt_yaml_check_keys(&r->y, root, "model file", "key", top_keys, N_TOP_KEYS,
                         BT_YAML_BAD_KEY_AS_NAME) < 0)
    return -1;
  const yaml_node_t *in_node = bt_yaml_lookup(&r->y, root, "input"),
                    *cls_node = bt_yaml_lookup(&r->y, root, "classes"),
                    *layers = bt_yaml_lookup(&r->y, root, "layers");
  yaml_mark_t end = root->end_mark;
  if (!in_node)
    return bt_yaml_at(&r->y, root->start_mark,
                      "missing 'input': the HxWxC the layers are designed for, e.g. "
                      "'input: 32x32x3'");
  if (!cls_node)
    return bt_yaml_at(&r->y, root->start_mark,
                      "missing 'classes': the class count the layers are designed "
                      "for, e.g. 'classes: 10'");
  if (!layers)
    return bt_yaml_at(&r->y, root->start_mark,
                      "missing 'layers': the list of layers, e.g. 'layers: [flatten, "
                      "dense: {units: classes}]'");
  char name[NAME_MAX_LEN + 1];
  bt_shape file_input;
  int file_classes;
  if (model_name(r, bt_yaml_lookup(&r->y, root, "name"), name, sizeof name) < 0 ||
      parse_shape(r, in_node, &file_input) < 0 ||
      int_value(r, cls_node, "classes", 2, UNITS_MAX, 0, &file_classes) < 0)
    return -1;
  int override = input.h != 0 || input.w != 0 || input.c != 0;
  bt_shape use = override ? input : file_input;
  r->classes = classes > 0 ? classes : file_classes;
  if (layers->type != YAML_SEQUENCE_NODE) {
    bt_yaml_describe(layers, got, sizeof got);
    return bt_yaml_at(&r->y, layers->start_mark,
                      "layers: expected a list of layers (- conv2d: {...}), got %s", got);
  }
  if (layers->data.sequence.items.top == layers->data.sequence.items.start)
    return bt_yaml_at(&r->y, layers->start_mark,
                      "layers: is empty; a model needs at least one layer");

  bt_model_init(m, name, use, r->classes);
  for (yaml_node_item_t *it = layers->data.sequence.items.start;
       it < layers->data.sequence.items.top; it++) {
    bt_layer l;
    if (parse_layer(r, bt_yaml_node(&r->y, *it), 0, &l) < 0)
      return -1;
    bt_model_push(m, l);
  }
  if (m->layers[m->n_layers - 1].kind != BT_SOFTMAX_CE)
    bt_model_push(m, bt_softmax_ce());
  if (check_shapes(r, m, layers, end) < 0) {
    if (override && (use.h != file_input.h || use.w != file_input.w || use.c != file_input.c)) {
      /* If the layers fit the file's own input, the cause is the other
       * input size: say so. (The model is discarded, so re-checking it in
       * place is harmless.) */
      bt_err own;
      reader r2 = *r;
      r2.y.err = &own;
      m->input = file_input;
      if (check_shapes(&r2, m, layers, end) == 0 && r->y.err) {
        char msg[BT_ERR_MSG_MAX];
        snprintf(msg, sizeof msg,
                 "%.800s (this file's layers are designed for input %dx%dx%d, "
                 "not %dx%dx%d)",
                 r->y.err->msg, file_input.h, file_input.w, file_input.c, use.h, use.w, use.c);
        bt_err_set(r->y.err, "%s", msg);
      }
    }
    return -1;
  }
  if (bt_model_finalize(m, r->y.err) < 0)
    return bt_err_prefix(r->y.err, "%.200s", r->y.name);
  return 0;
}

/* load_root's arguments, passed through bt_yaml_load. */
typedef struct root_args {
  reader *r;
  bt_shape input;
  int classes;
  bt_model *m;
} root_args;

/* A bt_yaml_root_fn; its reader is a->r->y, which load_root needs writable. */
static int load_root_args(const bt_yaml_reader *y, const yaml_node_t *root, void *arg) {
  const root_args *a = arg;
  return load_root(a->r, root, a->input, a->classes, a->m);
}

int bt_modelfile_load_string(const char *yaml, const char *name_for_errors, bt_shape input,
                             int classes, bt_model *m, bt_err *err) {
  memset(m, 0, sizeof *m);
  reader r = {.y = {.name = name_for_errors ? name_for_errors : "<string>", .err = err}};
  if (!yaml)
    return bt_err_set(err, "%.200s: no YAML text", r.y.name);
  int override = input.h != 0 || input.w != 0 || input.c != 0;
  if (override && (input.h < 1 || input.w < 1 || input.c < 1))
    return bt_err_set(err,
                      "%.200s: input %dx%dx%d: give all three dimensions, or 0x0x0 for the "
                      "file's own",
                      r.y.name, input.h, input.w, input.c);
  if (classes < 0 || classes == 1)
    return bt_err_set(err, "%.200s: %d classes: give at least 2, or 0 for the file's own", r.y.name,
                      classes);

  root_args a = {.r = &r, .input = input, .classes = classes, .m = m};
  int rc = bt_yaml_load(&r.y, yaml, load_root_args, &a,
                        "a model file holds one model (remove the '---' line and what follows)");
  if (rc < 0)
    bt_model_free(m);
  return rc;
}

int bt_modelfile_load(const char *path, bt_shape input, int classes, bt_model *m, bt_err *err) {
  memset(m, 0, sizeof *m);
  FILE *f = fopen(path, "rb");
  if (!f)
    return bt_err_set(err, "cannot open model file '%.300s': %s; check the path", path,
                      strerror(errno));
  char *buf = malloc(MODELFILE_MAX + 1);
  if (!buf) {
    fclose(f);
    return bt_err_set(err, "%.300s: out of memory", path);
  }
  size_t n = fread(buf, 1, MODELFILE_MAX + 1, f);
  int bad = ferror(f);
  fclose(f);
  int rc = 0;
  if (bad)
    rc = bt_err_set(err, "cannot read model file '%.300s'; check that it is a regular file", path);
  else if (n > MODELFILE_MAX)
    rc = bt_err_set(err, "%.300s: larger than %zu bytes; is it really a model file?", path,
                    MODELFILE_MAX);
  if (rc == 0) {
    buf[n] = '\0';
    const char *nul = memchr(buf, '\0', n);
    if (nul) {
      bt_yaml_reader r = {.name = path, .err = err};
      rc = bt_yaml_at(&r, bt_yaml_offset_mark(buf, (size_t)(nul - buf)),
                      "NUL byte in the file; a model file is text (UTF-8)");
    } else {
      rc = bt_modelfile_load_string(buf, path, input, classes, m, err);
    }
  }
  free(buf);
  return rc;
}

/* ---- writing ------------------------------------------------------------- */

/* Shortest text that strtof maps back to exactly `v`. */
static void float_text(char *buf, size_t n, float v) {
  for (int prec = 1; prec <= 9; prec++) {
    snprintf(buf, n, "%.*g", prec, (double)v);
    if (strtof(buf, NULL) == v)
      return;
  }
}

static void kernel_text(char *buf, size_t n, const bt_layer *l) {
  if (l->kh == l->kw)
    snprintf(buf, n, "%d", l->kh);
  else
    snprintf(buf, n, "[%d, %d]", l->kh, l->kw);
}

/* The entry of a non-residual layer, without "- ". `classes_units`: write
 * the width as the word `classes`. */
static void layer_text(char *buf, size_t n, const bt_layer *l, int classes_units) {
  const char *kname = bt_layer_kind_name(l->kind);
  char k[32], units[16], p[32];
  kernel_text(k, sizeof k, l);
  if (classes_units)
    snprintf(units, sizeof units, "classes");
  else
    snprintf(units, sizeof units, "%d", l->units);
  switch (l->kind) {
  case BT_CONV2D:
    snprintf(buf, n, "conv2d: {out: %s, kernel: %s, stride: %d, pad: %d}", units, k, l->stride,
             l->pad);
    break;
  case BT_DWCONV2D:
  case BT_MAXPOOL:
  case BT_AVGPOOL:
    snprintf(buf, n, "%s: {kernel: %s, stride: %d, pad: %d}", kname, k, l->stride, l->pad);
    break;
  case BT_DENSE:
    snprintf(buf, n, "dense: {units: %s}", units);
    break;
  case BT_DROPOUT:
    float_text(p, sizeof p, l->p);
    snprintf(buf, n, "dropout: {p: %s}", p);
    break;
  default:
    snprintf(buf, n, "%s", kname);
    break;
  }
}

typedef struct writer {
  FILE *f;
  int shapes; /* the model is finalized: comment shapes and sizes */
} writer;

enum { COMMENT_COL = 58 };

/* One list entry at `indent`, with the layer's output shape as a comment. */
static void entry(const writer *w, int indent, const char *body, const bt_layer *l) {
  int len = fprintf(w->f, "%*s- %s", indent, "", body);
  if (w->shapes) {
    fprintf(w->f, "%*s  # %dx%dx%d", len < COMMENT_COL ? COMMENT_COL - len : 0, "", l->out.h,
            l->out.w, l->out.c);
    if (l->n_params)
      fprintf(w->f, ", %zu params", l->n_params);
  }
  fputc('\n', w->f);
}

static int write_layers(const writer *w, const bt_layer *ls, int n, int indent, int classes_at,
                        bt_err *err) {
  char body[160];
  for (int i = 0; i < n; i++) {
    const bt_layer *l = &ls[i];
    if ((unsigned)l->kind >= BT_LAYER_KIND_COUNT)
      return bt_err_set(err, "cannot write layer %d: unknown kind %d", i + 1, (int)l->kind);
    if (l->kind != BT_RESIDUAL) {
      layer_text(body, sizeof body, l, i == classes_at);
      entry(w, indent, body, l);
      continue;
    }
    entry(w, indent, "residual:", l);
    fprintf(w->f, "%*spost: %s\n", indent + 4, "", l->post_relu ? "relu" : "none");
    fprintf(w->f, "%*sbody:\n", indent + 4, "");
    if (write_layers(w, l->sub, l->n_body, indent + 6, -1, err) < 0)
      return -1;
    if (l->n_short == 0) {
      fprintf(w->f, "%*sshortcut: []  # identity\n", indent + 4, "");
    } else {
      fprintf(w->f, "%*sshortcut:\n", indent + 4, "");
      if (write_layers(w, l->sub + l->n_body, l->n_short, indent + 6, -1, err) < 0)
        return -1;
    }
  }
  return 0;
}

/* The layer that produces the class scores, written as `classes` wide so the
 * file follows the data's class count: the last dense or conv2d, if only
 * channel-preserving layers follow it and it is exactly `classes` wide. */
static int classifier_index(const bt_model *m) {
  for (int i = m->n_layers - 1; i >= 0; i--) {
    const bt_layer *l = &m->layers[i];
    switch (l->kind) {
    case BT_SOFTMAX_CE:
    case BT_RELU:
    case BT_RELU6:
    case BT_DROPOUT:
    case BT_BATCHNORM:
    case BT_GLOBAL_AVGPOOL:
    case BT_MAXPOOL:
    case BT_AVGPOOL:
    case BT_DWCONV2D:
      continue;
    case BT_DENSE:
    case BT_CONV2D:
      return l->units == m->classes ? i : -1;
    default:
      return -1;
    }
  }
  return -1;
}

/* A plain YAML scalar when safe, else a double-quoted one. */
static void write_name(FILE *f, const char *s) {
  /* Plain only for names that YAML cannot read as null (or anything but a
   * plain word); everything else is quoted. */
  int plain = *s && strchr("-.", *s) == NULL && strcmp(s, "null") != 0 && strcmp(s, "Null") != 0 &&
              strcmp(s, "NULL") != 0;
  for (const char *p = s; *p && plain; p++)
    plain = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
            strchr("_-.", *p);
  if (plain) {
    fputs(s, f);
    return;
  }
  fputc('"', f);
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (*p == '"' || *p == '\\')
      fprintf(f, "\\%c", *p);
    else if (*p < 0x20 || *p == 0x7f)
      fprintf(f, "\\x%02x", *p);
    else
      fputc(*p, f);
  }
  fputc('"', f);
}

int bt_modelfile_write(const bt_model *m, FILE *f, bt_err *err) {
  writer w = {.f = f, .shapes = m->n_layers > 0 && m->layers[m->n_layers - 1].in.c > 0};
  /* The name is not echoed in comments: a newline in it would end the
   * comment; it is written, escaped, by write_name. */
  fprintf(f, "# baton model file: layers designed for %dx%dx%d inputs and %d classes.\n",
          m->input.h, m->input.w, m->input.c, m->classes);
  fprintf(f, "# Format: include/baton/modelfile.h.%s\n",
          w.shapes ? " Comments: output shape and parameters of each layer." : "");
  fputs("name: ", f);
  write_name(f, m->name);
  fprintf(f, "\ninput: %dx%dx%d\nclasses: %d\nlayers:\n", m->input.h, m->input.w, m->input.c,
          m->classes);
  if (write_layers(&w, m->layers, m->n_layers, 2, classifier_index(m), err) < 0)
    return -1;
  if (w.shapes)
    fprintf(f, "# total: %zu parameters, %zu state values, %.4g MFLOP forward per sample\n",
            m->n_params, m->n_state, bt_model_flops_fwd(m) / 1e6);
  if (fflush(f) != 0 || ferror(f))
    return bt_err_set(err, "cannot write model '%s': %s", m->name, strerror(errno));
  return 0;
}

int bt_modelfile_save(const bt_model *m, const char *path, bt_err *err) {
  FILE *f = fopen(path, "wb");
  if (!f)
    return bt_err_set(err, "cannot create model file '%.300s': %s; check the directory exists",
                      path, strerror(errno));
  int rc = bt_modelfile_write(m, f, err);
  if (fclose(f) != 0 && rc == 0)
    rc = bt_err_set(err, "cannot write model file '%.300s': %s", path, strerror(errno));
  if (rc < 0)
    return bt_err_prefix(err, "%.300s", path);
  return 0;
}

/* ---- resolving a model name ------------------------------------------------ */

static int ends_with(const char *s, const char *suffix) {
  size_t a = strlen(s), b = strlen(suffix);
  return a >= b && strcmp(s + a - b, suffix) == 0;
}

int bt_model_resolve(const char *spec, const char *models_dir, bt_shape input, int classes,
                     bt_model *m, bt_err *err) {
  memset(m, 0, sizeof *m);
  char zoo[256];
  zoo_list(zoo, sizeof zoo);
  if (!spec || !*spec)
    return bt_err_set(err, "no model given; name a zoo model (%s) or a model file (.yaml)", zoo);
  for (int i = 0; i < bt_zoo_count; i++) {
    if (strcmp(spec, bt_zoo_names[i]) != 0)
      continue;
    /* Zoo builders adapt the layers to the data, so they need its shape. */
    if (input.h < 1 || input.w < 1 || input.c < 1 || classes < 2)
      return bt_err_set(err,
                        "zoo model '%s' is built for the data: give the input shape (got "
                        "%dx%dx%d) and at least 2 classes (got %d)",
                        spec, input.h, input.w, input.c, classes);
    return bt_zoo_build(spec, input, classes, m, err);
  }
  if (ends_with(spec, ".yaml") || ends_with(spec, ".yml") || strchr(spec, '/'))
    return bt_modelfile_load(spec, input, classes, m, err);
  if (models_dir && *models_dir) {
    char path[1024];
    int len = snprintf(path, sizeof path, "%s/%s.yaml", models_dir, spec);
    FILE *f = len > 0 && (size_t)len < sizeof path ? fopen(path, "rb") : NULL;
    if (f) {
      fclose(f);
      return bt_modelfile_load(path, input, classes, m, err);
    }
    return bt_err_set(err,
                      "unknown model '%.100s': the zoo has %s, and there is no %.300s/%.100s.yaml; "
                      "give one of those or a model file path (ending in .yaml or "
                      "containing '/')",
                      spec, zoo, models_dir, spec);
  }
  return bt_err_set(err,
                    "unknown model '%.100s': the zoo has %s; or give a model file path (ending "
                    "in .yaml or containing '/')",
                    spec, zoo);
}
