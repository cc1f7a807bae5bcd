#!/usr/bin/env bash
# Command-line behaviour of build/baton: help texts, a short real run, and
# one clear error line with a non-zero exit (never a crash) for bad input.
# usage: cli_test.sh BATON FIXTURES_DIR
set -u
baton=$1
fx=$2
fails=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# expect_fail NAME SUBSTRING CMD...: non-zero exit < 128 (no signal), a
# single stderr line containing SUBSTRING.
expect_fail() {
  local name=$1 want=$2
  shift 2
  "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  if [ $rc -eq 0 ] || [ $rc -ge 128 ]; then
    echo "FAIL $name: exit status $rc (want 1 or 2)"; cat "$tmp/err"; fails=$((fails + 1)); return
  fi
  if ! grep -qF -- "$want" "$tmp/err"; then
    echo "FAIL $name: stderr lacks '$want':"; cat "$tmp/err"; fails=$((fails + 1)); return
  fi
  if [ "$(wc -l <"$tmp/err")" -ne 1 ]; then
    echo "FAIL $name: want one error line, got:"; cat "$tmp/err"; fails=$((fails + 1)); return
  fi
  echo "ok   $name: $(cat "$tmp/err")"
}

# expect_ok NAME SUBSTRING CMD...: exit 0 and stdout containing SUBSTRING.
expect_ok() {
  local name=$1 want=$2
  shift 2
  local status=0
  "$@" >"$tmp/out" 2>"$tmp/err" || status=$?
  if [ "$status" -ne 0 ]; then
    echo "FAIL $name: exit status $status"; cat "$tmp/err"; fails=$((fails + 1)); return
  fi
  if ! grep -qF -- "$want" "$tmp/out"; then
    echo "FAIL $name: stdout lacks '$want':"; cat "$tmp/out"; fails=$((fails + 1)); return
  fi
  echo "ok   $name"
}

syn=(--set data.name=synthetic --set data.train_samples=256 --set data.test_samples=64
  --set batch_size=32)

expect_ok help "commands:" "$baton" --help
expect_ok train-help "--help-config" "$baton" train --help
expect_ok help-config "optimizer.momentum" "$baton" train --help-config
expect_ok models "resnet18" "$baton" models
expect_ok models-layers "conv2d" "$baton" models --layers vgg11
expect_ok print-config "lr: 0.05" "$baton" train --print-config --set optimizer.lr=0.05
expect_ok train-synthetic "test accuracy" "$baton" train "${syn[@]}" --set model=mlp \
  --set data.shape=8x8x1 --set epochs=2
expect_ok train-microbatches "test accuracy" "$baton" train "${syn[@]}" --set model=lenet5 \
  --set data.shape=32x32x3 --set micro_batches=4 --set iterations=3

expect_ok models-export "conv2d: {out: 64" "$baton" models --export vgg11
"$baton" models --export resnet18 >"$tmp/r18.yaml" 2>/dev/null
expect_ok models-file "residual" "$baton" models --layers "$tmp/r18.yaml"
expect_ok train-model-file "test accuracy" "$baton" train "${syn[@]}" --set iterations=2 \
  --set data.shape=28x28x1 --set model="$fx/../../../data/models/lenet5.yaml"
printf 'input: 28x28x1\nclasses: 10\nlayers:\n  - conv2d: {out: 4, kernel: 31}\n  - dense: {units: 10}\n' \
  >"$tmp/shrink.yaml"
expect_fail model-file-shrinks "shrink.yaml:4" "$baton" train "${syn[@]}" --set data.shape=28x28x1 \
  --set model="$tmp/shrink.yaml"
printf 'input: 28x28x1\nclasses: 10\nlayers:\n  - convolution: {out: 4}\n' >"$tmp/kind.yaml"
expect_fail model-file-unknown-kind "convolution" "$baton" models --layers "$tmp/kind.yaml"

