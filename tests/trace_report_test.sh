#!/usr/bin/env bash
# baton trace and baton report on a synthetic 2-rank run (tests/make_runlog.c,
# whose header gives the exact figures), and one clear error line with exit
# status 1 for each kind of bad input.
# usage: trace_report_test.sh BATON MAKE_RUNLOG
set -u
baton=$1
make_runlog=$2
fails=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

fail() {
  echo "FAIL $1"
  shift
  [ $# -gt 0 ] && cat "$@"
  fails=$((fails + 1))
}

# expect_error NAME SUBSTRING CMD...: exit status 1, one stderr line with SUBSTRING.
expect_error() {
  local name=$1 want=$2
  shift 2
  "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  if [ $rc -ne 1 ]; then fail "$name: exit status $rc (want 1)" "$tmp/err"; return; fi
  if ! grep -qF -- "$want" "$tmp/err"; then fail "$name: stderr lacks '$want'" "$tmp/err"; return; fi
  if [ "$(wc -l <"$tmp/err")" -ne 1 ]; then fail "$name: want one error line" "$tmp/err"; return; fi
  echo "ok   $name: $(cat "$tmp/err")"
}

# expect_out NAME FILE SUBSTRING...: FILE contains every SUBSTRING.
expect_out() {
  local name=$1 file=$2
  shift 2
  for want in "$@"; do
    if ! grep -qF -- "$want" "$file"; then fail "$name: lacks '$want'" "$file"; return; fi
  done
  echo "ok   $name"
}

run="$tmp/run.h5"
if ! "$make_runlog" "$run" 5 2>"$tmp/err"; then
  fail "make_runlog" "$tmp/err"
  exit 1
fi

# ---- trace --------------------------------------------------------------
if "$baton" trace "$run" -o "$tmp/trace.json" >"$tmp/out" 2>"$tmp/err"; then
  expect_out trace-summary "$tmp/out" "90 events on 2 ranks"
else
  fail "trace: exit status $?" "$tmp/err"
fi

if [ -x /usr/bin/python3 ]; then
  # 18 events per iteration; compute on even tids, comm on odd; microseconds.
  if /usr/bin/python3 - "$tmp/trace.json" >"$tmp/py" 2>&1 <<'EOF'; then
import json, sys
t = json.load(open(sys.argv[1]))
ev = t["traceEvents"]
x = [e for e in ev if e["ph"] == "X"]
assert len(x) == 90, len(x)
names = {e["pid"]: e["args"]["name"] for e in ev if e["name"] == "process_name"}
assert names == {0: "rank 0 (jetson-nano)", 1: "rank 1 (raspberry-pi-4)"}, names
threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in ev if e["name"] == "thread_name"}
assert threads[(0, 0)] == "compute" and threads[(0, 1)] == "comm", threads
comm = {"send", "recv"}
assert all((e["tid"] % 2 == 1) == (e["name"] in comm) for e in x)
assert {e["name"] for e in x} == {"forward", "backward", "send", "recv", "optim"}
f0 = [e for e in x if e["pid"] == 0 and e["name"] == "forward" and e["args"]["iteration"] == 1]
assert [(e["ts"], e["dur"], e["args"]["micro_batch"]) for e in f0] == \
    [(10.5e6, 1e6, 0), (11.5e6, 1e6, 1)], f0
s = [e for e in x if e["name"] == "send" and e["pid"] == 0][0]["args"]
assert s["bytes"] == 4096 and s["peer"] == 1, s
# no two events overlap on one thread (they would be dropped by a viewer)
lanes = {}
for e in sorted(x, key=lambda e: (e["ts"], e["dur"])):
    key = (e["pid"], e["tid"])
    assert e["ts"] >= lanes.get(key, -1), e
    lanes[key] = e["ts"] + e["dur"]
print("json ok")
EOF
    echo "ok   trace-json (python3)"
  else
    fail "trace-json" "$tmp/py"
  fi
