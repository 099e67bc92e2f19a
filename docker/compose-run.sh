#!/usr/bin/env bash
# `docker compose run --rm SERVICE ARGS...` for the Makefile's train, doctor, prepare-gsm8k, bench, export, eval and report, with the
# host side made right first and Docker's failures that have a known cause explained after.
#
# Usage: compose-run.sh TARGET SERVICE [ARGS...]
#   TARGET   the make target, for messages
# Environment: COMPOSE (docker compose), VERLFIT_UID and VERLFIT_GID (the container's user, from the Makefile),
# VERLFIT_PROFILE (passed on to compose).
#
# Before: .env holds VERLFIT_UID and VERLFIT_GID (docker/write-env.sh); ./data and ./runs (compose.yaml's bind mounts) exist and the container's user can write them. Docker
# would create a missing one owned by root; run as root, this creates it owned by VERLFIT_UID:VERLFIT_GID; an
# existing one the container's user cannot write stops here with the chown that fixes it.
# After: Docker's `could not select device driver "nvidia"` (no NVIDIA Container Toolkit set up for this engine)
# gets the fix after Docker's own message. Exit status: compose's, or 2 when stopped before it.
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: compose-run.sh TARGET SERVICE [ARGS...]" >&2; exit 2; }
target=$1
shift
compose=${COMPOSE:-docker compose}
uid=${VERLFIT_UID:?} gid=${VERLFIT_GID:?}
# .env: the same ids for a later bare `docker compose run` (compose.yaml's user:)
bash "$(dirname "${BASH_SOURCE[0]}")/write-env.sh" .env "$uid" "$gid"

# writable_by DIR UID GID: whether a process of that uid and primary gid may create files in DIR
writable_by() {
  local owner group mode
  read -r owner group mode < <(stat -c '%u %g %a' "$1")
  mode=$((8#$mode))
  if [ "$2" = 0 ]; then return 0; fi
  if [ "$owner" = "$2" ]; then [ $((mode & 8#300)) = $((8#300)) ]; return; fi
  if [ "$group" = "$3" ]; then [ $((mode & 8#030)) = $((8#030)) ]; return; fi
  [ $((mode & 8#003)) = $((8#003)) ]
}

for dir in data runs; do
  if [ ! -e "$dir" ]; then
    mkdir "$dir"
    if [ "$(id -u)" = 0 ]; then
      chown "$uid:$gid" "$dir"
    fi
  fi
  if [ ! -d "$dir" ]; then
    echo "make $target: ./$dir is not a folder: compose.yaml mounts ./$dir at /workspace/$dir; move it away" >&2
    exit 2
  fi
  if ! writable_by "$dir" "$uid" "$gid"; then
    echo "make $target: ./$dir belongs to $(stat -c '%u:%g' "$dir") (mode $(stat -c '%a' "$dir")) and the container runs as" \
      "$uid:$gid, which cannot write it: sudo chown $uid:$gid ./$dir (or make $target VERLFIT_UID=... VERLFIT_GID=... with" \
      "its owner's ids)" >&2
    exit 2
  fi
done

errors=$(mktemp)
trap 'rm -f "$errors"' EXIT
status=0
# stderr through tee: shown as it comes, and kept to be recognised
# shellcheck disable=SC2086  # COMPOSE is a command line ("docker compose")
$compose run --rm "$@" 2> >(tee "$errors" >&2) || status=$?
wait
if [ "$status" != 0 ] && grep -q 'could not select device driver "nvidia"' "$errors"; then
  echo "make $target: this Docker engine cannot give containers a GPU: install the NVIDIA Container Toolkit" \
    "(package nvidia-container-toolkit), then 'sudo nvidia-ctk runtime configure --runtime=docker' and restart Docker" \
    "(docs/images.md, 'Running with compose')" >&2
fi
exit "$status"
