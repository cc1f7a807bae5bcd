#!/usr/bin/env bash
# Installs what is missing, builds baton (release), and runs the default
# experiment. Extra arguments go to `baton train` (e.g. --set epochs=1).
set -euo pipefail
cd "$(dirname "$0")"
source scripts/common.sh
baton_install_packages
baton_build build --buildtype=release
exec ./build/baton train experiments/configs/lenet5-fmnist.yaml "$@"
