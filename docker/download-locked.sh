#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# Download (or, for the few sdist-only packages a lock names with --no-binary, build) the wheels of
# lock files into DEST. Runs in the build stages only, so no index URL reaches the runtime stage.
#
# Usage: download-locked.sh DEST LOCK...
#   *-cu118.lock  from TORCH_INDEX_URL only: the CUDA 11.8 builds of torch, torchvision,
#                 torchaudio and xformers carry the same version numbers as PyPI's CUDA 12 builds
#                 (or exist only there), so no other index may be consulted. These locks carry no
#                 hashes (PyTorch's index was not reachable to read them: docs/images.md, "Hashes"):
#                 the one index they may come from is their guard.
#   other *.lock  from PIP_INDEX_URL only, with --require-hashes: every pin carries the sha256 of
#                 each file pip may pick (docker/lock.py), so a rebuild downloads the same bytes
#
# Every package of a layer is pinned with == in its lock (the whole dependency tree, written by
# docker/lock.py), so pip runs with --no-deps and resolves nothing; `pip check` at the end of the
# build proves the tree is complete. Binary wheels only, unless a lock says otherwise.
# Credentials for a mirror come from /root/.netrc (a BuildKit secret, never a layer).
# VERLFIT_DRY_RUN=1 prints the commands instead of running them.
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

[ $# -ge 2 ] || die "usage: download-locked.sh DEST LOCK..."
dest=$1
shift
for lock in "$@"; do
  [ -f "$lock" ] || die "lock file $lock not found"
  case $(basename "$lock") in
    *-cu118.lock) require TORCH_INDEX_URL; index=$TORCH_INDEX_URL; hashes=() ;;
    *.lock) require PIP_INDEX_URL; index=$PIP_INDEX_URL; hashes=(--require-hashes) ;;
    *) die "$lock: not a .lock file" ;;
  esac
  run "$VENV/bin/python" -m pip wheel --no-input --disable-pip-version-check --no-deps --no-build-isolation \
    --only-binary=:all: "${hashes[@]}" --index-url "$index" --wheel-dir "$dest" -r "$lock"
done
