#!/usr/bin/env bash
# Container entrypoint of the verlfit images (Dockerfile.p40, Dockerfile.a10).
#
# 1. Sets the profile's environment defaults (VLLM_DTYPE, TRITON_MAX_SHARED_MEMORY,
#    PYTORCH_CUDA_ALLOC_CONF) for VERLFIT_PROFILE, the image's profile; values the user set win.
#    They are exported here, before anything starts, so Ray workers inherit them; the ones filled in
#    here are listed in VERLFIT_PROFILE_DEFAULTS, so another profile's values replace them.
# 2. Runs what was asked:
#      (no arguments)            verlfit train: PPO on GSM8K with the defaults
#      a verlfit subcommand      verlfit "$@"            e.g. train --algo grpo, doctor
#      an option (-h, --version) verlfit "$@"
#      a program on PATH         that program            e.g. bash, python, ray start --head
#      anything else             "unknown subcommand" with the list, exit status 2
#
# The subcommand list is verlfit.cli.SUBCOMMANDS (tests/images/test_image_entrypoint.py keeps it equal).
set -euo pipefail

SUBCOMMANDS=(prepare-gsm8k prepare-data train plan doctor report export eval profiles bench)

profile=${VERLFIT_PROFILE:-}
if [ -n "$profile" ]; then
  case $profile in
    p40|t4|v100|a10) ;;
    *) echo "verlfit entrypoint: VERLFIT_PROFILE=$profile is not a profile (use p40, t4, v100 or a10; the images set it)" >&2; exit 2 ;;
  esac
  # Two steps, not eval "$(...)" directly: set -e does not see a failing command substitution
  # inside eval's argument, and a bad profile must stop here.
  defaults=$(verlfit profiles "$profile" --env-shell)
  eval "$defaults"
fi
# Without VERLFIT_PROFILE (outside the images) verlfit itself applies the chosen profile's defaults.

if [ $# -eq 0 ]; then
  exec verlfit train
fi

for subcommand in "${SUBCOMMANDS[@]}"; do
  if [ "$1" = "$subcommand" ]; then
    exec verlfit "$@"
  fi
done

case $1 in
  -*) exec verlfit "$@" ;;
esac

if type -P -- "$1" >/dev/null; then
  exec "$@"
fi

{
  echo "verlfit: unknown subcommand '$1'"
  echo "subcommands: ${SUBCOMMANDS[*]}"
  echo "or any program in the image, e.g. bash, python, ray"
} >&2
exit 2
