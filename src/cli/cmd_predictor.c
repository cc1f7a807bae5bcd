/* baton predictor: fit the layer-latency predictor on profiling sets, evaluate
 * it (seen devices, held-out devices after k probes, real host variants,
 * baselines, a mid-run slowdown), and predict a model's layers. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "baton/device.h"
#include "baton/gemm.h"
#include "baton/model.h"
#include "baton/modelfile.h"
#include "baton/predictor.h"
#include "baton/profile.h"
#include "cli.h"

static void predictor_usage(FILE *f) {
  fprintf(f,
          "usage: baton predictor fit [--data DIR] --out FILE [--linear-head]\n"
          "       baton predictor eval [--data DIR] [--folds K] [--linear-head]\n"
          "       baton predictor predict --predictor FILE --device NAME --model M [--batch B]\n"
          "                               [--input HxWxC]\n\n"
          "  --data DIR      profiling sets *.h5 (default <data>/predictor); a set is named by\n"
          "                  its file name; host-*.h5 are host variants (unseen devices in eval),\n"
          "                  corpus-*.h5 host corpora (more layers for the host-time model)\n"
          "  --folds K       layer folds of the cross-validation (default 5)\n"
          "  --train-fraction F  fit on this share of the sets' training rows only (learning\n"
          "                  curve; host corpora are used whole)\n"
          "  --linear-head   the comparison model: one time scale per device\n"
          "  --residual-memory  add the nearest fitted layers' residuals (slower, larger)\n"
          "  --trees N       boosted trees on the host regressions' residuals (default 200;\n"
          "                  0: the regressions alone)\n"
          "  --tree-depth D  their depth, 1..6 (default 5)\n"
          "  --dump FILE     eval: write every seen set's out-of-fold predictions, one CSV row\n"
          "                  per set and layer (with the host model's and the sets' median\n"
          "                  host times), for analysis\n");
}

/* ---- loading the sets ------------------------------------------------------ */

typedef struct sets {
  int n;
  bt_profile *p; /* shallow copies of dir's device sets and host variants */
  const char **names;
  int *variant; /* a real host variant (unseen in eval) */
  int n_corpora;
  bt_profile *corpora; /* host corpora: host-model rows only (bt_predictor_fit_ex) */
  bt_profile_dir dir;
} sets;

