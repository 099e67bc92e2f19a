#!/usr/bin/env bash
# Container entrypoint of the verlfit images (Dockerfile.p40, Dockerfile.a10).
#
# 1. Sets the profile's environment defaults (VLLM_DTYPE, TRITON_MAX_SHARED_MEMORY,
#    PYTORCH_CUDA_ALLOC_CONF) for VERLFIT_PROFILE, the image's profile; values the user set win.
#    They are exported here, before anything starts, so Ray workers inherit them; the ones filled in
#    here are listed in VERLFIT_PROFILE_DEFAULTS, so another profile's values replace them.
# 2. A CA bundle mounted at /etc/verlfit/ca-bundle.pem (compose.yaml mounts VERLFIT_CA_BUNDLE there; with
#    `docker run`, -v BUNDLE:/etc/verlfit/ca-bundle.pem:ro), when not empty: REQUESTS_CA_BUNDLE and SSL_CERT_FILE
#    point at it (requests, httpx, Python's ssl and pip trust it), and HF_HUB_DISABLE_XET=1, because hf-xet makes
#    its own TLS connections and has been reported failing behind intercepting proxies (huggingface/xet-core#389,
#    #399). Values the user set win, as in 1. Nothing of this reaches the host's shell.
# 3. The Hugging Face cache (HF_HOME; in the images the volume verlfit-hf-cache) is shared by every uid that runs the
#    image, and what one uid downloads there another cannot write (hub's lock files and refs, new model folders): when
#    this uid cannot write HF_HOME, its hub/ or its datasets/, a warning names the owner and the two fixes first.
#    Reading what is there still works (HF_HUB_OFFLINE=1), so it does not stop.
# 4. Runs what was asked:
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

# the mount point of a CA bundle (VERLFIT_CA_BUNDLE_MOUNT moves it: the tests' own file)
ca_bundle=${VERLFIT_CA_BUNDLE_MOUNT:-/etc/verlfit/ca-bundle.pem}
if [ -f "$ca_bundle" ] && [ -s "$ca_bundle" ]; then
  export REQUESTS_CA_BUNDLE="${REQUESTS_CA_BUNDLE-$ca_bundle}" SSL_CERT_FILE="${SSL_CERT_FILE-$ca_bundle}"
  export HF_HUB_DISABLE_XET="${HF_HUB_DISABLE_XET-1}"
fi

if [ -n "${HF_HOME:-}" ]; then
  for folder in "$HF_HOME" "$HF_HOME/hub" "$HF_HOME/datasets"; do
    if [ -d "$folder" ] && [ ! -w "$folder" ]; then
      owner=$(stat -c %u "$folder") uid=$(id -u)
      echo "verlfit entrypoint: warning: the Hugging Face cache folder $folder belongs to uid $owner and this" \
        "container runs as uid $uid, which cannot write it: downloads into it will fail with PermissionError (what is" \
        "there can still be read, with HF_HUB_OFFLINE=1). Run as uid $owner (VERLFIT_UID=$owner in .env; docker run -u" \
        "$owner), or give uid $uid a cache volume of its own (VERLFIT_HF_CACHE_VOLUME=verlfit-hf-cache-$uid in .env;" \
        "docker run -v verlfit-hf-cache-$uid:/cache/huggingface) (docs/images.md, 'Running with compose')" >&2
      break
    fi
  done
fi

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
