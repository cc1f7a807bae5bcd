/* cli/util: helpers shared by the subcommands; see cli.h. */
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <dirent.h>

#include "baton/calib.h"
#include "baton/gemm.h"
#include "baton/profile.h"
#include "baton_build.h"
#include "cli.h"
#include "compute_hash.h"

int bt_cli_fail(const char *cmd, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "baton %s: ", cmd);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  return 1;
}

static int is_dir(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

const char *bt_cli_data_dir(char *buf, size_t len) {
  const char *env = getenv("BATON_DATA");
  if (env && *env) {
    snprintf(buf, len, "%s", env);
    return buf;
  }
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n > 0) {
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (slash)
      *slash = '\0';
    const char *candidates[] = {"/../data", "/../share/baton"};
    for (size_t i = 0; i < sizeof candidates / sizeof *candidates; i++) {
      snprintf(buf, len, "%s%s", exe, candidates[i]);
      char probe[PATH_MAX + 16];
      snprintf(probe, sizeof probe, "%s/models", buf);
      if (is_dir(probe))
        return buf;
    }
  }
  snprintf(buf, len, "%s", BT_INSTALL_DATADIR);
  return buf;
}

int bt_cli_parse_shape(const char *text, int *h, int *w, int *c) {
  char tail;
  if (sscanf(text, "%dx%dx%d%c", h, w, c, &tail) != 3)
    return -1;
  return *h >= 1 && *w >= 1 && *c >= 1 && *h <= 4096 && *w <= 4096 && *c <= 4096 ? 0 : -1;
}

double bt_cli_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double bt_cli_cpu_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

size_t bt_cli_peak_rss(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (size_t)ru.ru_maxrss * 1024;
}

const char *bt_cli_bytes(double bytes, char *buf, size_t len) {
  const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024.0 && u < 4)
    bytes /= 1024.0, u++;
  snprintf(buf, len, u ? "%.1f %s" : "%.0f %s", bytes, units[u]);
  return buf;
}

int bt_cli_parse_range(const char *text, int64_t *first, int64_t *last) {
  char *end;
  const char *colon = strchr(text, ':');
  *first = 0;
  *last = INT64_MAX;
  if (text[0] != ':') {
    *first = strtoll(text, &end, 10);
    if (end == text || (*end != ':' && *end != '\0'))
      return -1;
  }
  if (!colon) {
    *last = *first;
    return 0;
  }
  if (colon[1] != '\0') {
    *last = strtoll(colon + 1, &end, 10);
    if (end == colon + 1 || *end != '\0')
      return -1;
  }
  return *first <= *last ? 0 : -1;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

double bt_cli_median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void bt_cli_host_key(char *buf, size_t len) {
  bt_calib_host(bt_gemm_arch(), bt_gemm_threads(), BT_COMPUTE_HASH, buf, len);
}

/* host_key up to its last '|': the CPU model and the BLIS kernels and
 * threads, without the compute-code hash. */
static size_t host_part(const char *key) {
  const char *bar = strrchr(key, '|');
  return bar ? (size_t)(bar - key) : strlen(key);
}

const char *bt_cli_predictor_dir(const char *host_key, char *buf, size_t len, int *per_host) {
  char data[4096], hosts[4200];
  bt_cli_data_dir(data, sizeof data);
  snprintf(buf, len, "%s/predictor", data);
  *per_host = 0;
  snprintf(hosts, sizeof hosts, "%s/predictor/hosts", data);
  DIR *d = host_key && host_key[0] ? opendir(hosts) : NULL;
  if (!d)
    return buf;
  const size_t hp = host_part(host_key);
  char best[256] = "";
  struct dirent *de;
  while ((de = readdir(d))) {
    if (de->d_name[0] == '.' || strlen(de->d_name) >= sizeof best)
      continue;
    char path[4600];
    snprintf(path, sizeof path, "%s/%s/host.h5", hosts, de->d_name);
    bt_profile p;
    bt_err err;
    memset(&p, 0, sizeof p);
    if (bt_profile_read(path, &p, &err) == 0 && host_part(p.host_key) == hp &&
        strncmp(p.host_key, host_key, hp) == 0 &&
        (!best[0] || strcmp(de->d_name, best) < 0)) /* the first by name: deterministic */
      snprintf(best, sizeof best, "%s", de->d_name);
    bt_profile_free(&p);
  }
  closedir(d);
  if (best[0]) {
    snprintf(buf, len, "%s/%s", hosts, best);
    *per_host = 1;
  }
  return buf;
}
