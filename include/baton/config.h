/* config: the experiment configuration (what to train, on what, how).
 *
 * An experiment is described by a YAML file of nested mappings
 * ("optimizer: {lr: 0.05}") plus command-line overrides with dotted keys
 * ("--set optimizer.lr=0.05"). Both are checked strictly against one table in
 * config.c that lists every key with its type, range, default and doc, so an
 * unknown key, a wrong type or an out-of-range value is an error naming the
 * file, line and column -- never silently ignored.
 *
 * Typical use:
 *
 *   bt_config c;
 *   bt_config_defaults(&c);
 *   if (bt_config_load_file(&c, "exp.yaml", &err) < 0 ||
 *       bt_config_set(&c, "optimizer.lr=0.05", &err) < 0 ||
 *       bt_config_validate(&c, &err) < 0) { print err.msg; ... }
 *   ...
 *   bt_config_free(&c);
 *
 * The defaults written in the field comments below are documentation only;
 * the values themselves live in the key table (see bt_config_print_help, which
 * is what `baton train --help-config` prints). Each field is named after its
 * key with '.' replaced by '_'. */
#ifndef BATON_CONFIG_H
#define BATON_CONFIG_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "baton/err.h"

#define BT_CONFIG_DEVICES_MAX 64 /* entries in `devices` */
#define BT_CONFIG_DEVICE_NAME 64 /* bytes per entry, NUL included */
#define BT_CONFIG_ENUM_MAX 32    /* bytes of an enum value, NUL included */

