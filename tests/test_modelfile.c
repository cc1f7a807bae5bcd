/* Tests for modelfile: every zoo model survives write -> load unchanged at
 * both dataset input sizes, the shipped data/models files equal the zoo,
 * hand-written files get their defaults, and each kind of mistake gives one
 * line naming file:line:column, what is wrong and how to fix it.
 *
 * Paths are under BT_SOURCE_ROOT, which meson defines as the source
 * directory; the default works when the tests run from the project root. */
#define _POSIX_C_SOURCE 200809L /* open_memstream */

#include "baton/modelfile.h"

#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef BT_SOURCE_ROOT
#define BT_SOURCE_ROOT "."
#endif
#define FIX_DIR BT_SOURCE_ROOT "/tests/fixtures/models"
#define FIX(name) FIX_DIR "/" name
#define MODELS_DIR BT_SOURCE_ROOT "/data/models"

#define assert_has(msg, needle)                                                                    \
  cr_assert(strstr((msg), (needle)) != NULL, "expected \"%s\" in: %s", (needle), (msg))

static const bt_shape NO_SHAPE = {0, 0, 0};

/* ---- helpers ------------------------------------------------------------ */

static void assert_layer_eq(const bt_layer *a, const bt_layer *b, const char *ctx, int i) {
  cr_assert_eq(a->kind, b->kind, "%s layer %d: kind %s vs %s", ctx, i, bt_layer_kind_name(a->kind),
               bt_layer_kind_name(b->kind));
  cr_assert_eq(a->units, b->units, "%s layer %d: units", ctx, i);
  cr_assert_eq(a->kh, b->kh, "%s layer %d: kh", ctx, i);
  cr_assert_eq(a->kw, b->kw, "%s layer %d: kw", ctx, i);
  cr_assert_eq(a->stride, b->stride, "%s layer %d: stride", ctx, i);
  cr_assert_eq(a->pad, b->pad, "%s layer %d: pad", ctx, i);
  cr_assert_eq(a->p, b->p, "%s layer %d: p %g vs %g", ctx, i, a->p, b->p);
  cr_assert_eq(a->post_relu, b->post_relu, "%s layer %d: post_relu", ctx, i);
  cr_assert_eq(a->n_body, b->n_body, "%s layer %d: n_body", ctx, i);
  cr_assert_eq(a->n_short, b->n_short, "%s layer %d: n_short", ctx, i);
  cr_assert(a->in.h == b->in.h && a->in.w == b->in.w && a->in.c == b->in.c,
            "%s layer %d: input %dx%dx%d vs %dx%dx%d", ctx, i, a->in.h, a->in.w, a->in.c, b->in.h,
            b->in.w, b->in.c);
  cr_assert(a->out.h == b->out.h && a->out.w == b->out.w && a->out.c == b->out.c,
            "%s layer %d: output %dx%dx%d vs %dx%dx%d", ctx, i, a->out.h, a->out.w, a->out.c,
            b->out.h, b->out.w, b->out.c);
  cr_assert_eq(a->n_params, b->n_params, "%s layer %d: n_params", ctx, i);
  cr_assert_eq(a->n_state, b->n_state, "%s layer %d: n_state", ctx, i);
  cr_assert_eq(a->param_off, b->param_off, "%s layer %d: param_off", ctx, i);
  cr_assert_eq(a->state_off, b->state_off, "%s layer %d: state_off", ctx, i);
  cr_assert_eq(a->stream, b->stream, "%s layer %d: stream", ctx, i);
  for (int j = 0; j < a->n_body + a->n_short; j++) {
    char sub[96];
    snprintf(sub, sizeof sub, "%.60s layer %d sub", ctx, i);
    assert_layer_eq(&a->sub[j], &b->sub[j], sub, j);
  }
}

static void assert_model_eq(const bt_model *a, const bt_model *b, const char *ctx) {
  cr_assert_str_eq(a->name, b->name, "%s: name", ctx);
  cr_assert(a->input.h == b->input.h && a->input.w == b->input.w && a->input.c == b->input.c,
            "%s: input", ctx);
  cr_assert_eq(a->classes, b->classes, "%s: classes", ctx);
  cr_assert_eq(a->n_layers, b->n_layers, "%s: %d vs %d layers", ctx, a->n_layers, b->n_layers);
  for (int i = 0; i < a->n_layers; i++)
    assert_layer_eq(&a->layers[i], &b->layers[i], ctx, i + 1);
  cr_assert_eq(a->n_params, b->n_params, "%s: n_params", ctx);
  cr_assert_eq(a->n_state, b->n_state, "%s: n_state", ctx);
  cr_assert_eq(bt_model_flops_fwd(a), bt_model_flops_fwd(b), "%s: forward FLOPs", ctx);
  cr_assert_eq(bt_model_flops_bwd(a), bt_model_flops_bwd(b), "%s: backward FLOPs", ctx);
}

