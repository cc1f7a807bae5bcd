#!/usr/bin/env bash
# Re-planning recovery with each device slowed in turn: experiments/replan/run.sh
# for RANK = 0..7 (each device of the default mix becomes 2x slower from
# iteration 20), with the predicted partitioner and, as the reference of what
# re-planning could reach, the oracle one (true device times). Prints one row
# per device: the share of the lost throughput each recovers.
#   experiments/replan/sweep.sh [ITERATIONS]   (BATON=path picks the binary,
#   CAUTION sets replan.caution, ORDER=plan|subset device_order (default
#   subset, as run.sh), ORACLE=0 skips the oracle runs)
set -uo pipefail
cd "$(dirname "$0")/../.."
iters=${1:-50}
devices=${DEVICES:-jetson-nano,rpi4,jetson-xavier-nx,rpi5,jetson-tx2,rpi3bplus,jetson-orin-nano,x86-laptop}
IFS=, read -r -a names <<<"$devices"
recovered() { sed -n 's/^recovered \([-0-9.]*\)%.*/\1/p' "$1"; }
ceiling() { sed -n 's/^the best plan for the slowed devices.*, \([-0-9.]*\)% of the loss.*/\1/p' "$1"; }
lost() { sed -n 's/^the slowdown took \([-0-9.]*\)%.*/\1/p' "$1"; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf "%-5s %-18s %10s %10s %10s %10s %10s\n" rank device "lost (p)" predicted ceiling "lost (o)" oracle
below=0 counted=0
for r in "${!names[@]}"; do
  RANK=$r DEVICES=$devices experiments/replan/run.sh "$iters" >"$tmp/p" 2>&1
  if [ "${ORACLE:-1}" = 1 ]; then
    RANK=$r DEVICES=$devices PARTITION=oracle experiments/replan/run.sh "$iters" >"$tmp/o" 2>&1
  else
    : >"$tmp/o"
  fi
  p=$(recovered "$tmp/p") o=$(recovered "$tmp/o") lp=$(lost "$tmp/p") lo=$(lost "$tmp/o")
  cp=$(ceiling "$tmp/p")
  printf "%-5s %-18s %9s%% %9s%% %9s%% %9s%% %9s%%\n" "$r" "${names[$r]}" "${lp:--}" "${p:--}" \
    "${cp:--}" "${lo:--}" "${o:--}"
  # A slowdown that costs the static plan under 5% leaves nothing to win back.
  if awk -v l="${lp:-0}" 'BEGIN { exit !(l >= 5) }'; then
    counted=$((counted + 1))
    awk -v p="${p:-0}" 'BEGIN { exit !(p < 80) }' && below=$((below + 1))
  fi
done
echo "lost = the share of the static plan's throughput the slowdown took; predicted, oracle = the share of that the re-planning won back;"
echo "ceiling = the share the best plan for the slowed devices would win back (true times, the schedule's model; against the predicted run's static plan)"
echo "slowdowns that cost at least 5%: $counted of ${#names[@]}; predicted re-planning recovers less than 80% on $below of them"
