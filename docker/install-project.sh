#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# Install a source tree into the venv without touching the network or its dependencies (they are
# all in the locks): patched verl editable (--editable), verlfit as a regular install.
#
# Usage: install-project.sh [--editable] DIR
# VERLFIT_DRY_RUN=1 prints the commands instead of running them.
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

editable=()
if [ "${1:-}" = --editable ]; then
  editable=(--editable)
  shift
fi
[ $# -eq 1 ] || die "usage: install-project.sh [--editable] DIR"
pip_install --no-index --no-build-isolation "${editable[@]}" "$1"
