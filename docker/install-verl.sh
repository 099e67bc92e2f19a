#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# Fetch verl at its release commit and apply verlfit's patch series to it (build stage).
#
# Usage: install-verl.sh fetch DIR   clone VERL_REPO at VERL_COMMIT into DIR and check the commit
#        install-verl.sh patch DIR   python3 PATCHES_DIR/apply.py DIR (the series, all or nothing)
#
# The commit is fetched by its hash (a tag can be moved; a hash cannot); a server that refuses to
# serve a bare hash gets a full fetch instead. Environment (build args): VERL_REPO (a mirror of
# https://github.com/volcengine/verl.git works), VERL_COMMIT; PATCHES_DIR (the checkout's patches/).
# VERLFIT_DRY_RUN=1 prints the commands instead of running them.
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

[ $# -eq 2 ] || die "usage: install-verl.sh fetch|patch DIR"
mode=$1 dir=$2
case $mode in
  fetch)
    require VERL_REPO VERL_COMMIT
    [[ $VERL_COMMIT =~ ^[0-9a-f]{40}$ ]] || die "VERL_COMMIT must be a full 40-digit commit hash, got '$VERL_COMMIT'"
    run git init --quiet "$dir"
    run git -C "$dir" remote add origin "$VERL_REPO"
    if ! run git -C "$dir" fetch --quiet --depth 1 origin "$VERL_COMMIT"; then
      log "$VERL_REPO refused a fetch by commit hash; fetching all branches and tags"
      run git -C "$dir" fetch --quiet --tags origin
    fi
    run git -C "$dir" -c advice.detachedHead=false checkout --quiet "$VERL_COMMIT"
    if ! dry_run; then
      head=$(git -C "$dir" rev-parse HEAD)
      [ "$head" = "$VERL_COMMIT" ] || die "verl checkout is at $head, expected $VERL_COMMIT"
    fi
    ;;
  patch)
    require PATCHES_DIR
    run python3 "$PATCHES_DIR/apply.py" "$dir"
    ;;
  *) die "unknown mode '$mode' (fetch, patch)" ;;
esac