static int cmp_dbl(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static void sets_free(sets *s) {
  bt_profile_dir_free(&s->dir);
  free(s->p), free(s->names), free(s->variant), free(s->corpora);
  memset(s, 0, sizeof *s);
}

static int load_sets(const char *dir, sets *s, bt_err *err) {
  memset(s, 0, sizeof *s);
  if (bt_profile_dir_read(dir, &s->dir, err) < 0)
    return -1;
  const int n = s->dir.n;
  s->p = calloc((size_t)n, sizeof *s->p);
  s->names = calloc((size_t)n, sizeof *s->names);
  s->variant = calloc((size_t)n, sizeof *s->variant);
  s->corpora = calloc((size_t)n, sizeof *s->corpora);
  if (!s->p || !s->names || !s->variant || !s->corpora) {
    sets_free(s);
    return bt_err_set(err, "out of memory");
  }
  for (int i = 0; i < n; i++) {
    if (s->dir.role[i] == BT_PROFILE_CORPUS) {
      s->corpora[s->n_corpora++] = s->dir.sets[i];
      continue;
    }
    s->p[s->n] = s->dir.sets[i];
    s->names[s->n] = s->dir.names[i];
    s->variant[s->n++] = s->dir.role[i] == BT_PROFILE_VARIANT;
  }
  return 0;
}

/* ---- metrics ------------------------------------------------------------------ */

typedef struct acc {
  long n, w10, w5;
  double ape;
} acc;

static void acc_add(acc *a, double pred, double truth) {
  double e = fabs(pred - truth) / truth;
  a->n++;
  a->ape += e;
  a->w10 += e <= 0.10;
  a->w5 += e <= 0.05;
}

static void acc_merge(acc *a, const acc *b) {
  a->n += b->n, a->w10 += b->w10, a->w5 += b->w5, a->ape += b->ape;
}

static double pct(long k, long n) { return n ? 100.0 * (double)k / (double)n : NAN; }

/* The host model's backward without input gradient against the host
 * corpora's zoo rows that timed it (held out: only random rows are fitted),
 * and the full backward's prediction as the naive estimate. */
static void score_nodin(const bt_predictor *pr, const sets *S, acc *fit, acc *full) {
  for (int k = 0; k < S->n_corpora; k++)
    for (int i = 0; i < S->corpora[k].n; i++) {
      const bt_profile_entry *e = &S->corpora[k].e[i];
      if (bt_profile_source_fitted(e->source) || !isfinite(e->host_bwd_nodin))
        continue;
      acc_add(fit, bt_predictor_host_time(pr, &e->layer, e->batch, BT_PASS_BWD_NODIN),
              e->host_bwd_nodin);
      acc_add(full, bt_predictor_host_time(pr, &e->layer, e->batch, BT_PASS_BWD),
              e->host_bwd_nodin);
    }
}

static void print_header(const char *what) {
  printf("\n%s\n", what);
  printf("%-20s | %27s | %27s | %27s\n", "", "forward", "backward", "stage sums");
  printf("%-20s | %7s %9s %9s | %7s %9s %9s | %7s %9s %9s\n", "device", "MAPE%", "<=10%", "<=5%",
         "MAPE%", "<=10%", "<=5%", "MAPE%", "<=10%", "<=5%");
}

static void print_row(const char *name, const acc a[3]) {
  printf("%-20s |", name);
  for (int k = 0; k < 3; k++)
    printf(" %7.1f %8.1f%% %8.1f%% |", a[k].n ? 100 * a[k].ape / a[k].n : NAN,
           pct(a[k].w10, a[k].n), pct(a[k].w5, a[k].n));
  printf("\n");
}

/* Stages: every zoo model and batch of the corpus, cut into 1, 2 and 4
 * contiguous runs of layers; a stage's time is its layers' fwd + bwd. */
typedef struct stages {
  int n;
  int *first, *len; /* into rows */
  int *rows;
  int n_rows;
} stages;

static void build_stages(const bt_profile *p, stages *st) {
  memset(st, 0, sizeof *st);
  st->first = malloc(4096 * sizeof(int));
  st->len = malloc(4096 * sizeof(int));
  st->rows = malloc(65536 * sizeof(int));
  static const struct {
    const char *name;
    bt_shape in;
  } zoo[] = {{"mlp", {28, 28, 1}},   {"lenet5", {28, 28, 1}},   {"vgg11", {32, 32, 3}},
             {"vgg16", {32, 32, 3}}, {"resnet18", {32, 32, 3}}, {"mobilenetv2", {32, 32, 3}}};
  for (size_t z = 0; z < sizeof zoo / sizeof *zoo; z++)
    for (int b = 8; b <= 32; b += 24) {
      bt_model m;
      bt_err err;
      if (bt_zoo_build(zoo[z].name, zoo[z].in, 10, &m, &err) < 0)
        continue;
      int rows[512], ok = m.n_layers <= 512;
      for (int i = 0; ok && i < m.n_layers; i++)
        ok = (rows[i] = bt_profile_find(p, &m.layers[i], b)) >= 0;
      for (int parts = 1; ok && parts <= 4; parts *= 2)
        for (int s = 0; s < parts && st->n < 4096; s++) {
          int a = m.n_layers * s / parts, e = m.n_layers * (s + 1) / parts;
          if (st->n_rows + (e - a) > 65536)
            break;
          st->first[st->n] = st->n_rows;
          st->len[st->n] = e - a;
          for (int i = a; i < e; i++)
            st->rows[st->n_rows++] = rows[i];
          st->n++;
        }
      bt_model_free(&m);
    }
}

static void stages_free(stages *s) { free(s->first), free(s->len), free(s->rows); }

/* Accumulates per-layer (rows with mask set) and stage metrics of predictions
 * pf/pb (NaN = not predicted) against set p. */
static void score(const bt_profile *p, const double *pf, const double *pb,
                  const unsigned char *mask, const stages *st, acc out[3]) {
  memset(out, 0, 3 * sizeof *out);
  for (int i = 0; i < p->n; i++) {
    if (mask && !mask[i])
      continue;
    if (isfinite(pf[i]))
      acc_add(&out[0], pf[i], p->e[i].fwd);
    if (isfinite(pb[i]))
      acc_add(&out[1], pb[i], p->e[i].bwd);
  }
  for (int s = 0; st && s < st->n; s++) {
    double pr = 0, tr = 0;
    int ok = 1;
    for (int j = 0; j < st->len[s]; j++) {
      int r = st->rows[st->first[s] + j];
      if (!isfinite(pf[r]) || !isfinite(pb[r])) {
        ok = 0;
        break;
      }
      pr += pf[r] + pb[r];
      tr += p->e[r].fwd + p->e[r].bwd;
    }
    if (ok)
      acc_add(&out[2], pr, tr);
  }
}

/* Like score, against the in-model figures of the rows timed in their model
 * (per layer: those rows alone). A stage sum takes the back-to-back figure
 * and prediction (nf, nb) of a row with none (a model's first layer has no
 * in-model backward with the input gradient); stages without any in-model
 * row are skipped. */
static void score_in_model(const bt_profile *p, const double *pf, const double *pb,
                           const double *nf, const double *nb, const stages *st, acc out[3]) {
  memset(out, 0, 3 * sizeof *out);
  for (int i = 0; i < p->n; i++) {
    if (isfinite(pf[i]) && isfinite(p->e[i].fwd_model))
      acc_add(&out[0], pf[i], p->e[i].fwd_model);
    if (isfinite(pb[i]) && isfinite(p->e[i].bwd_model))
      acc_add(&out[1], pb[i], p->e[i].bwd_model);
  }
  for (int s = 0; st && s < st->n; s++) {
    double pr = 0, tr = 0;
    int ok = 1, any = 0;
    for (int j = 0; ok && j < st->len[s]; j++) {
      const int r = st->rows[st->first[s] + j];
      const bt_profile_entry *e = &p->e[r];
      const int mf = isfinite(e->fwd_model), mb = isfinite(e->bwd_model);
      const double a = mf ? pf[r] : nf[r], b = mb ? pb[r] : nb[r];
      ok = isfinite(a) && isfinite(b);
      any |= mf | mb;
      pr += a + b;
      tr += (mf ? e->fwd_model : e->fwd) + (mb ? e->bwd_model : e->bwd);
    }
    if (ok && any)
      acc_add(&out[2], pr, tr);
  }
}

/* ---- eval ---------------------------------------------------------------------- */

static const int probe_counts[] = {0, 1, 5, 10, 50};
enum { N_PROBE_COUNTS = 5 };

/* The adaptation rows for k probes: the probe layers first (k <= 10), then
 * further corpus rows in a fixed shuffled order. */
static int adapt_rows(const bt_profile *p, int k, const int *order, int *rows) {
  int n = 0;
  for (int i = 0; i < p->n && n < k; i++)
    if (strcmp(p->e[i].source, "probe") == 0)
      rows[n++] = i;
  for (int j = 0; j < p->n && n < k; j++)
    if (strcmp(p->e[order[j]].source, "probe") != 0)
      rows[n++] = order[j];
  return n;
}

static int adapt_k(bt_predictor *pr, const char *name, const bt_profile *p, int k, const int *order,
                   unsigned char *used, bt_err *err) {
  /* Sets timed on the bare host are real hardware: raw heads. */
  int slot = bt_predictor_adapt(pr, name, NULL, 0, err);
  if (slot < 0)
    return -1;
  bt_predictor_set_raw(pr, slot, strcmp(p->device, "host") == 0);
  /* The held-out set's probes map host times of its own session. */
  if (bt_predictor_set_host_rates(pr, slot, &p->host, err) < 0)
    return -1;
  int rows[64];
  int n = adapt_rows(p, k, order, rows);
  bt_pred_sample s[128];
  for (int j = 0; j < n; j++) {
    const bt_profile_entry *e = &p->e[rows[j]];
    s[2 * j] = (bt_pred_sample){&e->layer, e->batch, BT_PASS_FWD, e->fwd};
    s[2 * j + 1] = (bt_pred_sample){&e->layer, e->batch, BT_PASS_BWD, e->bwd};
    if (used)
      used[rows[j]] = 1;
  }
  return bt_predictor_adapt(pr, name, s, 2 * n, err);
}

typedef struct eval_ctx {
  sets *S;
  int folds;
  double train_fraction; /* share of the training rows used (learning curve) */
  int *keep;             /* per row: 1 if it may be used for fitting */
  int *fold;             /* per row */
  int *order;            /* shuffled rows */
  stages st;
  bt_predictor_options opt;
  FILE *dump; /* CSV of the seen sets' out-of-fold predictions, or NULL */
} eval_ctx;

static void predict_rows(const bt_predictor *pr, int dev, const bt_profile *p, const int *fold,
                         int f, double *pf, double *pb) {
  for (int i = 0; i < p->n; i++)
    if (fold[i] == f) {
      pf[i] = bt_predictor_predict_dev(pr, dev, &p->e[i].layer, p->e[i].batch, BT_PASS_FWD);
      pb[i] = bt_predictor_predict_dev(pr, dev, &p->e[i].layer, p->e[i].batch, BT_PASS_BWD);
    }
}

/* Treats device k as unseen: adapts `pr` to it from each probe count in
 * turn and predicts fold f's rows into vf[q], vb[q]. */
static int probe_and_predict(const eval_ctx *c, bt_predictor *pr, int k, int f, double **vf,
                             double **vb, bt_err *err) {
  const sets *S = c->S;
  for (int q = 0; q < N_PROBE_COUNTS; q++) {
    int dev = adapt_k(pr, S->names[k], &S->p[k], probe_counts[q], c->order, NULL, err);
    if (dev < 0)
      return -1;
    predict_rows(pr, dev, &S->p[k], c->fold, f, vf[q], vb[q]);
  }
  return 0;
}

static double *nan_array(int n) {
  double *v = malloc((size_t)n * sizeof *v);
  for (int i = 0; v && i < n; i++)
    v[i] = NAN;
  return v;
}

static double median_host(const bt_profile *const *seen, int n_seen, int row, int bwd) {
  double v[64];
  for (int q = 0; q < n_seen; q++)
    v[q] = bwd ? seen[q]->e[row].host_bwd : seen[q]->e[row].host_fwd;
  qsort(v, (size_t)n_seen, sizeof *v, cmp_dbl);
  return v[n_seen / 2];
}

/* One CSV row per seen set and layer: what the evaluation scored, so that
 * the misses can be studied by shape (every prediction is out of fold). */
static int write_dump(FILE *f, const bt_profile *const *seen, const char *const *names, int n_seen,
                      double *const *pf, double *const *pb, const double *hpf, const double *hpb,
                      const double *mhf, const double *mhb, bt_err *err) {
  fprintf(f, "set,row,source,kind,batch,flops_fwd,fwd,bwd,pred_fwd,pred_bwd,host_fwd,host_bwd,"
             "median_host_fwd,median_host_bwd,model_host_fwd,model_host_bwd,spec\n");
  for (int j = 0; j < n_seen; j++)
    for (int i = 0; i < seen[j]->n; i++) {
      const bt_profile_entry *e = &seen[j]->e[i];
      fprintf(f, "%s,%d,%s,%s,%d,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,\"%s\"\n",
              names[j], i, e->source, bt_layer_kind_name(e->layer.kind), e->batch,
              (double)e->batch * bt_layer_flops_fwd(&e->layer), e->fwd, e->bwd, pf[j][i], pb[j][i],
              e->host_fwd, e->host_bwd, mhf[i], mhb[i], hpf[i], hpb[i], e->spec);
    }
  if (fflush(f) != 0 || ferror(f))
    return bt_err_set(err, "--dump: write failed (disk full?)");
  return 0;
}

/* (f): the seen sets' zoo rows as the runtime's calibration times them,
 * inside their model, predicted with the in-model context (mf, mb) and,
 * for reference, without it (pf, pb: what the predictor knew before). */
static void print_in_model(const bt_profile *const *seen, const int *seen_idx,
                           const char *const *seen_names, int n_seen, double *const *pf,
                           double *const *pb, double *const *mf, double *const *mb,
                           const stages *st) {
  print_header("(f) zoo layers timed inside their model (as the runtime's calibration times "
               "them), seen devices: with the in-model context / without it (back-to-back "
               "predictions)");
  acc tot[2][3];
  memset(tot, 0, sizeof tot);
  for (int j = 0; j < n_seen; j++) {
    const int k = seen_idx[j];
    for (int w = 0; w < 2; w++) {
      acc a[3];
      score_in_model(seen[j], w ? pf[k] : mf[k], w ? pb[k] : mb[k], pf[k], pb[k], st, a);
      char label[64];
      snprintf(label, sizeof label, "%.13s %s", seen_names[j], w ? "b2b" : "ctx");
      print_row(label, a);
      for (int t = 0; t < 3; t++)
        acc_merge(&tot[w][t], &a[t]);
    }
  }
  print_row("ALL with context", tot[0]);
  print_row("ALL back to back", tot[1]);
  printf("in-model zoo layers, seen: %.1f%% within 10%% with the context, %.1f%% without; stage "
         "sums within 5%%: %.1f%% / %.1f%%\n",
         pct(tot[0][0].w10 + tot[0][1].w10, tot[0][0].n + tot[0][1].n),
         pct(tot[1][0].w10 + tot[1][1].w10, tot[1][0].n + tot[1][1].n),
         pct(tot[0][2].w5, tot[0][2].n), pct(tot[1][2].w5, tot[1][2].n));
}

static int run_eval(eval_ctx *c, bt_err *err) {
  sets *S = c->S;
  const int n = S->p[0].n, D = S->n;
  int n_seen = 0, seen_idx[64];
  const bt_profile *seen[64];
  const char *seen_names[64];
  for (int k = 0; k < D; k++)
    if (!S->variant[k]) {
      seen_idx[n_seen] = k;
      seen[n_seen] = &S->p[k];
      seen_names[n_seen++] = S->names[k];
    }
  /* Out-of-fold predictions: [device][k probes] for unseen ones. */
  double *pf[64], *pb[64], *vf[64][N_PROBE_COUNTS], *vb[64][N_PROBE_COUNTS];
  double *mf[64], *mb[64]; /* with the in-model context */
  int has_ctx = 0;
  for (int k = 0; k < D; k++) {
    pf[k] = nan_array(n), pb[k] = nan_array(n);
    mf[k] = nan_array(n), mb[k] = nan_array(n);
    for (int q = 0; q < N_PROBE_COUNTS; q++)
      vf[k][q] = nan_array(n), vb[k][q] = nan_array(n);
  }
  unsigned char *use = malloc((size_t)n), *used = calloc((size_t)n, 1);
  double *hpf = nan_array(n), *hpb = nan_array(n), *mhf = nan_array(n), *mhb = nan_array(n);
  bt_profile *seen_sets = malloc((size_t)n_seen * sizeof *seen_sets);
  for (int j = 0; j < n_seen; j++)
    seen_sets[j] = *seen[j]; /* shallow copies: the fit only reads */
  double fit_seconds = 0;
  acc nodin_fit = {0}, nodin_full = {0};
  int rc = 0;
  /* (a) seen devices and (c) host variants: cross-validation over layers. */
  for (int f = 0; f < c->folds && rc == 0; f++) {
    for (int i = 0; i < n; i++)
      use[i] = c->fold[i] != f && c->keep[i];
    bt_predictor *pr;
    double t0 = bt_cli_now();
    if (bt_predictor_fit_ex(seen_sets, seen_names, n_seen, use, S->corpora, S->n_corpora, &c->opt,
                            &pr, err) < 0) {
      rc = -1;
      break;
    }
    fit_seconds += bt_cli_now() - t0;
    for (int j = 0; j < n_seen; j++)
      predict_rows(pr, j, seen[j], c->fold, f, pf[seen_idx[j]], pb[seen_idx[j]]);
    if (bt_predictor_set_in_model(pr, 1)) {
      has_ctx = 1;
      for (int j = 0; j < n_seen; j++)
        predict_rows(pr, j, seen[j], c->fold, f, mf[seen_idx[j]], mb[seen_idx[j]]);
      bt_predictor_set_in_model(pr, 0);
    }
    for (int i = 0; i < n; i++)
      if (c->fold[i] == f) {
        const bt_profile_entry *e = &seen[0]->e[i];
        hpf[i] = bt_predictor_host_time(pr, &e->layer, e->batch, BT_PASS_FWD);
        hpb[i] = bt_predictor_host_time(pr, &e->layer, e->batch, BT_PASS_BWD);
      }
    for (int k = 0; k < D && rc == 0; k++) {
      if (!S->variant[k])
        continue;
      rc = probe_and_predict(c, pr, k, f, vf[k], vb[k], err);
    }
    if (f == 0) /* the corpora's zoo rows are in no fit: any fold's model will do */
      score_nodin(pr, S, &nodin_fit, &nodin_full);
    bt_predictor_free(pr);
  }
  /* (b) each seen device held out in turn (folds over layers too). */
  for (int h = 0; h < n_seen && rc == 0; h++) {
    const int k = seen_idx[h];
    bt_profile others[64];
    const char *onames[64];
    int no = 0;
    for (int j = 0; j < n_seen; j++)
      if (j != h)
        others[no] = seen_sets[j], onames[no++] = seen_names[j];
    for (int f = 0; f < c->folds && rc == 0; f++) {
      for (int i = 0; i < n; i++)
        use[i] = c->fold[i] != f && c->keep[i];
      bt_predictor *pr;
      if (bt_predictor_fit_ex(others, onames, no, use, S->corpora, S->n_corpora, &c->opt, &pr,
                              err) < 0) {
        rc = -1;
        break;
      }
      rc = probe_and_predict(c, pr, k, f, vf[k], vb[k], err);
      bt_predictor_free(pr);
    }
  }
  if (rc < 0)
    goto done;
  printf("baton predictor eval: %d profiling sets x %d layers x 2 passes; %d-fold "
         "cross-validation over layers (every figure is on layers left out of the fit); "
         "%d stages (zoo models at batch 8 and 32 cut into 1, 2, 4 parts); head: %s; "
         "residual memory: %s; boosted trees: %d of depth %d; training rows used: %.0f%%\n",
         D, n, c->folds, c->st.n, c->opt.linear_head ? "linear (one scale)" : "device model",
         c->opt.residual_memory ? "on" : "off", c->opt.trees, c->opt.tree_depth,
         100 * c->train_fraction);
  long corpus_rows = 0;
  for (int k = 0; k < S->n_corpora; k++)
    corpus_rows += S->corpora[k].n;
  printf("host corpora: %d (%ld layers; their random layers that the profiling sets do not "
         "hold join every fit of the host model)\n",
         S->n_corpora, corpus_rows);
  printf("one fit (host regressions + %d heads): %.2f s\n", n_seen, fit_seconds / c->folds);
  /* Each row's median host time over the seen sets: the host model's target. */
  for (int i = 0; i < n; i++)
    mhf[i] = median_host(seen, n_seen, i, 0), mhb[i] = median_host(seen, n_seen, i, 1);
  acc tot_seen[3] = {{0}};
  print_header("(a) seen devices (fitted on their own profiling sets)");
  for (int j = 0; j < n_seen; j++) {
    acc a[3];
    score(seen[j], pf[seen_idx[j]], pb[seen_idx[j]], NULL, &c->st, a);
    print_row(seen_names[j], a);
    for (int t = 0; t < 3; t++)
      acc_merge(&tot_seen[t], &a[t]);
  }
  print_row("ALL seen", tot_seen);
  if (c->dump) {
    double *spf[64], *spb[64];
    for (int j = 0; j < n_seen; j++)
      spf[j] = pf[seen_idx[j]], spb[j] = pb[seen_idx[j]];
    if (write_dump(c->dump, seen, seen_names, n_seen, spf, spb, hpf, hpb, mhf, mhb, err) < 0) {
      rc = -1;
      goto done;
    }
    printf("(out-of-fold predictions of the seen sets written to the --dump file)\n");
  }
  /* Where the errors are: pooled seen-device figures by layer kind, and the
   * repeatability of the host measurement itself (each set's host time
   * against the median of all base-host sets: the noise floor). */
  printf("\nby layer kind (seen devices pooled; fwd+bwd): kind, samples, MAPE%%, <=10%%, "
         "<=5%%; then host-time repeatability across the %d sets (<=10%%, <=5%%)\n",
         n_seen);
  for (int kd = 0; kd < BT_LAYER_KIND_COUNT; kd++) {
    acc a = {0}, rep = {0}, hm = {0};
    for (int j = 0; j < n_seen; j++)
      for (int i = 0; i < n; i++) {
        const bt_profile_entry *e = &seen[j]->e[i];
        if ((int)e->layer.kind != kd)
          continue;
        if (isfinite(pf[seen_idx[j]][i]))
          acc_add(&a, pf[seen_idx[j]][i], e->fwd);
        if (isfinite(pb[seen_idx[j]][i]))
          acc_add(&a, pb[seen_idx[j]][i], e->bwd);
        acc_add(&rep, e->host_fwd, mhf[i]);
        acc_add(&rep, e->host_bwd, mhb[i]);
        if (j == 0) {
          acc_add(&hm, hpf[i], mhf[i]);
          acc_add(&hm, hpb[i], mhb[i]);
        }
      }
    if (a.n)
      printf("  %-16s %6ld %7.1f %7.1f%% %7.1f%%   repeat %6.1f%% %6.1f%%   host model %6.1f "
             "%6.1f%% %6.1f%%\n",
             bt_layer_kind_name((bt_layer_kind)kd), a.n, 100 * a.ape / a.n, pct(a.w10, a.n),
             pct(a.w5, a.n), pct(rep.w10, rep.n), pct(rep.w5, rep.n), 100 * hm.ape / hm.n,
             pct(hm.w10, hm.n), pct(hm.w5, hm.n));
  }
  if (nodin_fit.n)
    printf("backward without the input gradient (a model's first layer), host model on the "
           "host corpora's %ld zoo convolution and dense rows (in no fit): MAPE %.1f%%, %.1f%% "
           "within 10%%; the full backward's prediction in its place: MAPE %.1f%%, %.1f%%\n",
           nodin_fit.n, 100 * nodin_fit.ape / nodin_fit.n, pct(nodin_fit.w10, nodin_fit.n),
           100 * nodin_full.ape / nodin_full.n, pct(nodin_full.w10, nodin_full.n));
  /* Rows used for adaptation are excluded from the unseen scores. */
  unsigned char *mask = malloc((size_t)n);
  acc tot_unseen[N_PROBE_COUNTS][3];
  memset(tot_unseen, 0, sizeof tot_unseen);
  acc tot_var[N_PROBE_COUNTS][3];
  memset(tot_var, 0, sizeof tot_var);
  /* Where the held-out devices miss after the probe set (k = 10), by kind. */
  acc by_kind10[2][BT_LAYER_KIND_COUNT];
  memset(by_kind10, 0, sizeof by_kind10);
  for (int pass = 0; pass < 2; pass++) {
    print_header(pass == 0 ? "(b) each device held out in turn, after k probe layers (k = 50: "
                             "the probe set + 40 corpus layers)"
                           : "(c) real host variants as unseen devices (BLIS kernel sets, two "
                             "threads), after k probe layers");
    for (int q = 0; q < N_PROBE_COUNTS; q++)
      for (int k = 0; k < D; k++) {
        if (S->variant[k] != pass)
          continue;
        int rows[64],
            m = adapt_rows(&S->p[k], probe_counts[q] > 10 ? probe_counts[q] : 10, c->order, rows);
        for (int i = 0; i < n; i++)
          mask[i] = 1;
        for (int j = 0; j < m; j++)
          mask[rows[j]] = 0;
        acc a[3];
        score(&S->p[k], vf[k][q], vb[k][q], mask, &c->st, a);
        for (int i = 0; probe_counts[q] == 10 && i < n; i++) {
          const bt_profile_entry *e = &S->p[k].e[i];
          if (mask[i] && isfinite(vf[k][q][i]))
            acc_add(&by_kind10[pass][e->layer.kind], vf[k][q][i], e->fwd);
          if (mask[i] && isfinite(vb[k][q][i]))
            acc_add(&by_kind10[pass][e->layer.kind], vb[k][q][i], e->bwd);
        }
        char label[64];
        snprintf(label, sizeof label, "%.14s k=%d", S->names[k], probe_counts[q]);
        print_row(label, a);
        for (int t = 0; t < 3; t++)
          acc_merge(pass ? &tot_var[q][t] : &tot_unseen[q][t], &a[t]);
      }
    for (int q = 0; q < N_PROBE_COUNTS; q++) {
      char label[64];
      snprintf(label, sizeof label, "ALL k=%d", probe_counts[q]);
      print_row(label, pass ? tot_var[q] : tot_unseen[q]);
    }
    printf("by layer kind after 10 probes (fwd+bwd pooled): kind, samples, MAPE%%, <=10%%, "
           "<=5%%\n");
    for (int kd = 0; kd < BT_LAYER_KIND_COUNT; kd++) {
      const acc *a = &by_kind10[pass][kd];
      if (a->n)
        printf("  %-16s %6ld %7.1f %7.1f%% %7.1f%%\n", bt_layer_kind_name((bt_layer_kind)kd), a->n,
               100 * a->ape / a->n, pct(a->w10, a->n), pct(a->w5, a->n));
    }
  }
  free(mask);
  if (has_ctx)
    print_in_model(seen, seen_idx, seen_names, n_seen, pf, pb, mf, mb, &c->st);
  /* (d) baselines on every set, all rows. */
  print_header("(d) baselines: FLOPs / peak, roofline, host time x one constant per device "
               "(fitted on all its layers)");
  char data[4096];
  bt_cli_data_dir(data, sizeof data);
  acc tot_b[3][3];
  memset(tot_b, 0, sizeof tot_b);
  for (int k = 0; k < D; k++) {
    const bt_profile *p = &S->p[k];
    bt_device dev, host;
    bt_err e2;
    if (bt_host_as_device(&p->host, &host, &e2) < 0)
      continue;
    const int emulated = strcmp(p->device, "host") != 0;
    if (!emulated || bt_device_find(p->device, data, &dev, &e2) < 0)
      dev = host;
    double *bf = nan_array(n), *bb = nan_array(n), *hf = nan_array(n), *hb = nan_array(n);
    /* Base host time of each row: median of the seen sets' host figures. */
    double lr = 0;
    for (int i = 0; i < n; i++) {
      double hfi = S->variant[k] ? mhf[i] : p->e[i].host_fwd;
      double hbi = S->variant[k] ? mhb[i] : p->e[i].host_bwd;
      hf[i] = hfi, hb[i] = hbi;
      lr += log(p->e[i].fwd / hfi) + log(p->e[i].bwd / hbi);
    }
    const double cst = exp(lr / (2 * n));
    for (int b = 0; b < 3; b++) {
      for (int i = 0; i < n; i++) {
        const bt_layer *l = &p->e[i].layer;
        const int B = p->e[i].batch;
        for (int pass = 0; pass < 2; pass++) {
          double t = 0;
          if (b == 0) {
            t = B * (pass ? bt_layer_flops_bwd(l) : bt_layer_flops_fwd(l)) /
                (dev.rate[BT_OP_CONV] * 1e9);
          } else if (b == 1) {
            bt_device_op ops[BT_DEVICE_LAYER_OPS_MAX];
            int no = bt_device_layer_ops(l, B, pass, ops, BT_DEVICE_LAYER_OPS_MAX);
            for (int o = 0; o < no && o < BT_DEVICE_LAYER_OPS_MAX; o++) {
              double comp = bt_op_class_compute_bound(ops[o].cls)
                                ? ops[o].flops / (dev.rate[ops[o].cls] * 1e9)
                                : 0;
              double mem = ops[o].bytes / (dev.rate[BT_OP_ELEMENTWISE] * 1e9);
              t += comp > mem ? comp : mem;
            }
          } else {
            t = cst * (pass ? hb[i] : hf[i]);
          }
          (pass ? bb : bf)[i] = t > 0 ? t : 1e-9;
        }
      }
      acc a[3];
      score(p, bf, bb, NULL, &c->st, a);
      char label[64];
      static const char *bn[] = {"flops", "roofline", "host x c"};
      snprintf(label, sizeof label, "%.11s %s", S->names[k], bn[b]);
      print_row(label, a);
      for (int t = 0; t < 3; t++)
        acc_merge(&tot_b[b][t], &a[t]);
    }
    free(bf), free(bb), free(hf), free(hb);
  }
  print_row("ALL flops/peak", tot_b[0]);
  print_row("ALL roofline", tot_b[1]);
  print_row("ALL host x const", tot_b[2]);
  {
    acc un10[3];
    memcpy(un10, tot_unseen[3], sizeof un10);
    for (int t = 0; t < 3; t++)
      acc_merge(&un10[t], &tot_var[3][t]);
    long n10 = tot_seen[0].n + tot_seen[1].n, w10 = tot_seen[0].w10 + tot_seen[1].w10;
    long m10 = un10[0].n + un10[1].n, u10 = un10[0].w10 + un10[1].w10;
    printf("\nstage sums within 5%%: seen %.1f%%, unseen after 10 probes %.1f%%\n",
           pct(tot_seen[2].w5, tot_seen[2].n), pct(un10[2].w5, un10[2].n));
    printf("seen: %.1f%% within 10%%\n", pct(w10, n10));
    printf("unseen after 10 probes: %.1f%% within 10%%\n", pct(u10, m10));
  }
done:
  for (int k = 0; k < D; k++) {
    free(pf[k]), free(pb[k]), free(mf[k]), free(mb[k]);
    for (int q = 0; q < N_PROBE_COUNTS; q++)
      free(vf[k][q]), free(vb[k][q]);
  }
  free(use), free(used), free(seen_sets), free(hpf), free(hpb), free(mhf), free(mhb);
  return rc;
}

/* ---- continuous learning: a mid-run slowdown ------------------------------------ */

static int run_drift(sets *S, const bt_predictor_options *opt, bt_err *err) {
  int n_seen = 0;
  bt_profile seen[64];
  const char *names[64];
  for (int k = 0; k < S->n; k++)
    if (!S->variant[k])
      seen[n_seen] = S->p[k], names[n_seen++] = S->names[k];
  bt_predictor *pr;
  if (bt_predictor_fit_ex(seen, names, n_seen, NULL, S->corpora, S->n_corpora, opt, &pr, err) < 0)
    return -1;
  char data[4096];
  bt_cli_data_dir(data, sizeof data);
  printf("\n(e) continuous learning: resnet18 at batch 8 (every layer, fwd + bwd) measured "
         "each round; from round 5 on the device's conv ops run 2x slower and everything "
         "else 1.3x (throttle); one bt_predictor_update per round. Stage-sum error and the "
         "share of layers within 10%% before each update:\n");
  printf("%-18s %s\n", "device", "round: 4 (before) | 5 6 7 8 9 10 (after the slowdown)");
  bt_model m;
  if (bt_zoo_build("resnet18", (bt_shape){32, 32, 3}, 10, &m, err) < 0) {
    bt_predictor_free(pr);
    return -1;
  }
  int worst = 0, tested = 0;
  for (int k = 0; k < S->n; k++) {
    const bt_profile *p = &S->p[k];
    bt_device dev, host;
    if (S->variant[k] || bt_device_find(p->device, data, &dev, err) < 0 ||
        bt_host_as_device(&p->host, &host, err) < 0)
      continue;
    dev.n_throttle = 1;
    dev.throttle[0].after_iteration = 5;
    for (int c = 0; c < BT_OP_CLASS_COUNT; c++)
      dev.throttle[0].factor[c] = c == BT_OP_CONV ? 2.0 : 1.3;
    bt_pred_sample s[1024];
    int rows[512], ns = 0;
    for (int i = 0; i < m.n_layers; i++)
      rows[i] = bt_profile_find(p, &m.layers[i], 8);
    printf("%-18s", p->device);
    tested++;
    int dv = bt_predictor_device(pr, S->names[k]), back = -1;
    for (int round = 0; round <= 10; round++) {
      ns = 0;
      double ps = 0, ts = 0;
      int w10 = 0, nl = 0;
      for (int i = 0; i < m.n_layers; i++) {
        if (rows[i] < 0)
          continue;
        const bt_profile_entry *e = &p->e[rows[i]];
        for (int pass = 0; pass < 2; pass++) {
          double y = bt_device_layer_mapped(&dev, &host, &e->layer, 8, pass,
                                            pass ? e->host_bwd : e->host_fwd, round)
                         .total;
          double q = bt_predictor_predict_dev(pr, dv, &e->layer, 8, pass);
          s[ns++] = (bt_pred_sample){&e->layer, 8, pass, y};
          ps += q, ts += y;
          w10 += fabs(q - y) <= 0.1 * y;
          nl++;
        }
      }
      const double serr = fabs(ps - ts) / ts;
      if (round >= 4)
        printf(" %5.1f%%/%3.0f%%", 100 * serr, 100.0 * w10 / nl);
      if (round >= 5 && back < 0 && serr < 0.10)
        back = round - 5;
      if (bt_predictor_update(pr, S->names[k], s, ns, err) < 0) {
        bt_model_free(&m);
        bt_predictor_free(pr);
        return -1;
      }
    }
    printf("  -> back under 10%% after %d update(s)\n", back);
    if (back < 0 || back > 5)
      worst = 1;
  }
  if (tested == 0)
    printf("no device profile of these sets found in %s/devices: nothing to check\n", data);
  else
    printf("slowdown followed within 5 updates on every device: %s\n", worst ? "no" : "yes");
  bt_model_free(&m);
  bt_predictor_free(pr);
  return 0;
}

/* ---- subcommands ------------------------------------------------------------------ */

static int parse_common(int argc, char **argv, const char **dir, const char **out,
                        const char **model_file, const char **device, const char **model,
                        int *batch, bt_shape *input, int *folds, bt_predictor_options *opt) {
  for (int i = 2; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--linear-head") == 0) {
      opt->linear_head = 1;
      continue;
    }
    if (strcmp(a, "--residual-memory") == 0) {
      opt->residual_memory = 1;
      continue;
    }
    if (!v) {
      predictor_usage(stderr);
      bt_cli_fail("predictor", "unknown option or missing value: %s", a);
      return -1;
    }
    i++;
    if (strcmp(a, "--data") == 0)
      *dir = v;
    else if (strcmp(a, "--out") == 0)
      *out = v;
    else if (strcmp(a, "--predictor") == 0)
      *model_file = v;
    else if (strcmp(a, "--device") == 0)
      *device = v;
    else if (strcmp(a, "--model") == 0)
      *model = v;
    else if (strcmp(a, "--trees") == 0) {
      char *end;
      long x = strtol(v, &end, 10);
      if (!*v || *end || x < 0 || x > 5000) {
        bt_cli_fail("predictor", "--trees '%s': expected an integer in 0..5000", v);
        return -1;
      }
      opt->trees = (int)x;
    } else if (strcmp(a, "--tree-depth") == 0) {
      char *end;
      long x = strtol(v, &end, 10);
      if (!*v || *end || x < 1 || x > 6) {
        bt_cli_fail("predictor", "--tree-depth '%s': expected an integer in 1..6", v);
        return -1;
      }
      opt->tree_depth = (int)x;
    } else if (strcmp(a, "--batch") == 0 || strcmp(a, "--folds") == 0) {
      char *end;
      long x = strtol(v, &end, 10);
      if (*end || x < (a[2] == 'f' ? 2 : 1) || x > 65536) {
        bt_cli_fail("predictor", "%s '%s': expected a positive integer%s", a, v,
                    a[2] == 'f' ? " >= 2" : "");
        return -1;
      }
      *(a[2] == 'f' ? folds : batch) = (int)x;
    } else if (strcmp(a, "--input") == 0) {
      if (bt_cli_parse_shape(v, &input->h, &input->w, &input->c) < 0) {
        bt_cli_fail("predictor", "--input '%s': expected HxWxC", v);
        return -1;
      }
    } else {
      predictor_usage(stderr);
      bt_cli_fail("predictor", "unknown option %s", a);
      return -1;
    }
  }
  return 0;
}