else
  expect_out trace-json-keys "$tmp/trace.json" '"traceEvents"' '"process_name"' \
    '"rank 0 (jetson-nano)"' '"thread_name"' '"ph":"X"' '"micro_batch":' '"peer":'
fi

"$baton" trace "$run" --iterations 2:2 -o "$tmp/one.json" >"$tmp/out" 2>"$tmp/err" ||
  fail "trace-iterations: exit status $?" "$tmp/err"
expect_out trace-iterations "$tmp/out" "18 events on 2 ranks"
"$baton" trace "$run" >"$tmp/out" 2>"$tmp/err" || fail "trace-default-output" "$tmp/err"
[ -s "$tmp/run.trace.json" ] && echo "ok   trace-default-output" ||
  fail "trace-default-output: no $tmp/run.trace.json"

# ---- report -------------------------------------------------------------
if "$baton" report "$run" >"$tmp/report" 2>"$tmp/err"; then
  expect_out report "$tmp/report" "mode sim, clock virtual, schedule gpipe, 2 ranks" \
    "timeline: 5 iterations, 90 events, span 52.500 s" \
    "jetson-nano              32.500 s     22.500 s     20.000 s    61.9%    42.9%    38.1%" \
    "raspberry-pi-4           31.250 s     22.500 s     21.250 s    59.5%    42.9%    40.5%" \
    "throughput: 0.7619 samples/s (5 iterations x 8 samples" "loss: 2.1000"
else
  fail "report: exit status $?" "$tmp/err"
fi
"$baton" report "$run" --iterations 1: --last 2 >"$tmp/report" 2>"$tmp/err" ||
  fail "report-window: exit status $?" "$tmp/err"
expect_out report-window "$tmp/report" "timeline: 4 iterations, 72 events, span 44.500 s" \
  "jetson-nano              26.000 s     18.000 s     18.500 s    58.4%    40.4%    41.6%" \
  "loss: 1.9500, accuracy 27.5% (mean of the last 2 iterations, 3..4)"

# ---- plot script (only where Debian's h5py and matplotlib are installed) --
plot="$(dirname "$0")/../plots/timeline.py"
if /usr/bin/python3 -c 'import h5py, matplotlib' 2>/dev/null; then
  if /usr/bin/python3 "$plot" "$run" --iteration 3 --out "$tmp/p" >"$tmp/out" 2>&1 &&
    [ -s "$tmp/p-timeline.png" ] && [ -s "$tmp/p-loss.png" ]; then
    echo "ok   plot"
  else
    fail "plot" "$tmp/out"
  fi
else
  echo "skip plot: /usr/bin/python3 lacks h5py or matplotlib"
fi

# ---- bad input ----------------------------------------------------------
printf 'model: mlp\n' >"$tmp/text.h5"
: >"$tmp/empty.h5"
head -c 20000 "$run" >"$tmp/cut.h5"
for cmd in trace report; do
  expect_error "$cmd-missing" "No such file" "$baton" "$cmd" "$tmp/nope.h5"
  expect_error "$cmd-not-hdf5" "not an HDF5 file" "$baton" "$cmd" "$tmp/text.h5"
  expect_error "$cmd-empty" "empty file" "$baton" "$cmd" "$tmp/empty.h5"
  expect_error "$cmd-truncated" "cannot open the run log" "$baton" "$cmd" "$tmp/cut.h5"
  expect_error "$cmd-directory" "not a regular file" "$baton" "$cmd" "$tmp"
  expect_error "$cmd-bad-option" "unknown option" "$baton" "$cmd" "$run" --bogus
  expect_error "$cmd-bad-range" "--iterations" "$baton" "$cmd" "$run" --iterations 5:2
done
expect_error trace-unwritable "cannot write" "$baton" trace "$run" -o "$tmp/no/dir/t.json"
expect_error report-bad-last "--last" "$baton" report "$run" --last 0

if [ $fails -ne 0 ]; then
  echo "$fails failure(s)"
  exit 1
fi
echo "all trace/report tests passed"