typedef struct bt_config {
  /* model: model-zoo name or path to a model file. Default "lenet5". */
  char model[256];

  /* data.name: one of "fashion-mnist", "synthetic". Default "fashion-mnist". */
  char data_name[BT_CONFIG_ENUM_MAX];
  /* data.path: directory of the dataset files (fashion-mnist).
   * Default "/usr/share/datasets/fashion-mnist". */
  char data_path[512];
  /* data.normalize: scale inputs to mean 0, std 1 using training-set
   * statistics. Default true. */
  bool data_normalize;
  /* data.shape: input shape "HxWxC", each 1..4096. Default "28x28x1".
   * Stored in canonical form; data_h/data_w/data_c hold the parsed numbers
   * (default 28, 28, 1) and are always kept in step with the text. */
  char data_shape[32];
  int data_h;
  int data_w;
  int data_c;
  /* data.classes: number of classes, 2..1000. Default 10. */
  int data_classes;
  /* data.train_samples: synthetic training-set size, 1..10000000.
   * Default 60000. */
  int data_train_samples;
  /* data.test_samples: synthetic test-set size, 1..10000000. Default 10000. */
  int data_test_samples;

  /* batch_size: samples per optimizer step, 1..65536. Default 64. */
  int batch_size;
  /* micro_batches: pipeline micro-batches per step, 1..65536; must divide
   * batch_size. Default 1. */
  int micro_batches;

  /* optimizer.name: one of "sgd". Default "sgd". */
  char optimizer_name[BT_CONFIG_ENUM_MAX];
  /* optimizer.lr: learning rate, in (0, 10]. Default 0.01. */
  double optimizer_lr;
  /* optimizer.momentum: in [0, 1). Default 0.9. */
  double optimizer_momentum;
  /* optimizer.weight_decay: L2 penalty, in [0, 1). Default 0. */
  double optimizer_weight_decay;
  /* optimizer.nesterov: Nesterov momentum (needs momentum > 0).
   * Default false. */
  bool optimizer_nesterov;

  /* epochs: passes over the training set, 0..100000. Default 2. */
  int epochs;
  /* iterations: 0 = run `epochs` epochs; > 0 = stop after this many
   * optimizer steps at the latest. 0..10^12. Default 0. Not both 0. */
  int64_t iterations;
  /* seed: root of every random stream, 0..2^63-1. Default 1. */
  uint64_t seed;
  /* output: path of the run file to write; "" = none. Default "". */
  char output[512];
  /* threads: BLIS threads, 1..256. Default 1. */
  int threads;
  /* blis_arch: one of "auto", "skx", "haswell", "sandybridge", "generic".
   * Default "auto". */
  char blis_arch[BT_CONFIG_ENUM_MAX];
  /* progress: one of "auto", "always", "never". Default "auto". */
  char progress[BT_CONFIG_ENUM_MAX];
  /* eval_every: evaluate on the test set every N epochs, 0..100000;
   * 0 = only at the end. Default 1. */
  int eval_every;
  /* devices: device names for a pipeline run, at most BT_CONFIG_DEVICES_MAX
   * entries of at most BT_CONFIG_DEVICE_NAME - 1 characters, no ','.
   * Default empty (n_devices 0). */
  char devices[BT_CONFIG_DEVICES_MAX][BT_CONFIG_DEVICE_NAME];
  int n_devices;

  /* schedule: pipeline schedule, one of "gpipe", "1f1b". Default "1f1b". */
  char schedule[BT_CONFIG_ENUM_MAX];
  /* partition: how layers are cut into stages: "predicted" (the latency
   * predictor's times, exact search), "even" (equal layer counts), "params",
   * "flops", "profiled", "oracle" or "explicit" (the cuts below); see
   * docs/partition.md. Default "predicted". */
  char partition[BT_CONFIG_ENUM_MAX];
  /* cuts: with partition explicit, the first layer (1-based, as printed by
   * `baton models --layers`) of stages 2..N, increasing. Default empty. */
  char cuts[BT_CONFIG_DEVICES_MAX][BT_CONFIG_DEVICE_NAME];
  int n_cuts;
  /* device_order: with a planned partition, "plan" lets the partitioner
   * order the devices (stage s runs on the device it picks; every device
   * runs one stage), "subset" also lets it leave devices idle (the first
   * device, the run's lead, always runs a stage; a re-plan may bring idle
   * ones in), "experiment" keeps the order of `devices`. Default "plan". */
  char device_order[BT_CONFIG_ENUM_MAX];
  /* plan.bounds, plan.max_nodes: the exact plan search's bounds (auto,
   * scalar, pareto, stair; docs/partition.md) and node budget (0 = the
   * default, -1 = unlimited). Default auto, 0. */
  char plan_bounds[BT_CONFIG_ENUM_MAX];
  int64_t plan_max_nodes;
  /* throttle: per-rank slowdowns added to the device profiles,
   * "RANK:ITERATION:FACTOR" (every op class of device RANK (its index in
   * `devices`) FACTOR
   * times slower from iteration ITERATION on). Default empty. */
  char throttle[BT_CONFIG_DEVICES_MAX][BT_CONFIG_DEVICE_NAME];
  int n_throttle;
  /* replan.every: with partition predicted or oracle, every N iterations
   * rank 0 gathers the measured layer times (predicted: the predictor learns
   * from them) and re-plans; 0 = never. Default 10. */
  int replan_every;
  /* replan.threshold: re-cut only when the new plan's predicted iteration
   * time, with the weight migration spread over the remaining iterations,
   * beats the current plan's by more than this fraction. Default 0.05. */
  double replan_threshold;
  /* replan.caution: with partition predicted, the (device, layer) pairs a
   * new plan would run for the first time count this fraction slower than
   * predicted when it is weighed against the current plan. Default 0.1. */
  double replan_caution;
  /* replan.probe: with partition predicted, a re-plan that would move layers
   * onto a device that never ran them has that device time them first
   * (charged to the clock) and weighs the plans again. Default true. */
  bool replan_probe;
  /* clock: "virtual" (emulated device time), "wall" (sleep to device time) or
   * "none" (real hardware, no emulation). Default "virtual". */
  char clock[BT_CONFIG_ENUM_MAX];
  /* calibration: where the virtual and wall clocks get the host time of each
   * layer: "auto" (the default store, bt_calib_default_path: reused when it
   * holds the layer, measured and added when not), "fresh" (measured every
   * run, nothing stored) or the path of a store. Default "auto". */
  char calibration[512];
  /* links.bandwidth_mbps: every link's bandwidth in Mbit/s; 0 = each
   * sender's device default. Default 0. */
  double links_bandwidth_mbps;
  /* links.latency_ms: every link's latency; -1 = device default. Default -1. */
  double links_latency_ms;
  /* links.jitter_ms: standard deviation of seeded latency jitter. Default 0. */
  double links_jitter_ms;
  /* links.pairs: per directed pair overrides "SRC-DST:MBPS:MS" (ranks).
   * Default empty. */
  char link_pairs[BT_CONFIG_DEVICES_MAX][BT_CONFIG_DEVICE_NAME];
  int n_link_pairs;
  /* links.shared_medium: all transfers share one channel (Wi-Fi). Default false. */
  bool links_shared_medium;
  /* codec.activations / codec.gradients: compression of the messages
   * between stages (see docs/codec.md), e.g. "sparse-q8", "q8-ef", "fp16".
   * Default "none". */
  char codec_activations[64];
  char codec_gradients[64];
  /* codec.boundaries: per stage boundary overrides "B=ACT/GRAD" (B: the
   * boundary after stage B, 1-based; "-" keeps the default). Default empty. */
  char codec_boundaries[BT_CONFIG_DEVICES_MAX][BT_CONFIG_DEVICE_NAME];
  int n_codec_boundaries;
  /* memory_scale: multiplies every device's memory capacity. Default 1. */
  double memory_scale;

  /* Not keys: the file the configuration came from ("" if none) and its
   * bytes verbatim (NUL-terminated, malloc'ed, NULL if none), kept so a run
   * file can record exactly what was asked for. Set by bt_config_load_file,
   * freed by bt_config_free. */
  char path[512];
  char *yaml_text;
} bt_config;

