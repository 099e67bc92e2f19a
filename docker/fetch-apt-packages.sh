#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# Fetch the files of docker/apt.lock's apt steps by their sha256: the image build's only apt download (its own stage,
# apt-packages). The stages that install them (docker/install-system.sh) take the files from here, with no apt index
# and no network, so a build installs exactly the lock, today and after Ubuntu's index has moved on.
#
# Usage: fetch-apt-packages.sh DEST STEP...
#   writes DEST/STEP/<file>.deb for each of the lock's lines of each STEP (build, runtime, triton)
# Where each file is looked for, in this order, until one answers with the lock's sha256:
#   Ubuntu's (SOURCE ubuntu): $APT_MIRROR when set, then archive.ubuntu.com and security.ubuntu.com (their pools keep
#     superseded files long after the index drops them), then snapshot.ubuntu.com at the lock's "ubuntu archive:" time
#   NVIDIA's (SOURCE cuda): $CUDA_APT_MIRROR when set, then NVIDIA's CUDA repository (it keeps every version)
# A line whose sha256 is `signed-index` (NVIDIA's files in a lock resolved against a stand-in of NVIDIA's repository:
# docker/apt-lock.sh) is fetched by apt itself from NVIDIA's repository (or CUDA_APT_MIRROR), which checks it against
# NVIDIA's signed index with the base image's keyring; its sha256 is printed, for `make apt-lock` to record.
# A file found nowhere with its sha256 stops the build with one message: the package, each place tried and what it
# answered, and the fix. Files already fetched are kept by sha256 in $APT_FILES_CACHE (a build cache mount).
# The last line says how many files came from where.
#
# Environment: APT_LOCK (docker/apt.lock), APT_MIRROR, CUDA_APT_MIRROR (build args), APT_FILES_CACHE
# (/var/cache/verlfit-apt), http_proxy/https_proxy (apt reads the lower-case names), the CA bundle secret (lib.sh).
# Tests: UBUNTU_ARCHIVES_OVERRIDE / UBUNTU_SNAPSHOTS_OVERRIDE / CUDA_REPO_OVERRIDE replace the public places.
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

[ $# -ge 2 ] || die "usage: fetch-apt-packages.sh DEST build|runtime|triton..."
dest=$1
shift
APT_LOCK=${APT_LOCK:-$DOCKER_DIR/apt.lock}
cache=${APT_FILES_CACHE:-/var/cache/verlfit-apt}
# shellcheck disable=SC2206  # a test's space-separated list
[ -z "${UBUNTU_ARCHIVES_OVERRIDE:-}" ] || UBUNTU_ARCHIVES=($UBUNTU_ARCHIVES_OVERRIDE)
UBUNTU_SNAPSHOTS=${UBUNTU_SNAPSHOTS_OVERRIDE:-$UBUNTU_SNAPSHOTS}
CUDA_REPO=${CUDA_REPO_OVERRIDE:-$CUDA_REPO}
archive_date=$(sed -n 's/^# ubuntu archive: //p' "$APT_LOCK" 2>/dev/null | head -n 1)

ubuntu_places=()
[ -z "${APT_MIRROR:-}" ] || ubuntu_places+=("${APT_MIRROR%/}")
ubuntu_places+=("${UBUNTU_ARCHIVES[@]}")
[ -z "$archive_date" ] || ubuntu_places+=("$UBUNTU_SNAPSHOTS/$archive_date")
cuda_places=()
[ -z "${CUDA_APT_MIRROR:-}" ] || cuda_places+=("${CUDA_APT_MIRROR%/}")
cuda_places+=("$CUDA_REPO")
# apt's downloader: it verifies the hash it is given, honours the proxy variables and the CA bundle; a place that does
# not answer is given up after 30 s, and root writes the files (no _apt sandbox in a build)
helper=(/usr/lib/apt/apt-helper "${APT_CA_OPTIONS[@]}" -o Acquire::http::Timeout=30 -o Acquire::https::Timeout=30
        -o Acquire::Retries=0 -o APT::Sandbox::User=root)

declare -A fetched_from=()
signed_index=()
run mkdir -p "$cache"
for step in "$@"; do
  run mkdir -p "$dest/$step"
  lock_list=$(apt_lock_lines "$APT_LOCK" "$step") || exit 1
  mapfile -t lines <<<"$lock_list"
  for line in "${lines[@]}"; do
    read -r pin sha256 source path _ <<<"$line"
    file=${path##*/}
    if [ "$sha256" = signed-index ]; then
      [ "$source" = cuda ] || die "$APT_LOCK: $pin has no sha256 ('signed-index' is for NVIDIA's files only): regenerate the lock (make apt-lock)"
      signed_index+=("$pin|$dest/$step/$file")
      continue
    fi
    case $source in
      ubuntu) places=("${ubuntu_places[@]}") ;;
      cuda) places=("${cuda_places[@]}") ;;
      *) die "$APT_LOCK: $pin: unknown source '$source' (ubuntu, cuda): regenerate the lock (make apt-lock)" ;;
    esac
    if dry_run; then
      run "${helper[@]}" download-file "${places[0]}/$path" "$cache/$sha256.deb" "SHA256:$sha256"
      continue
    fi
    if ! { [ -f "$cache/$sha256.deb" ] && echo "$sha256  $cache/$sha256.deb" | sha256sum --check --status; }; then
      tried=()
      for place in "${places[@]}"; do
        if answer=$("${helper[@]}" download-file "$place/$path" "$cache/$sha256.partial" "SHA256:$sha256" 2>&1); then
          # (apt's file:// method links to the file instead of copying it: the cache keeps a copy)
          cp -L "$cache/$sha256.partial" "$cache/$sha256.copy" && mv "$cache/$sha256.copy" "$cache/$sha256.deb"
          rm -f "$cache/$sha256.partial"
          break
        fi
        rm -f "$cache/$sha256.partial"
        # apt's reason: the line after "Err:N URI" ("404  Not Found [IP: ...]", "Hash Sum mismatch", "Could not connect ...")
        reason=$(printf '%s\n' "$answer" | sed -n '/^Err:/{n;s/^ *//;s/ \[IP:.*//;p;q}')
        tried+=("$place/$path (${reason:-$(printf '%s\n' "$answer" | tail -n 1)})")
      done
      [ -f "$cache/$sha256.deb" ] || die "$pin: no place has its file with the lock's sha256 $sha256. Tried: $(printf '%s; ' "${tried[@]}")fix: regenerate the lock on a networked host (make apt-lock), or set APT_MIRROR (CUDA_APT_MIRROR for NVIDIA's) to a mirror that keeps this file (docs/images.md, 'apt lock')"
      fetched_from[$place]=$((${fetched_from[$place]:-0} + 1))
    else
      fetched_from[the build cache]=$((${fetched_from[the build cache]:-0} + 1))
    fi
    cp "$cache/$sha256.deb" "$dest/$step/$file"
  done
