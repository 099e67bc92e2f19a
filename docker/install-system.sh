#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# Install one stage's system packages from Ubuntu 22.04 and NVIDIA's CUDA apt repository.
#
# Usage: install-system.sh GROUP...              install the groups' packages at docker/apt.lock's versions
#        install-system.sh --print-lock GROUP...  print NAME=VERSION for each package apt would install now
#                                                 (what `make apt-lock` collects into docker/apt.lock)
#   always   ca-certificates, git, GNU patch (patches/apply.py), Python $PYTHON_VERSION and its venv
#   build    curl (the build stages download wheels)
#   cudnn    cuDNN $CUDNN_VERSION from NVIDIA's repository, held with apt-mark so no later
#            apt-get upgrade moves it (runtime stage)
#   triton   what Triton needs at run time to build its launcher stubs: a C compiler, the Python
#            headers and CUDA's link-time libcuda.so stub (Triton links with -lcuda; the container
#            toolkit mounts only libcuda.so.1). A10 image only: Triton cannot target the P40.
#   init     tini, the image's PID 1 (reaps Ray's processes, passes docker stop's signal on)
#
# The apt lock (APT_LOCK, default docker/apt.lock, written by `make apt-lock`): every package apt would install for
# the groups (its simulation, `apt-get -s`, dependencies included) is installed at the lock's version, NAME=VERSION,
# and nothing else: a package missing from the lock, a version the archive no longer has, or a package that came in
# unpinned stops the build with what to do. Ubuntu's live archive drops superseded versions from jammy-updates and
# jammy-security; the fix is a dated snapshot of the archive, APT_MIRROR=https://snapshot.ubuntu.com/ubuntu/<time>
# (docs/images.md, "apt lock").
#
# torch does not use the system cuDNN: torch 2.6.0+cu118 loads the pip package nvidia-cudnn-cu11
# 9.1.0.70. cuDNN 8.9.7 is there for programs linked against the system cuDNN 8 (docs/images.md).
#
# Environment (build args): PYTHON_VERSION (3.10), CUDNN_VERSION (8.9.7.29-1+cuda11.8), TORCH_CUDA_VERSION (11.8),
# APT_MIRROR (replaces archive.ubuntu.com and security.ubuntu.com, e.g. http://mirror.example/ubuntu),
# CUDA_APT_MIRROR (replaces https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/x86_64).
# Mirrors are used for this one apt run and the original sources are restored afterwards, so no
# mirror is left in the image. NVIDIA's repository is consulted only by the groups that install from it
# (cudnn, triton): for `build` alone its source lines are set aside during the run and put back after.
# When apt cannot reach a source or finds no libcudnn8 at the pin, the error names the build arg that
# points it at a mirror. A CA bundle build secret is trusted for https sources (lib.sh).
# VERLFIT_DRY_RUN=1 prints the commands instead of running them.
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

require PYTHON_VERSION
print_lock=false
if [ "${1:-}" = --print-lock ]; then
  print_lock=true
  shift
  exec 3>&1 1>&2  # the lock lines alone on stdout (fd 3); apt's progress to stderr
fi
[ $# -gt 0 ] || die "usage: install-system.sh [--print-lock] build|cudnn|triton|init..."
APT_LOCK=${APT_LOCK:-$DOCKER_DIR/apt.lock}

UBUNTU_ARCHIVES=(http://archive.ubuntu.com/ubuntu http://security.ubuntu.com/ubuntu)
CUDA_REPO=https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/x86_64
SOURCES=${APT_SOURCES_DIR:-/etc/apt}         # tests point these two at scratch copies
LISTS=${APT_LISTS_DIR:-/var/lib/apt/lists}

packages=(ca-certificates git patch python3 "python${PYTHON_VERSION}" "python${PYTHON_VERSION}-venv")
held=()
needs_cuda_repo=false
for group in "$@"; do
  case $group in
    build) packages+=(curl) ;;
    cudnn)
      require CUDNN_VERSION
      packages+=("libcudnn8=${CUDNN_VERSION}")
      held+=(libcudnn8)
      needs_cuda_repo=true
      ;;
    init) packages+=(tini) ;;
    triton)
      require TORCH_CUDA_VERSION
      packages+=(gcc libc6-dev "python${PYTHON_VERSION}-dev" "cuda-driver-dev-${TORCH_CUDA_VERSION/./-}")
      needs_cuda_repo=true
      ;;
    *) die "unknown package group '$group' (build, cudnn, triton, init)" ;;
  esac
done

# Point apt at the mirrors for this run only; set NVIDIA's source lines aside when nothing comes from there.
mirrored=()
if [ -n "${APT_MIRROR:-}" ]; then
  for archive in "${UBUNTU_ARCHIVES[@]}"; do
    mirrored+=("s|$archive|${APT_MIRROR%/}|g")
  done
fi
if [ -n "${CUDA_APT_MIRROR:-}" ]; then
  mirrored+=("s|$CUDA_REPO|${CUDA_APT_MIRROR%/}|g")
