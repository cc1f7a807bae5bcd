/* cli/fit_cache: fitted predictors kept on disk, keyed by what the fit
 * reads, so that a plan or a train on unchanged sets loads the predictor
 * (about 0.3 s) instead of refitting it (about 10 s on the shipped sets). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "baton/predictor.h"
#include "baton/profile.h"
#include "cli.h"
#include "predictor_hash.h"

/* Two 64-bit FNV-1a streams with different offsets: a 128-bit key. The key
 * names a cache file, it guards against accidents, not against an adversary
 * (whoever can write the cache can write the sets). */
typedef struct {
  uint64_t a, b;
} key128;

static void mix(key128 *k, const void *data, size_t n) {
  const unsigned char *p = data;
  for (size_t i = 0; i < n; i++) {
    k->a = (k->a ^ p[i]) * 0x100000001b3ULL;
    k->b = (k->b ^ p[i]) * 0x100000001b3ULL + 0x9e3779b97f4a7c15ULL;
  }
}

static void mix_str(key128 *k, const char *s) { mix(k, s, strlen(s) + 1); }

/* Every byte of the file: a set re-timed or edited in place, even with the
 * same size and time stamp, is another key. */
static int mix_file(key128 *k, const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return -1;
  unsigned char buf[1 << 16];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0)
    mix(k, buf, n);
  const int bad = ferror(f);
  fclose(f);
  return bad ? -1 : 0;
}

const char *bt_cli_predictor_cache_dir(char *buf, size_t len) {
  const char *env = getenv("BATON_PREDICTOR_CACHE");
  if (env && (strcmp(env, "0") == 0 || strcmp(env, "off") == 0))
    return NULL;
  const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
  if (env && *env)
    snprintf(buf, len, "%s", env);
  else if (xdg && *xdg)
    snprintf(buf, len, "%s/baton/predictor", xdg);
  else if (home && *home)
    snprintf(buf, len, "%s/.cache/baton/predictor", home);
  else
    return NULL;
  return buf;
}

/* mkdir -p; 0 when the directory exists afterwards. */
static int make_dirs(const char *dir) {
  char path[4096];
  if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path)
    return -1;
  for (char *p = path + 1; *p; p++)
    if (*p == '/') {
      *p = 0;
      if (mkdir(path, 0755) != 0 && errno != EEXIST)
        return -1;
      *p = '/';
    }
  return mkdir(path, 0755) != 0 && errno != EEXIST ? -1 : 0;
}

/* The key of a fit: the predictor's code and build, the options, and the
 * name, role and bytes of every set in the directory. */
static int fit_key(const char *dir, const bt_profile_dir *sd, const bt_predictor_options *opt,
                   key128 *k) {
  *k = (key128){0xcbf29ce484222325ULL, 0x84222325cbf29ce4ULL};
  mix_str(k, BT_PREDICTOR_CODE_HASH);
  char text[256];
  snprintf(text, sizeof text, "%d %.17g %.17g %.17g %.17g %d %d %d %d", BT_PREDICTOR_VERSION,
           opt->sigma, opt->forget, opt->process, opt->ridge, opt->linear_head,
           opt->residual_memory, opt->trees, opt->tree_depth);
  mix_str(k, text);
  for (int i = 0; i < sd->n; i++) {
    char path[8192];
    snprintf(path, sizeof path, "%s/%s.h5", dir, sd->names[i]);
    mix_str(k, sd->names[i]);
    mix(k, &sd->role[i], sizeof sd->role[i]);
    if (mix_file(k, path) < 0)
      return -1;
  }
  return 0;
}

/* How many fitted predictors the cache keeps (about 2 MB each): one per
 * sets directory and build, so a few builds of a few hosts' sets. */
#define CACHE_KEEP 16
/* A temporary file this old is left by a run that died while writing. */
#define STALE_TMP_SECONDS 3600

typedef struct {
  char name[64];
  time_t mtime;
} cache_entry;

static int newest_first(const void *a, const void *b) {
  const time_t ta = ((const cache_entry *)a)->mtime, tb = ((const cache_entry *)b)->mtime;
  return ta < tb ? 1 : ta > tb ? -1 : 0;
}

/* "predictor-" + 32 hex digits + suffix: only files this module wrote. */
static int cache_file_kind(const char *name) {
  const size_t n = strlen(name), stem = 10 + 32;
  if (strncmp(name, "predictor-", 10) != 0 || n < stem + 4)
    return 0;
  if (n == stem + 4 && strcmp(name + stem, ".txt") == 0)
    return 1;
  return strcmp(name + n - 4, ".tmp") == 0 ? 2 : 0;
}

