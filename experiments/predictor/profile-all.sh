#!/usr/bin/env bash
# Regenerates the shipped profiling sets of the latency predictor
# (data/predictor/*.h5): every device profile of data/devices, the bare host,
# three real host variants that the evaluation treats as unseen devices
# (BLIS haswell and generic kernel sets, two BLIS threads), and a host corpus
# of CORPUS further random layers (another seed) that only the host-time
# model is fitted on (corpus-host.h5; with --nodin it also times each
# convolution's and dense layer's backward without the input gradient, what
# a model's first layer runs), and a corpus of DEEP late-stage layers
# (corpus-host-deep.h5: 256-1024 channels on 1-8 pixels, large dense layers,
# where the weights' bytes set the time; the random corpus never reaches it),
# and a grid of late-stage convolutions around, never on, the zoo models' own
# (corpus-host-grid.h5, GRID=1: 256-1024 channels on 2-8 pixels at every batch
# 1-32, so that the micro-batch sizes plans run are covered), and, with BIG=1
# (default 0), a grid of large convolutions (corpus-host-big.h5: 1e8-5e9
# FLOPs, above the random corpus's 4e8 cap, never the zoo's own; 8.5 min),
# and with BLOCKS=1 (default 0) the other large layers (corpus-host-blocks.h5:
# depthwise convolutions, batch norm, ReLU(6), inverted residuals and basic
# blocks above the random layers' size cap, never the zoo's own; 6 min), and
# with MORE=N (default 0) two more random corpora of N layers each from seeds
# 6 and 8 (corpus-host-2.h5, corpus-host-3.h5; 13-15 min each at 16000),
# and with ODD=N (default 0) N layers of any channel count, kernel and padding
# (corpus-host-odd.h5, --odd: LeNet-like shapes off the random corpus's
# menus, never the zoo's own; 3 min at 4000), and with DENSE=N (default 0) N
# dense layers of any width (corpus-host-dense.h5, --dense: 8-4096 inputs,
# 2-4096 units, batches 1-32, never the zoo's own; 67 s at 4000).
# IN_MODEL=1 (default 0) also times every zoo layer of the device and host
# sets inside its whole model, as the runtime's calibration does
# (--in-model: the sets' *_model datasets; about 15 s more per set).
#   experiments/predictor/profile-all.sh [REPEATS] [RANDOM] [PASSES] [CORPUS] [DEEP] [GRID] [BIG] [BLOCKS] [MORE]
# The sets with every corpus (docs/predictor.md, "More corpora on this
# machine", its last row; not the shipped ones; about 75 min):
#   OUT=DIR experiments/predictor/profile-all.sh 4 700 3 8000 1200 1 1 1 16000
# BATON=path picks the binary (default ./build/baton), OUT=dir the output
# directory (default data/predictor, the default sets). On another CPU, write
# them to OUT=data/predictor/hosts/NAME: baton plan, train and predictor then
# take the sets whose host.h5 was timed on this CPU model with these BLIS
# kernels (docs/predictor.md, "Profiling sets"). Each device is timed afresh (the host
# noise of one set does not leak into another), PASSES times over the whole
# corpus with REPEATS runs per layer and pass, the minimum kept: load bursts
# of a shared host hit runs of consecutive layers, a later pass misses them.
# Profile all sets in one session on a quiet machine: the host-time model
# mixes them, and the speed of a shared VM drifts from day to day (sgemm
# 165 GFLOP/s one day, 100 another on the same kind of machine).
set -euo pipefail
cd "$(dirname "$0")/../.."
baton=${BATON:-./build/baton}
repeats=${1:-4}
random=${2:-700}
passes=${3:-3}
corpus=${4:-8000}
deep=${5:-1200}
grid=${6:-1}
big=${7:-0}
blocks=${8:-0}
more=${9:-0}
odd=${ODD:-0}
dense=${DENSE:-0}
out=${OUT:-data/predictor}
mkdir -p "$out"
export BLIS_NUM_THREADS=1
export BATON_DATA=${BATON_DATA:-$PWD/data}
opts=(--repeats "$repeats" --random "$random" --passes "$passes" --quiet)
if [ "${IN_MODEL:-0}" != 0 ]; then
  opts+=(--in-model)
fi
for f in data/devices/*.yaml; do
  d=$(basename "$f" .yaml)
  "$baton" profile --device "$d" --out "$out/$d.h5" "${opts[@]}"
done
"$baton" profile --device host --out "$out/host.h5" "${opts[@]}"
"$baton" profile --device host --arch haswell --out "$out/host-haswell.h5" "${opts[@]}"
"$baton" profile --device host --arch generic --out "$out/host-generic.h5" "${opts[@]}"
BLIS_NUM_THREADS=2 "$baton" profile --device host --threads 2 --out "$out/host-threads2.h5" \
  "${opts[@]}"
if [ "$corpus" -gt 0 ]; then
  "$baton" profile --device host --seed 2 --random "$corpus" --out "$out/corpus-host.h5" \
    --repeats "$repeats" --passes "$passes" --nodin --quiet
fi
if [ "$deep" -gt 0 ]; then
  "$baton" profile --device host --seed 3 --random 0 --deep "$deep" \
    --out "$out/corpus-host-deep.h5" --repeats "$repeats" --passes "$passes" --nodin --quiet
fi
if [ "$grid" -gt 0 ]; then
  "$baton" profile --device host --seed 4 --random 0 --deep-grid \
    --out "$out/corpus-host-grid.h5" --repeats "$repeats" --passes "$passes" --nodin --quiet
fi
if [ "$big" -gt 0 ]; then
  "$baton" profile --device host --seed 5 --random 0 --big-grid \
    --out "$out/corpus-host-big.h5" --repeats "$repeats" --passes "$passes" --nodin --quiet
fi
if [ "$blocks" -gt 0 ]; then
  "$baton" profile --device host --seed 7 --random 0 --big-blocks \
    --out "$out/corpus-host-blocks.h5" --repeats "$repeats" --passes "$passes" --nodin --quiet
fi
if [ "$more" -gt 0 ]; then
  for s in 6:2 8:3; do
    "$baton" profile --device host --seed "${s%:*}" --random "$more" \
      --out "$out/corpus-host-${s#*:}.h5" --repeats "$repeats" --passes "$passes" --nodin --quiet
  done
fi
if [ "$odd" -gt 0 ]; then
  "$baton" profile --device host --seed 8 --random 0 --odd "$odd" --zoo none \
    --out "$out/corpus-host-odd.h5" --repeats "$repeats" --passes "$passes" --nodin --quiet
fi
if [ "$dense" -gt 0 ]; then
  "$baton" profile --device host --seed 9 --random 0 --dense "$dense" --zoo none \
    --out "$out/corpus-host-dense.h5" --repeats "$repeats" --passes "$passes" --nodin --quiet
fi