fi
shopt -s nullglob
lists=("$SOURCES/sources.list" "$SOURCES"/sources.list.d/*.list)
shopt -u nullglob
changed=()
set_aside=()
for list in "${lists[@]}"; do
  if ! $needs_cuda_repo && grep -qF "$CUDA_REPO" "$list" 2>/dev/null; then
    set_aside+=("$list")
  elif [ ${#mirrored[@]} -gt 0 ]; then
    changed+=("$list")
  fi
done
restore() {
  local list
  for list in "${changed[@]}" "${set_aside[@]}"; do
    if dry_run || [ -f "$list.verlfit-orig" ]; then
      run mv "$list.verlfit-orig" "$list"
    fi
  done
}
trap restore EXIT
for list in "${set_aside[@]}"; do
  run mv "$list" "$list.verlfit-orig"
done
if [ ${#changed[@]} -gt 0 ]; then
  sed_args=()
  for expression in "${mirrored[@]}"; do
    sed_args+=(-e "$expression")
  done
  for list in "${changed[@]}"; do
    run cp "$list" "$list.verlfit-orig"
    run sed -i "${sed_args[@]}" "$list"
  done
fi

where_from="Ubuntu's archive (APT_MIRROR=<a mirror of http://archive.ubuntu.com/ubuntu>)"
if $needs_cuda_repo; then
  where_from="$where_from or NVIDIA's CUDA repository (CUDA_APT_MIRROR=<a mirror of $CUDA_REPO>)"
fi
export DEBIAN_FRONTEND=noninteractive
# apt-get update exits 100 when a source cannot be reached; its own lines say which
run apt-get "${APT_CA_OPTIONS[@]}" update \
  || die "apt-get update failed (above: the source it could not reach): set the build arg for $where_from; behind a TLS-intercepting proxy pass its CA bundle, --secret id=ca-bundle,src=<bundle> (docs/images.md, 'Restricted network')"
if $needs_cuda_repo && ! dry_run && ! apt-cache madison libcudnn8 2>/dev/null | grep -qF " ${CUDNN_VERSION} "; then
  die "no apt source offers libcudnn8=${CUDNN_VERSION}: it comes from NVIDIA's CUDA repository ($CUDA_REPO), which this build did not reach: set CUDA_APT_MIRROR=<a mirror of it> (make image-p40 CUDA_APT_MIRROR=...; docs/images.md, 'Restricted network')"
fi
# what apt would install for the groups now: NAME=VERSION per package, in C order (apt-get -s prints
# "Inst NAME [OLD] (VERSION ..." per package; python-apt, which would parse it, is not in the bases)
simulated() {
  apt-get "${APT_CA_OPTIONS[@]}" -s install -y --no-install-recommends "${packages[@]}" \
    | sed -n 's/^Inst \([^ ]*\) \(\[[^]]*\] \)\{0,1\}(\([^ ]*\) .*/\1=\3/p' | LC_ALL=C sort
}
if $print_lock; then
  simulated >&3
  run find "$LISTS" -mindepth 1 -delete
  exit 0
fi
[ -f "$APT_LOCK" ] || die "no apt lock at $APT_LOCK (make apt-lock writes docker/apt.lock)"
# locked NAME: the lock's version of NAME
locked() { awk -F= -v name="$1" '$1 == name { print $2 }' "$APT_LOCK"; }
lock_date=$(sed -n 's/^# snapshot: //p' "$APT_LOCK")
pinned=()
missing=()
gone=()
if dry_run; then
  names=("${packages[@]%%=*}")
else
  simulation=$(simulated) || die "apt cannot install ${packages[*]} from these sources (apt-get -s, above)"
  mapfile -t names < <(printf '%s\n' "$simulation" | sed -n 's/=.*//p')
fi
for name in "${names[@]}"; do
  version=$(locked "$name")
  if [ -z "$version" ]; then
    missing+=("$name")
  elif ! dry_run && ! apt-cache show "$name=$version" >/dev/null 2>&1; then
    gone+=("$name=$version")
  fi
  pinned+=("$name=$version")
done
[ ${#missing[@]} -eq 0 ] || die "apt would install ${missing[*]}, which $APT_LOCK does not pin (the base image or the groups changed): regenerate the lock on the bases you build from, make apt-lock (docs/images.md, 'apt lock')"
[ ${#gone[@]} -eq 0 ] || die "the apt sources no longer offer ${gone[*]} (Ubuntu drops superseded versions from jammy-updates and jammy-security): build from a dated snapshot of the archive taken while the lock was current, APT_MIRROR=https://snapshot.ubuntu.com/ubuntu/${lock_date:-<YYYYMMDDTHHMMSSZ>} (make image-p40 APT_MIRROR=...), or regenerate the lock (make apt-lock; docs/images.md, 'apt lock')"
before=$(mktemp)
after=$(mktemp)
dpkg-query -W -f '${Package}=${Version}\n' 2>/dev/null | sort >"$before" || true
if [ ${#pinned[@]} -gt 0 ]; then
  run apt-get "${APT_CA_OPTIONS[@]}" install -y --no-install-recommends "${pinned[@]}"
fi
if [ ${#held[@]} -gt 0 ]; then
  run apt-mark hold "${held[@]}"
fi
# every package that came in or changed is in the lock at its version
dpkg-query -W -f '${Package}=${Version}\n' 2>/dev/null | sort >"$after" || true
unlocked=()
while IFS= read -r installed; do
  [ "$(locked "${installed%%=*}")" = "${installed#*=}" ] || unlocked+=("$installed")
done < <(comm -13 "$before" "$after")
rm -f "$before" "$after"
[ ${#unlocked[@]} -eq 0 ] || die "apt installed ${unlocked[*]}, not at $APT_LOCK's versions: regenerate the lock (make apt-lock; docs/images.md, 'apt lock')"
run find "$LISTS" -mindepth 1 -delete
