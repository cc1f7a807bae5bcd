#!/usr/bin/env bash
# `baton train` under mpirun: launch checks, device and memory checks, plan
# errors, the three clocks, and a rank that fails mid-run (all ranks stop
# with a message naming it; the run file keeps every finished iteration).
# usage: mpi_cli_test.sh BATON
set -u
baton=$1
fails=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export BATON_CALIBRATION="$tmp/calibration.tsv" # keep the tests out of ~/.cache
export BATON_PREDICTOR_CACHE="$tmp/predictor-cache"
run() { timeout 120 "$@" >"$tmp/out" 2>"$tmp/err"; }
mpi() { local n=$1; shift; run mpirun -np "$n" --oversubscribe "$@"; }

expect_fail() { # NAME SUBSTRING (after a run)
  local rc=$1 name=$2 want=$3
  if [ "$rc" -eq 0 ] || [ "$rc" -eq 124 ] || ! grep -qF -- "$want" "$tmp/err"; then
    echo "FAIL $name (exit $rc): want '$want' on stderr:"; cat "$tmp/err"; fails=$((fails + 1))
  else
    echo "ok   $name: $(grep -F -- "$want" "$tmp/err" | head -n 1)"
  fi
}
expect_ok() { # NAME SUBSTRING
  local rc=$1 name=$2 want=$3
  if [ "$rc" -ne 0 ] || ! grep -qF -- "$want" "$tmp/out"; then
    echo "FAIL $name (exit $rc): want '$want' on stdout:"; cat "$tmp/out" "$tmp/err"
    fails=$((fails + 1))
  else
    echo "ok   $name"
  fi
}

# The runtime checks use fixed cuts (partition even); the planner has its own below.
syn=(--set data.name=synthetic --set data.train_samples=128 --set data.test_samples=32
  --set batch_size=16 --set micro_batches=4 --set model=lenet5 --set iterations=6
  --set partition=even)
two=(--set devices=rpi4,jetson-nano)

run "$baton" train "${syn[@]}" "${two[@]}"
expect_fail $? no-mpirun "mpirun -np 2"
mpi 3 "$baton" train "${syn[@]}" "${two[@]}"
expect_fail $? world-size "names 2 devices but mpirun started 3 ranks"
mpi 2 "$baton" train "${syn[@]}"
expect_fail $? no-devices "names no devices"
mpi 2 "$baton" train "${syn[@]}" --set devices=rpi4,jetson-nano-9000
expect_fail $? unknown-device "jetson-nano-9000"
mpi 2 "$baton" train "${syn[@]}" "${two[@]}" --set memory_scale=0.00001
expect_fail $? memory "rank"
grep -qiE "capacity|MiB|bytes" "$tmp/err" || { echo "FAIL memory: no sizes"; fails=$((fails + 1)); }
mpi 2 "$baton" train "${syn[@]}" "${two[@]}" --set partition=explicit --set cuts=40
expect_fail $? cut-range "cut 1 ('40')"
mpi 3 "$baton" train "${syn[@]}" --set devices=rpi4,rpi4,rpi5 --set partition=explicit \
  --set cuts=5,3
expect_fail $? cut-order "cut 2 (3) must be greater"

mpi 2 "$baton" train "${syn[@]}" "${two[@]}" --set links.pairs=0-1:fast:5
expect_fail $? bad-link-pair "links.pairs entry '0-1:fast:5'"
# A 1 Mbit/s, 50 ms link from rank 0 to 1 must slow the emulated iteration.
mpi 2 "$baton" train "${syn[@]}" "${two[@]}" --set progress=never
base=$(sed -n 's/^pipeline: \([0-9.]*\) s.*/\1/p' "$tmp/out")
mpi 2 "$baton" train "${syn[@]}" "${two[@]}" --set progress=never --set links.pairs=0-1:1:50
slow=$(sed -n 's/^pipeline: \([0-9.]*\) s.*/\1/p' "$tmp/out")
if awk -v a="$base" -v b="$slow" 'BEGIN { exit !(b > a + 0.2) }'; then
  echo "ok   slow-pair-link: $base -> $slow s/iteration"
else
  echo "FAIL slow-pair-link: $base -> $slow s/iteration"; fails=$((fails + 1))
fi

