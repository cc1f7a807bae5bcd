/* data: Fashion-MNIST loading, synthetic data, normalisation, shuffling and
 * batch gathering; see include/baton/data.h.
 *
 * The IDX reader trusts nothing in a file: a header's counts decide how much
 * is read, but memory grows only as bytes actually arrive, so a corrupt count
 * ends in a "truncated" error rather than a huge allocation. */
#define _POSIX_C_SOURCE 200809L

#include "baton/data.h"

#include <assert.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "baton/rng.h"

#define FMNIST_INSTALL_HINT                                                                        \
  "install it with: apt-get install dataset-fashion-mnist (or set data.path)"
#define FMNIST_CORRUPT_HINT                                                                        \
  "reinstall it with: apt-get install --reinstall dataset-fashion-mnist (or set data.path to an "  \
  "intact copy)"
#define FMNIST_SIDE 28
#define FMNIST_CLASSES 10
#define IDX_MAGIC_IMAGES 0x00000803u
#define IDX_MAGIC_LABELS 0x00000801u
#define IDX_HEADER_MAX 16

/* Purpose tags for bt_rng_stream, so that the shuffle and the synthetic data
 * of one seed never share a stream. */
#define STREAM_PERMUTATION 0x7065726d75746531ULL /* "permute1" */
#define STREAM_SYNTH_PROJ 0x73796e7470726f6aULL  /* "syntproj" */
#define STREAM_SYNTH_MIX 0x73796e746d697831ULL   /* "syntmix1" */
#define STREAM_SYNTH_X 0x73796e7478786478ULL     /* "syntxxdx" */

/* Above this many classes the synthetic projection is low rank (classes x
 * SYNTH_RANK times SYNTH_RANK x d): the per-value cost stays bounded for large
 * shapes with many classes, and the labels stay a linear function of x. */
#define SYNTH_RANK 32

/* gzread takes an unsigned length; big chunks keep the read fast without
 * going near that limit. */
#define READ_CHUNK ((size_t)1 << 24)

void bt_dataset_free(bt_dataset *ds) {
  if (!ds)
    return;
  free(ds->x);
  free(ds->y);
  memset(ds, 0, sizeof *ds);
}

static int mul_size(size_t a, size_t b, size_t *out) {
  if (a != 0 && b > SIZE_MAX / a)
    return -1;
  *out = a * b;
  return 0;
}

static uint32_t be32(const unsigned char *p) {
  return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3];
}

/* Reads up to len bytes; returns how many arrived (fewer only at end of data
 * or on error, which the caller tells apart with gzerror). */
static size_t gz_read_full(gzFile f, unsigned char *buf, size_t len) {
  size_t got = 0;
  while (got < len) {
    size_t want = len - got < READ_CHUNK ? len - got : READ_CHUNK;
    int r = gzread(f, buf + got, (unsigned)want);
    if (r <= 0)
      break;
    got += (size_t)r;
  }
  return got;
}

/* How a gzip stream stopped: Z_OK for a clean end of data, Z_BUF_ERROR when
 * the compressed file is cut short, another code for corrupt data. *msg gets
 * zlib's text without the "path: " zlib puts in front of it. */
static int gz_status(gzFile f, const char *path, const char **msg) {
  int errnum = Z_OK;
  const char *m = gzerror(f, &errnum);
  if (errnum == Z_STREAM_END)
    errnum = Z_OK;
  if (!m)
    m = "";
  size_t plen = strlen(path);
  if (strncmp(m, path, plen) == 0 && strncmp(m + plen, ": ", 2) == 0)
    m += plen + 2;
  *msg = m;
  return errnum;
}

/* Opens path for reading, or explains why not: a missing file or directory
 * gets the package hint, anything else the system's reason. */
static gzFile idx_open(const char *dir, const char *path, bt_err *err) {
  errno = 0;
  gzFile f = gzopen(path, "rb");
  if (f) {
    gzbuffer(f, 1u << 18);
    return f;
  }
  int e = errno;
  if (e == ENOENT || e == ENOTDIR) {
    struct stat st;
    if (stat(dir, &st) != 0)
      bt_err_set(err,
                 "fashion-mnist: cannot open %s: directory %s does not exist; " FMNIST_INSTALL_HINT,
                 path, dir);
    else
      bt_err_set(err, "fashion-mnist: cannot open %s: no such file; " FMNIST_INSTALL_HINT, path);
  } else {
    bt_err_set(err,
               "fashion-mnist: cannot open %s: %s; check that it is a readable file, "
               "or " FMNIST_INSTALL_HINT,
               path, e ? strerror(e) : "out of memory");
  }
  return NULL;
}

