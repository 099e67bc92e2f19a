#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# Download (or, for the few sdist-only packages a lock names with --no-binary, build) the wheels of
# lock files into DEST. Runs in the build stages only, so no index URL reaches the runtime stage.
#
# Usage: download-locked.sh [--download] DEST LOCK...
#   *-cu118.lock  from TORCH_INDEX_URL only: the CUDA 11.8 builds of torch, torchvision,
#                 torchaudio and xformers carry the same version numbers as PyPI's CUDA 12 builds
#                 (or exist only there), so no other index may be consulted. Their hashes are the
#                 published ones or, where none is published, build arguments the user gives
#                 (--hash=sha256:${NAME} in the lock: TORCHVISION_WHEEL_SHA256, TORCHAUDIO_WHEEL_SHA256,
#                 XFORMERS_WHEEL_SHA256 of Dockerfile.a10; docs/images.md, "Hashes")
#   other *.lock  from PIP_INDEX_URL only: every pin carries the sha256 of each file pip may pick
#                 (docker/lock.py), so a rebuild downloads the same bytes
# Every pip run has --require-hashes, on a copy of the lock with its build-argument hashes filled in
# (docker/wheel-hashes.py hashed), which stops the build first when a pin has no hash or a build
# argument is missing. That copy is DEST/NAME.hashes.lock (in the wheelhouse of `make wheelhouse` too).
#
# Every package of a layer is pinned with == in its lock (the whole dependency tree, written by
# docker/lock.py), so pip runs with --no-deps and resolves nothing; `pip check` at the end of the
# build proves the tree is complete. Binary wheels only, unless a lock says otherwise.
# Credentials for a mirror come from /root/.netrc (a BuildKit secret, never a layer).
# VERLFIT_DRY_RUN=1 prints the commands instead of running them.
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# --download: keep the files as published (wheels and the sdists of --no-binary pins) instead of building wheels, and
# arrange them as a static PEP 503 index, DEST/simple/<project>/ (the offline wheelhouse, `make wheelhouse`)
mode=wheel
if [ "${1:-}" = --download ]; then
  mode=download
  shift
fi
[ $# -ge 2 ] || die "usage: download-locked.sh [--download] DEST LOCK..."
dest=$1
shift
run mkdir -p "$dest"
for lock in "$@"; do
  [ -f "$lock" ] || die "lock file $lock not found"
  case $(basename "$lock") in
    *-cu118.lock) require TORCH_INDEX_URL; index=$TORCH_INDEX_URL ;;
    *.lock) require PIP_INDEX_URL; index=$PIP_INDEX_URL ;;
    *) die "$lock: not a .lock file" ;;
  esac
  # the lock as pip reads it: its build-argument hashes filled in (the build stops here when one is missing)
  hashed=$dest/$(basename "$lock" .lock).hashes.lock
  run "$VENV/bin/python" "$DOCKER_DIR/wheel-hashes.py" hashed "$lock" "$hashed"
  if [ "$mode" = download ]; then
    run "$VENV/bin/python" -m pip download --no-input --disable-pip-version-check --no-deps \
      --only-binary=:all: --require-hashes --index-url "$index" --dest "$dest" -r "$hashed"
  else
    run "$VENV/bin/python" -m pip wheel --no-input --disable-pip-version-check --no-deps --no-build-isolation \
      --only-binary=:all: --require-hashes --index-url "$index" --wheel-dir "$dest" -r "$hashed"
  fi
done
if [ "$mode" = download ]; then
  run "$VENV/bin/python" "$DOCKER_DIR/wheel-hashes.py" index "$dest"
fi
