/* modelfile: models described in YAML files instead of C builders.
 *
 * A model file lists the layers of one model for one input size:
 *
 *   # comments are free; the writer adds each layer's output shape and size
 *   name: lenet5            # optional; default: the file name without .yaml
 *   input: 32x32x3          # HxWxC the layers were designed for (required)
 *   classes: 10             # class count the layers were designed for (required)
 *   layers:
 *     - conv2d: {out: 6, kernel: 5, stride: 1, pad: 0}
 *     - relu
 *     - maxpool: {kernel: 2, stride: 2}
 *     - flatten
 *     - dense: {units: 120}
 *     - dropout: {p: 0.5}
 *     - residual:
 *         post: relu        # relu | none (default none): applied after the sum
 *         body:             # one or more layers
 *           - conv2d: {out: 64, kernel: 3, pad: 1}
 *           - batchnorm
 *         shortcut:         # omitted, empty or [] = identity
 *           - conv2d: {out: 64, kernel: 1}
 *     - dense: {units: classes}
 *     - softmax_ce          # optional: appended when missing
 *
 * Each entry is a layer kind (the names of bt_layer_kind_name()), alone or as
 * the single key of a mapping of parameters:
 *
 *   conv2d          out (required), kernel (required), stride (1), pad (0)
 *   dwconv2d        kernel (required), stride (1), pad (0)
 *   dense           units (required)
 *   maxpool/avgpool kernel (required), stride (= kernel), pad (0)
 *   dropout         p (0.5), in [0, 1)
 *   residual        body (required), shortcut ([]), post (none)
 *   relu relu6 global_avgpool batchnorm flatten softmax_ce: no parameters
 *
 * kernel is an integer (square) or [height, width]. `out` and `units` also
 * accept the word `classes`: the class count the model is loaded for, so one
 * file serves datasets with different class counts (the writer uses it for
 * the layer that produces the class scores).
 *
 * Reading is strict: an unknown kind or parameter, a wrong type (including a
 * quoted number), an out-of-range value or a missing required parameter is an
 * error "file:line:col: what; how to fix" listing the allowed names. Shapes are
 * then checked layer by layer at the input the model is loaded for, and a
 * shape error points at the offending layer's line. */
#ifndef BATON_MODELFILE_H
#define BATON_MODELFILE_H

#include <stdio.h>

#include "baton/err.h"
#include "baton/layers.h"
#include "baton/model.h"

/* Loads and finalizes the model in `path` into `m` (release with
 * bt_model_free). `input` {0, 0, 0} and `classes` 0 mean the file's own.
 * Another input may still fit the layers (e.g. a fully convolutional model),
 * or fail with a shape error that names the layer and the file's input. On
 * failure `m` is left empty (safe to bt_model_free). */
int bt_modelfile_load(const char *path, bt_shape input, int classes, bt_model *m, bt_err *err);

/* The same from YAML text; `name_for_errors` (NULL: "<string>") prefixes
 * messages and gives the default model name. */
int bt_modelfile_load_string(const char *yaml, const char *name_for_errors, bt_shape input,
                             int classes, bt_model *m, bt_err *err);

/* Writes `m` as a model file that loads back to the same model (same layers,
 * hyper-parameters, shapes and sizes; layer names are not kept: they are
 * regenerated on load). When `m` is finalized, comments give each layer's
 * output shape and parameter count. Fails on an invalid layer kind or a
 * write error. */
int bt_modelfile_write(const bt_model *m, FILE *f, bt_err *err);

/* bt_modelfile_write to a new file at `path` (replaced if it exists). */
int bt_modelfile_save(const bt_model *m, const char *path, bt_err *err);

/* Builds the model a user named with `spec` (the `model` setting):
 *   - a zoo name (bt_zoo_names)                  -> bt_zoo_build(spec, input, classes)
 *   - a path ending in .yaml/.yml or with a '/'  -> bt_modelfile_load(spec, ...), as given
 *   - another bare name, when `models_dir` (may be NULL) holds <spec>.yaml -> that file
 * otherwise an error listing the zoo. Zoo models adapt to `input`, so they
 * need it and `classes` (non-zero); files use their own when those are 0. */
int bt_model_resolve(const char *spec, const char *models_dir, bt_shape input, int classes,
                     bt_model *m, bt_err *err);

#endif
