/* cli: the `baton` command-line tool's internal interface: one function per
 * subcommand, plus small shared helpers. Each command returns the process
 * exit status (0 success, 1 failure, 2 usage error). */
#ifndef BATON_CLI_H
#define BATON_CLI_H

#include <stddef.h>
#include <stdint.h>

int bt_cmd_train(int argc, char **argv);
int bt_cmd_models(int argc, char **argv);
int bt_cmd_bench(int argc, char **argv);
int bt_cmd_bench_codec(int argc, char **argv); /* baton bench codec, from bt_cmd_bench */
int bt_cmd_bench_plan(int argc, char **argv);  /* baton bench plan, from bt_cmd_bench */
int bt_cmd_devices(int argc, char **argv);
int bt_cmd_trace(int argc, char **argv);
int bt_cmd_report(int argc, char **argv);
int bt_cmd_profile(int argc, char **argv);
int bt_cmd_predictor(int argc, char **argv);
int bt_cmd_plan(int argc, char **argv);

/* Prints "baton <cmd>: <message>" on stderr; returns 1. */
int bt_cli_fail(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The data directory: $BATON_DATA, else <exe dir>/../data (build tree next to
 * the sources), else <exe dir>/../share/baton (relocated install), else the
 * install prefix compiled in. Writes into buf; returns buf. */
const char *bt_cli_data_dir(char *buf, size_t len);

/* This host's key for calibration stores and profiling sets (bt_calib_host
 * of the configured BLIS kernels and threads and this build's compute-code
 * hash). Configure BLIS (bt_gemm_configure) first. */
void bt_cli_host_key(char *buf, size_t len);

/* The latency predictor's profiling sets for this host: the subdirectory of
 * <data>/predictor/hosts whose host.h5 was timed on the same CPU model with
 * the same BLIS kernels and threads as host_key says (bt_calib_host; the
 * first by name when several are), else <data>/predictor (the shipped
 * default sets). *per_host says which. Emulated devices follow the host's
 * kernels, so sets of this host predict them better (docs/partition.md,
 * "Another host"). */
const char *bt_cli_predictor_dir(const char *host_key, char *buf, size_t len, int *per_host);

/* Parses an iteration range "A:B", "A:", ":B" or "A" (inclusive); 0 or -1. */
int bt_cli_parse_range(const char *text, int64_t *first, int64_t *last);

/* Parses "HxWxC" (e.g. "32x32x3"); returns 0 or -1. */
int bt_cli_parse_shape(const char *text, int *h, int *w, int *c);

/* Monotonic wall-clock seconds. */
double bt_cli_now(void);

/* This thread's CPU seconds: what a rank sharing a core with others really
 * spent (being descheduled does not count). */
double bt_cli_cpu_now(void);

/* Median of v[0..n) (n >= 1); sorts v in place. */
double bt_cli_median(double *v, int n);

/* Peak resident set size of this process in bytes. */
size_t bt_cli_peak_rss(void);

/* "12.3 MiB"-style formatting into buf. */
const char *bt_cli_bytes(double bytes, char *buf, size_t len);

/* ---- the fitted-predictor cache (fit_cache.c) ---- */
struct bt_profile;
struct bt_profile_dir;
struct bt_predictor;
struct bt_predictor_options;
struct bt_err;

/* The cache directory: $BATON_PREDICTOR_CACHE (0 or off: no cache), else
 * $XDG_CACHE_HOME/baton/predictor, else ~/.cache/baton/predictor; NULL when
 * off or no home. */
const char *bt_cli_predictor_cache_dir(char *buf, size_t len);

enum { BT_CLI_CACHE_OFF, BT_CLI_CACHE_HIT, BT_CLI_CACHE_MISS, BT_CLI_CACHE_UNWRITABLE };
typedef struct bt_cli_fit_info {
  int state;       /* BT_CLI_CACHE_* */
  char path[4200]; /* the cache file ("" when off) */
  char note[4400]; /* non-empty: an unusable cache file or one not written */
} bt_cli_fit_info;

/* bt_predictor_fit_ex on the sets of dir (read into sd and selected into
 * sets/names and corpora), or the predictor a previous fit of the same
 * inputs cached: keyed by the predictor code and build, the options and
 * every byte of every set in dir. The loaded predictor predicts exactly what
 * a refit would (the model file round-trips). */
int bt_cli_fit_cached(const char *dir, const struct bt_profile_dir *sd,
                      const struct bt_profile *sets, const char *const *names, int n,
                      const struct bt_profile *corpora, int nc,
                      const struct bt_predictor_options *opt, struct bt_predictor **out,
                      bt_cli_fit_info *info, struct bt_err *err);
/* "loaded from the cache", "fitted and cached", ... */
const char *bt_cli_cache_state_name(int state);

#endif