expect_ok train-run-file "run file: $tmp/sp.h5" "$baton" train "${syn[@]}" --set model=mlp \
  --set data.shape=8x8x1 --set iterations=3 --set output="$tmp/sp.h5"
expect_ok report-single-process "3 train rows" "$baton" report "$tmp/sp.h5"
expect_ok report-test-accuracy "test: epoch 1 (after 3 iterations)" "$baton" report "$tmp/sp.h5"

expect_fail unknown-command "unknown command" "$baton" frobnicate
expect_fail missing-file "no-such.yaml" "$baton" train "$tmp/no-such.yaml"
expect_fail malformed-yaml "malformed.yaml:" "$baton" train "$fx/malformed.yaml"
expect_fail unknown-key "unknown-key.yaml:3:3" "$baton" train "$fx/unknown-key.yaml"
expect_fail bad-set "optimizer.lr" "$baton" train --set optimizer.lr=fast
expect_fail set-without-value "--set needs" "$baton" train --set
expect_fail unknown-model "unknown model 'resnet1000'" "$baton" train "${syn[@]}" \
  --set model=resnet1000
expect_fail shrinking-conv "gives no output pixel" "$baton" train "${syn[@]}" \
  --set model=lenet5 --set data.shape=8x8x1
expect_fail absent-dataset "apt-get install dataset-fashion-mnist" "$baton" train \
  --set data.path="$tmp/nowhere"
expect_fail microbatch-divides "micro_batches" "$baton" train --set batch_size=64 \
  --set micro_batches=5
expect_fail bench-no-model "needs --model" "$baton" bench step
expect_fail bench-bad-model "unknown model" "$baton" bench step --model nope
expect_fail bench-bad-batch "--batch" "$baton" bench step --model mlp --batch 0
expect_fail bench-plan-bad-bounds "--bounds" "$baton" bench plan --bounds best
expect_fail bench-plan-bad-option "unknown option" "$baton" bench plan --nodes 5

