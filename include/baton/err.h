/* err: one error message carried from where a problem is found to the
 * program that reports it.
 *
 * Library functions that can fail return 0 on success and a negative value on
 * failure, and fill `err` (when it is not NULL) with one line that says what
 * went wrong, where, and how to fix it. Programs print that line and exit
 * non-zero; nothing in the library prints or exits. */
#ifndef BATON_ERR_H
#define BATON_ERR_H

#include <stddef.h>

#define BT_ERR_MSG_MAX 1024

typedef struct bt_err {
  char msg[BT_ERR_MSG_MAX];
} bt_err;

/* Formats the message into err (printf-style) and returns -1, so that
 * `return bt_err_set(err, ...)` reports and fails in one statement. */
int bt_err_set(bt_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Prefixes an existing message ("context: old message"); returns -1. */
int bt_err_prefix(bt_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