mpi 2 "$baton" train "${syn[@]}" "${two[@]}" --set codec.gradients=q9-ef
expect_fail $? bad-codec "q9"
# Compressed messages: fewer bytes on the wire than uncompressed ones.
mpi 2 "$baton" train "${syn[@]}" "${two[@]}" --set codec.activations=sparse-q8 \
  --set codec.gradients=q4-ef --set output="$tmp/codec.h5"
expect_ok $? codec-run "test accuracy"
"$baton" trace "$tmp/codec.h5" -o "$tmp/codec.json" >"$tmp/out" 2>"$tmp/err" &&
  cp "$tmp/codec.json" "$tmp/out"
expect_ok $? codec-timeline-has-encode '"encode"'

mpi 2 "$baton" train "${syn[@]}" "${two[@]}" --set codec.boundaries=2=q4/q4
expect_fail $? bad-boundary "codec.boundaries entry '2=q4/q4'"
mpi 3 "$baton" train "${syn[@]}" --set devices=rpi4,rpi5,rpi4 \
  --set codec.boundaries=1=q4/q8-ef,2=-/fp16
expect_ok $? codec-per-boundary "test accuracy"

for clock in virtual wall none; do
  mpi 2 "$baton" train "${syn[@]}" "${two[@]}" --set clock=$clock --set schedule=gpipe \
    --set output="$tmp/$clock.h5"
  expect_ok $? clock-$clock "test accuracy"
done
"$baton" report "$tmp/virtual.h5" >"$tmp/out" 2>"$tmp/err"
expect_ok $? report-virtual "6 train rows"
grep -q "test: epoch 1 (after 6 iterations)" "$tmp/out" || {
  echo "FAIL report-virtual: no test evaluation in the run file"; fails=$((fails + 1)); }

# Calibration store: a second run takes every layer from the store and
# reports the same emulated iteration time to the last digit.
emulated() { sed -n 's/^pipeline: \([0-9.]*\) s\/iteration.*/\1/p' "$tmp/out"; }
mpi 2 "$baton" train "${syn[@]}" "${two[@]}" --set calibration="$tmp/store.tsv"
expect_ok $? calibration-fills-store "calibration: 0 layers from the store $tmp/store.tsv"
first=$(emulated)
mpi 2 "$baton" train "${syn[@]}" "${two[@]}" --set calibration="$tmp/store.tsv"
expect_ok $? calibration-reuses-store "0 measured now and added"
second=$(emulated)
if [ -n "$first" ] && [ "$first" = "$second" ]; then
  echo "ok   calibration-reproducible: $first s/iteration twice"
else
  echo "FAIL calibration-reproducible: '$first' then '$second'"; fails=$((fails + 1))
fi
mpi 2 "$baton" train "${syn[@]}" "${two[@]}" --set calibration=fresh
expect_ok $? calibration-fresh "measured now (fresh; nothing stored)"
printf 'not a calibration line\n' >"$tmp/bad.tsv"
mpi 2 "$baton" train "${syn[@]}" "${two[@]}" --set calibration="$tmp/bad.tsv"
expect_fail $? calibration-corrupt "$tmp/bad.tsv:1: not 'HOST<tab>KEY<tab>SECONDS<tab>SECONDS'"

# The planner (default partition: predicted, device_order: plan): rank 0
# plans, the ranks take their stages in the planned device order, and the
# plan's true-time model agrees with the measured run (within 1%: the cost
# model charges the codec and the optimizer step as the runtime does; it
# read -0.3% before those terms, -0.1% with them).
mpi 3 "$baton" train "${syn[@]}" --set devices=rpi4,jetson-orin-nano,rpi3bplus \
  --set partition=predicted --set progress=never --set output="$tmp/planned.h5"
expect_ok $? plan-predicted "plan: partition predicted, stages on ["
grep -q "^plan: predictor fitted and cached on the sets " "$tmp/out" ||
  { echo "FAIL plan-cache-miss: no 'fitted and cached' line"; cat "$tmp/out"; fails=$((fails + 1)); }
gap=$(sed -n 's/.*s with the true device times (\([-+0-9.]*\)%).*/\1/p' "$tmp/out")
if [ -n "$gap" ] && awk -v g="$gap" 'BEGIN { exit !(g >= -1 && g <= 1) }'; then
  echo "ok   plan-true-model: planned vs measured iteration ${gap}%"