/* Writes m to memory; the caller frees the text. */
static char *write_text(const bt_model *m) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  cr_assert_not_null(f);
  bt_err err = {{0}};
  int rc = bt_modelfile_write(m, f, &err);
  cr_assert_eq(fclose(f), 0);
  cr_assert_eq(rc, 0, "write failed: %s", err.msg);
  return buf;
}

/* Loads YAML text that must fail; returns the message. */
static bt_err load_fail(const char *yaml, bt_shape input, int classes) {
  bt_model m;
  bt_err err = {{0}};
  int rc = bt_modelfile_load_string(yaml, "t.yaml", input, classes, &m, &err);
  cr_assert_lt(rc, 0, "expected an error for:\n%s", yaml);
  cr_assert_eq(m.n_layers, 0, "a failed load must leave the model empty");
  cr_assert_null(m.layers);
  bt_model_free(&m); /* must be harmless */
  cr_assert_eq(strchr(err.msg, '\n'), NULL, "message must be one line: %s", err.msg);
  return err;
}

static bt_err load_file_fail(const char *path) {
  bt_model m;
  bt_err err = {{0}};
  cr_assert_lt(bt_modelfile_load(path, NO_SHAPE, 0, &m, &err), 0, "expected an error for %s", path);
  cr_assert_eq(m.n_layers, 0);
  bt_model_free(&m);
  return err;
}

/* A minimal valid file with `layer` as its only hidden layer. */
static void one_layer(char *buf, size_t n, const char *layer) {
  snprintf(buf, n,
           "input: 8x8x2\nclasses: 3\nlayers:\n  - %s\n  - flatten\n  - dense: {units: "
           "classes}\n",
           layer);
}

/* ---- round trips ---------------------------------------------------------- */

typedef struct zoo_case {
  char model[16];
  bt_shape input;
} zoo_case;

static zoo_case round_trip_cases[2 * 6];

ParameterizedTestParameters(modelfile, round_trip) {
  const bt_shape inputs[2] = {{28, 28, 1}, {32, 32, 3}};
  cr_assert_eq(bt_zoo_count, 6, "the zoo changed: update this test's case count");
  int n = 0;
  for (int s = 0; s < 2; s++)
    for (int i = 0; i < bt_zoo_count; i++) {
      snprintf(round_trip_cases[n].model, sizeof round_trip_cases[n].model, "%s", bt_zoo_names[i]);
      round_trip_cases[n++].input = inputs[s];
    }
  return cr_make_param_array(zoo_case, round_trip_cases, n);
}

/* zoo -> text -> model equals the zoo model, with the file's own input and
 * with the input given explicitly; writing the loaded model gives the same
 * text again. */
ParameterizedTest(zoo_case *c, modelfile, round_trip) {
  bt_model zoo, back, again;
  bt_err err = {{0}};
  char ctx[64];
  snprintf(ctx, sizeof ctx, "%s at %dx%dx%d", c->model, c->input.h, c->input.w, c->input.c);
  cr_assert_eq(bt_zoo_build(c->model, c->input, 10, &zoo, &err), 0, "%s", err.msg);
  char *text = write_text(&zoo);
  cr_assert_eq(bt_modelfile_load_string(text, "mem.yaml", NO_SHAPE, 0, &back, &err), 0,
               "%s: %s\n%s", ctx, err.msg, text);
  assert_model_eq(&zoo, &back, ctx);
  cr_assert_eq(bt_modelfile_load_string(text, "mem.yaml", c->input, 10, &again, &err), 0, "%s",
               err.msg);
  assert_model_eq(&zoo, &again, ctx);
  char *text2 = write_text(&back);
  cr_assert_str_eq(text, text2, "%s: writing the loaded model changed the text", ctx);
  free(text2);
  free(text);
  bt_model_free(&again);
  bt_model_free(&back);
  bt_model_free(&zoo);
}

