#!/usr/bin/env bash
# Regenerates the shipped profiling sets of the latency predictor
# (data/predictor/*.h5): every device profile of data/devices, the bare host,
# and three real host variants that the evaluation treats as unseen devices
# (BLIS haswell and generic kernel sets, two BLIS threads).
#   experiments/predictor/profile-all.sh [REPEATS] [RANDOM]
# BATON=path picks the binary (default ./build/baton). About a minute per
# device on a quiet 2-core host; each device is timed afresh (the host noise
# of one set does not leak into another).
set -euo pipefail
cd "$(dirname "$0")/../.."
baton=${BATON:-./build/baton}
repeats=${1:-10}
random=${2:-300}
out=data/predictor
mkdir -p "$out"
export BLIS_NUM_THREADS=1
for f in data/devices/*.yaml; do
  d=$(basename "$f" .yaml)
  "$baton" profile --device "$d" --out "$out/$d.h5" --repeats "$repeats" --random "$random" --quiet
done
"$baton" profile --device host --out "$out/host.h5" --repeats "$repeats" --random "$random" --quiet
"$baton" profile --device host --arch haswell --out "$out/host-haswell.h5" --repeats "$repeats" \
  --random "$random" --quiet
"$baton" profile --device host --arch generic --out "$out/host-generic.h5" --repeats "$repeats" \
  --random "$random" --quiet
BLIS_NUM_THREADS=2 "$baton" profile --device host --threads 2 --out "$out/host-threads2.h5" \
  --repeats "$repeats" --random "$random" --quiet
