#!/usr/bin/env bash
# Install what pinfer needs to build and test on Debian 12 (run as root, or with sudo available).
set -euo pipefail
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
PKGS=(gcc meson ninja-build pkg-config python3 procps libjansson-dev libpcre2-dev liburing-dev libnanomsg-dev libopenblas-dev)
# scripts/fuzz.sh: clang with libFuzzer and the sanitizer runtimes
PKGS+=(clang-14 libclang-rt-14-dev)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
