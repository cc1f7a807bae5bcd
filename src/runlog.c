/* runlog: the HDF5 writer and reader of a run log (one file per run, written
 * by rank 0 alone); the layout is documented in docs/hdf5-schema.md.
 *
 * Durability. The file is written in SWMR mode: HDF5 1.10 file format, every
 * group, dataset and attribute created up front, then H5Fstart_swmr_write.
 * SWMR orders metadata writes (flush dependencies) so that the file on disk is
 * consistent at every instant, not only right after a flush. Measured here
 * (HDF5 1.10.8, 300 writers appending and killed with SIGKILL at random
 * moments): with SWMR every non-empty file opened with every row intact; with
 * plain H5Fflush and no SWMR, about 4% of the files opened but held garbage
 * rows, because the metadata cache had evicted a grown extent ahead of the
 * data it describes. The price of SWMR: a file whose writer died keeps its
 * "open for writing" flag, so it opens only in SWMR-read mode. The reader
 * below falls back to that mode; h5py needs File(path, 'r', swmr=True) (or
 * `h5clear -s path` once). Rows that index other rows (/plans, /timing/
 * iteration) are written after the rows they point to, so a reader never
 * follows an index into rows that are not there yet.
 *
 * MPI. Debian's openmpi flavour of HDF5 is built with H5_HAVE_PARALLEL, so
 * hdf5.h includes mpi.h (from H5public.h); that is the only reason this file
 * sees MPI. It uses the serial API only (sec2 driver, no MPI calls): the
 * runtime gathers records to rank 0, which writes alone. */
#include "baton/runlog.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <hdf5.h>

#include "h5util.h"

/* ---- row layouts of the tables that have no public struct ----------- */

typedef struct device_row {
  int32_t rank;
  char profile[64];
  double memory_capacity, link_bandwidth_bps, link_latency_s;
} device_row;

typedef struct plan_row {
  int32_t plan;
  int64_t iteration;
  int32_t n_stages;
  int64_t first_stage_row; /* row of the plan's stage 0 in /plan_stages */
  double predicted_iteration_time;
  char partitioner[32];
} plan_row;

typedef struct stage_row {
  int32_t plan, stage;
  int32_t first_layer, end_layer; /* layers [first_layer, end_layer) */
  int32_t device_rank;
  double predicted_time;
} stage_row;

/* ---- compound types, described once by field tables ------------------ */

typedef enum ftype { F_I32, F_I64, F_F64, F_STR, F_SHAPE, F_EVENT_KIND, F_LAYER_KIND } ftype;

typedef struct field {
  const char *name;
  size_t offset;
  ftype type;
  size_t len; /* F_STR: bytes including the terminating NUL */
} field;

/* clang-format off */
#define FIELD(T, m, t) {#m, offsetof(T, m), t, 0}
#define STRFIELD(T, m) {#m, offsetof(T, m), F_STR, sizeof(((T *)0)->m)}
/* clang-format on */

static const field device_fields[] = {
    FIELD(device_row, rank, F_I32),
    STRFIELD(device_row, profile),
    FIELD(device_row, memory_capacity, F_F64),
    FIELD(device_row, link_bandwidth_bps, F_F64),
    FIELD(device_row, link_latency_s, F_F64),
};

static const field layer_fields[] = {
    FIELD(bt_runlog_layer, index, F_I32),
    STRFIELD(bt_runlog_layer, name),
    FIELD(bt_runlog_layer, kind, F_LAYER_KIND),
    {"in_shape", offsetof(bt_runlog_layer, in), F_SHAPE, 0},
    {"out_shape", offsetof(bt_runlog_layer, out), F_SHAPE, 0},
    FIELD(bt_runlog_layer, params, F_I64),
    FIELD(bt_runlog_layer, param_bytes, F_I64),
    FIELD(bt_runlog_layer, out_bytes, F_I64),
    FIELD(bt_runlog_layer, flops_fwd, F_F64),
    FIELD(bt_runlog_layer, flops_bwd, F_F64),
};

static const field plan_fields[] = {
    FIELD(plan_row, plan, F_I32),
    FIELD(plan_row, iteration, F_I64),
    FIELD(plan_row, n_stages, F_I32),
    FIELD(plan_row, first_stage_row, F_I64),
    FIELD(plan_row, predicted_iteration_time, F_F64),
    STRFIELD(plan_row, partitioner),
};

static const field stage_fields[] = {
    FIELD(stage_row, plan, F_I32),        FIELD(stage_row, stage, F_I32),
    FIELD(stage_row, first_layer, F_I32), FIELD(stage_row, end_layer, F_I32),
    FIELD(stage_row, device_rank, F_I32), FIELD(stage_row, predicted_time, F_F64),
};

static const field event_fields[] = {
    FIELD(bt_event, iteration, F_I64), FIELD(bt_event, rank, F_I32),
    FIELD(bt_event, micro, F_I32),     FIELD(bt_event, kind, F_EVENT_KIND),
    FIELD(bt_event, peer, F_I32),      FIELD(bt_event, t_start, F_F64),
    FIELD(bt_event, t_end, F_F64),     FIELD(bt_event, bytes, F_I64),
};

static const field train_fields[] = {
    FIELD(bt_train_record, iteration, F_I64), FIELD(bt_train_record, loss, F_F64),
    FIELD(bt_train_record, accuracy, F_F64),  FIELD(bt_train_record, iteration_time, F_F64),
    FIELD(bt_train_record, wall_time, F_F64), FIELD(bt_train_record, bytes_sent, F_I64),
};

static const field predictor_fields[] = {
    FIELD(bt_predictor_record, iteration, F_I64), FIELD(bt_predictor_record, rank, F_I32),
    FIELD(bt_predictor_record, layer, F_I32),     FIELD(bt_predictor_record, pass, F_I32),
    FIELD(bt_predictor_record, predicted, F_F64), FIELD(bt_predictor_record, measured, F_F64),
};

static const field probe_fields[] = {
    FIELD(bt_probe_record, iteration, F_I64), FIELD(bt_probe_record, rank, F_I32),
    FIELD(bt_probe_record, layer, F_I32),     FIELD(bt_probe_record, batch, F_I32),
    FIELD(bt_probe_record, pass, F_I32),      FIELD(bt_probe_record, predicted, F_F64),
    FIELD(bt_probe_record, measured, F_F64),  FIELD(bt_probe_record, host, F_F64),
    STRFIELD(bt_probe_record, spec),
};

static const field eval_fields[] = {
    FIELD(bt_eval_record, iteration, F_I64), FIELD(bt_eval_record, epoch, F_I32),
    FIELD(bt_eval_record, loss, F_F64),      FIELD(bt_eval_record, accuracy, F_F64),
    FIELD(bt_eval_record, samples, F_I64),
};

