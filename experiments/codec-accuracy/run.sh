#!/usr/bin/env bash
# Codec accuracy study: LeNet-5 on Fashion-MNIST over 4 pipeline stages
# (jetson-nano, rpi4, jetson-xavier-nx, rpi5; 1F1B, 4 micro-batches), 3
# epochs, each codec pair (activations/gradients) with 3 seeds. Run files go
# to runs/codec-accuracy/; the plot and the table come from
# plots/codec_accuracy.py (HDF5 only).
#   experiments/codec-accuracy/run.sh [EPOCHS] [SEEDS]
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/common.sh
baton=${BATON:-./build/baton}
epochs=${1:-3}
seeds=${2:-"1 2 3"}
out=runs/codec-accuracy
mkdir -p "$out"
for pair in none:none q8:q8 sparse-q8:q8-ef q4:q4-ef q2:q2-ef; do
  act=${pair%%:*} grad=${pair##*:}
  for seed in $seeds; do
    file="$out/${act}_${grad}_s${seed}.h5"
    [ -f "$file" ] && continue # resumable
    mpirun -np 4 --oversubscribe "$baton" train experiments/configs/lenet5-fmnist-4dev.yaml \
      --set epochs="$epochs" --set seed="$seed" --set codec.activations="$act" \
      --set codec.gradients="$grad" --set progress=never --set output="$file.part" |
      grep -E "^test accuracy" | sed "s|^|$act/$grad seed $seed: |"
    mv "$file.part" "$file"
  done
done
/usr/bin/python3 plots/codec_accuracy.py "$out"
