/* err: error message helpers; see include/baton/err.h. */
#include "baton/err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int bt_err_set(bt_err *err, const char *fmt, ...) {
  if (!err)
    return -1;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err->msg, sizeof err->msg, fmt, ap);
  va_end(ap);
  return -1;
}

int bt_err_prefix(bt_err *err, const char *fmt, ...) {
  if (!err)
    return -1;
  char prefix[BT_ERR_MSG_MAX];
  char old[BT_ERR_MSG_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(prefix, sizeof prefix, fmt, ap);
  va_end(ap);
  memcpy(old, err->msg, sizeof old);
  /* Precision bounds keep the result within the message (and gcc quiet). */
  snprintf(err->msg, sizeof err->msg, "%.400s: %.600s", prefix, old);
  return -1;
}