#define NFIELDS(a) ((int)(sizeof(a) / sizeof((a)[0])))

static const char *const event_kind_names[BT_EV_KIND_COUNT] = {
    "forward", "backward", "send", "recv", "encode", "decode", "optim"};

const char *bt_event_kind_name(bt_event_kind kind) {
  return (unsigned)kind < BT_EV_KIND_COUNT ? event_kind_names[kind] : "unknown";
}

/* Kinds are HDF5 enums so that h5py and h5dump show names; the file stores
 * one byte, memory the int32 of the structs (HDF5 converts by name). */
static hid_t enum_type(int file, int count, const char *(*name)(int)) {
  hid_t t = H5Tenum_create(file ? H5T_STD_I8LE : H5T_NATIVE_INT32);
  for (int i = 0; i < count; i++) {
    int8_t v8 = (int8_t)i;
    int32_t v32 = i;
    H5Tenum_insert(t, name(i), file ? (void *)&v8 : (void *)&v32);
  }
  return t;
}

static const char *event_name_i(int i) { return bt_event_kind_name((bt_event_kind)i); }
static const char *layer_name_i(int i) { return bt_layer_kind_name((bt_layer_kind)i); }

static hid_t member_type(const field *f, int file) {
  switch (f->type) {
  case F_I32:
    return H5Tcopy(file ? H5T_STD_I32LE : H5T_NATIVE_INT32);
  case F_I64:
    return H5Tcopy(file ? H5T_STD_I64LE : H5T_NATIVE_INT64);
  case F_F64:
    return H5Tcopy(file ? H5T_IEEE_F64LE : H5T_NATIVE_DOUBLE);
  case F_STR: {
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, f->len);
    H5Tset_strpad(t, H5T_STR_NULLTERM);
    H5Tset_cset(t, H5T_CSET_UTF8);
    return t;
  }
  case F_SHAPE: {
    hsize_t three = 3; /* h, w, c */
    return H5Tarray_create2(file ? H5T_STD_I32LE : H5T_NATIVE_INT32, 1, &three);
  }
  case F_EVENT_KIND:
    return enum_type(file, BT_EV_KIND_COUNT, event_name_i);
  case F_LAYER_KIND:
    return enum_type(file, BT_LAYER_KIND_COUNT, layer_name_i);
  }
  return H5I_INVALID_HID;
}

/* The memory type mirrors the C struct; the file type has the same members
 * in little-endian, packed without padding. */
static hid_t compound_type(size_t size, const field *fields, int n, int file) {
  hid_t t = H5Tcreate(H5T_COMPOUND, size);
  for (int i = 0; i < n; i++) {
    hid_t m = member_type(&fields[i], file);
    H5Tinsert(t, fields[i].name, fields[i].offset, m);
    H5Tclose(m);
  }
  if (file)
    H5Tpack(t);
  return t;
}

enum { T_DEVICE, T_LAYER, T_PLAN, T_STAGE, T_EVENT, T_TRAIN, T_EVAL, T_PRED, T_PROBE, T_COUNT };

static const struct {
  size_t size;
  const field *fields;
  int n;
} tables[T_COUNT] = {
    [T_DEVICE] = {sizeof(device_row), device_fields, NFIELDS(device_fields)},
    [T_LAYER] = {sizeof(bt_runlog_layer), layer_fields, NFIELDS(layer_fields)},
    [T_PLAN] = {sizeof(plan_row), plan_fields, NFIELDS(plan_fields)},
    [T_STAGE] = {sizeof(stage_row), stage_fields, NFIELDS(stage_fields)},
    [T_EVENT] = {sizeof(bt_event), event_fields, NFIELDS(event_fields)},
    [T_TRAIN] = {sizeof(bt_train_record), train_fields, NFIELDS(train_fields)},
    [T_EVAL] = {sizeof(bt_eval_record), eval_fields, NFIELDS(eval_fields)},
    [T_PRED] = {sizeof(bt_predictor_record), predictor_fields, NFIELDS(predictor_fields)},
    [T_PROBE] = {sizeof(bt_probe_record), probe_fields, NFIELDS(probe_fields)},
};

static hid_t table_type(int table, int file) {
  return compound_type(tables[table].size, tables[table].fields, tables[table].n, file);
}

/* ---- datasets --------------------------------------------------------- */

enum {
  D_DEVICES,
  D_LAYERS,
  D_PLANS,
  D_STAGES,
  D_TIMELINE,
  D_TRAIN,
  D_EVAL,
  D_PRED,
  D_PROBES,
  D_T_ITER,
  D_T_FWD,
  D_T_BWD,
  D_COUNT
};

/* Chunks hold a few hundred rows (tens of KiB): an iteration's events fill
 * part of one /timeline chunk, so each flush rewrites one or two chunks. */
static const struct {
  const char *path;
  int table; /* T_*, or -1 for the plain /timing arrays */
  hsize_t chunk;
  const char *description, *units;
} dsets[D_COUNT] = {
    [D_DEVICES] = {"/devices", T_DEVICE, 16, "the device each rank emulates",
                   "memory_capacity: bytes; link_bandwidth_bps: bit/s; link_latency_s: s"},
    [D_LAYERS] = {"/layers", T_LAYER, 64, "the model as it ran, one row per layer",
                  "in_shape, out_shape: (h, w, c) per sample; params: floats; param_bytes, "
                  "out_bytes: bytes per sample; flops_fwd, flops_bwd: FLOP per sample "
                  "(multiply-add = 2)"},
    [D_PLANS] = {"/plans", T_PLAN, 16,
                 "partition plans; plan p's stages are /plan_stages rows "
                 "[first_stage_row, first_stage_row + n_stages)",
                 "iteration: first iteration the plan applies to; predicted_iteration_time: s "
                 "(NaN: none)"},
    [D_STAGES] = {"/plan_stages", T_STAGE, 64,
                  "one row per stage of each plan: layers [first_layer, end_layer) on "
                  "device_rank",
                  "predicted_time: s (NaN: none); end_layer -1: model size unknown when logged"},
    [D_TIMELINE] = {"/timeline", T_EVENT, 1024, "every operation on every rank",
                    "t_start, t_end: s on the run's clock; bytes: bytes; peer: other rank of "
                    "a transfer, -1 otherwise; micro: micro-batch, -1 for optim"},
    [D_TRAIN] = {"/train", T_TRAIN, 256, "one row per iteration",
                 "loss: mean cross-entropy over the batch; accuracy: fraction; "
                 "iteration_time: s on the run's clock (max over ranks); wall_time: host s; "
                 "bytes_sent: bytes, all ranks"},
    [D_EVAL] = {"/eval", T_EVAL, 64, "one row per evaluation on the test set",
                "iteration: optimizer steps done; epoch: 1-based; loss: mean cross-entropy; "
                "accuracy: fraction"},
    [D_PRED] = {"/predictor", T_PRED, 256,
                "the latency predictor against the runtime: one row per layer and pass each "
                "time rank 0 re-plans (partition predicted)",
                "predicted, measured: device s per micro-batch on that rank; predicted is the "
                "prediction before learning from measured"},
    [D_PROBES] = {"/probes", T_PROBE, 64,
                  "probe timings the predictor learned from (partition predicted): the probe "
                  "set on every rank at start-up (iteration -1, layer -1), and the layers a "
                  "re-plan would put on a rank for the first time (replan.probe)",
                  "predicted, measured: device s per micro-batch (start-up: per probe layer at "
                  "its batch); predicted is the prediction before learning from measured; "
                  "host: host s the device time maps (0: none)"},
    [D_T_ITER] = {"/timing/iteration", -1, 256, "iteration of each row of /timing/fwd and bwd",
                  "iteration number"},
    [D_T_FWD] = {"/timing/fwd", -1, 64, "per-layer forward device time [row, layer]",
                 "s (device time on the owning rank; NaN: not measured)"},
    [D_T_BWD] = {"/timing/bwd", -1, 64, "per-layer backward device time [row, layer]",
                 "s (device time on the owning rank; NaN: not measured)"},
};

