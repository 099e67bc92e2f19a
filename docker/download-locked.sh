#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# Download (or, for the few sdist-only packages a lock names with --no-binary, build) the wheels of
# lock files into DEST. Runs in the build stages only, so no index URL reaches the runtime stage.
#
# Usage: download-locked.sh [--download] DEST LOCK...
#   *-cu118.lock  from TORCH_INDEX_URL only: the CUDA 11.8 builds of torch, torchvision,
#                 torchaudio and xformers carry the same version numbers as PyPI's CUDA 12 builds
#                 (or exist only there), so no other index may be consulted. A pin there without a
#                 published sha256 gets one on its first download (docker/wheel-hashes.py
#                 first-download), recorded in pip's cache mount and enforced by every later build
#                 on this host; the wheels folder keeps the record (hashes.lock) for `make wheelhouse`
#   other *.lock  from PIP_INDEX_URL only: every pin carries the sha256 of each file pip may pick
#                 (docker/lock.py), so a rebuild downloads the same bytes
# Every `pip wheel` runs with --require-hashes; the one exception is the first download of a pin no
# hash was published for (nothing to check it against yet: it is what computes the hash).
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
# where a first download's hashes are kept between builds: pip's cache mount (RUN --mount=type=cache)
records=${VERLFIT_FIRST_DOWNLOAD_DIR:-/root/.cache/pip/verlfit-first-download}
for lock in "$@"; do
  [ -f "$lock" ] || die "lock file $lock not found"
  hashed=$lock
  case $(basename "$lock") in
    *-cu118.lock)
      require TORCH_INDEX_URL; index=$TORCH_INDEX_URL
      if dry_run; then
        hashed=$records/$(basename "$lock")
        run "$VENV/bin/python" "$DOCKER_DIR/wheel-hashes.py" first-download "$lock" "$index" "$dest/.first-download" "$hashed"
      else
        hashed=$("$VENV/bin/python" "$DOCKER_DIR/wheel-hashes.py" first-download "$lock" "$index" "$dest/.first-download" "$records/$(basename "$lock")")
        rm -rf "$dest/.first-download"
      fi
      ;;
    *.lock) require PIP_INDEX_URL; index=$PIP_INDEX_URL ;;
    *) die "$lock: not a .lock file" ;;
  esac
  if [ "$mode" = download ]; then
    run "$VENV/bin/python" -m pip download --no-input --disable-pip-version-check --no-deps \
      --only-binary=:all: --require-hashes --index-url "$index" --dest "$dest" -r "$hashed"
  else
    run "$VENV/bin/python" -m pip wheel --no-input --disable-pip-version-check --no-deps --no-build-isolation \
      --only-binary=:all: --require-hashes --index-url "$index" --wheel-dir "$dest" -r "$hashed"
  fi
  run cp "$hashed" "$dest/$(basename "$lock" .lock).hashes.lock"
done
if [ "$mode" = download ]; then
  run "$VENV/bin/python" "$DOCKER_DIR/wheel-hashes.py" index "$dest"
fi
