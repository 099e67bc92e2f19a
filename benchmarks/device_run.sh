#!/usr/bin/env bash
# The stage runner is benchmarks/device_run.py (its --help lists the stages and the environment variables); this
# wrapper keeps `bash benchmarks/device_run.sh STAGE ...` working and hands every argument to it.
set -euo pipefail
exec python3 "$(dirname "${BASH_SOURCE[0]}")/device_run.py" "$@"
