/* calib: the host calibration store behind the virtual clock.
 *
 * The virtual clock maps a layer's host time to device time. Host times on a
 * shared machine move from run to run (the core's clock speed, the L3 that
 * neighbouring processes and VMs share: 10-20% for one conv layer here), so
 * a calibration measured once is kept in a store and reused: runs that find
 * their layers there get the same device times whatever the host's load.
 *
 * The store is a text file of tab-separated lines, appended to (one write()
 * per line, so concurrent appenders do not interleave):
 *   HOST <tab> KEY <tab> A <tab> B
 * HOST fingerprints the host and the code (CPU model, BLIS kernels and
 * threads, baton version); KEY names a layer configuration
 * (bt_calib_layer_key), A and B its forward and backward host seconds; the
 * key "#host-rates" holds the host's sgemm GFLOP/s and memory GB/s. When a
 * key appears more than once the smallest figures win (load only ever slows
 * a measurement down). Lines of other hosts are kept and ignored. */
#ifndef BATON_CALIB_H
#define BATON_CALIB_H

#include <stddef.h>

#include "baton/err.h"
#include "baton/layers.h"

#define BT_CALIB_HOST_RATES "#host-rates"

typedef struct bt_calib_store bt_calib_store;

/* "<cpu model>|<blis arch>x<threads>|<version>", tabs and newlines removed. */
void bt_calib_host(const char *blis_arch, int threads, const char *version, char *buf, size_t n);

/* A key for layer `l` at micro-batch `batch`: kind, shapes and
 * hyper-parameters (recursively for residual blocks). `no_input_grad` marks a
 * layer whose backward skips its input gradient (the first of the model). */
void bt_calib_layer_key(const bt_layer *l, int batch, int no_input_grad, char *buf, size_t n);

/* Loads the entries of `host` from `path`; a missing file is an empty
 * store. Malformed lines are an error naming the file and line. */
int bt_calib_load(const char *path, const char *host, bt_calib_store **out, bt_err *err);
/* 1 and the figures when `key` is stored, else 0. */
int bt_calib_lookup(const bt_calib_store *s, const char *key, double *a, double *b);
void bt_calib_free(bt_calib_store *s);

/* Appends one entry (creating the file and its directory). Figures must be
 * finite and positive. */
int bt_calib_append(const char *path, const char *host, const char *key, double a, double b,
                    bt_err *err);

/* The default store: $BATON_CALIBRATION, else $XDG_CACHE_HOME/baton/
 * calibration.tsv, else $HOME/.cache/baton/calibration.tsv. */
void bt_calib_default_path(char *buf, size_t n);

#endif
