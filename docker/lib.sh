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