enum { TIMING_LAYER_CHUNK = 32 };

struct bt_runlog {
  hid_t file;
  hid_t mem[T_COUNT];
  hid_t dset[D_COUNT];
  int n_layers; /* columns of /timing, fixed by write_layers or the first timing row */
  int n_plans;
  int layers_written, devices_written;
  char path[512];
};

/* ---- errors ----------------------------------------------------------- */

static herr_t innermost(unsigned n, const H5E_error2_t *e, void *buf) {
  if (n == 0)
    snprintf(buf, 256, "%s", e->desc);
  return 0;
}

/* "<path>: <what> (HDF5: <innermost message of the error stack>)". */
static int h5_fail(bt_err *err, const char *path, const char *what) {
  char detail[256] = "";
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, innermost, detail);
  if (detail[0])
    return bt_err_set(err, "%s: %s (HDF5: %s)", path, what, detail);
  return bt_err_set(err, "%s: %s", path, what);
}

/* ---- writing ---------------------------------------------------------- */

/* H5Pset_file_locking arrived in 1.10.7 and 1.12.1 (not 1.12.0). */
#if (H5_VERS_MAJOR == 1 && H5_VERS_MINOR == 10 && H5_VERS_RELEASE >= 7) || H5_VERSION_GE(1, 12, 1)
#define BT_HAVE_FILE_LOCKING_PROP 1
#endif

static hid_t file_access(int writing) {
  hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
  /* SWMR needs the 1.10 format; pinning both bounds keeps files readable by
   * any HDF5 >= 1.10 even when built against a newer library. */
  if (writing)
    H5Pset_libver_bounds(fapl, H5F_LIBVER_V110, H5F_LIBVER_V110);
#ifdef BT_HAVE_FILE_LOCKING_PROP
  /* NFS and Lustre often lack flock(); lock where possible, never fail. */
  H5Pset_file_locking(fapl, 1, 1);
#endif
  return fapl;
}

static int attr_str(hid_t loc, const char *name, const char *value) {
  hid_t t = H5Tcopy(H5T_C_S1);
  H5Tset_size(t, H5T_VARIABLE);
  H5Tset_cset(t, H5T_CSET_UTF8);
  hid_t s = H5Screate(H5S_SCALAR);
  hid_t a = H5Acreate2(loc, name, t, s, H5P_DEFAULT, H5P_DEFAULT);
  const char *v = value ? value : "";
  herr_t rc = a < 0 ? -1 : H5Awrite(a, t, &v);
  if (a >= 0)
    H5Aclose(a);
  H5Sclose(s);
  H5Tclose(t);
  return rc < 0 ? -1 : 0;
}

static int attr_num(hid_t loc, const char *name, hid_t file_type, hid_t mem_type,
                    const void *value) {
  hid_t s = H5Screate(H5S_SCALAR);
  hid_t a = H5Acreate2(loc, name, file_type, s, H5P_DEFAULT, H5P_DEFAULT);
  herr_t rc = a < 0 ? -1 : H5Awrite(a, mem_type, value);
  if (a >= 0)
    H5Aclose(a);
  H5Sclose(s);
  return rc < 0 ? -1 : 0;
}

static int attr_i32(hid_t loc, const char *name, int value) {
  int32_t v = value;
  return attr_num(loc, name, H5T_STD_I32LE, H5T_NATIVE_INT32, &v);
}

