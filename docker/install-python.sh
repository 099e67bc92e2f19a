#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# Create the image's Python environment: a venv at $VENV (/opt/venv) on Ubuntu's Python
# $PYTHON_VERSION (3.10) with pip, setuptools and wheel at the pins of docker/python.lock.
#
# Usage: install-python.sh            download the pins from PIP_INDEX_URL, --require-hashes (build stages)
#        install-python.sh WHEEL_DIR  install the wheels in WHEEL_DIR, no index, --require-hashes (runtime stage)
#
# setuptools stays below 81 because verl 0.4.1 imports pkg_resources.
# VERLFIT_DRY_RUN=1 prints the commands instead of running them.
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

require PYTHON_VERSION
[ $# -le 1 ] || die "usage: install-python.sh [WHEEL_DIR]"
run "python${PYTHON_VERSION}" -m venv "$VENV"
if [ $# -eq 1 ]; then
  # the new venv's own pip (Ubuntu's ensurepip) reads the folder's hashes; its pip is then replaced by the pinned one
  requirements=$(mktemp /tmp/verlfit-wheels.XXXXXX.txt)
  trap 'rm -f "$requirements"' EXIT
  wheel_requirements "$requirements" "$1"
  pip_install --no-index --find-links "$1" --require-hashes -r "$requirements"
else
  require PIP_INDEX_URL
  pip_install --only-binary=:all: --require-hashes --index-url "$PIP_INDEX_URL" -r "$DOCKER_DIR/python.lock"
fi
