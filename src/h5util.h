/* h5util: small HDF5 helpers shared by the modules that read and write HDF5
 * (runlog, profile). Internal to src/. */
#ifndef BATON_H5UTIL_H
#define BATON_H5UTIL_H

#include <hdf5.h>

/* HDF5 prints its error stack on stderr by default; library code must not
 * print (err.h), so every public entry point silences it and restores it. */
typedef struct bt_h5_quiet {
  H5E_auto2_t fn;
  void *data;
} bt_h5_quiet;

static inline bt_h5_quiet bt_h5_quiet_begin(void) {
  bt_h5_quiet q;
  H5Eget_auto2(H5E_DEFAULT, &q.fn, &q.data);
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
  return q;
}

static inline void bt_h5_quiet_end(bt_h5_quiet q) { H5Eset_auto2(H5E_DEFAULT, q.fn, q.data); }

#endif
