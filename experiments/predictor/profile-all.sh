#!/usr/bin/env bash
# Regenerates the shipped profiling sets of the latency predictor
# (data/predictor/*.h5): every device profile of data/devices, the bare host,
# and three real host variants that the evaluation treats as unseen devices
# (BLIS haswell and generic kernel sets, two BLIS threads).
#   experiments/predictor/profile-all.sh [REPEATS] [RANDOM] [PASSES]
# BATON=path picks the binary (default ./build/baton), OUT=dir the output
# directory (default data/predictor). Each device is timed afresh (the host
# noise of one set does not leak into another), PASSES times over the whole
# corpus with REPEATS runs per layer and pass, the minimum kept: load bursts
# of a shared host hit runs of consecutive layers, a later pass misses them.
# About 1-2 minutes per device on this 2-core host (22 minutes in all).
set -euo pipefail
cd "$(dirname "$0")/../.."
baton=${BATON:-./build/baton}
repeats=${1:-4}
random=${2:-700}
passes=${3:-3}
out=${OUT:-data/predictor}
mkdir -p "$out"
export BLIS_NUM_THREADS=1
export BATON_DATA=${BATON_DATA:-$PWD/data}
opts=(--repeats "$repeats" --random "$random" --passes "$passes" --quiet)
for f in data/devices/*.yaml; do
  d=$(basename "$f" .yaml)
  "$baton" profile --device "$d" --out "$out/$d.h5" "${opts[@]}"
done
"$baton" profile --device host --out "$out/host.h5" "${opts[@]}"
"$baton" profile --device host --arch haswell --out "$out/host-haswell.h5" "${opts[@]}"
"$baton" profile --device host --arch generic --out "$out/host-generic.h5" "${opts[@]}"
BLIS_NUM_THREADS=2 "$baton" profile --device host --threads 2 --out "$out/host-threads2.h5" \
  "${opts[@]}"