done

# NVIDIA's signed-index lines: apt fetches them from NVIDIA's repository alone, checking each against the signed index
if [ ${#signed_index[@]} -gt 0 ]; then
  index=$(mktemp -d)
  mkdir -p "$index/lists/partial" "$index/parts" "$index/archives/partial"
  SOURCES=${APT_SOURCES_DIR:-/etc/apt}
  # NVIDIA's own source lines of the base image (its keyring: signed-by), pointed at the mirror when one is set
  cat "$SOURCES"/sources.list.d/*.list 2>/dev/null | grep -F "$CUDA_REPO" | sed "s|$CUDA_REPO|${cuda_places[0]}|g" >"$index/sources.list" || true
  [ -s "$index/sources.list" ] || die "no source line of NVIDIA's CUDA repository ($CUDA_REPO) in $SOURCES/sources.list.d: the base image is not nvidia/cuda's, or its sources changed"
  apt_index=(-o "Dir::Etc::SourceList=$index/sources.list" -o "Dir::Etc::SourceParts=$index/parts"
             -o "Dir::State::Lists=$index/lists" -o "Dir::Cache::Archives=$index/archives" -o APT::Sandbox::User=root)
  run apt-get "${APT_CA_OPTIONS[@]}" "${apt_index[@]}" update --error-on=any \
    || die "apt-get update of NVIDIA's CUDA repository failed (above): set CUDA_APT_MIRROR=<a mirror of $CUDA_REPO>; behind a TLS-intercepting proxy pass its CA bundle, --secret id=ca-bundle,src=<bundle> (docs/images.md, 'Restricted network')"
  for entry in "${signed_index[@]}"; do
    pin=${entry%%|*} target=${entry#*|}
    (cd "$index/archives" && run apt-get "${APT_CA_OPTIONS[@]}" "${apt_index[@]}" download "$pin") \
      || die "$pin: NVIDIA's repository (${cuda_places[0]}) does not offer it (above): set CUDA_APT_MIRROR to a mirror that has it (docs/images.md, 'apt lock')"
    dry_run && continue
    downloaded=$(find "$index/archives" -maxdepth 1 -name "${target##*/}" -print -quit)
    [ -n "$downloaded" ] || die "$pin: apt fetched no ${target##*/}"
    mv "$downloaded" "$target"
    log "$pin: $(sha256sum "$target" | cut -d' ' -f1), checked against NVIDIA's signed index (make apt-lock where NVIDIA's repository answers records it)"
  done
  rm -rf "$index"
fi

summary=
for place in "${ubuntu_places[@]}" "${cuda_places[@]}" "the build cache"; do
  [ -z "${fetched_from[$place]:-}" ] || summary+="${summary:+, }${fetched_from[$place]} from $place"
done
[ ${#signed_index[@]} -eq 0 ] || summary+="${summary:+, }${#signed_index[@]} checked against NVIDIA's signed index (${cuda_places[0]})"
log "apt packages fetched by sha256 for $*: ${summary:-none (dry run)}"