int bt_cmd_predictor(int argc, char **argv) {
  if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
    predictor_usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const char *sub = argv[1];
  /* The sets of this host when data/predictor/hosts has them (as baton plan
   * and train pick them), else the shipped default sets. */
  char defdir[4400], host[512];
  int per_host = 0;
  bt_gemm_configure("auto", 1); /* the kernels baton profile picks: the sets' host key */
  bt_cli_host_key(host, sizeof host);
  bt_cli_predictor_dir(host, defdir, sizeof defdir, &per_host);
  const char *dir = defdir, *out = NULL, *model_file = NULL, *device = NULL, *model = NULL;
  int batch = 8, folds = 5;
  double train_fraction = 1.0;
  bt_shape input = {32, 32, 3};
  bt_predictor_options opt;
  bt_predictor_default_options(&opt);
  for (int i = 2; i < argc; i++)
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      predictor_usage(stdout);
      return 0;
    }
  const char *dump = NULL;
  for (int i = 2; i + 1 < argc; i++)
    if (strcmp(argv[i], "--dump") == 0) {
      dump = argv[i + 1];
      for (int j = i; j + 2 <= argc; j++) /* drop the pair */
        argv[j] = j + 2 < argc ? argv[j + 2] : NULL;
      argc -= 2;
      break;
    }
  for (int i = 2; i + 1 < argc; i++)
    if (strcmp(argv[i], "--train-fraction") == 0) {
      char *end;
      train_fraction = strtod(argv[i + 1], &end);
      if (*end || !(train_fraction > 0 && train_fraction <= 1))
        return bt_cli_fail("predictor", "--train-fraction '%s': expected a number in (0, 1]",
                           argv[i + 1]) +
               1;
      for (int j = i; j + 2 <= argc; j++) /* drop the pair */
        argv[j] = j + 2 < argc ? argv[j + 2] : NULL;
      argc -= 2;
      break;
    }
  if (parse_common(argc, argv, &dir, &out, &model_file, &device, &model, &batch, &input, &folds,
                   &opt) < 0)
    return 2;
  if (dump && strcmp(sub, "eval") != 0)
    return bt_cli_fail("predictor", "--dump is an option of 'baton predictor eval' only") + 1;
  /* Opened before the two-minute evaluation, so that a bad path fails first. */
  FILE *dump_file = dump ? fopen(dump, "w") : NULL;
  if (dump && !dump_file)
    return bt_cli_fail("predictor", "--dump %s: cannot open for writing; check the directory",
                       dump) +
           1;
  bt_err err = {{0}};
  if (strcmp(sub, "fit") == 0 || strcmp(sub, "eval") == 0) {
    if (strcmp(sub, "fit") == 0 && !out)
      return bt_cli_fail("predictor", "fit needs --out FILE") + 1;
    sets S;
    if (load_sets(dir, &S, &err) < 0) {
      if (dump_file)
        fclose(dump_file);
      return bt_cli_fail("predictor", "%s", err.msg);
    }
    printf("baton predictor %s: profiling sets of %s%s\n", sub, dir,
           dir == defdir && per_host ? " (timed on this host)" : "");
    int rc = 0;
    if (strcmp(sub, "fit") == 0) {
      bt_predictor *pr;
      double t0 = bt_cli_now();
      rc = bt_predictor_fit_ex(S.p, S.names, S.n, NULL, S.corpora, S.n_corpora, &opt, &pr, &err);
      if (rc == 0) {
        double dt = bt_cli_now() - t0;
        rc = bt_predictor_save(pr, out, &err);
        printf("baton predictor fit: %d devices, %d layers each, %.2f s -> %s\n", S.n, S.p[0].n, dt,
               out);
        printf("%-20s %9s %9s %9s %9s %9s %8s %10s %9s %7s\n", "device (head)", "conv GF/s",
               "dw GF/s", "dense", "elem GB/s", "pool GB/s", "ovh us", "half FLOP", "cache KiB",
               "speedup");
        for (int k = 0; k < S.n; k++) {
          bt_device d;
          bt_predictor_head_device(pr, k, &d);
          printf("%-20s %9.1f %9.1f %9.1f %9.1f %9.1f %8.2f %10.3g %9.0f %7.2f\n", S.names[k],
                 d.rate[0], d.rate[1], d.rate[2], d.rate[3], d.rate[4], d.op_overhead_us,
                 d.half_util_flops, d.cache_kib, d.cache_speedup);
        }
        bt_predictor_free(pr);
      }
    } else {
      eval_ctx c = {.S = &S, .folds = folds, .opt = opt, .dump = dump_file};
      const int n = S.p[0].n;
      c.fold = malloc((size_t)n * sizeof(int));
      c.order = malloc((size_t)n * sizeof(int));
      /* A fixed shuffle (LCG) of the rows: folds and the extra adaptation rows. */
      for (int i = 0; i < n; i++)
        c.order[i] = i;
      unsigned long long x = 12345;
      for (int i = n - 1; i > 0; i--) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        int j = (int)((x >> 33) % (unsigned long long)(i + 1)), t = c.order[i];
        c.order[i] = c.order[j], c.order[j] = t;
      }
      c.keep = malloc((size_t)n * sizeof(int));
      c.train_fraction = train_fraction;
      for (int i = 0; i < n; i++) {
        c.fold[c.order[i]] = i % folds;
        /* A hash independent of the folds decides the kept training rows. */
        unsigned long long h = (unsigned long long)(i + 1) * 0x9E3779B97F4A7C15ULL;
        c.keep[i] = (double)((h >> 40) % 1000) < train_fraction * 1000;
      }
      build_stages(&S.p[0], &c.st);
      rc = run_eval(&c, &err);
      if (rc == 0)
        rc = run_drift(&S, &opt, &err);
      stages_free(&c.st);
      free(c.fold), free(c.order), free(c.keep);
    }
    sets_free(&S);
    if (dump_file && fclose(dump_file) != 0 && rc == 0)
      rc = bt_err_set(&err, "--dump %s: write failed (disk full?)", dump);
    return rc < 0 ? bt_cli_fail("predictor", "%s", err.msg) : 0;
  }
  if (strcmp(sub, "predict") == 0) {
    if (!model_file || !device || !model)
      return bt_cli_fail("predictor", "predict needs --predictor FILE --device NAME --model M") + 1;
    bt_predictor *pr;
    if (bt_predictor_load(model_file, &pr, &err) < 0)
      return bt_cli_fail("predictor", "%s", err.msg);
    int dv = bt_predictor_device(pr, device);
    if (dv < 0) {
      bt_predictor_free(pr);
      return bt_cli_fail("predictor",
                         "device '%s' is not in %s (fit it in, or adapt it from "
                         "probes)",
                         device, model_file);
    }
    bt_model m;
    char data[4096], models[4200];
    snprintf(models, sizeof models, "%s/models", bt_cli_data_dir(data, sizeof data));
    if (bt_model_resolve(model, models, input, 10, &m, &err) < 0) {
      bt_predictor_free(pr);
      return bt_cli_fail("predictor", "%s", err.msg);
    }
    /* Times as the layers take inside the model in training (the runtime's
     * calibration), when the sets held in-model timings. */
    const int in_model = bt_predictor_set_in_model(pr, 1);
    printf("%-4s %-22s %-15s %12s %12s\n", "#", "layer", "kind", "fwd ms", "bwd ms");
    double tf = 0, tb = 0;
    for (int i = 0; i < m.n_layers; i++) {
      double f = bt_predictor_predict_dev(pr, dv, &m.layers[i], batch, BT_PASS_FWD);
      double b = bt_predictor_predict_dev(pr, dv, &m.layers[i], batch,
                                          bt_pass_backward_of(&m.layers[i], i));
      tf += f, tb += b;
      printf("%-4d %-22s %-15s %12.4f %12.4f\n", i + 1, m.layers[i].name,
             bt_layer_kind_name(m.layers[i].kind), f * 1e3, b * 1e3);
    }
    /* Cost of predicting every layer for every device of the file. */
    double t0 = bt_cli_now(), sink = 0, all[BT_PRED_DEVICES_MAX];
    const int reps = 20;
    for (int r = 0; r < reps; r++)
      for (int i = 0; i < m.n_layers; i++)
        for (int pass = 0; pass < 2; pass++) {
          int nd = bt_predictor_predict_all(pr, &m.layers[i], batch, pass, all);
          for (int d = 0; d < nd; d++)
            sink += all[d];
        }
    double dt = (bt_cli_now() - t0) / reps;
    printf("total: forward %.3f ms + backward %.3f ms = %.3f ms on %s (batch %d; %s)\n", tf * 1e3,
           tb * 1e3, (tf + tb) * 1e3, device, batch,
           in_model ? "inside the model, the in-model context" : "layers timed back to back");
    printf("predicting all %d layers x 2 passes for all %d devices took %.1f us%s\n", m.n_layers,
           bt_predictor_n_devices(pr), dt * 1e6, sink < 0 ? "!" : "");
    bt_model_free(&m);
    bt_predictor_free(pr);
    return 0;
  }
  predictor_usage(stderr);
  return bt_cli_fail("predictor", "unknown subcommand '%s' (fit, eval, predict)", sub) + 1;
}
