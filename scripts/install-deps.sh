#!/usr/bin/env bash
# Install what pinfer needs to build and test on Debian 12 (run as root, or with sudo available).
set -euo pipefail
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
PKGS=(gcc meson ninja-build pkg-config python3 procps libjansson-dev libpcre2-dev liburing-dev libnanomsg-dev libopenblas-dev libmicrohttpd-dev python3-prometheus-client python3-yaml)
# tests/test_quant_avx512_emu: the AVX-512 kernels over SIMDe's portable intrinsics (headers only);
# without them the test is not built and test_suite_complete reports it unregistered
PKGS+=(libsimde-dev)
# scripts/fuzz.sh: clang with libFuzzer and the sanitizer runtimes
PKGS+=(clang-14 libclang-rt-14-dev)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# apid's tests: the official OpenAI SDK and playwright-core run on Node.js (Debian 12's is 18; a newer
# one already installed, e.g. with its own npm, is kept) and drive Debian's headless chromium.
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
dpkg-query -W -f='${Status}' chromium 2>/dev/null | grep -q "install ok installed" || missing+=(chromium)
if [ ${#missing[@]} -gt 0 ]; then
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