else
  echo "FAIL plan-true-model: '$gap'"; cat "$tmp/out"; fails=$((fails + 1))
fi
"$baton" report "$tmp/planned.h5" >"$tmp/out" 2>"$tmp/err"
expect_ok $? plan-logged "predicted"
grep -q "^  predictor: sets .*; fitted and cached in .*; cache file $tmp/predictor-cache/predictor-" \
  "$tmp/out" || { echo "FAIL plan-logged-predictor: no predictor line"; cat "$tmp/out"; fails=$((fails + 1)); }
mpi 2 "$baton" train "${syn[@]}" "${two[@]}" --set partition=oracle --set memory_scale=0.00001
expect_fail $? plan-memory "the smallest memory scale with which some plan fits is"
# Real hardware: the ranks' own probes, raw heads; no emulated true times.
mpi 2 "$baton" train "${syn[@]}" "${two[@]}" --set partition=predicted --set clock=none
expect_ok $? plan-clock-none "plan: the predicted partitioner needs"
mpi 2 "$baton" train "${syn[@]}" "${two[@]}" --set partition=oracle --set clock=none
expect_fail $? plan-oracle-needs-emulation "which real hardware (clock none) does not have"
mpi 2 "$baton" train "${syn[@]}" "${two[@]}" --set partition=profiled --set clock=none
expect_ok $? plan-profiled-clock-none "plan: partition profiled, stages on ["

# Re-planning: rank 1 becomes 50x slower at iteration 4 (so that any build,
# sanitized too, finds a better plan); the oracle re-cuts
# after iteration 4 and the weights, momentum and state migrate. The losses
# equal those of the run that keeps its first plan (1F1B sums in the
# single-process order whatever the cuts, so they match to the last digit).
rp=(--set data.train_samples=256 --set iterations=10 --set devices=rpi4,jetson-orin-nano,rpi3bplus
  --set partition=oracle --set throttle=1:4:50 --set progress=never)
mpi 3 "$baton" train "${syn[@]}" "${rp[@]}" --set replan.every=0 --set output="$tmp/static.h5"
expect_ok $? replan-reference "test accuracy"
mpi 3 "$baton" train "${syn[@]}" "${rp[@]}" --set replan.every=2 --set output="$tmp/replan.h5"
expect_ok $? replan-happens "re-plan after iteration 4: cuts"
losses() { "$baton" report "$1" --per-iteration | awk '$1 ~ /^[0-9]+$/ && NF == 5 { print $1, $2 }'; }
if [ "$(losses "$tmp/static.h5" | wc -l)" -eq 10 ] &&
  [ "$(losses "$tmp/static.h5")" = "$(losses "$tmp/replan.h5")" ]; then
  echo "ok   replan-same-losses: 10 iterations"
else
  echo "FAIL replan-same-losses:"; paste <(losses "$tmp/static.h5") <(losses "$tmp/replan.h5")
  fails=$((fails + 1))
fi
# Stages in another device order: the same losses as the experiment's order.
mpi 3 "$baton" train "${syn[@]}" "${rp[@]}" --set replan.every=0 --set partition=even \
  --set output="$tmp/even.h5"
if [ "$(losses "$tmp/even.h5")" = "$(losses "$tmp/static.h5")" ]; then
  echo "ok   device-order-same-losses"
else
  echo "FAIL device-order-same-losses:"; paste <(losses "$tmp/even.h5") <(losses "$tmp/static.h5")
  fails=$((fails + 1))
