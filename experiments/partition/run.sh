#!/usr/bin/env bash
# Partitioners compared on models x device mixes with `baton plan`: each
# partitioner's plan, its iteration time under the true (emulated) device
# times, and the gap to the oracle plan. Prints one table row per model, mix
# and partitioner, then the worst predicted-vs-oracle gap.
#   experiments/partition/run.sh [in-order|first|all|subset|any]   (baton plan --devices;
#   BATON=path picks the binary)
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/common.sh
baton=${BATON:-./build/baton}
use=${1:-in-order}
mixes=(
  "jetson-nano,rpi4,jetson-xavier-nx,rpi5"
  "rpi3bplus,rpi4,rpi5,x86-laptop"
  "jetson-nano,jetson-tx2,jetson-xavier-nx,jetson-orin-nano"
  "jetson-nano,rpi4,jetson-xavier-nx,rpi5,jetson-tx2,rpi3bplus,jetson-orin-nano,x86-laptop"
)
common=(--set data.name=synthetic --set data.shape=32x32x3 --set data.train_samples=64
  --set data.test_samples=16 --set batch_size=32 --set micro_batches=8 --set schedule=1f1b)
worst=0
printf "%-12s %-3s %-10s %12s %10s %11s\n" model mix partition "true s/it" "vs oracle" "search ms"
for model in vgg11 resnet18 mobilenetv2; do
  for m in "${!mixes[@]}"; do
    out=$("$baton" plan "${common[@]}" --set model="$model" --set devices="${mixes[$m]}" \
      --devices "$use")
    while read -r name true gap ms; do
      printf "%-12s %-3s %-10s %12s %10s %11s\n" "$model" "$m" "$name" "$true" "$gap" "$ms"
      if [ "$name" = predicted ]; then
        worst=$(awk -v a="$worst" -v b="${gap%\%}" 'BEGIN { b += 0; print (b > a ? b : a) }')
      fi
    done < <(echo "$out" | awk '/^(even|params|flops|profiled|predicted|oracle) / {
      n = NF; print $1, $(n - 3), $(n - 2), $(n - 1) }')
  done
done
echo "mixes: $(for m in "${!mixes[@]}"; do printf '%s=[%s] ' "$m" "${mixes[$m]}"; done)"
echo "worst predicted-vs-oracle gap: ${worst}% (target: within 5%)"
awk -v w="$worst" 'BEGIN { exit !(w <= 5) }'
