/* cli/train_common: data loading shared by both training paths. */
#include <string.h>

#include "train_common.h"

int bt_cli_load_data(const bt_config *c, bt_dataset *train, bt_dataset *test, bt_err *err) {
  if (strcmp(c->data_name, "synthetic") == 0) {
    if (bt_data_synthetic(c->data_train_samples, c->data_h, c->data_w, c->data_c, c->data_classes,
                          c->seed, train, err) < 0 ||
        bt_data_synthetic(c->data_test_samples, c->data_h, c->data_w, c->data_c, c->data_classes,
                          c->seed + 0x7e57, test, err) < 0)
      return -1;
  } else {
    if (bt_data_load_fashion_mnist(c->data_path, 1, train, err) < 0 ||
        bt_data_load_fashion_mnist(c->data_path, 0, test, err) < 0)
      return -1;
  }
  if (c->data_normalize) {
    float mean, std;
    bt_data_stats(train, &mean, &std);
    bt_data_normalize(train, mean, std);
    bt_data_normalize(test, mean, std);
  }
  if (train->n < c->batch_size)
    return bt_err_set(err,
                      "the training set has %ld samples, fewer than batch_size %d; lower "
                      "batch_size",
                      train->n, c->batch_size);
  return 0;
}
