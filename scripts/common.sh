# Shared by run.sh and test.sh: install missing Debian packages, configure
# and build with meson/ninja, and set the environment Open MPI and BLIS need.
# Sourced, not executed.

BATON_PACKAGES=(gcc pkg-config meson ninja-build libblis-dev libopenmpi-dev openmpi-bin
  libhdf5-openmpi-dev libgsl-dev libcriterion-dev libyaml-dev zlib1g-dev
  dataset-fashion-mnist)
# baton bench codec: zstd and lz4 references
BATON_PACKAGES+=(libzstd-dev liblz4-dev)

# Open MPI refuses to run as root and to oversubscribe cores unless told.
export OMPI_ALLOW_RUN_AS_ROOT=1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
# One BLAS thread per rank: ranks are the parallelism.
export BLIS_NUM_THREADS="${BLIS_NUM_THREADS:-1}"

baton_missing_packages() {
  local p missing=()
  for p in "${BATON_PACKAGES[@]}" "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' ||
      missing+=("$p")
  done
  echo "${missing[@]}"
}

baton_install_packages() {
  local missing
  missing=$(baton_missing_packages "$@")
  [ -z "$missing" ] && return 0
  echo "baton: installing missing Debian packages: $missing"
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  # shellcheck disable=SC2086
  $sudo apt-get install -y -qq --no-install-recommends $missing
}

# baton_build DIR [meson setup options...]
baton_build() {
  local dir=$1
  shift
  if [ ! -f "$dir/build.ninja" ]; then
    meson setup "$dir" "$@"
  fi
  ninja -C "$dir"
}