fi
"$baton" report "$tmp/replan.h5" >"$tmp/out" 2>"$tmp/err"
expect_ok $? replan-logged "plan 1 from iteration 4 (oracle)"
# A re-plan that reorders the stages (device_order: plan): rpi5 (stage 2)
# becomes 50x slower and swaps places with rpi4. The processes take new
# stages in a new communicator; the losses still equal the static run's and
# the run file names each stage's process. The plan puts the Orin Nano
# (world rank 1) first, so the lead (world rank 0: planner, run file) runs
# another stage from the start.
# The host times come from a fixed store (this host's key, times measured
# once on a release build) so that the plans, and so the order, are the same
# in every build: a sanitized build's own times put rpi5 first.
# KEY<tab>FWD<tab>BWD seconds (the host's rates: GFLOP/s, GB/s)
cat >"$tmp/fixed-times.tsv" <<'TIMES'
#host-rates	95.8	38.4
b4 nodin conv2d 28x28x1>28x28x6 u6 k5x5 s1 p2	3.07e-05	3.85e-05
b4 relu 28x28x6>28x28x6 u0 k1x1 s1 p0	5.98e-06	7.24e-06
b4 maxpool 28x28x6>14x14x6 u0 k2x2 s2 p0	2.19e-05	6.32e-06
b4 conv2d 14x14x6>10x10x16 u16 k5x5 s1 p0	2.03e-05	1.20e-04
b4 relu 10x10x16>10x10x16 u0 k1x1 s1 p0	2.22e-06	2.59e-06
b4 maxpool 10x10x16>5x5x16 u0 k2x2 s2 p0	5.01e-06	2.71e-06
b4 flatten 5x5x16>1x1x400 u0 k1x1 s1 p0	8.84e-07	1.03e-06
b4 dense 1x1x400>1x1x120 u120 k1x1 s1 p0	3.42e-05	6.04e-05
b4 relu 1x1x120>1x1x120 u0 k1x1 s1 p0	7.89e-07	7.08e-07
b4 dense 1x1x120>1x1x84 u84 k1x1 s1 p0	1.16e-05	1.94e-05
b4 relu 1x1x84>1x1x84 u0 k1x1 s1 p0	7.02e-07	6.76e-07
b4 dense 1x1x84>1x1x10 u10 k1x1 s1 p0	5.39e-06	9.07e-06
b4 softmax_ce 1x1x10>1x1x10 u0 k1x1 s1 p0	1.91e-06	6.80e-07
TIMES
# The store the earlier runs filled holds these layers under this host's key.
awk -F'\t' -v OFS='\t' 'NR == FNR { t[$1] = $2 OFS $3; next } ($2 in t) { print $1, $2, t[$2] }' \
  "$tmp/fixed-times.tsv" "$tmp/calibration.tsv" >"$tmp/fixed.tsv"
ro=(--set data.train_samples=256 --set iterations=10 --set devices=rpi4,jetson-orin-nano,rpi3bplus,rpi5
  --set partition=oracle --set throttle=3:4:50 --set progress=never --set calibration="$tmp/fixed.tsv")
mpi 4 "$baton" train "${syn[@]}" "${ro[@]}" --set replan.every=0 --set output="$tmp/ro-static.h5"
expect_ok $? reorder-reference "0 measured now and added" # all times fixed
mpi 4 "$baton" train "${syn[@]}" "${ro[@]}" --set replan.every=2 --set output="$tmp/ro.h5"
expect_ok $? replan-reorders "-> [" # the cuts
start=$(sed -n 's/^plan: partition oracle, stages on \[\([^]]*\)\].*/\1/p' "$tmp/out")
order=$(sed -n 's/^re-plan after iteration 4: .*, stages on \[\([^]]*\)\].*/\1/p' "$tmp/out")
if [ -n "$start" ] && [ -n "$order" ] && [ "$order" != "$start" ]; then
  echo "ok   reorder-order: [$start] -> [$order]"
else
  echo "FAIL reorder-order: [$start] -> [$order]"; cat "$tmp/out"; fails=$((fails + 1))
fi
if [ "$(losses "$tmp/ro-static.h5" | wc -l)" -eq 10 ] &&
  [ "$(losses "$tmp/ro-static.h5")" = "$(losses "$tmp/ro.h5")" ]; then
  echo "ok   reorder-same-losses: 10 iterations"
else
  echo "FAIL reorder-same-losses:"; paste <(losses "$tmp/ro-static.h5") <(losses "$tmp/ro.h5")
  fails=$((fails + 1))
