#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# Resolve apt steps to files: what apt would install for each step now, as the files it would fetch and their sha256.
# Runs as root inside a throwaway container of a base image; `make apt-lock` (docker/apt-lock.sh) collects its output
# into docker/apt.lock. Never run in an image build.
#
# Usage: apt-resolve.sh STEP...
#   STEP is an apt step of lib.sh's apt_set_packages (build, runtime, triton). Steps are stacked in the order given, as
#   the images run them: `runtime triton` resolves triton on top of runtime, so triton's lines are only what it adds.
# Output, one line per package file (stdout):
#   NAME=VERSION SHA256 SOURCE PATH STEP
#   SOURCE is `ubuntu` (PATH is the pool path, the same on every Ubuntu mirror and on snapshot.ubuntu.com) or `cuda`
#   (PATH is relative to NVIDIA's CUDA repository for Ubuntu 22.04, $CUDA_REPO). The sha256 is the one the signed index
#   gives (apt-get --print-uris with Acquire::ForceHash=SHA256).
# and one line "# ubuntu archive: YYYYMMDDTHHMMSSZ": the newest Date of the Ubuntu Release files read, the time at which
# snapshot.ubuntu.com serves exactly this state of the archive.
#
# Environment: PYTHON_VERSION, CUDNN_VERSION, TORCH_CUDA_VERSION (the Dockerfiles' ARGs), APT_MIRROR (replaces
# archive.ubuntu.com and security.ubuntu.com), CUDA_APT_MIRROR (replaces $CUDA_REPO): the container's sources are
# rewritten in place (the container is thrown away). A CA bundle at /run/secrets/ca-bundle is trusted (lib.sh).
# apt reads the lower-case http_proxy/https_proxy. Fails, naming the setting, when a source cannot be reached
# (apt-get update --error-on=any) or a file's URI belongs to no known source.
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

require PYTHON_VERSION
[ $# -gt 0 ] || die "usage: apt-resolve.sh build|runtime|triton..."
SOURCES=${APT_SOURCES_DIR:-/etc/apt}
LISTS=${APT_LISTS_DIR:-/var/lib/apt/lists}
ubuntu_root=${APT_MIRROR:+${APT_MIRROR%/}}
cuda_root=${CUDA_APT_MIRROR:-$CUDA_REPO}
cuda_root=${cuda_root%/}

shopt -s nullglob
for list in "$SOURCES/sources.list" "$SOURCES"/sources.list.d/*.list; do
  [ -z "${APT_MIRROR:-}" ] || sed -i -e "s|${UBUNTU_ARCHIVES[0]}|$ubuntu_root|g" -e "s|${UBUNTU_ARCHIVES[1]}|$ubuntu_root|g" "$list"
  [ -z "${CUDA_APT_MIRROR:-}" ] || sed -i "s|$CUDA_REPO|$cuda_root|g" "$list"
done
shopt -u nullglob

export DEBIAN_FRONTEND=noninteractive
apt-get "${APT_CA_OPTIONS[@]}" update --error-on=any >&2 \
  || die "apt-get update failed (above: the source it could not reach): set APT_MIRROR=<a mirror of ${UBUNTU_ARCHIVES[0]}> or CUDA_APT_MIRROR=<a mirror of $CUDA_REPO>; behind a proxy set the lower-case http_proxy/https_proxy apt reads; behind a TLS-intercepting proxy pass its CA bundle, CA_BUNDLE=<bundle> (docs/images.md, 'apt lock')"

# The Ubuntu archive's state: the newest Date of its Release files (Origin: Ubuntu), as snapshot.ubuntu.com's time
newest=0
for release in "$LISTS"/*InRelease; do
  grep -qx 'Origin: Ubuntu' "$release" || continue
  date=$(sed -n 's/^Date: //p' "$release" | head -n 1)
  seconds=$(date -u -d "$date" +%s) || die "$release: unreadable Date '$date'"
  [ "$seconds" -le "$newest" ] || newest=$seconds
done
[ "$newest" -gt 0 ] || die "no Ubuntu Release file in $LISTS after apt-get update: are Ubuntu's sources in $SOURCES?"
echo "# ubuntu archive: $(date -u -d "@$newest" +%Y%m%dT%H%M%SZ)"

# The files apt would fetch for the steps so far: "'URI' NAME_VERSION_ARCH.deb SIZE SHA256:HASH" a line
asked=()
seen=$(mktemp)
for step in "$@"; do
  package_list=$(apt_set_packages "$step") || exit 1
  mapfile -t packages <<<"$package_list"
  asked+=("${packages[@]}")
  uris=$(apt-get "${APT_CA_OPTIONS[@]}" -o Acquire::ForceHash=SHA256 install --print-uris -qq --no-install-recommends "${asked[@]}") \
    || die "apt cannot install ${asked[*]} from these sources (above)"
  while read -r uri file _ hash; do
    [ -n "$uri" ] || continue
    uri=${uri//\'/}
    grep -qxF "$file" "$seen" && continue
    echo "$file" >>"$seen"
    name=${file%%_*} version=${file#*_}
    version=${version%_*}
    version=$(printf '%b' "${version//%/\\x}")  # apt writes the epoch's ':' as %3a
    case $hash in SHA256:*) hash=${hash#SHA256:} ;; *) die "apt gave no SHA256 for $uri ('$hash')" ;; esac
    uri=$(printf '%b' "${uri//%/\\x}")  # and '+' as %2b
    case $uri in
      "$cuda_root"/*) path=${uri#"$cuda_root"/}; echo "$name=$version $hash cuda ${path#./} $step" ;;
      */pool/*) echo "$name=$version $hash ubuntu pool/${uri#*/pool/} $step" ;;
      *) die "$uri: neither in NVIDIA's repository ($cuda_root) nor in an Ubuntu pool" ;;
    esac
  done <<<"$uris"
done
rm -f "$seen"
find "$LISTS" -mindepth 1 -delete
