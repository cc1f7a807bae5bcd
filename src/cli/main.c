/* baton: command-line entry point; dispatches to the subcommands. */
#include <stdio.h>
#include <string.h>

#include "baton_build.h"
#include "cli.h"

static const struct {
  const char *name;
  int (*run)(int, char **);
  const char *summary;
} commands[] = {
    {"train", bt_cmd_train, "train a model described by an experiment file"},
    {"models", bt_cmd_models, "list the model zoo: layers, parameters, FLOPs per sample"},
    {"bench", bt_cmd_bench, "benchmarks: training-step time and GEMM rate"},
    {"devices", bt_cmd_devices, "device profiles, and the modelled layer times of a model on one"},
    {"trace", bt_cmd_trace, "turn a run log into a Chrome/Perfetto trace (JSON)"},
    {"report", bt_cmd_report, "summarise a run log: compute, communication, bubbles, throughput"},
    {"profile", bt_cmd_profile, "time a corpus of layers on a device: a profiling set (HDF5)"},
    {"predictor", bt_cmd_predictor, "layer-latency predictor: fit, eval, predict"},
    {"plan", bt_cmd_plan, "the pipeline plan of an experiment, and every partitioner's"},
};
enum { N_COMMANDS = sizeof commands / sizeof commands[0] };

static void usage(FILE *f) {
  fprintf(f, "usage: baton <command> [options]\n\n"
             "baton trains deep networks as pipelines across (emulated) edge devices.\n\n"
             "commands:\n");
  for (int i = 0; i < N_COMMANDS; i++)
    fprintf(f, "  %-8s %s\n", commands[i].name, commands[i].summary);
  fprintf(f, "\n'baton <command> --help' describes a command's options.\n"
             "'baton --version' prints the version.\n");
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
      strcmp(argv[1], "help") == 0) {
    usage(stdout);
    return 0;
  }
  if (strcmp(argv[1], "--version") == 0) {
    char data[4096];
    printf("baton %s (data: %s)\n", BT_VERSION, bt_cli_data_dir(data, sizeof data));
    return 0;
  }
  for (int i = 0; i < N_COMMANDS; i++)
    if (strcmp(argv[1], commands[i].name) == 0)
      return commands[i].run(argc - 1, argv + 1);
  fprintf(stderr, "baton: unknown command '%s'; run 'baton --help' for the list\n", argv[1]);
  return 2;
}
