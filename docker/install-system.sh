#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# Install one apt step's packages from the files docker/fetch-apt-packages.sh fetched by sha256: no apt index, no
# network, nothing but docker/apt.lock's files.
#
# Usage: install-system.sh STEP DIR
#   STEP  build, runtime or triton (lib.sh's apt_set_packages says what each holds)
#   DIR   the step's fetched files (the apt-packages stage's /apt-packages/STEP, bind-mounted)
#
# Each of the lock's lines for STEP is installed from DIR unless the base already has that version or a newer one
# (a base pinned by digest never moves, so this only skips what the base brings itself). apt resolves the files
# against what is installed: a dependency that is neither (the lock was resolved on other bases) stops the build with
# apt's own line and the fix, `make apt-lock` on the bases you build from. Afterwards every package that came in or
# changed must be in the lock at its version, and cuDNN is held (runtime step) so no later apt-get upgrade moves it.
#
# torch does not use the system cuDNN: torch 2.6.0+cu118 loads the pip package nvidia-cudnn-cu11 9.1.0.70. cuDNN 8.9.7
# is there for programs linked against the system cuDNN 8 (docs/images.md).
#
# Environment: APT_LOCK (docker/apt.lock), PYTHON_VERSION (and CUDNN_VERSION, TORCH_CUDA_VERSION for the steps that
# name them). VERLFIT_DRY_RUN=1 prints the commands instead of running them (nothing counts as installed then).
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

require PYTHON_VERSION
[ $# -eq 2 ] || die "usage: install-system.sh build|runtime|triton DIR"
step=$1 dir=$2
APT_LOCK=${APT_LOCK:-$DOCKER_DIR/apt.lock}
LISTS=${APT_LISTS_DIR:-/var/lib/apt/lists}
asked_list=$(apt_set_packages "$step") || exit 1
lock_list=$(apt_lock_lines "$APT_LOCK" "$step") || exit 1
mapfile -t asked <<<"$asked_list"
mapfile -t lines <<<"$lock_list"

# locked NAME: the lock's version of NAME
locked() { awk -v name="$1" '!/^#/ { split($1, pin, "="); if (pin[1] == name) { sub(/^[^=]*=/, "", $1); print $1 } }' "$APT_LOCK"; }
installed_version() { dry_run || dpkg-query -W -f '${Version}' "$1" 2>/dev/null || true; }

# every package the step asks for is in the lock (a step changed since the lock was made)
unlocked_asked=()
for package in "${asked[@]}"; do
  name=${package%%=*}
  [ -n "$(locked "$name")" ] || unlocked_asked+=("$name")
  [ "$package" = "$name" ] || [ "$(locked "$name")" = "${package#*=}" ] || unlocked_asked+=("$package (locked: $(locked "$name"))")
done
[ ${#unlocked_asked[@]} -eq 0 ] || die "the apt step '$step' asks for ${unlocked_asked[*]}, which $APT_LOCK does not pin at that version: regenerate the lock (make apt-lock; docs/images.md, 'apt lock')"

files=()
for line in "${lines[@]}"; do
  read -r pin _ _ path _ <<<"$line"
  name=${pin%%=*} version=${pin#*=}
  have=$(installed_version "$name")
  if [ -n "$have" ] && dpkg --compare-versions "$have" ge "$version"; then
    continue
  fi
  dry_run || [ -f "$dir/${path##*/}" ] || die "$dir/${path##*/} ($pin) is missing: the apt-packages stage fetches it (docker/fetch-apt-packages.sh $step)"
  files+=("$dir/${path##*/}")
done

export DEBIAN_FRONTEND=noninteractive
before=$(mktemp)
after=$(mktemp)
dpkg-query -W -f '${Package}=${Version}\n' 2>/dev/null | sort >"$before" || true
if [ ${#files[@]} -gt 0 ]; then
  run apt-get install -y --no-install-recommends "${files[@]}" \
    || die "apt could not install the lock's files for '$step' on this base (above: what it lacks): the lock was resolved on other bases; regenerate it on the bases you build from (make apt-lock; docs/images.md, 'apt lock')"
fi
case $step in runtime) run apt-mark hold libcudnn8 ;; esac
# every package that came in or changed is in the lock at its version
dpkg-query -W -f '${Package}=${Version}\n' 2>/dev/null | sort >"$after" || true
unlocked=()
while IFS= read -r installed; do
  [ "$(locked "${installed%%=*}")" = "${installed#*=}" ] || unlocked+=("$installed")
done < <(comm -13 "$before" "$after")
rm -f "$before" "$after"
[ ${#unlocked[@]} -eq 0 ] || die "apt installed ${unlocked[*]}, not at $APT_LOCK's versions: regenerate the lock (make apt-lock; docs/images.md, 'apt lock')"
run find "$LISTS" -mindepth 1 -delete