static zoo_case shipped_cases[6];

ParameterizedTestParameters(modelfile, shipped_equals_zoo) {
  for (int i = 0; i < bt_zoo_count && i < 6; i++) {
    snprintf(shipped_cases[i].model, sizeof shipped_cases[i].model, "%s", bt_zoo_names[i]);
    shipped_cases[i].input = (bt_shape){32, 32, 3};
  }
  return cr_make_param_array(zoo_case, shipped_cases, bt_zoo_count < 6 ? bt_zoo_count : 6);
}

/* data/models/<zoo>.yaml loads (directly and through bt_model_resolve) to
 * exactly bt_zoo_build at 32x32x3 with 10 classes. */
ParameterizedTest(zoo_case *c, modelfile, shipped_equals_zoo) {
  bt_model zoo, file, resolved;
  bt_err err = {{0}};
  char path[512];
  snprintf(path, sizeof path, "%s/%s.yaml", MODELS_DIR, c->model);
  cr_assert_eq(bt_zoo_build(c->model, c->input, 10, &zoo, &err), 0, "%s", err.msg);
  cr_assert_eq(bt_modelfile_load(path, NO_SHAPE, 0, &file, &err), 0,
               "%s (regenerate data/models with bt_modelfile_save)", err.msg);
  assert_model_eq(&zoo, &file, path);
  cr_assert_eq(bt_model_resolve(path, NULL, c->input, 10, &resolved, &err), 0, "%s", err.msg);
  assert_model_eq(&zoo, &resolved, path);
  bt_model_free(&resolved);
  bt_model_free(&file);
  bt_model_free(&zoo);
}

/* A model no builder makes: non-square windows, a pool with padding, odd
 * dropout, a name that needs quoting, and a convolution (not a dense layer)
 * that produces the class scores. */
Test(modelfile, round_trip_unusual) {
  bt_model m, back;
  bt_err err = {{0}};
  bt_model_init(&m, "my model: \"v2\"\\ #1", (bt_shape){9, 7, 2}, 3);
  bt_layer c = bt_conv2d(3, 3, 1, 0);
  c.kw = 1;
  bt_model_push(&m, c);
  bt_model_push(&m, bt_maxpool(3, 2, 1));
  bt_layer a = bt_avgpool(2, 1, 0);
  a.kw = 3;
  bt_model_push(&m, a);
  bt_model_push(&m, bt_dropout(1.0f / 3.0f)); /* needs 8 significant digits */
  bt_model_push(&m, bt_global_avgpool());
  bt_model_push(&m, bt_relu6());
  bt_model_push(&m, bt_softmax_ce());
  cr_assert_eq(bt_model_finalize(&m, &err), 0, "%s", err.msg);
  char *text = write_text(&m);
  assert_has(text, "kernel: [3, 1]");
  assert_has(text, "out: classes");
  assert_has(text, "p: 0.33333334}");
  cr_assert_eq(bt_modelfile_load_string(text, "mem.yaml", NO_SHAPE, 0, &back, &err), 0, "%s\n%s",
               err.msg, text);
  assert_model_eq(&m, &back, "unusual");
  free(text);
  bt_model_free(&back);
  bt_model_free(&m);
}

/* The writer also takes a model that was never finalized (no shape
 * comments then), and "null" as a name must be quoted to load back. */
Test(modelfile, write_unfinalized) {
  bt_model m, back;
  bt_err err = {{0}};
  bt_model_init(&m, "null", (bt_shape){4, 4, 1}, 2);
  bt_model_push(&m, bt_flatten());
  bt_model_push(&m, bt_dense(2));
  char *text = write_text(&m);
  cr_assert_null(strstr(text, "params"), "no shape comments expected:\n%s", text);
  cr_assert_eq(bt_modelfile_load_string(text, "mem.yaml", NO_SHAPE, 0, &back, &err), 0, "%s\n%s",
               err.msg, text);
  cr_assert_str_eq(back.name, "null");
  cr_assert_eq(back.n_layers, 3, "softmax_ce is appended");
  free(text);
  bt_model_free(&back);
  bt_model_free(&m);
}

/* ---- hand-written files ------------------------------------------------------ */

