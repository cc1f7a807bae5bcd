/* baton models: the model zoo with parameters and FLOPs per sample, and the
 * per-layer view of one model (what the predictor and partitioner see). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "baton/model.h"
#include "baton/modelfile.h"
#include "cli.h"

static void models_usage(FILE *f) {
  fprintf(f, "usage: baton models [--input HxWxC] [--classes N] [--layers MODEL | --export MODEL]\n\n"
             "Lists the model zoo: layers, parameters, forward and training FLOPs per sample,\n"
             "activation bytes per sample.\n"
             "  --layers MODEL  print one model layer by layer (MODEL: zoo name or model file)\n"
             "  --export MODEL  write MODEL as a model file (YAML) on stdout\n"
             "Default input 32x32x3 (CIFAR-shaped); Fashion-MNIST is 28x28x1.\n");
}

static double act_bytes(const bt_model *m) {
  double b = 0;
  for (int i = 0; i < m->n_layers; i++)
    b += 4.0 * bt_shape_elems(m->layers[i].out) + 4.0 * bt_layer_aux_floats(&m->layers[i], 1);
  return b;
}

static void print_layers(const bt_model *m) {
  printf("%-4s %-20s %-15s %-14s %12s %12s %12s %12s\n", "#", "name", "kind", "output", "params",
         "out bytes", "fwd MFLOP", "bwd MFLOP");
  for (int i = 0; i < m->n_layers; i++) {
    const bt_layer *l = &m->layers[i];
    char shape[32];
    snprintf(shape, sizeof shape, "%dx%dx%d", l->out.h, l->out.w, l->out.c);
    printf("%-4d %-20s %-15s %-14s %12zu %12zu %12.3f %12.3f\n", i + 1, l->name,
           bt_layer_kind_name(l->kind), shape, l->n_params, 4 * bt_shape_elems(l->out),
           bt_layer_flops_fwd(l) / 1e6, bt_layer_flops_bwd(l) / 1e6);
  }
}

int bt_cmd_models(int argc, char **argv) {
  bt_shape input = {32, 32, 3};
  int classes = 10;
  const char *one = NULL;
  int export = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      models_usage(stdout);
      return 0;
    } else if (strcmp(argv[i], "--input") == 0 && i + 1 < argc) {
      if (bt_cli_parse_shape(argv[++i], &input.h, &input.w, &input.c) < 0)
        return bt_cli_fail("models", "--input '%s': expected HxWxC such as 32x32x3", argv[i]);
    } else if (strcmp(argv[i], "--classes") == 0 && i + 1 < argc) {
      classes = atoi(argv[++i]);
      if (classes < 2)
        return bt_cli_fail("models", "--classes must be at least 2");
    } else if ((strcmp(argv[i], "--layers") == 0 || strcmp(argv[i], "--export") == 0) &&
               i + 1 < argc) {
      export = strcmp(argv[i], "--export") == 0;
      one = argv[++i];
    } else {
      return bt_cli_fail("models", "unknown option '%s'; see 'baton models --help'", argv[i]);
    }
  }
  bt_err err;
  bt_model m;
  if (one) {
    char data[4096], models[4200];
    snprintf(models, sizeof models, "%s/models", bt_cli_data_dir(data, sizeof data));
    if (bt_model_resolve(one, models, input, classes, &m, &err) < 0)
      return bt_cli_fail("models", "%s", err.msg);
    if (export) {
      int rc = bt_modelfile_write(&m, stdout, &err);
      bt_model_free(&m);
      return rc < 0 ? bt_cli_fail("models", "%s", err.msg) : 0;
    }
    printf("%s, input %dx%dx%d, %zu parameters\n", m.name, input.h, input.w, input.c, m.n_params);
    print_layers(&m);
    bt_model_free(&m);
    return 0;
  }
  printf("model zoo for input %dx%dx%d, %d classes\n", input.h, input.w, input.c, classes);
  printf("%-12s %7s %12s %14s %14s %14s\n", "model", "layers", "params", "fwd GFLOP/smp",
         "train GFLOP/smp", "act MiB/smp");
  for (int z = 0; z < bt_zoo_count; z++) {
    if (bt_zoo_build(bt_zoo_names[z], input, classes, &m, &err) < 0) {
      printf("%-12s (not buildable for this input: %s)\n", bt_zoo_names[z], err.msg);
      continue;
    }
    double f = bt_model_flops_fwd(&m), b = bt_model_flops_bwd(&m);
    printf("%-12s %7d %12zu %14.4f %14.4f %14.3f\n", m.name, m.n_layers, m.n_params, f / 1e9,
           (f + b) / 1e9, act_bytes(&m) / (1024.0 * 1024.0));
    bt_model_free(&m);
  }
  return 0;
}
