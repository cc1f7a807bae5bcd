/* Scores a candidate set of memory-bound probes without re-timing the
 * profiling sets (docs/predictor.md, "The cache between the probes").
 *
 * An emulated device's time of a memory-bound layer is the device model's
 * analytic time (bt_device_layer_mapped keeps it), so the probe rows an
 * emulated set would record for other memory-bound probes can be computed;
 * the program checks that the set's own memory-bound probe rows equal them.
 * Each emulated device of DIR is held out in turn: the others are fitted on
 * all their rows (one fit, no folds, so the figures run above `baton
 * predictor eval`'s), the held-out device is adapted from the compute
 * probes of its set plus the candidate's memory-bound probes, and every row
 * of its set is scored. Candidates come on stdin, one per line:
 *
 *   NAME SPEC/BATCH SPEC/BATCH ...      (layer specs as in the sets)
 *   own                                 (the set's own ten probe rows)
 *
 * Output: one line per device and candidate, then the means.
 *
 * Build and run from the repository root, after `meson compile -C build`:
 *   cc -O2 -std=c11 -D_POSIX_C_SOURCE=200809L -Iinclude \
 *     $(pkg-config --cflags hdf5-openmpi) experiments/predictor/probe_substitution.c \
 *     build/src/libbaton_core.a -o /tmp/probe_substitution \
 *     $(pkg-config --libs hdf5-openmpi) -lhdf5_hl -lblis -lgsl -lyaml -lz -lm
 *   BATON_DATA=data /tmp/probe_substitution data/predictor/hosts/intel-xeon-skx \
 *     < experiments/predictor/probe_candidates.txt
 */
#include "baton/device.h"
#include "baton/err.h"
#include "baton/predictor.h"
#include "baton/profile.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_CANDIDATES = 16, MAX_SETS = 64 };

typedef struct candidate {
  char name[32];
  int own;
  bt_profile layers; /* its memory-bound probes */
} candidate;

typedef struct score {
  double all, relu, batchnorm, cache_kib;
} score;

static int memory_bound(const bt_layer *l) {
  return l->kind != BT_CONV2D && l->kind != BT_DWCONV2D && l->kind != BT_DENSE &&
         l->kind != BT_RESIDUAL;
}

static int read_candidates(candidate *c, int max) {
  char line[4096];
  int n = 0;
  while (n < max && fgets(line, sizeof line, stdin)) {
    char *save, *tok = strtok_r(line, " \t\n", &save);
    if (!tok)
      continue;
    memset(&c[n], 0, sizeof c[n]);
    snprintf(c[n].name, sizeof c[n].name, "%s", tok);
    c[n].own = strcmp(tok, "own") == 0;
    while ((tok = strtok_r(NULL, " \t\n", &save))) {
      char *slash = strrchr(tok, '/');
      bt_err err = {{0}};
      bt_layer l;
      if (!slash || atoi(slash + 1) < 1) {
        fprintf(stderr, "candidate %s: '%s' is not SPEC/BATCH\n", c[n].name, tok);
        exit(2);
      }
      *slash = 0;
      if (bt_layer_spec_parse(tok, &l, &err) < 0 ||
          bt_profile_add(&c[n].layers, l, atoi(slash + 1), "probe", &err) < 0) {
        fprintf(stderr, "candidate %s: %s\n", c[n].name, err.msg);
        exit(2);
      }
    }
    n++;
  }
  return n;
}

static score score_device(const bt_predictor *pr, int dev, const bt_profile *p) {
  long n = 0, ok = 0, nr = 0, okr = 0, nb = 0, okb = 0;
  for (int i = 0; i < p->n; i++)
    for (int pass = 0; pass < 2; pass++) {
      const bt_layer *l = &p->e[i].layer;
      const double t = bt_predictor_predict_dev(pr, dev, l, p->e[i].batch,
                                                pass ? BT_PASS_BWD : BT_PASS_FWD);
      const double y = pass ? p->e[i].bwd : p->e[i].fwd;
      const int hit = fabs(t / y - 1) <= 0.10;
      n++, ok += hit;
      if (l->kind == BT_RELU)
        nr++, okr += hit;
      if (l->kind == BT_BATCHNORM)
        nb++, okb += hit;
    }
  bt_device head;
  bt_predictor_head_device(pr, dev, &head);
  return (score){100.0 * ok / n, nr ? 100.0 * okr / nr : NAN, nb ? 100.0 * okb / nb : NAN,
                 head.cache_kib};
}

/* Adapts `name` from its set's compute probes plus the candidate's probes
 * (or its set's ten probes), timed as the device model times them. */