Test(modelfile, good_file_defaults) {
  bt_model m;
  bt_err err = {{0}};
  cr_assert_eq(bt_modelfile_load(FIX("good_small.yaml"), NO_SHAPE, 0, &m, &err), 0, "%s", err.msg);
  cr_assert_str_eq(m.name, "good_small", "no name key: the file name is the model name");
  cr_assert_eq(m.n_layers, 14, "13 layers in the file plus the appended softmax_ce");
  const bt_layer *L = m.layers;
  cr_assert_eq(L[0].kind, BT_CONV2D);
  cr_assert_eq(L[0].stride, 1);
  cr_assert_eq(L[0].pad, 1);
  cr_assert_eq(L[3].kind, BT_RESIDUAL);
  cr_assert_eq(L[3].post_relu, 1);
  cr_assert_eq(L[3].n_body, 4);
  cr_assert_eq(L[3].n_short, 1);
  cr_assert_eq(L[3].sub[3].kind, BT_DWCONV2D);
  cr_assert_eq(L[3].sub[4].stride, 2, "block-style parameters");
  cr_assert_eq(L[3].sub[4].pad, 0, "pad defaults to 0");
  cr_assert_eq(L[4].post_relu, 0, "post defaults to none");
  cr_assert_eq(L[4].n_short, 0, "no shortcut: identity");
  cr_assert_eq(L[5].kind, BT_MAXPOOL);
  cr_assert_eq(L[5].stride, 2, "pool stride defaults to the kernel");
  cr_assert(L[5].out.h == 4 && L[5].out.w == 4);
  cr_assert(L[6].kh == 2 && L[6].kw == 1 && L[6].out.h == 3 && L[6].out.w == 4);
  cr_assert_eq(L[8].kind, BT_DROPOUT);
  cr_assert_eq(L[8].p, 0.5f, "dropout p defaults to 0.5");
  cr_assert_eq(L[11].p, 0.25f);
  cr_assert_eq(L[12].units, 10);
  cr_assert_eq(L[13].kind, BT_SOFTMAX_CE);
  bt_model_free(&m);

  /* `units: classes` follows the class count the model is loaded for. */
  cr_assert_eq(bt_modelfile_load(FIX("good_small.yaml"), NO_SHAPE, 100, &m, &err), 0, "%s",
               err.msg);
  cr_assert_eq(m.classes, 100);
  cr_assert_eq(m.layers[12].units, 100);
  cr_assert_eq(m.layers[9].units, 32);
  bt_model_free(&m);
}

/* A file for 32x32x3 still loads at 28x28x1 when the shapes fit (lenet5
 * without the zoo's 28x28 padding: 24 -> 12 -> 8 -> 4), and the result is
 * not the zoo's 28x28 model. */
Test(modelfile, other_input_that_fits) {
  bt_model m, zoo;
  bt_err err = {{0}};
  cr_assert_eq(bt_modelfile_load(MODELS_DIR "/lenet5.yaml", (bt_shape){28, 28, 1}, 10, &m, &err), 0,
               "%s", err.msg);
  cr_assert_eq(m.input.c, 1);
  cr_assert_eq(m.layers[6].out.c, 4 * 4 * 16);
  cr_assert_eq(bt_zoo_build("lenet5", (bt_shape){28, 28, 1}, 10, &zoo, &err), 0, "%s", err.msg);
  cr_assert_neq(m.n_params, zoo.n_params);
  bt_model_free(&zoo);
  bt_model_free(&m);
}

/* vgg11 written for 32x32 has five pools; at 28x28 the fifth meets a 1x1
 * image: the error names the file, line, layer, and the designed input. */
Test(modelfile, other_input_that_does_not_fit) {
  bt_model m;
  bt_err err = {{0}};
  cr_assert_lt(bt_modelfile_load(MODELS_DIR "/vgg11.yaml", (bt_shape){28, 28, 1}, 10, &m, &err), 0);
  assert_has(err.msg, "vgg11.yaml:");
  assert_has(err.msg, "(maxpool)");
  assert_has(err.msg, "on a 1x1 input");
  assert_has(err.msg, "designed for input 32x32x3, not 28x28x1");
  bt_model_free(&m);

  /* No such hint when the file does not fit its own input either. */
  cr_assert_lt(bt_modelfile_load(FIX("bad_shrink.yaml"), (bt_shape){9, 9, 1}, 10, &m, &err), 0);
  assert_has(err.msg, "layer 3 (conv2d)");
  cr_assert_null(strstr(err.msg, "designed for"), "%s", err.msg);
}

