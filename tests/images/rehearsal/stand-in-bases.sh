#!/usr/bin/env bash
# Stand-ins for the nvidia/cuda:11.8.0-{devel,base}-ubuntu22.04 base images, which the public Docker registry and
# NVIDIA's registry serve and this network cannot reach: Ubuntu 22.04 (jammy) from Ubuntu's own archive by
# debootstrap, plus what the images' scripts rely on from NVIDIA's bases: the CUDA apt source line and its keyring
# path, the ENV (CUDA_VERSION, NVIDIA_*, PATH, LD_LIBRARY_PATH) and ca-certificates. No CUDA files: nothing in the
# rehearsal runs GPU code. Each image is labelled io.verlfit.stand-in with what it stands in for.
#
# Usage: stand-in-bases.sh WORKDIR KEYRING REGISTRY
#   WORKDIR   where the jammy root is made (cached: rootfs.tar is reused when present)
#   KEYRING   the binary OpenPGP keyring to place at NVIDIA's path (the rehearsal's own apt repository key)
#   REGISTRY  host:port of the local registry; pushes REGISTRY/nvidia/cuda:11.8.0-{devel,base}-ubuntu22.04
# Environment: DOCKER (docker), UBUNTU_MIRROR (http://archive.ubuntu.com/ubuntu). Built with the command
# docker/build-command.sh picks, as `make image-p40` is.
set -euo pipefail
[ $# -eq 3 ] || { echo "usage: stand-in-bases.sh WORKDIR KEYRING REGISTRY" >&2; exit 2; }
workdir=$1 keyring=$2 registry=$3
docker=${DOCKER:-docker}
mirror=${UBUNTU_MIRROR:-http://archive.ubuntu.com/ubuntu}
# Ubuntu's archive keyring, which Debian does not package: the .deb from Ubuntu's archive, pinned by its sha256
keyring_deb=ubuntu-keyring_2021.03.26_all.deb
keyring_sha256=0d0e7ed6b112f5d03eabf3c7eb01ebdacf9c57714b279e90495cfc58c8c4520f
cuda_repo=https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/x86_64

mkdir -p "$workdir"
if [ ! -s "$workdir/rootfs.tar" ]; then
  curl --fail --silent --show-error --location --output "$workdir/$keyring_deb" "$mirror/pool/main/u/ubuntu-keyring/$keyring_deb"
  echo "$keyring_sha256  $workdir/$keyring_deb" | sha256sum --check --quiet
  rm -rf "$workdir/keyring" && mkdir "$workdir/keyring"
  dpkg-deb --extract "$workdir/$keyring_deb" "$workdir/keyring"
  rm -rf "$workdir/root"
  debootstrap --variant=minbase --include=ca-certificates \
    --keyring="$workdir/keyring/usr/share/keyrings/ubuntu-archive-keyring.gpg" jammy "$workdir/root" "$mirror" >"$workdir/debootstrap.log" 2>&1 \
    || { tail -20 "$workdir/debootstrap.log" >&2; exit 1; }
  # the archive lines of Ubuntu's own images (main restricted universe multiverse, updates, security)
  cat >"$workdir/root/etc/apt/sources.list" <<SOURCES
deb http://archive.ubuntu.com/ubuntu/ jammy main restricted universe multiverse
deb http://archive.ubuntu.com/ubuntu/ jammy-updates main restricted universe multiverse
deb http://security.ubuntu.com/ubuntu/ jammy-security main restricted universe multiverse
SOURCES
  chroot "$workdir/root" apt-get clean
  rm -rf "$workdir/root/var/lib/apt/lists/"*
  tar --numeric-owner -C "$workdir/root" -cf "$workdir/rootfs.tar.partial" .
  mv "$workdir/rootfs.tar.partial" "$workdir/rootfs.tar"
  rm -rf "$workdir/root"
fi

for flavour in devel base; do
  context=$workdir/context-$flavour
  rm -rf "$context" && mkdir -p "$context"
  cp "$keyring" "$context/cuda-archive-keyring.gpg"
  cp "$workdir/rootfs.tar" "$context/rootfs.tar"
  cat >"$context/Dockerfile" <<DOCKERFILE
FROM scratch
ADD rootfs.tar /
# NVIDIA's CUDA repository as nvidia/cuda's bases declare it (the key is the rehearsal's own apt repository's)
COPY cuda-archive-keyring.gpg /usr/share/keyrings/cuda-archive-keyring.gpg
RUN echo "deb [signed-by=/usr/share/keyrings/cuda-archive-keyring.gpg] $cuda_repo/ /" > /etc/apt/sources.list.d/cuda-ubuntu2204-x86_64.list
ENV PATH=/usr/local/nvidia/bin:/usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \\
    LD_LIBRARY_PATH=/usr/local/nvidia/lib:/usr/local/nvidia/lib64 \\
    CUDA_VERSION=11.8.0 \\
    NVIDIA_VISIBLE_DEVICES=all \\
    NVIDIA_DRIVER_CAPABILITIES=compute,utility \\
    NVIDIA_REQUIRE_CUDA="cuda>=11.8 brand=tesla,driver>=470,driver<471"
LABEL io.verlfit.stand-in="nvidia/cuda:11.8.0-$flavour-ubuntu22.04: Ubuntu 22.04 from Ubuntu's archive (debootstrap), NVIDIA's apt source line, keyring path and ENV; no CUDA files"
CMD ["bash"]
DOCKERFILE
  tag=$registry/nvidia/cuda:11.8.0-$flavour-ubuntu22.04
  build=$(DOCKER=$docker bash "$(dirname "${BASH_SOURCE[0]}")/../../../docker/build-command.sh" stand-in-bases)
  $build --quiet --tag "$tag" "$context" >/dev/null
  $docker push --quiet "$tag" >/dev/null
  rm -rf "$context"
done