static int adapt(bt_predictor *pr, const char *name, const bt_profile *p, const bt_device *truth,
                 const candidate *c, bt_err *err) {
  bt_pred_sample s[128];
  int n = 0;
  for (int i = 0; i < p->n && n < 124; i++) {
    const bt_profile_entry *e = &p->e[i];
    if (strcmp(e->source, "probe") != 0 || (!c->own && memory_bound(&e->layer)))
      continue;
    s[n++] = (bt_pred_sample){&e->layer, e->batch, BT_PASS_FWD, e->fwd};
    s[n++] = (bt_pred_sample){&e->layer, e->batch, BT_PASS_BWD, e->bwd};
  }
  for (int i = 0; i < c->layers.n && n < 124; i++) {
    const bt_profile_entry *e = &c->layers.e[i];
    for (int pass = 0; pass < 2; pass++) {
      const bt_pass ps = pass ? BT_PASS_BWD : BT_PASS_FWD;
      s[n++] = (bt_pred_sample){&e->layer, e->batch, ps,
                                bt_device_layer_analytic(truth, &e->layer, e->batch, ps, 0).total};
    }
  }
  const int dev = bt_predictor_adapt(pr, name, NULL, 0, err);
  if (dev < 0 || bt_predictor_set_host_rates(pr, dev, &p->host, err) < 0)
    return -1;
  return bt_predictor_adapt(pr, name, s, n, err);
}

/* The set's memory-bound probe rows against the device model: the largest
 * relative difference (0 when the substitution is exact). */
static double own_probe_gap(const bt_profile *p, const bt_device *truth) {
  double gap = 0;
  for (int i = 0; i < p->n; i++) {
    const bt_profile_entry *e = &p->e[i];
    if (strcmp(e->source, "probe") != 0 || !memory_bound(&e->layer))
      continue;
    const double f = bt_device_layer_analytic(truth, &e->layer, e->batch, BT_PASS_FWD, 0).total,
                 b = bt_device_layer_analytic(truth, &e->layer, e->batch, BT_PASS_BWD, 0).total;
    gap = fmax(gap, fmax(fabs(f / e->fwd - 1), fabs(b / e->bwd - 1)));
  }
  return gap;
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: probe_substitution DIR < candidates\n");
    return 2;
  }
  const char *data = getenv("BATON_DATA") ? getenv("BATON_DATA") : "data";
  candidate cand[MAX_CANDIDATES];
  const int nc = read_candidates(cand, MAX_CANDIDATES);
  bt_err err = {{0}};
  bt_profile_dir dir;
  if (bt_profile_dir_read(argv[1], &dir, &err) < 0) {
    fprintf(stderr, "%s\n", err.msg);
    return 1;
  }
  double sum[MAX_CANDIDATES] = {0};
  int held = 0;
  for (int h = 0; h < dir.n; h++) {
    bt_device truth;
    if (dir.role[h] != BT_PROFILE_DEVICE || strcmp(dir.sets[h].device, "host") == 0 ||
        bt_device_find(dir.names[h], data, &truth, &err) < 0)
      continue;
    bt_profile others[MAX_SETS], corpora[MAX_SETS];
    const char *names[MAX_SETS];
    int no = 0, ncorp = 0;
    for (int k = 0; k < dir.n; k++)
      if (dir.role[k] == BT_PROFILE_CORPUS)
        corpora[ncorp++] = dir.sets[k];
      else if (dir.role[k] == BT_PROFILE_DEVICE && k != h)
        others[no] = dir.sets[k], names[no++] = dir.names[k];
    bt_predictor_options opt;
    bt_predictor_default_options(&opt);
    bt_predictor *pr;
    if (bt_predictor_fit_ex(others, names, no, NULL, corpora, ncorp, &opt, &pr, &err) < 0) {
      fprintf(stderr, "%s\n", err.msg);
      return 1;
    }
    const double gap = own_probe_gap(&dir.sets[h], &truth);
    for (int c = 0; c < nc; c++) {
      const int dev = adapt(pr, dir.names[h], &dir.sets[h], &truth, &cand[c], &err);
      if (dev < 0) {
        fprintf(stderr, "%s: %s\n", dir.names[h], err.msg);
        return 1;
      }
      const score sc = score_device(pr, dev, &dir.sets[h]);
      sum[c] += sc.all;
      printf("%-18s %-10s %5.1f%% within 10%% (ReLU %5.1f%%, batch norm %5.1f%%), cache %6.0f KiB "
             "(profile %6.0f); own memory-bound probes off the model by %.2g\n",
             dir.names[h], cand[c].name, sc.all, sc.relu, sc.batchnorm, sc.cache_kib,
             truth.cache_kib, gap);
    }
    held++;
    bt_predictor_free(pr);
  }
  for (int c = 0; c < nc; c++)
    printf("mean over %d held-out emulated devices: %-10s %.2f%% within 10%%\n", held,
           cand[c].name, held ? sum[c] / held : NAN);
  for (int c = 0; c < nc; c++)
    bt_profile_free(&cand[c].layers);
  bt_profile_dir_free(&dir);
  return 0;
}
