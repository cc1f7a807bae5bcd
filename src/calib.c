/* calib: the host calibration store; see include/baton/calib.h. */
#include "baton/calib.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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