static void iso8601_now(char *buf, size_t len) {
  time_t now = time(NULL);
  struct tm tm;
  gmtime_r(&now, &tm);
  strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static int write_root_attrs(hid_t file, const bt_runlog_meta *m) {
  char created[32];
  iso8601_now(created, sizeof created);
  uint64_t seed = m->seed;
  int rc = 0;
  rc |= attr_i32(file, "schema_version", BT_RUNLOG_SCHEMA_VERSION);
  rc |= attr_str(file, "baton_version", m->baton_version);
  rc |= attr_str(file, "git_describe", m->git_describe);
  rc |= attr_str(file, "config_yaml", m->config_yaml);
  rc |= attr_str(file, "effective_config_yaml", m->effective_config_yaml);
  rc |= attr_str(file, "mode", m->mode);
  rc |= attr_str(file, "clock", m->clock);
  rc |= attr_i32(file, "world_size", m->world_size);
  rc |= attr_num(file, "seed", H5T_STD_U64LE, H5T_NATIVE_UINT64, &seed);
  rc |= attr_str(file, "blis_arch", m->blis_arch);
  rc |= attr_i32(file, "blis_threads", m->blis_threads);
  rc |= attr_str(file, "schedule", m->schedule);
  rc |= attr_i32(file, "micro_batches", m->micro_batches);
  rc |= attr_i32(file, "batch_size", m->batch_size);
  rc |= attr_str(file, "created", created);
  if (m->predictor && m->predictor[0])
    rc |= attr_str(file, "predictor", m->predictor);
  return rc;
}

/* An empty, extendible, chunked dataset: 1-D rows of a table, 1-D int64
 * (/timing/iteration) or 2-D float64 [row, layer] (/timing/fwd, bwd). */
static hid_t create_dataset(hid_t file, int d) {
  int two_d = d == D_T_FWD || d == D_T_BWD;
  hsize_t dims[2] = {0, 0}, maxdims[2] = {H5S_UNLIMITED, H5S_UNLIMITED};
  hsize_t chunk[2] = {dsets[d].chunk, TIMING_LAYER_CHUNK};
  hid_t space = H5Screate_simple(two_d ? 2 : 1, dims, maxdims);
  hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  H5Pset_chunk(dcpl, two_d ? 2 : 1, chunk);
  hid_t type;
  if (dsets[d].table >= 0) {
    type = table_type(dsets[d].table, 1);
  } else if (two_d) {
    double nan = NAN; /* cells never written read as "not measured" */
    H5Pset_fill_value(dcpl, H5T_NATIVE_DOUBLE, &nan);
    type = H5Tcopy(H5T_IEEE_F64LE);
  } else {
    type = H5Tcopy(H5T_STD_I64LE);
  }
  hid_t ds = H5Dcreate2(file, dsets[d].path, type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  H5Tclose(type);
  H5Pclose(dcpl);
  H5Sclose(space);
  if (ds >= 0 && (attr_str(ds, "description", dsets[d].description) < 0 ||
                  attr_str(ds, "units", dsets[d].units) < 0)) {
    H5Dclose(ds);
    return H5I_INVALID_HID;
  }
  return ds;
}

/* Everything SWMR will ever write must exist before H5Fstart_swmr_write. */
static int create_layout(bt_runlog *log, const bt_runlog_meta *meta, bt_err *err) {
  if (write_root_attrs(log->file, meta) < 0)
    return h5_fail(err, log->path, "cannot write the root attributes");
  hid_t g = H5Gcreate2(log->file, "/timing", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  if (g < 0)
    return h5_fail(err, log->path, "cannot create /timing");
  int rc = attr_str(g, "description",
                    "per-layer device times; rows every time the runtime "
                    "reports them, iteration in /timing/iteration");
  H5Gclose(g);
  if (rc < 0)
    return h5_fail(err, log->path, "cannot write /timing attributes");
  for (int d = 0; d < D_COUNT; d++) {
    log->dset[d] = create_dataset(log->file, d);
    if (log->dset[d] < 0) {
      char what[96];
      snprintf(what, sizeof what, "cannot create %s", dsets[d].path);
      return h5_fail(err, log->path, what);
    }
  }
  return 0;
}

static bt_runlog *runlog_alloc(const char *path) {
  bt_runlog *log = calloc(1, sizeof *log);
  if (!log)
    return NULL;
  log->file = H5I_INVALID_HID;
  for (int t = 0; t < T_COUNT; t++)
    log->mem[t] = H5I_INVALID_HID;
  for (int d = 0; d < D_COUNT; d++)
    log->dset[d] = H5I_INVALID_HID;
  snprintf(log->path, sizeof log->path, "%s", path);
  return log;
}

static int runlog_release(bt_runlog *log) {
  int rc = 0;
  for (int d = 0; d < D_COUNT; d++)
    if (log->dset[d] >= 0)
      rc |= H5Dclose(log->dset[d]) < 0;
  for (int t = 0; t < T_COUNT; t++)
    if (log->mem[t] >= 0)
      H5Tclose(log->mem[t]);
  if (log->file >= 0)
    rc |= H5Fclose(log->file) < 0;
  free(log);
  return rc ? -1 : 0;
}

static int create_impl(bt_runlog **out, const char *path, const bt_runlog_meta *meta, bt_err *err) {
  bt_runlog *log = runlog_alloc(path);
  if (!log)
    return bt_err_set(err, "%s: out of memory", path);
  hid_t fapl = file_access(1);
  log->file = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
  H5Pclose(fapl);
  if (log->file < 0) {
    h5_fail(err, path, "cannot create the run log (is the directory there and writable?)");
    runlog_release(log);
    return -1;
  }
  for (int t = 0; t < T_COUNT; t++)
    log->mem[t] = table_type(t, 0);
  if (create_layout(log, meta, err) < 0) {
    runlog_release(log);
    unlink(path); /* a half-made file would only mislead */
    return -1;
  }
  if (H5Fstart_swmr_write(log->file) < 0) {
    h5_fail(err, path, "cannot start SWMR writing");
    runlog_release(log);
    unlink(path);
    return -1;
  }
  *out = log;
  return 0;
}

int bt_runlog_create(bt_runlog **log, const char *path, const bt_runlog_meta *meta, bt_err *err) {
  if (!log || !path || !*path || !meta)
    return bt_err_set(err, "bt_runlog_create: log, path and meta are required");
  *log = NULL;
  bt_h5_quiet q = bt_h5_quiet_begin();
  int rc = create_impl(log, path, meta, err);
  bt_h5_quiet_end(q);
  return rc;
}

/* Rows currently in dataset d (first dimension); -1 on error. */
static hssize_t rows_of(hid_t ds, hsize_t *cols) {
  hsize_t dims[2] = {0, 0};
  hid_t s = H5Dget_space(ds);
  if (s < 0)
    return -1;
  int nd = H5Sget_simple_extent_dims(s, dims, NULL);
  H5Sclose(s);
  if (cols)
    *cols = nd == 2 ? dims[1] : 1;
  return nd < 0 ? -1 : (hssize_t)dims[0];
}

/* Grows dataset `d` by `n` rows of `cols` columns and writes buf there. */
static int append(bt_runlog *log, int d, hid_t mem_type, size_t n, size_t cols, const void *buf,
                  bt_err *err) {
  if (n == 0)
    return 0;
  hid_t ds = log->dset[d];
  int rank = dsets[d].table < 0 && d != D_T_ITER ? 2 : 1;
  hssize_t rows = rows_of(ds, NULL);
  hsize_t start[2] = {(hsize_t)rows, 0}, count[2] = {n, cols};
  hsize_t extent[2] = {(hsize_t)rows + n, cols};
  herr_t rc = rows < 0 ? -1 : H5Dset_extent(ds, extent);
  hid_t fs = rc < 0 ? H5I_INVALID_HID : H5Dget_space(ds);
  hid_t ms = H5Screate_simple(rank, count, NULL);
  if (fs >= 0)
    rc = H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, count, NULL);
  if (fs >= 0 && rc >= 0)
    rc = H5Dwrite(ds, mem_type, ms, fs, H5P_DEFAULT, buf);
  if (fs >= 0)
    H5Sclose(fs);
  H5Sclose(ms);
  if (fs < 0 || rc < 0) {
    char what[96];
    snprintf(what, sizeof what, "cannot append to %s", dsets[d].path);
    return h5_fail(err, log->path, what);
  }
  return 0;
}

static int write_devices_impl(bt_runlog *log, int n, const bt_runlog_device *devices, bt_err *err) {
  device_row *rows = calloc((size_t)n, sizeof *rows);
  if (!rows)
    return bt_err_set(err, "%s: out of memory", log->path);
  for (int i = 0; i < n; i++) {
    rows[i].rank = devices[i].rank;
    snprintf(rows[i].profile, sizeof rows[i].profile, "%s",
             devices[i].profile ? devices[i].profile : "");
    rows[i].memory_capacity = devices[i].memory_capacity;
    rows[i].link_bandwidth_bps = devices[i].link_bandwidth_bps;
    rows[i].link_latency_s = devices[i].link_latency_s;
  }
  int rc = append(log, D_DEVICES, log->mem[T_DEVICE], (size_t)n, 1, rows, err);
  free(rows);
  if (rc == 0)
    log->devices_written = 1;
  return rc;
}

int bt_runlog_write_devices(bt_runlog *log, int n, const bt_runlog_device *devices, bt_err *err) {
  if (!log || n < 0 || (n > 0 && !devices))
    return bt_err_set(err, "bt_runlog_write_devices: bad arguments");
  if (log->devices_written)
    return bt_err_set(err, "%s: devices are written once per run", log->path);
  bt_h5_quiet q = bt_h5_quiet_begin();
  int rc = write_devices_impl(log, n, devices, err);
  bt_h5_quiet_end(q);
  return rc;
}

static void layer_row(const bt_layer *l, int index, bt_runlog_layer *r) {
  memset(r, 0, sizeof *r);
  r->index = index;
  snprintf(r->name, sizeof r->name, "%s", l->name);
  r->kind = (int32_t)l->kind;
  r->in = l->in;
  r->out = l->out;
  r->params = (int64_t)l->n_params;
  r->param_bytes = (int64_t)(sizeof(float) * l->n_params);
  r->out_bytes = (int64_t)(sizeof(float) * bt_shape_elems(l->out));
  r->flops_fwd = bt_layer_flops_fwd(l);
  r->flops_bwd = bt_layer_flops_bwd(l);
}

static int write_layers_impl(bt_runlog *log, const bt_model *m, bt_err *err) {
  bt_runlog_layer *rows = calloc((size_t)m->n_layers, sizeof *rows);
  if (!rows)
    return bt_err_set(err, "%s: out of memory", log->path);
  for (int i = 0; i < m->n_layers; i++)
    layer_row(&m->layers[i], i, &rows[i]);
  int rc = append(log, D_LAYERS, log->mem[T_LAYER], (size_t)m->n_layers, 1, rows, err);
  free(rows);
  if (rc == 0) {
    log->layers_written = 1;
    log->n_layers = m->n_layers;
  }
  return rc;
}

int bt_runlog_write_layers(bt_runlog *log, const bt_model *m, bt_err *err) {
  if (!log || !m || m->n_layers <= 0 || !m->layers)
    return bt_err_set(err, "bt_runlog_write_layers: a finalized model is required");
  if (log->layers_written)
    return bt_err_set(err, "%s: layers are written once per run", log->path);
  if (log->n_layers && log->n_layers != m->n_layers)
    return bt_err_set(err, "%s: model has %d layers but /timing rows have %d", log->path,
                      m->n_layers, log->n_layers);
  bt_h5_quiet q = bt_h5_quiet_begin();
  int rc = write_layers_impl(log, m, err);
  bt_h5_quiet_end(q);
  return rc;
}

static int check_plan(const bt_runlog *log, const bt_runlog_plan *p, bt_err *err) {
  if (p->n_stages <= 0 || !p->first_layer || !p->device_rank)
    return bt_err_set(err, "%s: plan needs n_stages > 0, first_layer and device_rank", log->path);
  for (int s = 0; s < p->n_stages; s++) {
    int end = s + 1 < p->n_stages ? p->first_layer[s + 1] : log->n_layers;
    if (p->first_layer[s] < 0 || (end > 0 && p->first_layer[s] >= end))
      return bt_err_set(err, "%s: plan stage %d starts at layer %d, not before the next stage",
                        log->path, s, p->first_layer[s]);
  }
  return 0;
}

/* Stage rows first, then the plan row that points at them (see the top). */
static int append_plan_impl(bt_runlog *log, const bt_runlog_plan *p, bt_err *err) {
  hssize_t first = rows_of(log->dset[D_STAGES], NULL);
  if (first < 0)
    return h5_fail(err, log->path, "cannot read the size of /plan_stages");
  stage_row *rows = calloc((size_t)p->n_stages, sizeof *rows);
  if (!rows)
    return bt_err_set(err, "%s: out of memory", log->path);
  for (int s = 0; s < p->n_stages; s++) {
    int end = s + 1 < p->n_stages ? p->first_layer[s + 1] : log->n_layers;
    rows[s] =
        (stage_row){log->n_plans,      s,
                    p->first_layer[s], end > 0 ? end : -1,
                    p->device_rank[s], p->predicted_stage_time ? p->predicted_stage_time[s] : NAN};
  }
  int rc = append(log, D_STAGES, log->mem[T_STAGE], (size_t)p->n_stages, 1, rows, err);
  free(rows);
  plan_row row = {
      log->n_plans, p->iteration, p->n_stages, (int64_t)first, p->predicted_iteration_time, ""};
  snprintf(row.partitioner, sizeof row.partitioner, "%s", p->partitioner ? p->partitioner : "");
  if (rc == 0)
    rc = append(log, D_PLANS, log->mem[T_PLAN], 1, 1, &row, err);
  if (rc == 0)
    log->n_plans++;
  return rc;
}

int bt_runlog_append_plan(bt_runlog *log, const bt_runlog_plan *plan, bt_err *err) {
  if (!log || !plan)
    return bt_err_set(err, "bt_runlog_append_plan: log and plan are required");
  if (check_plan(log, plan, err) < 0)
    return -1;
  bt_h5_quiet q = bt_h5_quiet_begin();
  int rc = append_plan_impl(log, plan, err);
  bt_h5_quiet_end(q);
  return rc;
}

/* NULL fwd or bwd leaves the row at the fill value NaN (not measured). */
static int append_timing_impl(bt_runlog *log, int64_t iteration, int n_layers, const double *fwd,
                              const double *bwd, bt_err *err) {
  hid_t f64 = H5T_NATIVE_DOUBLE;
  hssize_t row = rows_of(log->dset[D_T_ITER], NULL);
  if (row < 0)
    return h5_fail(err, log->path, "cannot read the size of /timing/iteration");
  int rc = 0;
  const double *arrays[2] = {fwd, bwd};
  const int which[2] = {D_T_FWD, D_T_BWD};
  for (int k = 0; k < 2 && rc == 0; k++) {
    hsize_t extent[2] = {(hsize_t)row + 1, (hsize_t)n_layers};
    if (arrays[k])
      rc = append(log, which[k], f64, 1, (size_t)n_layers, arrays[k], err);
    else if (H5Dset_extent(log->dset[which[k]], extent) < 0)
      rc = h5_fail(err, log->path, "cannot extend /timing");
  }
  if (rc == 0)
    rc = append(log, D_T_ITER, H5T_NATIVE_INT64, 1, 1, &iteration, err);
  return rc;
}

int bt_runlog_append_timing(bt_runlog *log, int64_t iteration, int n_layers, const double *fwd,
                            const double *bwd, bt_err *err) {
  if (!log || n_layers <= 0)
    return bt_err_set(err, "bt_runlog_append_timing: log and n_layers > 0 are required");
  if (log->n_layers && n_layers != log->n_layers)
    return bt_err_set(err, "%s: timing row has %d layers, the run has %d", log->path, n_layers,
                      log->n_layers);
  log->n_layers = n_layers;
  bt_h5_quiet q = bt_h5_quiet_begin();
  int rc = append_timing_impl(log, iteration, n_layers, fwd, bwd, err);
  bt_h5_quiet_end(q);
  return rc;
}

int bt_runlog_append_events(bt_runlog *log, size_t n, const bt_event *events, bt_err *err) {
  if (!log || (n > 0 && !events))
    return bt_err_set(err, "bt_runlog_append_events: bad arguments");
  for (size_t i = 0; i < n; i++)
    if (events[i].kind < 0 || events[i].kind >= BT_EV_KIND_COUNT)
      return bt_err_set(err, "%s: event %zu has kind %d (valid: 0..%d)", log->path, i,
                        events[i].kind, BT_EV_KIND_COUNT - 1);
  bt_h5_quiet q = bt_h5_quiet_begin();
  int rc = append(log, D_TIMELINE, log->mem[T_EVENT], n, 1, events, err);
  bt_h5_quiet_end(q);
  return rc;
}

int bt_runlog_append_eval(bt_runlog *log, const bt_eval_record *rec, bt_err *err) {
  if (!log || !rec)
    return bt_err_set(err, "bt_runlog_append_eval: log and record are required");
  bt_h5_quiet q = bt_h5_quiet_begin();
  int rc = append(log, D_EVAL, log->mem[T_EVAL], 1, 1, rec, err);
  bt_h5_quiet_end(q);
  return rc;
}

/* n rows of a compound table (who: the caller, for the error). */
static int append_rows(bt_runlog *log, int d, int t, size_t n, const void *recs, const char *who,
                       bt_err *err) {
  if (!log || (n > 0 && !recs))
    return bt_err_set(err, "%s: bad arguments", who);
  bt_h5_quiet q = bt_h5_quiet_begin();
  int rc = append(log, d, log->mem[t], n, 1, recs, err);
  bt_h5_quiet_end(q);
  return rc;
}

int bt_runlog_append_predictor(bt_runlog *log, size_t n, const bt_predictor_record *recs,
                               bt_err *err) {
  return append_rows(log, D_PRED, T_PRED, n, recs, "bt_runlog_append_predictor", err);
}

int bt_runlog_append_probes(bt_runlog *log, size_t n, const bt_probe_record *recs, bt_err *err) {
  return append_rows(log, D_PROBES, T_PROBE, n, recs, "bt_runlog_append_probes", err);
}

int bt_runlog_append_train(bt_runlog *log, const bt_train_record *rec, bt_err *err) {
  if (!log || !rec)
    return bt_err_set(err, "bt_runlog_append_train: log and record are required");
  bt_h5_quiet q = bt_h5_quiet_begin();
  int rc = append(log, D_TRAIN, log->mem[T_TRAIN], 1, 1, rec, err);
  bt_h5_quiet_end(q);
  return rc;
}

/* H5Fflush hands everything to the kernel: it survives the process being
 * killed (SIGKILL, OOM killer, a batch system's time limit), not a crash of
 * the machine, for which fsync would be needed at a price per iteration. */
int bt_runlog_flush(bt_runlog *log, bt_err *err) {
  if (!log)
    return bt_err_set(err, "bt_runlog_flush: no run log");
  bt_h5_quiet q = bt_h5_quiet_begin();
  int rc = H5Fflush(log->file, H5F_SCOPE_GLOBAL) < 0 ? h5_fail(err, log->path, "flush failed") : 0;
  bt_h5_quiet_end(q);
  return rc;
}

int bt_runlog_close(bt_runlog **log, bt_err *err) {
  if (!log || !*log)
    return 0;
  char path[sizeof(*log)->path];
  memcpy(path, (*log)->path, sizeof path);
  bt_h5_quiet q = bt_h5_quiet_begin();
  int rc = runlog_release(*log) < 0 ? h5_fail(err, path, "close failed") : 0;
  bt_h5_quiet_end(q);
  *log = NULL;
  return rc;
}

/* ---- reading ---------------------------------------------------------- */

static int check_file(const char *path, bt_err *err) {
  struct stat st;
  if (stat(path, &st) < 0)
    return bt_err_set(err, "%s: %s", path, strerror(errno));
  if (!S_ISREG(st.st_mode))
    return bt_err_set(err, "%s: not a regular file", path);
  if (st.st_size == 0)
    return bt_err_set(err,
                      "%s: empty file, not a run log (a writer killed while creating it "
                      "leaves this)",
                      path);
  if (access(path, R_OK) < 0)
    return bt_err_set(err, "%s: %s", path, strerror(errno));
  if (H5Fis_hdf5(path) <= 0)
    return bt_err_set(err, "%s: not an HDF5 file; expected a run log written by baton", path);
  return 0;
}

/* A file whose SWMR writer died (or still runs) keeps a flag that refuses
 * ordinary opens; SWMR-read mode opens it as it stands on disk. */
static hid_t open_file(const char *path, int *unclosed, bt_err *err) {
  hid_t fapl = file_access(0);
  hid_t f = H5Fopen(path, H5F_ACC_RDONLY, fapl);
  *unclosed = 0;
  if (f < 0) {
    h5_fail(err, path, "cannot open the run log");
    f = H5Fopen(path, H5F_ACC_RDONLY | H5F_ACC_SWMR_READ, fapl);
    *unclosed = f >= 0;
  }
  H5Pclose(fapl);
  return f;
}

static int has_attr(hid_t loc, const char *name) { return H5Aexists(loc, name) > 0; }

static int read_attr_str(hid_t loc, const char *name, char **out) {
  *out = NULL;
  hid_t a = H5Aopen(loc, name, H5P_DEFAULT);
  if (a < 0)
    return -1;
  hid_t t = H5Tcopy(H5T_C_S1);
  H5Tset_size(t, H5T_VARIABLE);
  H5Tset_cset(t, H5T_CSET_UTF8);
  char *v = NULL;
  herr_t rc = H5Aread(a, t, &v);
  if (rc >= 0) {
    *out = strdup(v ? v : "");
    H5free_memory(v);
  }
  H5Tclose(t);
  H5Aclose(a);
  return rc < 0 || !*out ? -1 : 0;
}

static int read_attr_fixed(hid_t loc, const char *name, char *buf, size_t len) {
  char *v;
  if (read_attr_str(loc, name, &v) < 0)
    return -1;
  snprintf(buf, len, "%s", v);
  free(v);
  return 0;
}

static int read_attr_num(hid_t loc, const char *name, hid_t mem_type, void *out) {
  hid_t a = H5Aopen(loc, name, H5P_DEFAULT);
  if (a < 0)
    return -1;
  herr_t rc = H5Aread(a, mem_type, out);
  H5Aclose(a);
  return rc < 0 ? -1 : 0;
}

static int read_attr_int(hid_t loc, const char *name, int *out) {
  int32_t v = 0;
  int rc = read_attr_num(loc, name, H5T_NATIVE_INT32, &v);
  *out = v;
  return rc;
}

static int check_schema(hid_t file, const char *path, int *version, bt_err *err) {
  if (!has_attr(file, "schema_version"))
    return bt_err_set(err,
                      "%s: HDF5 file but not a baton run log (no schema_version attribute "
                      "on /)",
                      path);
  if (read_attr_int(file, "schema_version", version) < 0)
    return h5_fail(err, path, "cannot read the schema_version attribute");
  if (*version != BT_RUNLOG_SCHEMA_VERSION)
    return bt_err_set(err,
                      "%s: schema_version %d, but this baton reads schema_version %d; use "
                      "the baton release that wrote it",
                      path, *version, BT_RUNLOG_SCHEMA_VERSION);
  return 0;
}

static int read_root_attrs(hid_t f, const char *path, bt_runlog_data *d, bt_err *err) {
  int rc = 0;
  rc |= read_attr_int(f, "world_size", &d->world_size);
  rc |= read_attr_fixed(f, "clock", d->clock, sizeof d->clock);
  rc |= read_attr_fixed(f, "schedule", d->schedule, sizeof d->schedule);
  rc |= read_attr_fixed(f, "mode", d->mode, sizeof d->mode);
  rc |= read_attr_fixed(f, "baton_version", d->baton_version, sizeof d->baton_version);
  rc |= read_attr_fixed(f, "git_describe", d->git_describe, sizeof d->git_describe);
  rc |= read_attr_fixed(f, "blis_arch", d->blis_arch, sizeof d->blis_arch);
  rc |= read_attr_fixed(f, "created", d->created, sizeof d->created);
  rc |= read_attr_num(f, "seed", H5T_NATIVE_UINT64, &d->seed);
  rc |= read_attr_int(f, "blis_threads", &d->blis_threads);
  rc |= read_attr_int(f, "micro_batches", &d->micro_batches);
  rc |= read_attr_int(f, "batch_size", &d->batch_size);
  rc |= read_attr_str(f, "config_yaml", &d->config_yaml);
  rc |= read_attr_str(f, "effective_config_yaml", &d->effective_config_yaml);
  if (H5Aexists(f, "predictor") > 0) /* optional: runs planned by the predictor */
    rc |= read_attr_str(f, "predictor", &d->predictor_info);
  return rc ? h5_fail(err, path, "missing or unreadable root attributes") : 0;
}

/* Reads dataset `d` whole into a new buffer of *rows x cols elements of
 * `elem` bytes. An empty dataset gives NULL and 0 rows. */
static int read_dataset(hid_t file, const char *path, int d, hid_t mem_type, size_t elem,
                        void **buf, size_t *rows, size_t *cols, bt_err *err) {
  *buf = NULL;
  *rows = 0;
  char what[96];
  snprintf(what, sizeof what, "cannot read %s", dsets[d].path);
  hid_t ds = H5Dopen2(file, dsets[d].path, H5P_DEFAULT);
  if (ds < 0)
    return h5_fail(err, path, what);
  hsize_t c = 1;
  hssize_t n = rows_of(ds, &c);
  int rc = n < 0 ? -1 : 0;
  if (rc == 0 && n > 0 && c > 0) {
    *buf = malloc((size_t)n * c * elem);
    rc = !*buf || H5Dread(ds, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, *buf) < 0 ? -1 : 0;
  }
  H5Dclose(ds);
  if (rc < 0) {
    free(*buf);
    *buf = NULL;
    return h5_fail(err, path, what);
  }
  *rows = (size_t)n;
  if (cols)
    *cols = (size_t)c;
  return 0;
}

static int read_table(hid_t file, const char *path, int d, hid_t mem_type, void **buf, size_t *rows,
                      bt_err *err) {
  return read_dataset(file, path, d, mem_type, tables[dsets[d].table].size, buf, rows, NULL, err);
}

static int read_devices(hid_t f, const char *path, hid_t mem, bt_runlog_data *d, bt_err *err) {
  device_row *rows;
  size_t n;
  if (read_table(f, path, D_DEVICES, mem, (void **)&rows, &n, err) < 0)
    return -1;
  d->n_devices = (int)n;
  d->device_profile = calloc(n + 1, sizeof *d->device_profile);
  d->devices = calloc(n + 1, sizeof *d->devices);
  if (!d->device_profile || !d->devices) {
    free(rows);
    return bt_err_set(err, "%s: out of memory", path);
  }
  for (size_t i = 0; i < n; i++) {
    memcpy(d->device_profile[i], rows[i].profile, sizeof d->device_profile[i]);
    d->device_profile[i][sizeof d->device_profile[i] - 1] = '\0';
    d->devices[i] = (bt_runlog_device){rows[i].rank, d->device_profile[i], rows[i].memory_capacity,
                                       rows[i].link_bandwidth_bps, rows[i].link_latency_s};
  }
  free(rows);
  return 0;
}

/* Keeps only plans whose stage rows are all there (a writer killed between
 * the two appends leaves none behind, by the write order; this is defence). */
static int read_plans(hid_t f, const char *path, hid_t plan_mem, hid_t stage_mem, bt_runlog_data *d,
                      bt_err *err) {
  plan_row *plans = NULL;
  stage_row *stages = NULL;
  size_t np, ns;
  if (read_table(f, path, D_PLANS, plan_mem, (void **)&plans, &np, err) < 0 ||
      read_table(f, path, D_STAGES, stage_mem, (void **)&stages, &ns, err) < 0) {
    free(plans);
    return -1;
  }
  d->plans = calloc(np + 1, sizeof *d->plans);
  d->plan_ints = calloc(2 * ns + 1, sizeof *d->plan_ints);
  d->plan_doubles = calloc(ns + 1, sizeof *d->plan_doubles);
  d->plan_partitioner = calloc(np + 1, sizeof *d->plan_partitioner);
  int rc = d->plans && d->plan_ints && d->plan_doubles && d->plan_partitioner ? 0 : -1;
  for (size_t i = 0; i < ns && rc == 0; i++) {
    d->plan_ints[i] = stages[i].first_layer;
    d->plan_ints[ns + i] = stages[i].device_rank;
    d->plan_doubles[i] = stages[i].predicted_time;
  }
  for (size_t i = 0; i < np && rc == 0; i++) {
    const plan_row *p = &plans[i];
    if (p->n_stages <= 0 || p->first_stage_row < 0 ||
        (size_t)p->first_stage_row + (size_t)p->n_stages > ns)
      continue;
    int k = d->n_plans++;
    memcpy(d->plan_partitioner[k], p->partitioner, sizeof d->plan_partitioner[k]);
    d->plan_partitioner[k][sizeof d->plan_partitioner[k] - 1] = '\0';
    d->plans[k] = (bt_runlog_plan){p->iteration,
                                   p->n_stages,
                                   &d->plan_ints[p->first_stage_row],
                                   &d->plan_ints[ns + (size_t)p->first_stage_row],
                                   &d->plan_doubles[p->first_stage_row],
                                   p->predicted_iteration_time,
                                   d->plan_partitioner[k]};
  }
  free(plans);
  free(stages);
  return rc < 0 ? bt_err_set(err, "%s: out of memory", path) : 0;
}

/* /timing/iteration is written last, so its length is the number of
 * complete rows; longer fwd/bwd arrays (killed writer) are cut to it. */
static int read_timing(hid_t f, const char *path, bt_runlog_data *d, bt_err *err) {
  size_t n_iter, n_fwd, n_bwd, c_fwd = 0, c_bwd = 0;
  if (read_dataset(f, path, D_T_ITER, H5T_NATIVE_INT64, sizeof(int64_t),
                   (void **)&d->timing_iteration, &n_iter, NULL, err) < 0 ||
      read_dataset(f, path, D_T_FWD, H5T_NATIVE_DOUBLE, sizeof(double), (void **)&d->timing_fwd,
                   &n_fwd, &c_fwd, err) < 0 ||
      read_dataset(f, path, D_T_BWD, H5T_NATIVE_DOUBLE, sizeof(double), (void **)&d->timing_bwd,
                   &n_bwd, &c_bwd, err) < 0)
    return -1;
  if (c_fwd != c_bwd && n_fwd && n_bwd)
    return bt_err_set(err, "%s: /timing/fwd has %zu columns, /timing/bwd %zu", path, c_fwd, c_bwd);
  d->n_timing = n_iter < n_fwd ? n_iter : n_fwd;
  d->n_timing = d->n_timing < n_bwd ? d->n_timing : n_bwd;
  d->timing_layers = d->n_timing ? (int)c_fwd : 0;
  return 0;
}

static int read_tables(hid_t f, const char *path, bt_runlog_data *d, bt_err *err) {
  hid_t mem[T_COUNT];
  for (int t = 0; t < T_COUNT; t++)
    mem[t] = table_type(t, 0);
  size_t n_layers = 0;
  int rc = read_devices(f, path, mem[T_DEVICE], d, err);
  if (rc == 0)
    rc = read_table(f, path, D_LAYERS, mem[T_LAYER], (void **)&d->layers, &n_layers, err);
  if (rc == 0)
    rc = read_plans(f, path, mem[T_PLAN], mem[T_STAGE], d, err);
  if (rc == 0)
    rc = read_timing(f, path, d, err);
  if (rc == 0)
    rc = read_table(f, path, D_TIMELINE, mem[T_EVENT], (void **)&d->events, &d->n_events, err);
  if (rc == 0)
    rc = read_table(f, path, D_TRAIN, mem[T_TRAIN], (void **)&d->train, &d->n_train, err);
  /* /eval came after the first files were written (a new dataset does not
   * change the schema version): absent means no evaluations. */
  if (rc == 0 && H5Lexists(f, "eval", H5P_DEFAULT) > 0)
    rc = read_table(f, path, D_EVAL, mem[T_EVAL], (void **)&d->eval, &d->n_eval, err);
  if (rc == 0 && H5Lexists(f, "predictor", H5P_DEFAULT) > 0)
    rc = read_table(f, path, D_PRED, mem[T_PRED], (void **)&d->predictor, &d->n_predictor, err);
  if (rc == 0 && H5Lexists(f, "probes", H5P_DEFAULT) > 0)
    rc = read_table(f, path, D_PROBES, mem[T_PROBE], (void **)&d->probes, &d->n_probes, err);
  for (int t = 0; t < T_COUNT; t++)
    H5Tclose(mem[t]);
  d->n_layers = n_layers ? (int)n_layers : d->timing_layers;
  return rc;
}

static int read_impl(const char *path, bt_runlog_data *d, bt_err *err) {
  if (check_file(path, err) < 0)
    return -1;
  hid_t f = open_file(path, &d->unclosed, err);
  if (f < 0)
    return -1;
  int rc = check_schema(f, path, &d->schema_version, err);
  if (rc == 0)
    rc = read_root_attrs(f, path, d, err);
  if (rc == 0)
    rc = read_tables(f, path, d, err);
  H5Fclose(f);
  return rc;
}

int bt_runlog_read(const char *path, bt_runlog_data *out, bt_err *err) {
  if (!out)
    return bt_err_set(err, "bt_runlog_read: out is required");
  memset(out, 0, sizeof *out);
  if (!path || !*path)
    return bt_err_set(err, "bt_runlog_read: no path given");
  bt_h5_quiet q = bt_h5_quiet_begin();
  int rc = read_impl(path, out, err);
  bt_h5_quiet_end(q);
  if (rc < 0)
    bt_runlog_data_free(out);
  return rc;
}

void bt_runlog_data_free(bt_runlog_data *d) {
  if (!d)
    return;
  free(d->events);
  free(d->train);
  free(d->eval);
  free(d->predictor);
  free(d->probes);
  free(d->device_profile);
  free(d->config_yaml);
  free(d->effective_config_yaml);
  free(d->predictor_info);
  free(d->devices);
  free(d->layers);
  free(d->plans);
  free(d->timing_iteration);
  free(d->timing_fwd);
  free(d->timing_bwd);
  free(d->plan_ints);
  free(d->plan_doubles);
  free(d->plan_partitioner);
  memset(d, 0, sizeof *d);
}