/* Reads the IDX header of an open file: the magic number must be `magic`, whose
 * low byte is the number of dimensions; dims receives them. */
static int idx_header(gzFile f, const char *path, uint32_t magic, const char *what, uint32_t *dims,
                      bt_err *err) {
  int ndims = (int)(magic & 0xff);
  size_t hlen = 4 + 4 * (size_t)ndims;
  unsigned char h[IDX_HEADER_MAX];
  assert(hlen <= sizeof h);
  size_t got = gz_read_full(f, h, hlen);
  if (got < hlen) {
    const char *zmsg;
    int z = gz_status(f, path, &zmsg);
    if (z != Z_OK && z != Z_BUF_ERROR)
      return bt_err_set(
          err, "fashion-mnist: %s: corrupt gzip data while reading the IDX header (zlib: %s); %s",
          path, zmsg, FMNIST_CORRUPT_HINT);
    return bt_err_set(err,
                      "fashion-mnist: %s: truncated: the data ends after %zu bytes, inside the "
                      "%zu-byte IDX header%s; " FMNIST_CORRUPT_HINT,
                      path, got, hlen, z == Z_BUF_ERROR ? " (the gzip stream is cut short)" : "");
  }
  uint32_t m = be32(h);
  if (m != magic)
    return bt_err_set(err,
                      "fashion-mnist: %s: bad magic number 0x%08x (expected 0x%08x, an IDX file of "
                      "%s): wrong or corrupt file; " FMNIST_CORRUPT_HINT,
                      path, (unsigned)m, (unsigned)magic, what);
  for (int i = 0; i < ndims; i++)
    dims[i] = be32(h + 4 + 4 * i);
  return 0;
}

/* Reads exactly len body bytes, growing the buffer only as data arrives, then
 * checks that nothing follows (extra data means the header's count is wrong). */
static int idx_body(gzFile f, const char *path, size_t len, const char *what, unsigned char **out,
                    bt_err *err) {
  *out = NULL;
  unsigned char *buf = NULL;
  size_t cap = 0, got = 0;
  while (got < len) {
    if (got == cap) {
      size_t ncap = cap ? cap * 2 : READ_CHUNK;
      if (ncap > len || ncap < cap)
        ncap = len;
      unsigned char *nb = realloc(buf, ncap);
      if (!nb) {
        free(buf);
        return bt_err_set(err, "fashion-mnist: %s: out of memory reading %zu bytes of %s", path,
                          len, what);
      }
      buf = nb;
      cap = ncap;
    }
    size_t r = gz_read_full(f, buf + got, cap - got);
    got += r;
    if (got < cap)
      break;
  }
  const char *zmsg;
  int z = gz_status(f, path, &zmsg);
  if (got < len) {
    free(buf);
    if (z != Z_OK && z != Z_BUF_ERROR)
      return bt_err_set(err,
                        "fashion-mnist: %s: corrupt gzip data after %zu of the %zu bytes of %s "
                        "(zlib: %s); " FMNIST_CORRUPT_HINT,
                        path, got, len, what, zmsg);
    return bt_err_set(err,
                      "fashion-mnist: %s: truncated: the header promises %zu bytes of %s but "
                      "only %zu follow%s; " FMNIST_CORRUPT_HINT,
                      path, len, what, got,
                      z == Z_BUF_ERROR ? " (the gzip stream is cut short)" : "");
  }
  unsigned char extra;
  if (gz_read_full(f, &extra, 1) == 1) {
    free(buf);
    return bt_err_set(err,
                      "fashion-mnist: %s: more data than the header's count of %s (%zu bytes): "
                      "wrong or corrupt file; " FMNIST_CORRUPT_HINT,
                      path, what, len);
  }
  /* All the data arrived, but the gzip trailer (length and CRC) must check
   * out too, or the bytes read may be wrong. */
  z = gz_status(f, path, &zmsg);
  if (z != Z_OK) {
    free(buf);
    if (z == Z_BUF_ERROR)
      return bt_err_set(err,
                        "fashion-mnist: %s: truncated: the gzip stream is cut short after the %s; "
                        "" FMNIST_CORRUPT_HINT,
                        path, what);
    return bt_err_set(err, "fashion-mnist: %s: corrupt gzip data after the %s (zlib: %s); %s", path,
                      what, zmsg, FMNIST_CORRUPT_HINT);
  }
  *out = buf;
  return 0;
}

