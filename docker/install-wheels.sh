#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# Install every wheel in each DIR into the venv: no index, no dependency resolution (the wheels are
# exactly one layer's lock, fetched and verified by a build stage and bind-mounted here), with
# --require-hashes: each wheel's sha256 (docker/wheel-hashes.py folder) is checked as it installs.
#
# Usage: install-wheels.sh DIR...
# VERLFIT_DRY_RUN=1 prints the commands instead of running them.
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

[ $# -ge 1 ] || die "usage: install-wheels.sh DIR..."
requirements=$(mktemp /tmp/verlfit-wheels.XXXXXX.txt)
trap 'rm -f "$requirements"' EXIT
links=()
for dir in "$@"; do
  links+=(--find-links "$dir")
done
wheel_requirements "$requirements" "$@"
pip_install --no-index "${links[@]}" --require-hashes -r "$requirements"