/* ---- errors in files ------------------------------------------------------- */

Test(modelfile_errors, unknown_kind) {
  bt_err e = load_file_fail(FIX("bad_unknown_kind.yaml"));
  assert_has(e.msg, "bad_unknown_kind.yaml:6:5:");
  assert_has(e.msg, "unknown layer kind 'conv3d'");
  assert_has(e.msg, "conv2d, dwconv2d, dense, relu, relu6, maxpool, avgpool, global_avgpool, "
                    "batchnorm, flatten, dropout, residual, softmax_ce");
}

Test(modelfile_errors, unknown_parameter) {
  bt_err e = load_file_fail(FIX("bad_unknown_param.yaml"));
  assert_has(e.msg, "bad_unknown_param.yaml:5:22:");
  assert_has(e.msg, "conv2d: unknown parameter 'kernal'");
  assert_has(e.msg, "allowed: out, kernel, stride, pad");
}

Test(modelfile_errors, negative_kernel) {
  bt_err e = load_file_fail(FIX("bad_negative_kernel.yaml"));
  assert_has(e.msg, "bad_negative_kernel.yaml:5:23:");
  assert_has(e.msg, "maxpool.kernel: -2 is out of range; use 1 to");
}

Test(modelfile_errors, shrinks_below_one_pixel) {
  bt_err e = load_file_fail(FIX("bad_shrink.yaml"));
  assert_has(e.msg, "bad_shrink.yaml:7:5: layer 3 (conv2d)");
  assert_has(e.msg, "on a 2x2 input gives no output pixel");
  assert_has(e.msg, "use a smaller kernel, more padding, or a larger input");
}

Test(modelfile_errors, sub_layer_shape_error_points_at_its_line) {
  bt_err e = load_file_fail(FIX("bad_residual_sub_shrink.yaml"));
  assert_has(e.msg, "bad_residual_sub_shrink.yaml:8:11: layer 1 (residual), body layer 2 (conv2d)");
  assert_has(e.msg, "gives no output pixel");
}

Test(modelfile_errors, missing_file) {
  bt_err e = load_file_fail(FIX("no_such_model.yaml"));
  assert_has(e.msg, "cannot open model file '");
  assert_has(e.msg, "no_such_model.yaml");
  assert_has(e.msg, "No such file");
}

Test(modelfile_errors, malformed_yaml) {
  bt_err e = load_file_fail(FIX("bad_malformed.yaml"));
  assert_has(e.msg, "bad_malformed.yaml:");
  assert_has(e.msg, "invalid YAML");
}

Test(modelfile_errors, residual_shapes_differ) {
  bt_err e = load_file_fail(FIX("bad_residual_shapes.yaml"));
  assert_has(e.msg, "bad_residual_shapes.yaml:6:5: layer 1 (residual)");
  assert_has(e.msg, "body gives 4x4x8 but the shortcut gives 8x8x4");
  assert_has(e.msg, "add a projection");
}

Test(modelfile_errors, parameters_not_indented) {
  bt_err e = load_file_fail(FIX("bad_indent.yaml"));
  assert_has(e.msg, "bad_indent.yaml:5:5:");
  assert_has(e.msg, "also has 'out'; indent the parameters under the kind");
}

Test(modelfile_errors, missing_parameter) {
  bt_err e = load_file_fail(FIX("bad_missing_param.yaml"));
  assert_has(e.msg, "bad_missing_param.yaml:4:5:");
  assert_has(e.msg, "conv2d: missing parameter 'out'; write e.g. conv2d: {out: 64, kernel: 3");
}

/* ---- errors in text ------------------------------------------------------- */