/* Keeps the CACHE_KEEP most recently used predictors (a hit touches its
 * file) and drops temporary files of runs that died. Best effort: a file
 * another run removes first is no error. */
static void prune_cache(const char *cdir) {
  DIR *d = opendir(cdir);
  if (!d)
    return;
  cache_entry *e = NULL;
  int n = 0, cap = 0;
  const time_t now = time(NULL);
  char path[8192];
  for (struct dirent *de; (de = readdir(d)) != NULL;) {
    const int kind = cache_file_kind(de->d_name);
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", cdir, de->d_name);
    if (!kind || strlen(de->d_name) >= sizeof e->name || stat(path, &st) != 0)
      continue;
    if (kind == 2) {
      if (now - st.st_mtime > STALE_TMP_SECONDS)
        unlink(path);
      continue;
    }
    if (n == cap) {
      cache_entry *grown = realloc(e, (size_t)(cap = cap ? 2 * cap : 32) * sizeof *e);
      if (!grown)
        break;
      e = grown;
    }
    snprintf(e[n].name, sizeof e[n].name, "%s", de->d_name);
    e[n++].mtime = st.st_mtime;
  }
  closedir(d);
  qsort(e, (size_t)n, sizeof *e, newest_first);
  for (int i = CACHE_KEEP; i < n; i++) {
    snprintf(path, sizeof path, "%s/%s", cdir, e[i].name);
    unlink(path);
  }
  free(e);
}

/* A cached predictor must head exactly the sets it is asked for. */
static int heads_match(const bt_predictor *p, const char *const *names, int n) {
  if (bt_predictor_n_devices(p) != n)
    return 0;
  for (int i = 0; i < n; i++)
    if (strcmp(bt_predictor_device_name(p, i), names[i]) != 0)
      return 0;
  return 1;
}

int bt_cli_fit_cached(const char *dir, const bt_profile_dir *sd, const bt_profile *sets,
                      const char *const *names, int n, const bt_profile *corpora, int nc,
                      const bt_predictor_options *opt, bt_predictor **out, bt_cli_fit_info *info,
                      bt_err *err) {
  memset(info, 0, sizeof *info);
  char cdir[4096];
  key128 k;
  if (!bt_cli_predictor_cache_dir(cdir, sizeof cdir) || fit_key(dir, sd, opt, &k) < 0) {
    info->state = BT_CLI_CACHE_OFF;
    return bt_predictor_fit_ex(sets, names, n, NULL, corpora, nc, opt, out, err);
  }
  snprintf(info->path, sizeof info->path, "%s/predictor-%016llx%016llx.txt", cdir,
           (unsigned long long)k.a, (unsigned long long)k.b);
  bt_err lerr = {{0}};
  if (access(info->path, R_OK) == 0) {
    const int loaded = bt_predictor_load(info->path, out, &lerr) == 0;
    if (loaded && heads_match(*out, names, n)) {
      info->state = BT_CLI_CACHE_HIT;
      utimensat(AT_FDCWD, info->path, NULL, 0); /* most recently used */
      return 0;
    }
    bt_predictor_free(*out);
    *out = NULL;
    snprintf(info->note, sizeof info->note,
             "the cached predictor %.4000s was unusable (%s), refitted", info->path,
             loaded ? "other devices" : "not a valid predictor file");
  }
  info->state = BT_CLI_CACHE_MISS;
  if (bt_predictor_fit_ex(sets, names, n, NULL, corpora, nc, opt, out, err) < 0)
    return -1;
  /* Written under a temporary name and renamed: concurrent runs (an mpirun
   * batch on one node) never read a half-written file. A cache that cannot
   * be written costs the next run its fit, nothing else. */
  char tmp[sizeof info->path + 32];
  snprintf(tmp, sizeof tmp, "%s.%ld.tmp", info->path, (long)getpid());
  if (make_dirs(cdir) < 0 || bt_predictor_save(*out, tmp, &lerr) < 0 ||
      rename(tmp, info->path) != 0) {
    unlink(tmp);
    snprintf(info->note, sizeof info->note,
             "could not write the predictor cache in %.3000s (%.1000s)", cdir,
             lerr.msg[0] ? lerr.msg : strerror(errno));
    info->state = BT_CLI_CACHE_UNWRITABLE;
  } else
    prune_cache(cdir);
  return 0;
}

const char *bt_cli_cache_state_name(int state) {
  switch (state) {
  case BT_CLI_CACHE_HIT:
    return "loaded from the cache";
  case BT_CLI_CACHE_MISS:
    return "fitted and cached";
  case BT_CLI_CACHE_UNWRITABLE:
    return "fitted (cache not writable)";
  default:
    return "fitted (cache off)";
  }
}
