#!/usr/bin/env bash
# Print the command that builds the images with BuildKit on this host, or say what to install.
#
# Usage: DOCKER=docker build-command.sh TARGET
#   prints one line, the words of the build command, for `make TARGET` to run:
#     DOCKER buildx build --load                  where the buildx plugin answers (Docker >= 23 ships it)
#     env DOCKER_BUILDKIT=1 DOCKER build          where it does not and the client is older than 23: such a
#                                                 client asks the engine's built-in BuildKit (Debian's docker.io
#                                                 20.10, for one, has no buildx package)
#   exits 2 with the fix on stderr otherwise: a client of 23 or later sends DOCKER_BUILDKIT=1 builds through
#   buildx only, and the legacy builder fails on the Dockerfiles' first RUN --mount.
#
# The Dockerfiles carry no `# syntax=` line, so either way the engine's own Dockerfile frontend parses them
# and nothing is pulled from a registry before the build starts (docs/images.md, "Building").
set -euo pipefail

target=${1:-image}
docker=${DOCKER:-docker}

if $docker buildx version >/dev/null 2>&1; then
  echo "$docker buildx build --load"
  exit 0
fi
client=$($docker version --format '{{.Client.Version}}' 2>/dev/null) || client=
major=${client%%.*}
if [[ $major =~ ^[0-9]+$ ]] && [ "$major" -lt 23 ]; then
  echo "env DOCKER_BUILDKIT=1 $docker build"
  exit 0
fi
if [ -z "$client" ]; then
  echo "make $target: '$docker version' did not answer: install Docker (Docker Engine >= 20.10 with BuildKit; docs/images.md, 'Building')" >&2
else
  # the client's own package name for buildx differs by where Docker came from
  echo "make $target: BuildKit is needed (the Dockerfiles use RUN --mount) and '$docker buildx version' failed," \
    "while the Docker client $client (>= 23) builds with BuildKit only through buildx: install Docker's buildx plugin" \
    "(package docker-buildx-plugin from Docker's apt/yum repository, or the docker-buildx binary in ~/.docker/cli-plugins/)," \
    "or build with a client older than 23 that uses the engine's built-in BuildKit (make DOCKER=/usr/bin/docker with" \
    "Debian's docker.io 20.10), or name your own command: make $target DOCKER_BUILD='...' (docs/images.md, 'Building')" >&2
fi
exit 2
