#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# Install every wheel in each DIR into the venv: no index, no dependency resolution (the wheels are
# exactly one layer's lock, fetched and verified by a build stage and bind-mounted here).
#
# Usage: install-wheels.sh DIR...
# VERLFIT_DRY_RUN=1 prints the commands instead of running them.
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

[ $# -ge 1 ] || die "usage: install-wheels.sh DIR..."
wheels=()
for dir in "$@"; do
  if dry_run; then
    wheels+=("$dir/*.whl")
  else
    shopt -s nullglob
    found=("$dir"/*.whl)
    shopt -u nullglob
    [ ${#found[@]} -gt 0 ] || die "no wheels in $dir"
    wheels+=("${found[@]}")
  fi
done
pip_install --no-index "${wheels[@]}"
