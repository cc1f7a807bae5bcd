/* data: datasets for training, held whole in memory.
 *
 * Images are float32 NHWC (n, h, w, c), contiguous, and labels int32, so a
 * batch is a plain slice of two arrays and any layer can read it without a
 * copy or a layout change. Everything random here (synthetic inputs, their
 * labels, the per-epoch shuffle) comes from bt_rng streams keyed by (seed,
 * purpose, index), so a run is reproducible from its seed alone and does not
 * depend on how many ranks or threads produce it. */
#ifndef BATON_DATA_H
#define BATON_DATA_H

#include <stdint.h>

#include "baton/err.h"

/* Where Debian's dataset-fashion-mnist package puts the four IDX .gz files
 * (a build may define another default). */
#ifndef BT_DATA_FASHION_MNIST_DIR
#define BT_DATA_FASHION_MNIST_DIR "/usr/share/datasets/fashion-mnist"
#endif

typedef struct bt_dataset {
  long n;      /* number of samples */
  int h, w, c; /* image height, width, channels */
  int classes; /* labels are in [0, classes) */
  float *x;    /* n*h*w*c floats, NHWC */
  int32_t *y;  /* n labels */
} bt_dataset;

/* Frees x and y and zeroes *ds; safe on a zeroed or already freed dataset. */
void bt_dataset_free(bt_dataset *ds);

/* Loads Fashion-MNIST from `dir` (NULL: BT_DATA_FASHION_MNIST_DIR), the
 * training set (60000 images) when `train` is 1, the test set (10000) when 0.
 * Reads {train,t10k}-{images-idx3,labels-idx1}-ubyte.gz (IDX, gzip or plain)
 * and checks magic numbers, dimensions, matching counts, truncation and labels
 * < 10. Pixels become floats in [0, 1]; out gets h = w = 28, c = 1,
 * classes = 10. On failure returns -1, leaves *out zeroed and says in err which
 * file is wrong and why (a missing file names the package to install). */
int bt_data_load_fashion_mnist(const char *dir, int train, bt_dataset *out, bt_err *err);

/* Mean and (population) standard deviation over every value of ds->x, all
 * pixels and channels together, accumulated in double. 0 and 0 when empty. */
void bt_data_stats(const bt_dataset *ds, float *mean, float *std);

/* x = (x - mean) / std for every value. Callers pass the training set's stats
 * for both train and test so both see the same transform. A std that is not
 * positive (a constant dataset) is taken as 1: centre only, never NaN. */
void bt_data_normalize(bt_dataset *ds, float mean, float std);

/* Synthetic data of any shape, for tests and timing runs: inputs are N(0, 1)
 * and each label is the argmax of a fixed random linear projection of its
 * input (seeded by `seed`), so the labels are linearly separable and a model
 * can fit them. The same seed gives the same bytes. classes must be >= 2.
 * Costs about n*h*w*c*min(classes, 32) multiply-adds beyond drawing inputs. */
int bt_data_synthetic(long n, int h, int w, int c, int classes, uint64_t seed, bt_dataset *out,
                      bt_err *err);

/* Writes a uniformly random permutation of 0..n-1 into idx[0..n) (Fisher-Yates).
 * The order depends only on (seed, epoch): it is the same on every call and
 * every rank, and different from one epoch to the next. */
void bt_data_permutation(long n, uint64_t seed, long epoch, long *idx);

/* Copies samples idx[0..count) of ds, in that order, into x_out (count*h*w*c
 * floats) and y_out (count labels). Either output may be NULL to skip it.
 * Every idx[i] must be in [0, ds->n). */
void bt_data_gather(const bt_dataset *ds, const long *idx, long count, float *x_out,
                    int32_t *y_out);

#endif
