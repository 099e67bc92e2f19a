#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# Download one wheel by URL into a directory and verify its sha256 before anything installs it.
#
# Usage: fetch-wheel.sh DEST_DIR URL SHA256
#
# For wheels that no package index carries (vLLM's CUDA 11.8 build, flash-attn's cu11 build are
# GitHub release assets). SHA256 is required: there is no trust-on-first-use default. The file is
# saved under its URL-decoded name (pip needs the real wheel file name). A mirror of the release
# assets works by passing its URL; credentials come from /root/.netrc (a BuildKit secret).
# VERLFIT_DRY_RUN=1 prints the commands instead of running them.
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

[ $# -eq 3 ] || die "usage: fetch-wheel.sh DEST_DIR URL SHA256"
dest=$1 url=$2 sha256=$3
name=${url##*/}
name=${name%%\?*}
name=${name//%2B/+}
name=${name//%2b/+}
case $name in
  *.whl) ;;
  *) die "$url does not name a .whl file" ;;
esac
[ -n "$sha256" ] || die "no sha256 given for $name; pass its sha256 as a build arg (docs/images.md, 'A10 wheels')"
[[ $sha256 =~ ^[0-9a-f]{64}$ ]] || die "sha256 for $name must be 64 lowercase hex digits, got '$sha256'"

run mkdir -p "$dest"
run curl --fail --silent --show-error --location --retry 3 --netrc-optional --output "$dest/$name" "$url"
if dry_run; then
  printf '+ verify sha256 %s %q\n' "$sha256" "$dest/$name"
else
  actual=$(sha256sum "$dest/$name" | cut -d' ' -f1)
  if [ "$actual" != "$sha256" ]; then
    rm -f "$dest/$name"
    die "sha256 mismatch for $name from $url: expected $sha256, got $actual"
  fi
  log "$name: sha256 $actual verified"
fi
