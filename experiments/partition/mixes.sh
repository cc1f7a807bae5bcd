# shellcheck shell=bash
# What the partition experiments (run.sh, learned.sh) share: the device
# mixes; the calibration stores' directory, CALIBRATION_DIR when set (kept),
# else a temporary one that the caller removes ($calibration_tmp non-empty);
# and max_gap A B, the larger of two gaps ("+4.3%" or 4.3).
# shellcheck disable=SC2034  # used by the scripts that source this file
mixes=(
  "jetson-nano,rpi4,jetson-xavier-nx,rpi5"
  "rpi3bplus,rpi4,rpi5,x86-laptop"
  "jetson-nano,jetson-tx2,jetson-xavier-nx,jetson-orin-nano"
  "jetson-nano,rpi4,jetson-xavier-nx,rpi5,jetson-tx2,rpi3bplus,jetson-orin-nano,x86-laptop"
)
calibration_tmp=
if [ -n "${CALIBRATION_DIR:-}" ]; then
  calibration_dir=$CALIBRATION_DIR
  mkdir -p "$calibration_dir"
else
  calibration_dir=$(mktemp -d)
  calibration_tmp=$calibration_dir
fi
max_gap() { awk -v a="${1%\%}" -v b="${2%\%}" 'BEGIN { a += 0; b += 0; print (b > a ? b : a) }'; }