Test(modelfile_errors, wrong_types) {
  char y[512];
  struct {
    const char *layer, *needle;
  } cases[] = {
      {"conv2d: {out: 8, kernel: \"3\"}", "got the quoted string '3'; remove the quotes"},
      {"conv2d: {out: 8, kernel: 2.5}", "conv2d.kernel: expected an integer, got '2.5'"},
      {"conv2d: {out: eight, kernel: 3}", "conv2d.out: expected an integer or 'classes', got "
                                          "'eight'"},
      {"conv2d: {out: 8, kernel: [3, 3, 3]}", "expected one integer or [height, width]"},
      {"conv2d: {out: 8, kernel: 3, stride: 0}", "conv2d.stride: 0 is out of range; use 1 to"},
      {"conv2d: {out: 8, kernel: 3, pad: {a: 1}}", "conv2d.pad: expected an integer, got a "
                                                   "mapping"},
      {"conv2d: {out: 8, kernel: 3, out: 9}", "'out' is given twice"},
      {"conv2d: [8, 3]", "conv2d: expected a mapping of parameters, got a list"},
      {"conv2d", "conv2d: missing parameter 'out'"},
      {"dropout: {p: 1.5}", "dropout.p: 1.5 is out of range; use a probability in [0, 1)"},
      {"dropout: {p: nan}", "dropout.p: expected a number in [0, 1), got 'nan'"},
      {"dropout: {p: '0.5'}", "got the quoted string '0.5'"},
      {"relu: {inplace: true}", "relu: unknown parameter 'inplace'; relu takes no parameters"},
      {"relu: 3", "relu takes no parameters, got '3'; write just '- relu'"},
      {"maxpool: {kernel: [2, 3]}", "maxpool: a 2x3 window needs an explicit 'stride'"},
      {"{}", "empty layer {}"},
      {"[relu]", "expected a layer"},
      {"residual: {body: [relu, residual: {body: [relu]}]}", "a residual cannot sit inside a "
                                                             "residual block"},
      {"residual: {body: [softmax_ce]}", "a softmax_ce cannot sit inside a residual block"},
      {"residual: {body: []}", "residual.body: is empty"},
      {"residual: {shortcut: [relu]}", "residual: missing 'body'"},
      {"residual: {body: relu}", "residual.body: expected a list of layers"},
      {"residual: {body: [relu], post: sigmoid}", "residual.post: expected relu or none, got "
                                                  "'sigmoid'"},
      {"softmax_ce", "layer 1 (softmax_ce) must be the last layer"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    one_layer(y, sizeof y, cases[i].layer);
    bt_err e = load_fail(y, NO_SHAPE, 0);
    assert_has(e.msg, "t.yaml:4:");
    assert_has(e.msg, cases[i].needle);
  }
}

Test(modelfile_errors, top_level) {
  struct {
    const char *yaml, *needle;
  } cases[] = {
      {"", "t.yaml: empty model file; it needs the keys input, classes and layers"},
      {"# only a comment\n", "empty model file"},
      {"- relu\n", "t.yaml:1:1: expected a mapping with keys name, input, classes, layers"},
      {"input: 8x8x1\nclasses: 2\nlayers: [flatten]\nlayer: []\n",
       "t.yaml:4:1: model file: unknown key 'layer'; allowed: name, input, classes, layers"},
      {"classes: 2\nlayers: [flatten]\n", "missing 'input'"},
      {"input: 8x8x1\nlayers: [flatten]\n", "missing 'classes'"},
      {"input: 8x8x1\nclasses: 2\n", "missing 'layers'"},
      {"input: 8x8\nclasses: 2\nlayers: [flatten]\n", "t.yaml:1:8: input: expected HxWxC, e.g. "
                                                      "32x32x3; got '8x8'"},
      {"input: 0x8x1\nclasses: 2\nlayers: [flatten]\n", "each dimension must be 1 to"},
      {"input: 8x8x1\nclasses: 1\nlayers: [flatten]\n", "classes: 1 is out of range; use 2 to"},
      {"input: 8x8x1\nclasses: 2\nlayers: []\n", "t.yaml:3:9: layers: is empty"},
      {"input: 8x8x1\nclasses: 2\nlayers: flatten\n", "layers: expected a list of layers"},
      {"name: \"\"\ninput: 8x8x1\nclasses: 2\nlayers: [flatten]\n", "name: must be 1 to 63"},
      {"input: 8x8x1\nclasses: 2\nlayers: [flatten, dense: {units: 2}]\n---\ninput: 8x8x1\n",
       "t.yaml:4:1: a second YAML document starts here"},
      {"input: 8x8x1\nclasses: 2\nclasses: 3\nlayers: [flatten]\n", "t.yaml:3:1: model file: "
                                                                    "'classes' is given twice"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    bt_err e = load_fail(cases[i].yaml, NO_SHAPE, 0);
    assert_has(e.msg, cases[i].needle);
  }
}

/* A literal classifier width that disagrees with the class count: point at
 * that layer and suggest `classes`. */
Test(modelfile_errors, classes_mismatch) {
  const char *y = "input: 8x8x1\nclasses: 10\nlayers:\n  - flatten\n  - dense: {units: 10}\n"
                  "  - relu\n";
  bt_model m;
  bt_err err = {{0}};
  cr_assert_eq(bt_modelfile_load_string(y, "t.yaml", NO_SHAPE, 0, &m, &err), 0, "%s", err.msg);
  bt_model_free(&m);
  bt_err e = load_fail(y, NO_SHAPE, 5);
  assert_has(e.msg, "t.yaml:5:5: layer 2 (dense) gives 10 class scores but the model has 5 "
                    "classes; write 'units: classes'");
  e = load_fail("input: 2x1x1\nclasses: 3\nlayers: [flatten]\n", NO_SHAPE, 0);
  assert_has(e.msg, "t.yaml:3:10: layer 1 (flatten) gives 2 class scores but the model has 3 "
                    "classes; end the layers with '- dense: {units: classes}'");
}

Test(modelfile_errors, bad_arguments) {
  const char *y = "input: 8x8x1\nclasses: 2\nlayers: [flatten]\n";
  bt_err e = load_fail(y, (bt_shape){8, 8, 0}, 0);
  assert_has(e.msg, "give all three dimensions");
  e = load_fail(y, NO_SHAPE, 1);
  assert_has(e.msg, "give at least 2");
}

/* ---- resolve ----------------------------------------------------------------- */

Test(modelfile, resolve) {
  bt_model m, zoo;
  bt_err err = {{0}};
  bt_shape in = {32, 32, 3};
  cr_assert_eq(bt_model_resolve("resnet18", MODELS_DIR, in, 10, &m, &err), 0, "%s", err.msg);
  cr_assert_eq(bt_zoo_build("resnet18", in, 10, &zoo, &err), 0, "%s", err.msg);
  assert_model_eq(&zoo, &m, "resolve zoo");
  bt_model_free(&zoo);
  bt_model_free(&m);

  /* A path (with '/'), and a bare name found in models_dir. */
  cr_assert_eq(bt_model_resolve(FIX("good_small.yaml"), NULL, NO_SHAPE, 0, &m, &err), 0, "%s",
               err.msg);
  cr_assert_str_eq(m.name, "good_small");
  bt_model_free(&m);
  cr_assert_eq(bt_model_resolve("good_small", FIX_DIR, NO_SHAPE, 0, &m, &err), 0, "%s", err.msg);
  cr_assert_eq(m.n_layers, 14);
  bt_model_free(&m);

  /* A .yaml name is a path even without '/': here a missing file. */
  cr_assert_lt(bt_model_resolve("nothere.yaml", NULL, in, 10, &m, &err), 0);
  assert_has(err.msg, "cannot open model file 'nothere.yaml'");

  cr_assert_lt(bt_model_resolve("resnet50", NULL, in, 10, &m, &err), 0);
  assert_has(err.msg, "unknown model 'resnet50'");
  assert_has(err.msg, "mlp, lenet5, vgg11, vgg16, resnet18, mobilenetv2");
  assert_has(err.msg, "model file path");
  cr_assert_lt(bt_model_resolve("resnet50", FIX_DIR, in, 10, &m, &err), 0);
  assert_has(err.msg, "no " FIX_DIR "/resnet50.yaml");
  cr_assert_eq(m.n_layers, 0);

  cr_assert_lt(bt_model_resolve("lenet5", NULL, NO_SHAPE, 0, &m, &err), 0);
  assert_has(err.msg, "zoo model 'lenet5' is built for the data");
  cr_assert_lt(bt_model_resolve("", NULL, in, 10, &m, &err), 0);
  assert_has(err.msg, "no model given");
}

Test(modelfile, save_to_bad_path) {
  bt_model m;
  bt_err err = {{0}};
  cr_assert_eq(bt_zoo_build("mlp", (bt_shape){28, 28, 1}, 10, &m, &err), 0, "%s", err.msg);
  cr_assert_lt(bt_modelfile_save(&m, "/nonexistent-dir/x.yaml", &err), 0);
  assert_has(err.msg, "cannot create model file '/nonexistent-dir/x.yaml'");
  bt_model_free(&m);
}
