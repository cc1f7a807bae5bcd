#!/usr/bin/env bash
# The predicted plan before and after the predictor learns from the
# runtime: for every model and device mix of experiments/partition/run.sh,
# `baton train` with partition predicted and re-planning every EVERY
# iterations (no throttling) on the virtual clock; prints the first plan's
# and the last plan's true iteration time against the oracle plan's (baton
# plan, same calibration).
#   experiments/partition/learned.sh [plan|subset|experiment]   (device_order; default plan)
# BATON=path picks the binary; EVERY (default 5) and ITERS (default 40: a re-plan must pay back its
# migration within the iterations left);
# CALIBRATIONS and CALIBRATION_DIR as in run.sh (default 1 fresh calibration).
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/common.sh
source experiments/partition/mixes.sh
baton=${BATON:-./build/baton}
order=${1:-plan}
every=${EVERY:-5}
iters=${ITERS:-40}
n_cal=${CALIBRATIONS:-1}
case $order in
  plan) use=all ;;
  subset) use=subset ;;
  experiment) use=in-order ;;
  *) echo "learned.sh: device_order '$order': expected plan, subset or experiment" >&2; exit 2 ;;
esac
tmp=$calibration_dir
runs=$(mktemp -d)
trap 'rm -rf "$runs" "$calibration_tmp"' EXIT
# The "(X s with the true device times)" figure of the log line matching $2.
true_time() {
  echo "$1" | awk -v re="$2" '$0 ~ re {
    for (i = 1; i < NF; i++) if ($(i + 1) == "s" && $(i + 2) == "with") {
      gsub(/\(/, "", $i); print $i; exit } }'
}
gap() { awk -v a="$1" -v o="$2" 'BEGIN { printf "%+.1f%%", 100 * (a / o - 1) }'; }
printf "%-12s %-3s %-4s %11s %11s %9s %11s %9s\n" model mix cal "oracle s" "first s" "gap" \
  "learned s" "gap"
worst_first=0 worst_learned=0
for c in $(seq 1 "$n_cal"); do
  store=$tmp/calibration-$c.tsv
  for model in vgg11 resnet18 mobilenetv2; do
    for m in "${!mixes[@]}"; do
      devices=${mixes[$m]}
      np=$(echo "$devices" | tr ',' '\n' | wc -l)
      oracle=$(BATON_CALIBRATION=$store "$baton" plan experiments/configs/vgg11-4dev.yaml \
        --set model="$model" --set devices="$devices" --devices "$use" |
        awk '/^oracle / { print $(NF - 3) }')
      log=$(BATON_CALIBRATION=$store mpirun -np "$np" --oversubscribe "$baton" train \
        experiments/configs/vgg11-4dev.yaml --set model="$model" --set devices="$devices" \
        --set partition=predicted --set device_order="$order" --set replan.every="$every" \
        --set iterations="$iters" --set output="$runs/run.h5" --set progress=never)
      first=$(true_time "$log" '^plan: partition predicted')
      learned=$(true_time "$log" '^plan: the predicted partitioner predicted')
      g1=$(gap "$first" "$oracle") g2=$(gap "$learned" "$oracle")
      printf "%-12s %-3s %-4s %11s %11s %9s %11s %9s\n" "$model" "$m" "$c" "$oracle" "$first" \
        "$g1" "$learned" "$g2"
      worst_first=$(max_gap "$worst_first" "$g1")
      worst_learned=$(max_gap "$worst_learned" "$g2")
    done
  done
done
echo "device_order $order, re-planning every $every iterations, $iters iterations"
echo "worst gap to the oracle: first plan ${worst_first}%, after learning ${worst_learned}%"
