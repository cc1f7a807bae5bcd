#!/usr/bin/env bash
# `meson install` puts the binary, data/ and docs/ in place, and the
# installed baton finds its data without the source tree.
# usage: install_test.sh BUILD_DIR
set -eu
build=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
meson install -C "$build" --destdir "$tmp" --no-rebuild --quiet >/dev/null
exe=$(find "$tmp" -type f -name baton -perm -u+x | head -n 1)
[ -n "$exe" ] || { echo "FAIL: no installed baton under $tmp"; exit 1; }
cd /
out=$(env -u BATON_DATA "$exe" --version)
echo "$out"
data=${out##*data: }
data=${data%)}
case "$data" in "$tmp"/*) ;; *) echo "FAIL: installed baton uses data outside the install: $data"; exit 1 ;; esac
[ -f "$data/models/lenet5.yaml" ] || { echo "FAIL: $data/models/lenet5.yaml missing"; exit 1; }
env -u BATON_DATA "$exe" models --layers "$data/models/resnet18.yaml" >/dev/null
find "$tmp" -path '*doc/baton/ARCHITECTURE.md' | grep -q . || { echo "FAIL: docs not installed"; exit 1; }
echo "install ok: $exe with data in $data"
