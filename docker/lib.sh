# shellcheck shell=bash
# Helpers shared by docker/install-*.sh (sourced, never executed).
#
# Every command that changes the system goes through `run`. With VERLFIT_DRY_RUN=1 it prints the
# command instead, one line per command in `set -x` style ("+ cmd 'arg'"), so the scripts can be
# exercised outside Docker (tests/images/test_scripts.py) and read as a build plan.

set -euo pipefail

DOCKER_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export DOCKER_DIR
VENV=${VENV:-/opt/venv}

dry_run() { [ "${VERLFIT_DRY_RUN:-0}" = 1 ]; }

# A private or intercepting TLS certificate authority: the build secret `ca-bundle` (a PEM bundle: the system's
# bundle with that authority in it, e.g. /etc/ssl/certs/ca-certificates.crt of a host that trusts it), mounted at
# /run/secrets/ca-bundle for one RUN and never written to a layer. When it is there, pip, git, curl, Python's ssl
# and apt (APT_CA_OPTIONS, for https sources) trust it instead of their own bundles. VERLFIT_CA_BUNDLE names
# another path (tests).
CA_BUNDLE=${VERLFIT_CA_BUNDLE:-/run/secrets/ca-bundle}
# shellcheck disable=SC2034  # read by install-system.sh, which sources this file
APT_CA_OPTIONS=()
if [ -s "$CA_BUNDLE" ]; then
  export PIP_CERT=$CA_BUNDLE GIT_SSL_CAINFO=$CA_BUNDLE CURL_CA_BUNDLE=$CA_BUNDLE SSL_CERT_FILE=$CA_BUNDLE REQUESTS_CA_BUNDLE=$CA_BUNDLE
  # shellcheck disable=SC2034
  APT_CA_OPTIONS=(-o "Acquire::https::CaInfo=$CA_BUNDLE")
fi

# Deterministic bytecode: with SOURCE_DATE_EPOCH set, Python's py_compile (which pip uses for every .pyc it writes)
# records a hash of the source instead of its modification time, so two builds of the same wheels write the same
# .pyc files (the rehearsal compares them). Any value does that; unset, it is 1980-01-01 (315532800), the earliest
# time a zip archive such as a wheel can record, so a wheel built here gets valid timestamps. Not the commit's time:
# that would change every install step's environment, and so its cache key, at every commit.
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-315532800}
# and one string hash order: a set literal in a module is stored in its .pyc as a frozenset, in the order of the
# strings' hashes, which Python randomises per process unless PYTHONHASHSEED is fixed
export PYTHONHASHSEED=0

# run CMD ARGS...: run a command, or print it in dry-run mode.
run() {
  if dry_run; then
    printf '+'
    printf ' %q' "$@"
    printf '\n'
  else
    "$@"
  fi
}

log() { printf 'verlfit-build: %s\n' "$*" >&2; }

die() {
  printf 'verlfit-build: error: %s\n' "$*" >&2
  exit 1
}

# require NAME...: fail unless each variable is set and non-empty.
require() {
  local name
  for name in "$@"; do
    [ -n "${!name:-}" ] || die "$name is not set (a build arg of Dockerfile.p40/Dockerfile.a10)"
  done
}

# pip ARGS...: the venv's pip, quiet about its own version, never prompting.
pip_install() {
  run "$VENV/bin/python" -m pip install --no-input --disable-pip-version-check --no-deps "$@"
}

# wheel_requirements FILE DIR...: append to FILE a `NAME==VERSION --hash=sha256:...` line for every wheel in each DIR
# (docker/wheel-hashes.py folder), for `pip install --no-index --require-hashes -r FILE`; dry-run prints the command.
wheel_requirements() {
  local file=$1 dir
  shift
  for dir in "$@"; do
    if dry_run; then
      run "$VENV/bin/python" "$DOCKER_DIR/wheel-hashes.py" folder "$dir"
    else
      compgen -G "$dir/*.whl" >/dev/null || die "no wheels in $dir"
      "$VENV/bin/python" "$DOCKER_DIR/wheel-hashes.py" folder "$dir" >>"$file" || die "no hashed wheels in $dir"
    fi
  done
}

# ---- apt: the images' three apt steps and their lock (docker/apt.lock) ----------------------------------------------
# Where Ubuntu's and NVIDIA's packages come from when no mirror is set. Ubuntu's pool is the same on both hosts;
# snapshot.ubuntu.com serves the archive as it was at a time (the lock's "ubuntu archive:" line), every file it held.
# shellcheck disable=SC2034  # read by the apt scripts, which source this file
UBUNTU_ARCHIVES=(http://archive.ubuntu.com/ubuntu http://security.ubuntu.com/ubuntu)
# shellcheck disable=SC2034
UBUNTU_SNAPSHOTS=https://snapshot.ubuntu.com/ubuntu
# shellcheck disable=SC2034
CUDA_REPO=https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/x86_64

# apt_set_packages SET: the packages one apt step asks for (dependencies come with them), one per line
#   build    the build stages: ca-certificates, git, GNU patch (patches/apply.py), Python $PYTHON_VERSION and its venv,
#            curl (the wheels are downloaded with it)
#   runtime  the runtime stage of both images: the same less curl, cuDNN $CUDNN_VERSION from NVIDIA's repository (held
#            with apt-mark so no later apt-get upgrade moves it) and tini (the image's PID 1)
#   triton   the A10 image's second apt step, on top of runtime: what Triton needs at run time to build its launcher
#            stubs (a C compiler, the Python headers, CUDA's link-time libcuda.so stub: Triton links with -lcuda and
#            the container toolkit mounts only libcuda.so.1). Not in the P40 image: Triton cannot target the P40.
apt_set_packages() {
  local always=(ca-certificates git patch python3 "python${PYTHON_VERSION}" "python${PYTHON_VERSION}-venv")
  case $1 in
    build) printf '%s\n' "${always[@]}" curl ;;
    runtime) require CUDNN_VERSION; printf '%s\n' "${always[@]}" "libcudnn8=${CUDNN_VERSION}" tini ;;
    triton) require TORCH_CUDA_VERSION; printf '%s\n' gcc libc6-dev "python${PYTHON_VERSION}-dev" "cuda-driver-dev-${TORCH_CUDA_VERSION/./-}" ;;
    *) die "unknown apt step '$1' (build, runtime, triton)" ;;
  esac
}

# apt_lock_lines LOCK SET: the lock's lines of one apt step, "NAME=VERSION SHA256 SOURCE PATH STEPS" each
# (columns: docker/apt-lock.sh). Fails when the lock is missing or has none for SET.
apt_lock_lines() {
  local lock=$1 set=$2 lines
  [ -f "$lock" ] || die "no apt lock at $lock (make apt-lock writes docker/apt.lock)"
  lines=$(awk -v set="$set" '!/^#/ && NF == 5 { n = split($5, sets, ","); for (i = 1; i <= n; i++) if (sets[i] == set) print }' "$lock")
  [ -n "$lines" ] || die "$lock has no packages for the apt step '$set' (make apt-lock writes every step's)"
  printf '%s\n' "$lines"
}
