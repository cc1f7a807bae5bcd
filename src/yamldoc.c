/* yamldoc: the YAML reading helpers that device profiles (device.c) and model
 * files (modelfile.c) share; see include/baton/yamldoc.h. */
#include "baton/yamldoc.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int bt_yaml_at(const bt_yaml_reader *r, yaml_mark_t m, const char *fmt, ...) {
  char msg[BT_ERR_MSG_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  /* Cut both parts so that the position always survives a long message. */
  return bt_err_set(r->err, "%.200s:%zu:%zu: %.700s", r->name, m.line + 1, m.column + 1, msg);
}

yaml_node_t *bt_yaml_node(const bt_yaml_reader *r, int id) {
  return yaml_document_get_node(r->doc, id);
}

const char *bt_yaml_text(const yaml_node_t *nd) { return (const char *)nd->data.scalar.value; }

int bt_yaml_is_null(const yaml_node_t *nd) {
  if (nd->type != YAML_SCALAR_NODE || nd->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
    return 0;
  const char *s = bt_yaml_text(nd);
  return !*s || strcmp(s, "~") == 0 || strcmp(s, "null") == 0 || strcmp(s, "Null") == 0 ||
         strcmp(s, "NULL") == 0;
}

void bt_yaml_describe(const yaml_node_t *nd, char *buf, size_t n) {
  if (nd->type == YAML_MAPPING_NODE)
    snprintf(buf, n, "a mapping");
  else if (nd->type == YAML_SEQUENCE_NODE)
    snprintf(buf, n, "a list");
  else if (bt_yaml_is_null(nd))
    snprintf(buf, n, "nothing");
  else
    snprintf(buf, n, "'%.*s%s'", BT_YAML_SHOW(bt_yaml_text(nd)));
}

int bt_yaml_name(const bt_yaml_reader *r, const yaml_node_t *nd, const char *what) {
  char got[96];
  if (nd->type != YAML_SCALAR_NODE || bt_yaml_is_null(nd)) {
    bt_yaml_describe(nd, got, sizeof got);
    return bt_yaml_at(r, nd->start_mark, "expected %s, got %s", what, got);
  }
  if (strlen(bt_yaml_text(nd)) != nd->data.scalar.length)
    return bt_yaml_at(r, nd->start_mark, "%s contains a NUL character", what);
  return 0;
}

/* A key that is not a plain name, worded as `bad` says. */
static int bad_key(const bt_yaml_reader *r, const yaml_node_t *kn, const char *ctx,
                   const char *noun, bt_yaml_bad_key bad) {
  char what[32], got[96];
  snprintf(what, sizeof what, "a %s name", noun);
  if (bad == BT_YAML_BAD_KEY_AS_NAME)
    return bt_yaml_name(r, kn, what);
  if (kn->type != YAML_SCALAR_NODE || bt_yaml_is_null(kn) ||
      strlen(bt_yaml_text(kn)) != kn->data.scalar.length) {
    bt_yaml_describe(kn, got, sizeof got);
    return bt_yaml_at(r, kn->start_mark, "%s: expected %s, got %s", ctx, what, got);
  }
  return 0;
}

int bt_yaml_check_keys(const bt_yaml_reader *r, const yaml_node_t *map, const char *ctx,
                       const char *noun, const char *const *allowed, int n, bt_yaml_bad_key bad) {
  char list[320] = "", got[96];
  if (map->type != YAML_MAPPING_NODE) {
    bt_yaml_describe(map, got, sizeof got);
    return bt_yaml_at(r, map->start_mark, "%s: expected a mapping, got %s", ctx, got);
  }
  for (int i = 0; i < n; i++)
    snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "", allowed[i]);
  yaml_node_pair_t *start = map->data.mapping.pairs.start;
  for (yaml_node_pair_t *p = start; p < map->data.mapping.pairs.top; p++) {
    yaml_node_t *kn = bt_yaml_node(r, p->key);
    if (!kn || !bt_yaml_node(r, p->value))
      return bt_yaml_at(r, map->start_mark, "broken YAML mapping");
    if (bad_key(r, kn, ctx, noun, bad) < 0)
      return -1;
    const char *k = bt_yaml_text(kn);
    int known = 0;
    for (int i = 0; i < n; i++)
      known |= strcmp(k, allowed[i]) == 0;
    if (!known && n == 0)
      return bt_yaml_at(r, kn->start_mark, "%s: unknown %s '%.*s%s'; %s takes no %ss", ctx, noun,
                        BT_YAML_SHOW(k), ctx, noun);
    if (!known)
      return bt_yaml_at(r, kn->start_mark, "%s: unknown %s '%.*s%s'; allowed: %s", ctx, noun,
                        BT_YAML_SHOW(k), list);
    for (yaml_node_pair_t *q = start; q < p; q++) {
      yaml_node_t *k2 = bt_yaml_node(r, q->key);
      if (strcmp(bt_yaml_text(k2), k) == 0)
        return bt_yaml_at(r, kn->start_mark,
                          "%s: '%s' is given twice (first at line %zu); keep one", ctx, k,
                          k2->start_mark.line + 1);
    }
  }
  return 0;
}

