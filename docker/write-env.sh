#!/usr/bin/env bash
# Write the container user's ids into compose's .env file, so that a bare `docker compose run --rm train` runs as the
# caller (compose.yaml: user: "${VERLFIT_UID:-1000}:${VERLFIT_GID:-1000}") and files under ./data and ./runs are theirs.
# Called by make (image targets and every compose target).
#
# Usage: write-env.sh FILE UID GID
# FILE's other lines are kept as they are; its VERLFIT_UID= and VERLFIT_GID= lines are replaced. The new file is
# written beside it and renamed over it, so an interrupted run leaves the old one whole; nothing is written when it
# already says so. FILE is left readable by its owner only (mode 600): users keep HF_TOKEN, WANDB_API_KEY or a proxy
# password there too, and compose reads it as the user who runs it. Fails when FILE exists and is not a regular file,
# or UID/GID are not numbers.
set -euo pipefail
[ $# -eq 3 ] || { echo "usage: write-env.sh FILE UID GID" >&2; exit 2; }
file=$1 uid=$2 gid=$3
case $uid$gid in *[!0-9]*|'') echo "write-env.sh: VERLFIT_UID=$uid VERLFIT_GID=$gid: numeric ids expected" >&2; exit 2;; esac
if [ -e "$file" ] && [ ! -f "$file" ]; then
  echo "write-env.sh: $file exists and is not a file: compose reads its variables from there; move it away" >&2
  exit 2
fi
new=$(mktemp "$(dirname "$file")/.env.XXXXXX")
trap 'rm -f "$new"' EXIT
{
  if [ -f "$file" ]; then grep -v -e '^VERLFIT_UID=' -e '^VERLFIT_GID=' -e '^# the container user (make writes these)' "$file" || true; fi
  echo "# the container user (make writes these): compose.yaml's user:, so ./data and ./runs stay yours"
  echo "VERLFIT_UID=$uid"
  echo "VERLFIT_GID=$gid"
} >"$new"
if [ -f "$file" ] && cmp -s "$new" "$file"; then
  chmod go-rwx "$file"
  exit 0
fi
chmod 600 "$new"
mv "$new" "$file"
