#!/usr/bin/env bash
# Installs every build and test dependency of the project from Debian 12's
# packages. Idempotent: a package already present is not fetched again, and
# apt-get is skipped entirely when everything is installed.
# Must run as root (or with sudo available).
set -euo pipefail

PACKAGES=(
  build-essential cmake pkg-config ninja-build
  libgrpc++-dev libgrpc-dev protobuf-compiler protobuf-compiler-grpc libprotobuf-dev
  libspdlog-dev libfmt-dev
  libboost-dev
  libasio-dev
  catch2
  libcli11-dev
  libtomlplusplus-dev
  libssl-dev openssl
  libsystemd-dev
  libsqlite3-dev
  python3-dev pybind11-dev python3-numpy python3-pytest python3-grpcio python3-protobuf
  iproute2 file
  lintian help2man prometheus
  libstarpu-dev
  clang libclang-rt-14-dev clang-tidy-22
  clang-19 libclang-rt-19-dev llvm-19 lld-14 lld-19
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages already installed"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
    echo "install-deps: missing packages (${missing[*]}) and not root; run as root" >&2
    exit 1
  fi
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