/* Fills every key with its default, path with "" and yaml_text with NULL.
 * Initializes a fresh struct: it does not free an earlier yaml_text. */
void bt_config_defaults(bt_config *c);

/* Reads the YAML file at `path` and applies the keys it sets on top of the
 * values already in `c` (call bt_config_defaults first). On success also
 * records path and yaml_text (replacing earlier ones). An empty file sets
 * nothing. On failure returns -1, fills err and leaves `c` unchanged. */
int bt_config_load_file(bt_config *c, const char *path, bt_err *err);

/* As bt_config_load_file for YAML text already in memory; `name_for_errors`
 * (NULL: "<string>") prefixes error messages. Does not touch path or
 * yaml_text. */
int bt_config_load_string(bt_config *c, const char *yaml, const char *name_for_errors, bt_err *err);

/* Applies one command-line override "key=value" with a dotted key, e.g.
 * "optimizer.lr=0.05", "data.normalize=off", "devices=jetson-nano,rpi4"
 * ("devices=" clears the list). Same types and ranges as the file. On failure
 * returns -1, leaves `c` unchanged and fills err ("--set key=value: ..."). */
int bt_config_set(bt_config *c, const char *assignment, bt_err *err);

/* Checks every key against its range (in case code changed fields directly)
 * and the rules that involve several keys (micro_batches divides batch_size,
 * epochs and iterations not both 0, ...). Call after all loads and --set. */
int bt_config_validate(const bt_config *c, bt_err *err);

/* Prints every key: dotted name, type and allowed values, default, doc. */
void bt_config_print_help(FILE *f);

/* Writes the effective configuration (every key) as YAML that
 * bt_config_load_string/file accepts and that reproduces `c`. */
void bt_config_dump_yaml(const bt_config *c, FILE *f);

/* Frees yaml_text (sets it to NULL). Safe to call twice. */
void bt_config_free(bt_config *c);

#endif
