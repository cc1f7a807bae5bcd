/* baton devices: the shipped device profiles side by side, and one profile
 * with the modelled (analytic) time of every layer of a model on it, so that
 * users can see how differently the boards treat the same layers. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "baton/device.h"
#include "baton/model.h"
#include "baton/modelfile.h"
#include "cli.h"

static void devices_usage(FILE *f) {
  fprintf(f, "usage: baton devices [NAME [--model M] [--batch B] [--input HxWxC] [--classes N]\n"
             "                          [--iteration I]]\n\n"
             "Without NAME: a table of the device profiles in <data>/devices.\n"
             "With NAME: that profile, then the modelled forward and backward time of each\n"
             "layer of model M (zoo name or model file; default lenet5) at batch B (default\n"
             "32) on it, analytic mode (docs/devices.md). --iteration applies the profile's\n"
             "throttle schedule as of that iteration (default 0).\n"
             "Default input 32x32x3, 10 classes.\n");
}

static int print_table(const char *data_dir) {
  bt_device_names names;
  bt_err err;
  if (bt_device_list(data_dir, &names, &err) < 0)
    return bt_cli_fail("devices", "%s", err.msg);
  if (names.count == 0) {
    bt_device_names_free(&names);
    return bt_cli_fail("devices", "no device profiles in %s/devices", data_dir);
  }
  printf("device profiles in %s/devices (sources: comments in each file, docs/devices.md)\n",
         data_dir);
  printf("%-18s %-4s %10s %10s %10s %9s %9s %10s %9s\n", "name", "kind", "conv", "dense", "mem",
         "overhead", "memory", "link", "latency");
  printf("%-18s %-4s %10s %10s %10s %9s %9s %10s %9s\n", "", "", "GFLOP/s", "GFLOP/s", "GB/s",
         "us/op", "MiB", "Mbit/s", "ms");
  int rc = 0;
  for (int i = 0; i < names.count; i++) {
    bt_device d;
    if (bt_device_find(names.names[i], data_dir, &d, &err) < 0) {
      /* One broken profile should not hide the others; report it and fail. */
      fprintf(stderr, "baton devices: %s\n", err.msg);
      rc = 1;
      continue;
    }
    printf("%-18s %-4s %10.1f %10.1f %10.1f %9.1f %9.0f %10.0f %9.2f\n", d.name,
           d.kind == BT_DEVICE_GPU ? "gpu" : "cpu", d.rate[BT_OP_CONV], d.rate[BT_OP_DENSE],
           d.rate[BT_OP_ELEMENTWISE], d.op_overhead_us, d.capacity_mib, d.link_bandwidth_mbps,
           d.link_latency_ms);
  }
  bt_device_names_free(&names);
  return rc;
}

static void print_profile(const bt_device *d) {
  printf("%s: %s\n", d->name, d->description[0] ? d->description : "(no description)");
  printf("  kind %s; per-op overhead %.1f us; 50%% utilisation at %.3g FLOP\n",
         d->kind == BT_DEVICE_GPU ? "gpu" : "cpu", d->op_overhead_us, d->half_util_flops);
  printf("  conv %.1f, dwconv %.1f, dense %.1f GFLOP/s; elementwise %.1f, pool/norm %.1f GB/s\n",
         d->rate[BT_OP_CONV], d->rate[BT_OP_DWCONV], d->rate[BT_OP_DENSE],
         d->rate[BT_OP_ELEMENTWISE], d->rate[BT_OP_POOL_NORM]);
  printf("  memory %.0f MiB, DRAM %.1f GB/s, cache %.0f KiB (x%.1f inside it)\n", d->capacity_mib,
         d->bandwidth_gbs, d->cache_kib, d->cache_speedup);
  printf("  link %.0f Mbit/s, %.2f ms\n", d->link_bandwidth_mbps, d->link_latency_ms);
  for (int i = 0; i < d->n_throttle; i++) {
    printf("  throttle from iteration %ld:", d->throttle[i].after_iteration);
    for (int c = 0; c < BT_OP_CLASS_COUNT; c++)
      printf(" %s x%.2g", bt_op_class_name((bt_op_class)c), d->throttle[i].factor[c]);
    printf("\n");
  }
}

/* The class holding most of a layer's busy time (a residual mixes them). */
static const char *main_class(const bt_layer_time *t) {
  int best = 0;
  for (int c = 1; c < BT_OP_CLASS_COUNT; c++)
    if (t->by_class[c] > t->by_class[best])
      best = c;
  return bt_op_class_name((bt_op_class)best);
}

