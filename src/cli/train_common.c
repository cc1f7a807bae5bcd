/* cli/train_common: data loading shared by both training paths. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train_common.h"

#include "baton/gemm.h"
#include "baton_build.h"
#include "git_version.h"

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

bt_runlog_meta bt_cli_runlog_meta(const bt_config *cfg, const char *clock, const char *schedule,
                                  int world_size, char **effective) {
  size_t len = 0;
  *effective = NULL;
  FILE *mem = open_memstream(effective, &len);
  if (mem) {
    bt_config_dump_yaml(cfg, mem);
    fclose(mem);
  }
  return (bt_runlog_meta){.baton_version = BT_VERSION,
                          .git_describe = BT_GIT_DESCRIBE,
                          .config_yaml = cfg->yaml_text ? cfg->yaml_text : "",
                          .effective_config_yaml = *effective ? *effective : "",
                          .mode = "train",
                          .clock = clock,
                          .world_size = world_size,
                          .seed = cfg->seed,
                          .blis_arch = bt_gemm_arch(),
                          .blis_threads = bt_gemm_threads(),
                          .schedule = schedule,
                          .micro_batches = cfg->micro_batches,
                          .batch_size = cfg->batch_size};
}

int bt_cli_load_config(bt_config *cfg, const char *cmd, int argc, char **argv, int *print_only,
                       bt_err *err) {
  bt_config_defaults(cfg);
  const char *file = NULL;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--set") == 0) {
      if (i + 1 >= argc)
        return bt_err_set(err, "--set needs key=value, e.g. --set optimizer.lr=0.05");
      i++;
    } else if (strcmp(argv[i], "--print-config") == 0) {
      *print_only = 1;
    } else if (argv[i][0] == '-') {
      return bt_err_set(err, "unknown option '%s'; see 'baton %s --help'", argv[i], cmd);
    } else if (file) {
      return bt_err_set(err, "only one experiment file, got '%s' and '%s'", file, argv[i]);
    } else {
      file = argv[i];
    }
  }
  if (file && bt_config_load_file(cfg, file, err) < 0)
    return -1;
  for (int i = 1; i < argc; i++)
    if (strcmp(argv[i], "--set") == 0 && bt_config_set(cfg, argv[++i], err) < 0)
      return -1;
  return bt_config_validate(cfg, err);
}