fi
"$baton" report "$tmp/ro.h5" >"$tmp/out" 2>"$tmp/err"
ranks=$(grep "^plan 1 from iteration 4" "$tmp/out" | grep -o "on rank [0-9]" | awk '{ printf "%s", $3 }')
if [ ${#ranks} -eq 4 ] && [ "$ranks" != 0123 ]; then
  echo "ok   reorder-logged: plan 1 runs stages 0..3 on ranks $ranks"
else
  echo "FAIL reorder-logged: '$ranks'"; cat "$tmp/out"; fails=$((fails + 1))
fi
# The first stage's device slows down (the Orin Nano, 50x): the re-plan
# moves stage 0 to another process; the losses are still the static run's.
mpi 4 "$baton" train "${syn[@]}" "${ro[@]}" --set throttle=1:4:50 --set replan.every=0 \
  --set output="$tmp/r0-static.h5"
expect_ok $? first-stage-reference "test accuracy"
mpi 4 "$baton" train "${syn[@]}" "${ro[@]}" --set throttle=1:4:50 --set replan.every=2 \
  --set output="$tmp/r0.h5"
expect_ok $? replan-moves-first-stage "re-plan after iteration 4"
first=$(sed -n 's/^re-plan after iteration 4: .*, stages on \[\([^],]*\).*/\1/p' "$tmp/out")
if [ -n "$first" ] && [ "$first" != jetson-orin-nano ] &&
  [ "$(losses "$tmp/r0-static.h5" | wc -l)" -eq 10 ] &&
  [ "$(losses "$tmp/r0-static.h5")" = "$(losses "$tmp/r0.h5")" ]; then
  echo "ok   first-stage-moves: stage 0 on $first from iteration 4, same losses"
else
  echo "FAIL first-stage-moves: stage 0 on '$first'"; cat "$tmp/out"
  paste <(losses "$tmp/r0-static.h5") <(losses "$tmp/r0.h5"); fails=$((fails + 1))
fi
# Partition predicted: before a re-plan moves layers onto a device that
# never ran them, that device times them (replan.probe); the pause leaves
# the numerics alone.
mpi 4 "$baton" train "${syn[@]}" "${ro[@]}" --set throttle=1:4:50 --set replan.every=2 \
  --set partition=predicted --set output="$tmp/probe.h5"
expect_ok $? replan-probes "never ran them; timing them there first"
# The same sets as plan-predicted's (clock virtual): the fitted predictor
# comes from the cache.
grep -q "^plan: predictor loaded from the cache on the sets " "$tmp/out" ||
  { echo "FAIL plan-cache-hit: no 'loaded from the cache' line"; cat "$tmp/out"; fails=$((fails + 1)); }
# The run file keeps what the predictor learned from: 10 probe layers x 2
# passes on each of the 4 ranks at start-up, and the re-plan probe's layers.
run "$baton" report "$tmp/probe.h5"
expect_ok $? probes-logged "probes at start-up: 80 timings on 4 ranks"
expect_ok 0 replan-probes-logged "re-plan probes: "
if [ "$(losses "$tmp/r0-static.h5")" = "$(losses "$tmp/probe.h5")" ]; then
  echo "ok   replan-probe-same-losses"
else
  echo "FAIL replan-probe-same-losses:"; paste <(losses "$tmp/r0-static.h5") <(losses "$tmp/probe.h5")
  fails=$((fails + 1))
fi
mpi 4 "$baton" train "${syn[@]}" "${ro[@]}" --set throttle=1:4:50 --set replan.every=2 \
  --set partition=predicted --set replan.probe=false
if [ $? -eq 0 ] && ! grep -q "timing them there first" "$tmp/out"; then
  echo "ok   replan-probe-off"
else
  echo "FAIL replan-probe-off"; cat "$tmp/out"; fails=$((fails + 1))
fi
# device_order: subset. The plan may leave devices idle (their ranks wait
# outside the pipeline) and a re-plan may bring them in or idle others; the
# losses stay those of the static run. (a) The Orin Nano and rpi4 start
# alone (Xavier NX and rpi3bplus idle); the Orin Nano slows down 50x and the
# re-plan brings the idle two in. (b) Orin Nano, rpi5 and rpi4 start
# (rpi3bplus idle); the re-plan leaves the slowed Orin Nano idle.
for mix in in:rpi4,jetson-orin-nano,jetson-xavier-nx,rpi3bplus out:rpi4,jetson-orin-nano,rpi3bplus,rpi5; do
  name=${mix%%:*}
  sub=("${ro[@]}" --set devices="${mix#*:}" --set device_order=subset --set throttle=1:4:50)
  mpi 4 "$baton" train "${syn[@]}" "${sub[@]}" --set replan.every=0 --set output="$tmp/sub-$name-static.h5"
  expect_ok $? "subset-$name-reference" "; idle: "
  mpi 4 "$baton" train "${syn[@]}" "${sub[@]}" --set replan.every=2 --set output="$tmp/sub-$name.h5"
  expect_ok $? "subset-$name-replans" "re-plan after iteration 4"
  start=$(sed -n 's/^plan: partition oracle, stages on \[\([^]]*\)\].*/\1/p' "$tmp/out")
  after=$(sed -n 's/^re-plan after iteration 4: .*, stages on \[\([^]]*\)\].*/\1/p' "$tmp/out")
  idle_before=$(echo "$start" | sed -n 's/.*; idle: //p' | tr -cd , | wc -c)
  idle_after=$(echo "$after" | sed -n 's/.*; idle: //p' | tr -cd , | wc -c)
  [[ "$start" == *"; idle: "* ]] && idle_before=$((idle_before + 1)) || idle_before=0
  [[ "$after" == *"; idle: "* ]] && idle_after=$((idle_after + 1)) || idle_after=0
  if { [ $name = in ] && [ $idle_after -lt $idle_before ]; } ||
    { [ $name = out ] && [ $idle_after -gt $idle_before ] && [[ "${after#*; idle: }" == *jetson-orin-nano* ]]; }; then
    echo "ok   subset-$name-moves: [$start] -> [$after]"
  else
    echo "FAIL subset-$name-moves: [$start] -> [$after]"; cat "$tmp/out"; fails=$((fails + 1))
  fi
  if [ "$(losses "$tmp/sub-$name-static.h5" | wc -l)" -eq 10 ] &&
    [ "$(losses "$tmp/sub-$name-static.h5")" = "$(losses "$tmp/sub-$name.h5")" ]; then
    echo "ok   subset-$name-same-losses: 10 iterations"
  else
    echo "FAIL subset-$name-same-losses:"
    paste <(losses "$tmp/sub-$name-static.h5") <(losses "$tmp/sub-$name.h5"); fails=$((fails + 1))
  fi
done
"$baton" report "$tmp/sub-in.h5" >"$tmp/out" 2>"$tmp/err"
plan0=$(grep -o "^plan 0 .*" "$tmp/out" | grep -o "stage [0-9]* =" | wc -l)
plan1=$(grep -o "^plan 1 from iteration 4.*" "$tmp/out" | grep -o "stage [0-9]* =" | wc -l)
if [ "$plan0" -lt 4 ] && [ "$plan1" -gt "$plan0" ]; then
  echo "ok   subset-logged: $plan0 then $plan1 stages"
else
  echo "FAIL subset-logged: $plan0 then $plan1 stages"; cat "$tmp/out"; fails=$((fails + 1))
fi
mpi 2 "$baton" train "${syn[@]}" "${two[@]}" --set throttle=5:1:2
expect_fail $? bad-throttle "throttle entry '5:1:2'"

BATON_FAIL_AT=1:3 mpi 3 -x BATON_FAIL_AT "$baton" train "${syn[@]}" \
  --set devices=rpi4,jetson-nano,rpi5 --set output="$tmp/killed.h5"
expect_fail $? rank-failure "rank 1: injected failure"
# Rank 0 may be killed while it flushes iteration 2 (rank 1 runs ahead to
# its failure), so the file holds iterations 0..1 or 0..2; it must open.
"$baton" report "$tmp/killed.h5" >"$tmp/out" 2>"$tmp/err"
rc=$?
rows=$(sed -n 's/.* \([0-9]*\) train rows.*/\1/p' "$tmp/out")
if [ $rc -eq 0 ] && [ "${rows:-0}" -ge 2 ] && [ "${rows:-0}" -le 3 ]; then
  echo "ok   killed-run-readable: $rows train rows"
else
  echo "FAIL killed-run-readable (exit $rc, rows '${rows}')"; cat "$tmp/out" "$tmp/err"
  fails=$((fails + 1))
fi

[ $fails -eq 0 ] && echo "all MPI CLI checks passed" || echo "$fails MPI CLI check(s) failed"
exit $((fails > 0))
