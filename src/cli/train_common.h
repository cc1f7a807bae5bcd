/* cli/train_common: what the single-process and the pipeline training paths
 * of `baton train` share. */
#ifndef BATON_CLI_TRAIN_COMMON_H
#define BATON_CLI_TRAIN_COMMON_H

#include "baton/config.h"
#include "baton/data.h"
#include "baton/err.h"
#include "baton/runlog.h"

/* The experiment of a `baton <cmd> [EXPERIMENT.yaml] [--set key=value]...
 * [--print-config]` command line, validated. */
int bt_cli_load_config(bt_config *cfg, const char *cmd, int argc, char **argv, int *print_only,
                       bt_err *err);

/* Loads the configured training and test sets, normalised with the training
 * set's statistics when data.normalize is set. */
int bt_cli_load_data(const bt_config *c, bt_dataset *train, bt_dataset *test, bt_err *err);

/* The root attributes of a training run file. *effective receives the
 * effective configuration as YAML (malloc'ed; free it after creating the
 * file); the meta's strings point into cfg and *effective. */
bt_runlog_meta bt_cli_runlog_meta(const bt_config *cfg, const char *clock, const char *schedule,
                                  int world_size, char **effective);

/* Pipeline training: MPI is initialised and the world size equals the
 * number of devices. Returns the exit status. */
int bt_cli_train_pipeline(bt_config *cfg);

#endif