# Small profiling sets of this host (data/predictor/hosts/NAME, found by the
# host key of their host.h5; taken over the default sets) for the plan checks:
# fitting the predictor on the shipped sets takes half a minute under ASan.
src_data=${BATON_DATA:-$(dirname "$baton")/../data}
hd=$tmp/data
mkdir -p "$hd/predictor/hosts/here"
ln -s "$(cd "$src_data" && pwd)/models" "$hd/models"
ln -s "$(cd "$src_data" && pwd)/devices" "$hd/devices"
for f in "$src_data"/predictor/*.h5; do ln -s "$(cd "$(dirname "$f")" && pwd)/$(basename "$f")" "$hd/predictor/"; done
# lenet5's layers only (--zoo): all six models' take minutes under ASan.
BATON_DATA=$hd "$baton" profile --device host --random 5 --repeats 1 --quiet --zoo lenet5 \
  --out "$hd/predictor/hosts/here/host.h5" >/dev/null
BATON_DATA=$hd "$baton" profile --device rpi4 --random 5 --repeats 1 --quiet --zoo lenet5 \
  --out "$hd/predictor/hosts/here/rpi4.h5" >/dev/null
expect_fail profile-bad-zoo "zoo model 'vgg' is not one the corpus holds" "$baton" profile \
  --device host --zoo lenet5,vgg --out "$tmp/never.h5"

# baton plan: the plan of an experiment and every partitioner side by side.
export BATON_CALIBRATION="$tmp/calibration.tsv"
export BATON_PREDICTOR_CACHE="$tmp/predictor-cache"
psyn=(--set data.name=synthetic --set data.train_samples=64 --set data.test_samples=16
  --set batch_size=16 --set micro_batches=4 --set model=lenet5)
export BATON_DATA=$hd
expect_ok plan "oracle" "$baton" plan "${psyn[@]}" --set devices=rpi4,jetson-orin-nano,rpi3bplus
for p in even params flops profiled predicted; do
  grep -q "^$p " "$tmp/out" || { echo "FAIL plan: no '$p' row"; fails=$((fails + 1)); }
done
grep -qE "^oracle .* \+0\.0%" "$tmp/out" || { echo "FAIL plan: oracle row not +0.0%"; fails=$((fails + 1)); }
# Probing is timed on the slowest device (the devices probe at once): three
# devices cost what their slowest, rpi3bplus, costs alone, not the sum.
probe_3=$(awk '/^predicted / { print $NF }' "$tmp/out")
expect_ok plan-one-device "predicted" "$baton" plan "${psyn[@]}" --set devices=rpi3bplus
probe_1=$(awk '/^predicted / { print $NF }' "$tmp/out")
[ -n "$probe_1" ] && [ "$probe_1" = "$probe_3" ] ||
  { echo "FAIL plan: probing on 3 devices '$probe_3' s, on the slowest alone '$probe_1' s"; fails=$((fails + 1)); }
expect_ok plan-any-order "devices" "$baton" plan "${psyn[@]}" --devices any \
  --set devices=rpi4,jetson-orin-nano,rpi3bplus --set partition=oracle
expect_fail plan-no-devices "names no devices" "$baton" plan "${psyn[@]}"
expect_fail plan-bad-cut "cut 2 (3) must be greater" "$baton" plan "${psyn[@]}" \
  --set devices=rpi4,rpi4,rpi5 --set partition=explicit --set cuts=5,3
expect_fail plan-bad-devices-flag "--devices takes" "$baton" plan "${psyn[@]}" --devices some
expect_fail plan-no-fit "smallest memory scale" "$baton" plan "${psyn[@]}" \
  --set devices=rpi4,rpi5 --set memory_scale=0.000001

expect_ok plan-this-host-sets "hosts/here (this host's sets)" "$baton" plan \
  "${psyn[@]}" --set devices=rpi4,rpi5 --set partition=predicted
# The fit cache: a second plan on the same sets loads the predictor and plans
# exactly as the first; an unusable cache file is refitted; new sets, a new
# key; no cache or one that cannot be written still plans.
pcache=(plan "${psyn[@]}" --set devices=rpi4,rpi5,jetson-nano --devices any)
plan_rows() { grep -E '^(stage|iteration|even|params|flops|profiled|predicted|oracle) ' "$tmp/out" |
  awk '{ $(NF - 1) = ""; print }'; } # without the search's milliseconds
BATON_PREDICTOR_CACHE=$tmp/pc expect_ok plan-cache-miss "fitted and cached in" "$baton" "${pcache[@]}"
plan_rows >"$tmp/rows1"
first_key=$(ls "$tmp"/pc/predictor-*.txt)
BATON_PREDICTOR_CACHE=$tmp/pc expect_ok plan-cache-hit "loaded from the cache in" "$baton" "${pcache[@]}"
plan_rows >"$tmp/rows2"
cmp -s "$tmp/rows1" "$tmp/rows2" && [ -s "$tmp/rows1" ] && echo "ok   plan-cache-same-plan" ||
  { echo "FAIL plan-cache-same-plan:"; diff "$tmp/rows1" "$tmp/rows2"; fails=$((fails + 1)); }
for f in "$tmp"/pc/predictor-*.txt; do head -c 3000 "$f" >"$f.cut" && mv "$f.cut" "$f"; done
BATON_PREDICTOR_CACHE=$tmp/pc expect_ok plan-cache-corrupt "was unusable (not a valid predictor file), refitted" "$baton" "${pcache[@]}"
plan_rows >"$tmp/rows3"
cmp -s "$tmp/rows1" "$tmp/rows3" && echo "ok   plan-cache-corrupt-same-plan" ||
  { echo "FAIL plan-cache-corrupt-same-plan:"; diff "$tmp/rows1" "$tmp/rows3"; fails=$((fails + 1)); }
cp "$hd/predictor/hosts/here/rpi4.h5" "$hd/predictor/hosts/here/rpi4-copy.h5"
BATON_PREDICTOR_CACHE=$tmp/pc expect_ok plan-cache-new-sets "fitted and cached in" "$baton" "${pcache[@]}"
[ "$(ls "$tmp"/pc/predictor-*.txt | wc -l)" -eq 2 ] && echo "ok   plan-cache-two-keys" ||
  { echo "FAIL plan-cache-two-keys:"; ls "$tmp/pc"; fails=$((fails + 1)); }
rm "$hd/predictor/hosts/here/rpi4-copy.h5"
# Pruning: a write keeps the 16 most recently used predictors (a hit counts
# as a use) and drops temporary files of dead runs, nothing else.
for i in $(seq 10 29); do
  touch -d "2 days ago + $i minutes" "$tmp/pc/predictor-$(printf '%032d' "$i").txt"
done
touch -d "3 days ago" "$first_key" "$tmp/pc/predictor-$(printf '%032d' 1).123.tmp"
touch "$tmp/pc/predictor-$(printf '%032d' 2).456.tmp" "$tmp/pc/notes.txt"
BATON_PREDICTOR_CACHE=$tmp/pc expect_ok plan-cache-hit-again "loaded from the cache in" "$baton" "${pcache[@]}"
cp "$hd/predictor/hosts/here/rpi4.h5" "$hd/predictor/hosts/here/rpi4-copy2.h5"
BATON_PREDICTOR_CACHE=$tmp/pc expect_ok plan-cache-prune-write "fitted and cached in" "$baton" "${pcache[@]}"
kept=$(ls "$tmp"/pc/predictor-*.txt | wc -l)
[ "$kept" -eq 16 ] && [ -f "$first_key" ] && [ -f "$tmp/pc/notes.txt" ] &&
  [ ! -e "$tmp/pc/predictor-$(printf '%032d' 10).txt" ] &&
  [ -e "$tmp/pc/predictor-$(printf '%032d' 29).txt" ] &&
  [ ! -e "$tmp/pc/predictor-$(printf '%032d' 1).123.tmp" ] &&
  [ -e "$tmp/pc/predictor-$(printf '%032d' 2).456.tmp" ] && echo "ok   plan-cache-pruned" ||
  { echo "FAIL plan-cache-pruned ($kept kept):"; ls -l "$tmp/pc"; fails=$((fails + 1)); }
rm "$hd/predictor/hosts/here/rpi4-copy2.h5"
BATON_PREDICTOR_CACHE=0 expect_ok plan-cache-off "fitted (cache off) in" "$baton" "${pcache[@]}"
: >"$tmp/not-a-dir"
BATON_PREDICTOR_CACHE=$tmp/not-a-dir expect_ok plan-cache-unwritable "could not write the predictor cache in $tmp/not-a-dir" "$baton" "${pcache[@]}"
expect_ok predictor-this-host-sets "hosts/here (timed on this host)" "$baton" \
  predictor fit --out "$tmp/pred.txt"
# Small sets leave kind groups unfitted; their file still reads back.
expect_ok predictor-small-sets-file-reads "rpi4" "$baton" predictor predict \
  --predictor "$tmp/pred.txt" --device rpi4 --model lenet5
expect_fail predictor-dump-bad-path "--dump $tmp/no/such/dir.csv: cannot open" "$baton" \
  predictor eval --data "$hd/predictor/hosts/here" --dump "$tmp/no/such/dir.csv"
expect_fail predictor-dump-not-fit "--dump is an option of 'baton predictor eval' only" \
  "$baton" predictor fit --out "$tmp/p2.txt" --dump "$tmp/d.csv"
rm -rf "$hd/predictor/hosts"
expect_ok plan-default-sets "predictor: sets $hd/predictor," "$baton" plan \
  "${psyn[@]}" --set devices=rpi4,rpi5 --set partition=predicted

[ $fails -eq 0 ] && echo "all CLI checks passed" || echo "$fails CLI check(s) failed"
exit $((fails > 0))