static int load_images(const char *dir, const char *path, unsigned char **pix, uint32_t *count,
                       bt_err *err) {
  gzFile f = idx_open(dir, path, err);
  if (!f)
    return -1;
  uint32_t dims[3] = {0};
  int rc =
      idx_header(f, path, IDX_MAGIC_IMAGES, "images (unsigned bytes, 3 dimensions)", dims, err);
  if (rc == 0 && (dims[1] != FMNIST_SIDE || dims[2] != FMNIST_SIDE))
    rc = bt_err_set(err,
                    "fashion-mnist: %s: images are %ux%u, expected %dx%d: not "
                    "Fashion-MNIST; " FMNIST_CORRUPT_HINT,
                    path, (unsigned)dims[1], (unsigned)dims[2], FMNIST_SIDE, FMNIST_SIDE);
  if (rc == 0 && dims[0] == 0)
    rc = bt_err_set(err, "fashion-mnist: %s: the header says 0 images; " FMNIST_CORRUPT_HINT, path);
  size_t len = 0;
  if (rc == 0 && mul_size((size_t)dims[0], (size_t)FMNIST_SIDE * FMNIST_SIDE, &len) != 0)
    rc = bt_err_set(err, "fashion-mnist: %s: image count %u is too large; " FMNIST_CORRUPT_HINT,
                    path, (unsigned)dims[0]);
  if (rc == 0)
    rc = idx_body(f, path, len, "pixels", pix, err);
  gzclose(f);
  *count = dims[0];
  return rc;
}

static int load_labels(const char *dir, const char *path, unsigned char **lab, uint32_t *count,
                       bt_err *err) {
  gzFile f = idx_open(dir, path, err);
  if (!f)
    return -1;
  uint32_t dims[1] = {0};
  int rc = idx_header(f, path, IDX_MAGIC_LABELS, "labels (unsigned bytes, 1 dimension)", dims, err);
  if (rc == 0 && dims[0] == 0)
    rc = bt_err_set(err, "fashion-mnist: %s: the header says 0 labels; " FMNIST_CORRUPT_HINT, path);
  if (rc == 0)
    rc = idx_body(f, path, dims[0], "labels", lab, err);
  gzclose(f);
  *count = dims[0];
  return rc;
}

int bt_data_load_fashion_mnist(const char *dir, int train, bt_dataset *out, bt_err *err) {
  memset(out, 0, sizeof *out);
  if (!dir)
    dir = BT_DATA_FASHION_MNIST_DIR;
  const char *split = train ? "train" : "t10k";
  char ipath[4096], lpath[4096];
  int ni = snprintf(ipath, sizeof ipath, "%s/%s-images-idx3-ubyte.gz", dir, split);
  int nl = snprintf(lpath, sizeof lpath, "%s/%s-labels-idx1-ubyte.gz", dir, split);
  if (ni < 0 || (size_t)ni >= sizeof ipath || nl < 0 || (size_t)nl >= sizeof lpath)
    return bt_err_set(err,
                      "fashion-mnist: directory path is too long (%zu characters); set "
                      "data.path to a shorter path",
                      strlen(dir));

  unsigned char *pix = NULL, *lab = NULL;
  uint32_t nimg = 0, nlab = 0;
  /* Labels first: the small file fails fast when the package is absent. */
  if (load_labels(dir, lpath, &lab, &nlab, err) != 0)
    return -1;
  if (load_images(dir, ipath, &pix, &nimg, err) != 0) {
    free(lab);
    return -1;
  }
  int rc = 0;
  if (nimg != nlab)
    rc = bt_err_set(err,
                    "fashion-mnist: %s holds %u images but %s holds %u labels: the files do not "
                    "belong together; " FMNIST_CORRUPT_HINT,
                    ipath, (unsigned)nimg, lpath, (unsigned)nlab);
  for (uint32_t i = 0; rc == 0 && i < nlab; i++)
    if (lab[i] >= FMNIST_CLASSES)
      rc = bt_err_set(err,
                      "fashion-mnist: %s: label %u of sample %u is out of range (must be < %d): "
                      "corrupt file; " FMNIST_CORRUPT_HINT,
                      lpath, (unsigned)lab[i], (unsigned)i, FMNIST_CLASSES);
  size_t npix = (size_t)nimg * FMNIST_SIDE * FMNIST_SIDE;
  float *x = NULL;
  int32_t *y = NULL;
  if (rc == 0) {
    x = malloc(npix * sizeof *x);
    y = malloc((size_t)nlab * sizeof *y);
    if (!x || !y)
      rc = bt_err_set(err, "fashion-mnist: out of memory for %u images (%zu MiB)", (unsigned)nimg,
                      npix * sizeof *x >> 20);
  }
  if (rc == 0) {
    /* A table, not a division per pixel: the same bits as b / 255.0f. */
    float lut[256];
    for (int b = 0; b < 256; b++)
      lut[b] = (float)b / 255.0f;
    for (size_t i = 0; i < npix; i++)
      x[i] = lut[pix[i]];
    for (uint32_t i = 0; i < nlab; i++)
      y[i] = lab[i];
    out->n = (long)nimg;
    out->h = FMNIST_SIDE;
    out->w = FMNIST_SIDE;
    out->c = 1;
    out->classes = FMNIST_CLASSES;
    out->x = x;
    out->y = y;
  } else {
    free(x);
    free(y);
  }
  free(pix);
  free(lab);
  return rc;
}

