#!/usr/bin/env bash
# Installs everything TensorFold needs to build and test on Debian 12 / Ubuntu 24.04 (run as root or
# with sudo). C++ libraries come from the distribution; Python test tools from PyPI.
set -euo pipefail
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends \
  build-essential cmake ninja-build pkg-config git ca-certificates \
  nlohmann-json3-dev libpcre2-dev libutf8proc-dev libcpp-httplib-dev libcli11-dev \
  libcurl4-openssl-dev zlib1g-dev libssl-dev libgtest-dev libgmock-dev \
  python3 python3-pip python3-venv >/dev/null
# Python test tools live in a virtual environment in the checkout (.venv), which the tests use.
root="$(cd "$(dirname "$0")/.." && pwd)"
if [ "${TF_SKIP_PIP:-0}" != 1 ]; then
  [ -x "$root/.venv/bin/python" ] || python3 -m venv "$root/.venv"
  "$root/.venv/bin/python" -m pip install -q --disable-pip-version-check -r "$root/tools/requirements-test.txt"
fi