yaml_node_t *bt_yaml_lookup(const bt_yaml_reader *r, const yaml_node_t *map, const char *key) {
  if (!map || map->type != YAML_MAPPING_NODE)
    return NULL;
  for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++)
    if (strcmp(bt_yaml_text(bt_yaml_node(r, p->key)), key) == 0)
      return bt_yaml_node(r, p->value);
  return NULL;
}

yaml_mark_t bt_yaml_offset_mark(const char *s, size_t offset) {
  yaml_mark_t m = {0, 0, 0};
  for (size_t i = 0; i < offset && s[i]; i++) {
    if (s[i] == '\n') {
      m.line++;
      m.column = 0;
    } else {
      m.column++;
    }
  }
  return m;
}

int bt_yaml_error(const bt_yaml_reader *r, const yaml_parser_t *p, const char *s) {
  const char *problem = p->problem ? p->problem : "unknown problem";
  switch (p->error) {
  case YAML_MEMORY_ERROR:
    return bt_err_set(r->err, "%.200s: out of memory while parsing YAML", r->name);
  case YAML_READER_ERROR: /* encoding problems come as a byte offset, not a mark */
    return bt_yaml_at(r, bt_yaml_offset_mark(s, p->problem_offset),
                      "not readable as YAML text: %s; save the file as UTF-8", problem);
  default:
    if (p->context)
      return bt_yaml_at(r, p->problem_mark, "invalid YAML: %s (%s at line %zu, column %zu)",
                        problem, p->context, p->context_mark.line + 1, p->context_mark.column + 1);
    return bt_yaml_at(r, p->problem_mark, "invalid YAML: %s", problem);
  }
}

int bt_yaml_load(bt_yaml_reader *r, const char *yaml, bt_yaml_root_fn fn, void *arg,
                 const char *one) {
  yaml_parser_t parser;
  if (!yaml_parser_initialize(&parser))
    return bt_err_set(r->err, "%.200s: out of memory", r->name);
  yaml_parser_set_input_string(&parser, (const unsigned char *)yaml, strlen(yaml));
  yaml_document_t doc;
  int rc;
  if (!yaml_parser_load(&parser, &doc)) {
    rc = bt_yaml_error(r, &parser, yaml);
  } else {
    r->doc = &doc;
    rc = fn(r, yaml_document_get_root_node(&doc), arg);
    yaml_document_delete(&doc);
    r->doc = NULL;
    if (rc == 0) {
      /* A second document is most likely a second file pasted in: refuse it
       * rather than silently ignore it. */
      yaml_document_t doc2;
      if (!yaml_parser_load(&parser, &doc2)) {
        rc = bt_yaml_error(r, &parser, yaml);
      } else {
        if (yaml_document_get_root_node(&doc2))
          rc = bt_yaml_at(r, doc2.start_mark, "a second YAML document starts here; %s", one);
        yaml_document_delete(&doc2);
      }
    }
  }
  yaml_parser_delete(&parser);
  return rc;
}