static size_t dataset_values(const bt_dataset *ds) {
  if (!ds || ds->n <= 0 || ds->h <= 0 || ds->w <= 0 || ds->c <= 0)
    return 0;
  return (size_t)ds->n * (size_t)ds->h * (size_t)ds->w * (size_t)ds->c;
}

void bt_data_stats(const bt_dataset *ds, float *mean, float *std) {
  size_t m = dataset_values(ds);
  if (m == 0 || !ds->x) {
    *mean = 0.0f;
    *std = 0.0f;
    return;
  }
  /* Two passes: the variance from the sum of squared deviations, which does
   * not cancel catastrophically the way E[x^2] - E[x]^2 can. */
  double s = 0.0;
  for (size_t i = 0; i < m; i++)
    s += ds->x[i];
  double mu = s / (double)m;
  double ss = 0.0;
  for (size_t i = 0; i < m; i++) {
    double d = ds->x[i] - mu;
    ss += d * d;
  }
  *mean = (float)mu;
  *std = (float)sqrt(ss / (double)m);
}

void bt_data_normalize(bt_dataset *ds, float mean, float std) {
  size_t m = dataset_values(ds);
  if (m == 0 || !ds->x)
    return;
  float inv = (std > 0.0f && isfinite(std)) ? (float)(1.0 / (double)std) : 1.0f;
  for (size_t i = 0; i < m; i++)
    ds->x[i] = (ds->x[i] - mean) * inv;
}

/* Fills rows x cols with N(0,1) from one stream and scales every row to unit
 * length, so each class's score has the same spread and none dominates. */
static void random_unit_rows(float *a, size_t rows, size_t cols, uint64_t seed, uint64_t stream) {
  bt_rng rng;
  bt_rng_seed(&rng, seed, stream);
  for (size_t r = 0; r < rows; r++) {
    float *row = a + r * cols;
    double ss = 0.0;
    for (size_t j = 0; j < cols; j++) {
      row[j] = bt_rng_normal(&rng);
      ss += (double)row[j] * row[j];
    }
    float inv = ss > 0.0 ? (float)(1.0 / sqrt(ss)) : 0.0f;
    for (size_t j = 0; j < cols; j++)
      row[j] *= inv;
  }
}