static void print_layers(const bt_device *d, const bt_model *m, int batch, long iteration) {
  double sum_f = 0, sum_b = 0, sum_over = 0, flops = 0;
  bt_layer_time *tf = calloc((size_t)m->n_layers, sizeof *tf);
  bt_layer_time *tb = calloc((size_t)m->n_layers, sizeof *tb);
  if (!tf || !tb) {
    free(tf);
    free(tb);
    fprintf(stderr, "baton devices: out of memory\n");
    return;
  }
  for (int i = 0; i < m->n_layers; i++) {
    tf[i] = bt_device_layer_analytic(d, &m->layers[i], batch, BT_PASS_FWD, iteration);
    tb[i] = bt_device_layer_analytic(d, &m->layers[i], batch, bt_pass_backward_of(&m->layers[i], i),
                                     iteration);
    sum_f += tf[i].total;
    sum_b += tb[i].total;
    sum_over += tf[i].overhead + tb[i].overhead;
    flops += batch * (bt_layer_flops_fwd(&m->layers[i]) + bt_layer_flops_bwd(&m->layers[i]));
  }
  printf("\n%s on %s, batch %d, iteration %ld (analytic model)\n", m->name, d->name, batch,
         iteration);
  printf("%-4s %-20s %-15s %-12s %11s %11s %7s %10s\n", "#", "name", "kind", "class", "fwd ms",
         "bwd ms", "share", "GFLOP/s");
  for (int i = 0; i < m->n_layers; i++) {
    const bt_layer *l = &m->layers[i];
    double t = tf[i].total + tb[i].total;
    double f = batch * (bt_layer_flops_fwd(l) + bt_layer_flops_bwd(l));
    printf("%-4d %-20s %-15s %-12s %11.4f %11.4f %6.1f%% %10.2f\n", i + 1, l->name,
           bt_layer_kind_name(l->kind), main_class(&tf[i]), tf[i].total * 1e3, tb[i].total * 1e3,
           100.0 * t / (sum_f + sum_b), t > 0 ? f / t / 1e9 : 0.0);
  }
  printf("total: forward %.3f ms, backward %.3f ms, %.3f ms per step; %.1f%% of it per-op "
         "overhead; %.2f GFLOP/s overall\n",
         sum_f * 1e3, sum_b * 1e3, (sum_f + sum_b) * 1e3, 100.0 * sum_over / (sum_f + sum_b),
         flops / (sum_f + sum_b) / 1e9);
  free(tf);
  free(tb);
}

int bt_cmd_devices(int argc, char **argv) {
  const char *name = NULL, *model = "lenet5";
  bt_shape input = {32, 32, 3};
  int classes = 10, batch = 32;
  long iteration = 0;
  for (int i = 1; i < argc; i++) {
    char *end;
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      devices_usage(stdout);
      return 0;
    } else if (strcmp(argv[i], "--model") == 0 && i + 1 < argc) {
      model = argv[++i];
    } else if (strcmp(argv[i], "--batch") == 0 && i + 1 < argc) {
      long b = strtol(argv[++i], &end, 10);
      if (*end || b < 1 || b > 65536)
        return bt_cli_fail("devices", "--batch '%s': expected an integer from 1 to 65536", argv[i]);
      batch = (int)b;
    } else if (strcmp(argv[i], "--input") == 0 && i + 1 < argc) {
      if (bt_cli_parse_shape(argv[++i], &input.h, &input.w, &input.c) < 0)
        return bt_cli_fail("devices", "--input '%s': expected HxWxC such as 32x32x3", argv[i]);
    } else if (strcmp(argv[i], "--classes") == 0 && i + 1 < argc) {
      long c = strtol(argv[++i], &end, 10);
      if (*end || c < 2 || c > 100000)
        return bt_cli_fail("devices", "--classes '%s': expected an integer of at least 2", argv[i]);
      classes = (int)c;
    } else if (strcmp(argv[i], "--iteration") == 0 && i + 1 < argc) {
      iteration = strtol(argv[++i], &end, 10);
      if (*end || iteration < 0)
        return bt_cli_fail("devices", "--iteration '%s': expected an integer >= 0", argv[i]);
    } else if (argv[i][0] != '-' && !name) {
      name = argv[i];
    } else {
      return bt_cli_fail("devices", "unknown option '%s'; see 'baton devices --help'", argv[i]);
    }
  }
  char data[4096];
  bt_cli_data_dir(data, sizeof data);
  if (!name)
    return print_table(data);
  bt_err err;
  bt_device d;
  if (bt_device_find(name, data, &d, &err) < 0)
    return bt_cli_fail("devices", "%s", err.msg);
  bt_model m;
  char models[4200];
  snprintf(models, sizeof models, "%s/models", data);
  if (bt_model_resolve(model, models, input, classes, &m, &err) < 0)
    return bt_cli_fail("devices", "%s", err.msg);
  print_profile(&d);
  print_layers(&d, &m, batch, iteration);
  bt_model_free(&m);
  return 0;
}
