#!/usr/bin/env bash
# Partitioners compared on models x device mixes with `baton plan`: each
# partitioner's plan, its iteration time under the true (emulated) device
# times, and the gap to the oracle plan. Prints one table row per model, mix
# and partitioner, then the worst predicted-vs-oracle gap.
#   experiments/partition/run.sh [in-order|first|all|subset|any]   (baton plan --devices)
# BATON=path picks the binary. CALIBRATIONS=N (default 3): the true times are
# N independent host calibrations, each measured now in a fresh store (one
# calibration of this shared VM moves single layers by 10-20%, enough to
# turn a near-tie between two plans); every calibration gets its own columns
# and the worst gap is over all of them. CALIBRATIONS=0 uses the user's store
# (baton's default, $BATON_CALIBRATION) instead: figures of another session.
# CALIBRATION_DIR=dir keeps the N stores there (and reuses those present), so
# that two binaries or predictors can be compared on the same true times.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/common.sh
source experiments/partition/mixes.sh
baton=${BATON:-./build/baton}
use=${1:-in-order}
n_cal=${CALIBRATIONS:-3}
models=(vgg11 resnet18 mobilenetv2)
partitions=(even params flops profiled predicted oracle)
common=(--set data.name=synthetic --set data.shape=32x32x3 --set data.train_samples=64
  --set data.test_samples=16 --set batch_size=32 --set micro_batches=8 --set schedule=1f1b)
tmp=$calibration_dir
trap 'rm -rf "$calibration_tmp"' EXIT
stores=()
if [ "$n_cal" -eq 0 ]; then
  stores=("${BATON_CALIBRATION:-}")
else
  for c in $(seq 1 "$n_cal"); do stores+=("$tmp/calibration-$c.tsv"); done
fi
declare -A true_s gap ms
for c in "${!stores[@]}"; do
  for model in "${models[@]}"; do
    for m in "${!mixes[@]}"; do
      out=$(BATON_CALIBRATION=${stores[$c]} "$baton" plan "${common[@]}" --set model="$model" \
        --set devices="${mixes[$m]}" --devices "$use")
      sets=$(echo "$out" | sed -n 's/^predictor: sets \([^,]*\), .*/\1/p')
      while read -r name t g s; do
        true_s[$c,$model,$m,$name]=$t gap[$c,$model,$m,$name]=$g ms[$c,$model,$m,$name]=$s
      done < <(echo "$out" | awk '/^(even|params|flops|profiled|predicted|oracle) / {
        n = NF; print $1, $(n - 3), $(n - 2), $(n - 1) }')
    done
  done
done
printf "%-12s %-3s %-10s" model mix partition
for c in "${!stores[@]}"; do printf " %11s %9s" "true s/it" "vs oracle"; done
printf " %10s\n" "search ms"
worst=0
for model in "${models[@]}"; do
  for m in "${!mixes[@]}"; do
    for name in "${partitions[@]}"; do
      printf "%-12s %-3s %-10s" "$model" "$m" "$name"
      for c in "${!stores[@]}"; do
        g=${gap[$c,$model,$m,$name]}
        printf " %11s %9s" "${true_s[$c,$model,$m,$name]}" "$g"
        if [ "$name" = predicted ]; then
          worst=$(max_gap "$worst" "$g")
        fi
      done
      printf " %10s\n" "${ms[0,$model,$m,$name]}"
    done
  done
done
echo "mixes: $(for m in "${!mixes[@]}"; do printf '%s=[%s] ' "$m" "${mixes[$m]}"; done)"
echo "predictor's profiling sets: $sets"
if [ "$n_cal" -eq 0 ]; then
  echo "true times: the user's calibration store"
else
  echo "true times: $n_cal independent host calibrations measured now (one column pair each)"
fi
within=0 total=0
for c in "${!stores[@]}"; do
  for model in "${models[@]}"; do
    for m in "${!mixes[@]}"; do
      g=${gap[$c,$model,$m,predicted]}
      total=$((total + 1))
      within=$((within + $(awk -v b="${g%\%}" 'BEGIN { print (b + 0 <= 5) }')))
    done
  done
done
echo "predicted within 5% of the oracle: $within of $total (mix, calibration) cases"
echo "worst predicted-vs-oracle gap: ${worst}% (target: within 5%)"
awk -v w="$worst" 'BEGIN { exit !(w <= 5) }'