int bt_data_synthetic(long n, int h, int w, int c, int classes, uint64_t seed, bt_dataset *out,
                      bt_err *err) {
  memset(out, 0, sizeof *out);
  if (n <= 0 || h <= 0 || w <= 0 || c <= 0)
    return bt_err_set(err,
                      "data.synthetic: shape n=%ld h=%d w=%d c=%d has a size <= 0; every size "
                      "must be positive",
                      n, h, w, c);
  if (classes < 2)
    return bt_err_set(
        err, "data.synthetic: classes=%d; a classification task needs at least 2 classes", classes);
  size_t d = 0, total = 0, xbytes = 0, projbytes = 0, rank = 0;
  rank = (size_t)(classes < SYNTH_RANK ? classes : SYNTH_RANK);
  if (mul_size((size_t)h, (size_t)w, &d) || mul_size(d, (size_t)c, &d) ||
      mul_size((size_t)n, d, &total) || mul_size(total, sizeof(float), &xbytes) ||
      total > (size_t)LONG_MAX || mul_size(d, rank * sizeof(float), &projbytes))
    return bt_err_set(err,
                      "data.synthetic: n*h*w*c = %ld*%d*%d*%d overflows the address space; use a "
                      "smaller n or image shape",
                      n, h, w, c);

  float *x = malloc(xbytes);
  int32_t *y = malloc((size_t)n * sizeof *y);
  float *proj = malloc(projbytes);
  float *mix = classes > SYNTH_RANK ? malloc((size_t)classes * rank * sizeof *mix) : NULL;
  double *u = malloc(rank * sizeof *u);
  if (!x || !y || !proj || !u || (classes > SYNTH_RANK && !mix)) {
    free(x);
    free(y);
    free(proj);
    free(mix);
    free(u);
    return bt_err_set(err,
                      "data.synthetic: out of memory for %ld samples of %dx%dx%d (%zu MiB); use a "
                      "smaller n or image shape",
                      n, h, w, c, xbytes >> 20);
  }
  /* The label rule depends on the seed and shape only, never on n, so a
   * longer synthetic set extends a shorter one with the same labels. */
  random_unit_rows(proj, rank, d, seed, bt_rng_stream(STREAM_SYNTH_PROJ, d, rank));
  if (mix)
    random_unit_rows(mix, (size_t)classes, rank, seed,
                     bt_rng_stream(STREAM_SYNTH_MIX, rank, (uint64_t)classes));

  for (long i = 0; i < n; i++) {
    /* One stream per sample: sample i is the same whoever generates it. */
    bt_rng rng;
    bt_rng_seed(&rng, seed, bt_rng_stream(STREAM_SYNTH_X, (uint64_t)i, d));
    float *xi = x + (size_t)i * d;
    for (size_t j = 0; j < d; j++)
      xi[j] = bt_rng_normal(&rng);
    for (size_t k = 0; k < rank; k++) {
      const float *pk = proj + k * d;
      double s = 0.0;
      for (size_t j = 0; j < d; j++)
        s += (double)pk[j] * xi[j];
      u[k] = s;
    }
    int best = 0;
    double best_score = -INFINITY;
    for (int k = 0; k < classes; k++) {
      double score;
      if (mix) {
        score = 0.0;
        for (size_t r = 0; r < rank; r++)
          score += (double)mix[(size_t)k * rank + r] * u[r];
      } else {
        score = u[k];
      }
      if (score > best_score) {
        best_score = score;
        best = k;
      }
    }
    y[i] = best;
  }
  free(proj);
  free(mix);
  free(u);
  out->n = n;
  out->h = h;
  out->w = w;
  out->c = c;
  out->classes = classes;
  out->x = x;
  out->y = y;
  return 0;
}

void bt_data_permutation(long n, uint64_t seed, long epoch, long *idx) {
  if (n <= 0)
    return;
  for (long i = 0; i < n; i++)
    idx[i] = i;
  bt_rng rng;
  bt_rng_seed(&rng, seed, bt_rng_stream(STREAM_PERMUTATION, (uint64_t)epoch, 0));
  for (long i = n - 1; i > 0; i--) {
    long j = (long)bt_rng_below(&rng, (uint64_t)i + 1);
    long t = idx[i];
    idx[i] = idx[j];
    idx[j] = t;
  }
}

void bt_data_gather(const bt_dataset *ds, const long *idx, long count, float *x_out,
                    int32_t *y_out) {
  size_t d = (size_t)ds->h * (size_t)ds->w * (size_t)ds->c;
  for (long i = 0; i < count; i++) {
    long s = idx[i];
    assert(s >= 0 && s < ds->n);
    if (x_out)
      memcpy(x_out + (size_t)i * d, ds->x + (size_t)s * d, d * sizeof *x_out);
    if (y_out)
      y_out[i] = ds->y[s];
  }
}
