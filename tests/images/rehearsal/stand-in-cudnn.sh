#!/usr/bin/env bash
# Stand-in for NVIDIA's CUDA apt repository, which this network cannot reach: a flat apt repository signed with a
# key made here, holding one empty package, libcudnn8 at the image's pin (8.9.7.29-1+cuda11.8), so the build's
# `apt-get install libcudnn8=VERSION` and `apt-mark hold` run for real against a signed repository (the pin, the
# signature check, the hold). It carries no cuDNN code, only a stand-in libcudnn.so.8 (a C stub built here with gcc)
# that needs cuBLAS 11 (libcublasLt.so.11, libcublas.so.11) as cuDNN 8's own libraries do: on the image's CUDA "base"
# flavour, which has no cuBLAS, only torch's copy (the nvidia-cublas-cu11 wheel, on the library path through
# /etc/ld.so.conf.d/verlfit-torch-cuda.conf) can satisfy it, and check-image.py --libraries says whether it does. Beside it an empty cuda-driver-dev-11-8 at
# 11.8.89-1 (the version of NVIDIA's repository: its file name cuda-driver-dev-11-8_11.8.89-1_amd64.deb in public
# install scripts), the A10 image's one other package from there, so `make apt-lock` can collect the A10 image's
# packages too (gcc, libc6-dev and python3.10-dev come from Ubuntu's real archive).
#
# Usage: stand-in-cudnn.sh DIR VERSION
#   writes DIR/repo/ (serve it; CUDA_APT_MIRROR=<its URL>) and DIR/cuda-archive-keyring.gpg (the public key, binary)
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: stand-in-cudnn.sh DIR VERSION" >&2; exit 2; }
dir=$1 version=$2
rm -rf "$dir" && mkdir -p "$dir/repo" "$dir/gnupg"
chmod 700 "$dir/gnupg"
export GNUPGHOME=$dir/gnupg
# the stand-in library: linked against cuBLAS 11's sonames (stubs made for the link only, never shipped)
mkdir -p "$dir/stub"
printf 'int cudnnGetVersion(void) { return 8907; }\n' >"$dir/stub/cudnn.c"
for soname in libcublasLt.so.11 libcublas.so.11; do
  gcc -shared -fPIC -Wl,-soname,"$soname" -o "$dir/stub/$soname" "$dir/stub/cudnn.c"
done
for package in "libcudnn8 $version" "cuda-driver-dev-11-8 11.8.89-1"; do
  name=${package% *} package_version=${package#* }
  rm -rf "$dir/package" && mkdir -p "$dir/package/DEBIAN"
  if [ "$name" = libcudnn8 ]; then
    mkdir -p "$dir/package/usr/lib/x86_64-linux-gnu"
    gcc -shared -fPIC -Wl,-soname,libcudnn.so.8 -o "$dir/package/usr/lib/x86_64-linux-gnu/libcudnn.so.8.9.7" "$dir/stub/cudnn.c" \
      -Wl,--no-as-needed "$dir/stub/libcublasLt.so.11" "$dir/stub/libcublas.so.11"
    ln -s libcudnn.so.8.9.7 "$dir/package/usr/lib/x86_64-linux-gnu/libcudnn.so.8"
  fi
  cat >"$dir/package/DEBIAN/control" <<CONTROL
Package: $name
Version: $package_version
Architecture: amd64
Maintainer: verlfit rehearsal <rehearsal@verlfit.invalid>
Description: verlfit rehearsal stand-in for NVIDIA's $name (no code)
 Stands in for $name $package_version from NVIDIA's CUDA repository, which the rehearsal cannot reach.
CONTROL
  dpkg-deb --root-owner-group --build "$dir/package" "$dir/repo/${name}_${package_version}_amd64.deb" >/dev/null
done
(
  cd "$dir/repo"
  apt-ftparchive packages . >Packages
  gzip -9 --keep --no-name Packages
  apt-ftparchive -o APT::FTPArchive::Release::Origin="verlfit rehearsal" release . >Release
)
gpg --batch --quiet --passphrase '' --quick-generate-key "verlfit rehearsal stand-in CUDA repository" ed25519 sign never 2>/dev/null
gpg --batch --quiet --yes --clearsign --output "$dir/repo/InRelease" "$dir/repo/Release"
gpg --batch --quiet --yes --armor --detach-sign --output "$dir/repo/Release.gpg" "$dir/repo/Release"
gpg --batch --quiet --export >"$dir/cuda-archive-keyring.gpg"
gpgconf --kill all
rm -rf "$dir/package" "$dir/gnupg" "$dir/stub"
