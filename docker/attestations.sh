#!/usr/bin/env bash
# Can this host's BuildKit make SBOM and provenance attestations for `make push`?
#
# Usage: DOCKER=docker attestations.sh
#   exit 0, nothing printed: yes. `docker buildx` answers and its current builder can store an image index: any driver
#     but `docker` (docker-container, kubernetes, remote), or the `docker` driver on an engine whose image store is
#     containerd's (`docker info`'s DriverStatus names io.containerd.snapshotter.v1).
#   exit 1, one line on stdout: no, and why, with the fix. Either buildx is not installed (only BuildKit through buildx
#     makes attestations), or the builder uses the `docker` driver on the engine's classic image store, which cannot
#     hold an image index: buildx stops there with "Attestation is not supported for the docker driver" (docker/buildx
#     #1988; Docker's attestation docs). make then pushes the built images without attestations and says so.
#   exit 2, on stderr: `docker buildx inspect` failed, so nobody knows; make stops rather than guess.
set -euo pipefail

docker=${DOCKER:-docker}

if ! $docker buildx version >/dev/null 2>&1; then
  echo "'$docker buildx' is not installed here, and only BuildKit through buildx makes them (install docker-buildx-plugin and run make push again)"
  exit 1
fi
if ! builder=$($docker buildx inspect 2>&1); then
  echo "make push: '$docker buildx inspect' failed, so whether its builder can make attestations is unknown: $builder" >&2
  exit 2
fi
name=$(sed -n 's/^Name: *//p' <<<"$builder" | head -n 1)
driver=$(sed -n 's/^Driver: *//p' <<<"$builder" | head -n 1)
if [ "$driver" != docker ]; then
  exit 0
fi
if $docker info --format '{{json .DriverStatus}}' 2>/dev/null | grep -q 'io.containerd.snapshotter'; then
  exit 0
fi
echo "the buildx builder '$name' uses the docker driver on the engine's classic image store, which cannot hold" \
  "attestations (buildx: \"Attestation is not supported for the docker driver\"); for them, turn on the containerd" \
  "image store, or 'docker buildx create --use --driver docker-container' (a builder of its own: it builds the images" \
  "again, without make image-*'s cache), and run make push again"
exit 1
