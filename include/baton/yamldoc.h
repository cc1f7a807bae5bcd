/* yamldoc: reading strict YAML documents (device profiles, model files) with
 * "file:line:col: ..." errors.
 *
 * The readers load the whole text with libyaml's document API, so every node
 * keeps the line/column where it starts, and check each mapping's keys against
 * a list, so that a typo is an error at its own line rather than a silently
 * defaulted value. These helpers are what those readers share: the messages
 * they produce are part of the readers' behaviour (tests match them), so
 * change a wording here only on purpose. Pure: no I/O, no globals. */
#ifndef BATON_YAMLDOC_H
#define BATON_YAMLDOC_H

#include "baton/err.h"

#include <stddef.h>
#include <string.h> /* strlen, for BT_YAML_SHOW */
#include <yaml.h>

/* Quoted user text in messages is cut at this many bytes, so one message stays
 * one readable line. Use as "'%.*s%s'" with BT_YAML_SHOW(s). */
#define BT_YAML_SHOW_MAX 40
#define BT_YAML_SHOW(s)                                                                            \
  (int)(strlen(s) > BT_YAML_SHOW_MAX ? BT_YAML_SHOW_MAX : strlen(s)), (s),                         \
      (strlen(s) > BT_YAML_SHOW_MAX ? "..." : "")

/* One document being read: where errors go and the name they start with. */
typedef struct bt_yaml_reader {
  yaml_document_t *doc; /* set by bt_yaml_load while the document is read */
  const char *name;     /* file name for messages */
  bt_err *err;
} bt_yaml_reader;

/* How bt_yaml_check_keys words a key that is not a plain name (a list, a
 * null, text with a NUL): both readers reject the same keys, in their own
 * words. */
typedef enum bt_yaml_bad_key {
  BT_YAML_BAD_KEY_IN_CONTEXT, /* "<ctx>: expected a <noun> name, got ..." */
  BT_YAML_BAD_KEY_AS_NAME,    /* as bt_yaml_name: "expected a <noun> name, got ..." */
} bt_yaml_bad_key;

/* Sets r->err to "name:line:col: <fmt...>" for libyaml's 0-based mark m; returns -1. */
int bt_yaml_at(const bt_yaml_reader *r, yaml_mark_t m, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The node with id `id` in the document, or NULL. */
yaml_node_t *bt_yaml_node(const bt_yaml_reader *r, int id);

/* A scalar node's text (NUL-terminated; may hold NULs from "\0" escapes). */
const char *bt_yaml_text(const yaml_node_t *nd);

/* True for YAML's null: an empty plain value ("key:"), "~" or "null". */
int bt_yaml_is_null(const yaml_node_t *nd);

/* "a mapping", "a list", "nothing" or "'text'", for "expected X, got Y". */
void bt_yaml_describe(const yaml_node_t *nd, char *buf, size_t n);

/* Fails unless nd is a non-null scalar without NULs; `what` names it ("a layer kind"). */
int bt_yaml_name(const bt_yaml_reader *r, const yaml_node_t *nd, const char *what);

/* Fails unless `map` is a mapping whose keys are names among `allowed` (n),
 * each given once; `ctx` names the mapping, `noun` its keys ("parameter"). */
int bt_yaml_check_keys(const bt_yaml_reader *r, const yaml_node_t *map, const char *ctx,
                       const char *noun, const char *const *allowed, int n, bt_yaml_bad_key bad);

/* The value of `key` in `map` (keys already checked); NULL if absent or map is no mapping. */
yaml_node_t *bt_yaml_lookup(const bt_yaml_reader *r, const yaml_node_t *map, const char *key);

/* The 0-based mark of byte `offset` of text `s` (libyaml gives some errors as offsets). */
yaml_mark_t bt_yaml_offset_mark(const char *s, size_t offset);

/* Reports the problem that stopped parser p on text s as an error; returns -1. */
int bt_yaml_error(const bt_yaml_reader *r, const yaml_parser_t *p, const char *s);

/* Reads a document's root node (NULL for empty text); returns 0 or -1. */
typedef int (*bt_yaml_root_fn)(const bt_yaml_reader *r, const yaml_node_t *root, void *arg);

/* Parses `yaml` (not NULL), calls `fn` on the first document's root with
 * r->doc set, and refuses a second document: "a second YAML document starts
 * here; <one>". Returns fn's result, or -1 on a YAML error. */
int bt_yaml_load(bt_yaml_reader *r, const char *yaml, bt_yaml_root_fn fn, void *arg,
                 const char *one);

#endif
