#!/usr/bin/env bash
# Installs the Debian packages ember builds with (idempotent: installs only what is missing).
#   scripts/install_deps.sh           what the library and programs need
#   scripts/install_deps.sh --tests   also what the tests need (PyTorch for interop and parity)
set -euo pipefail

packages=(cmake g++ make catch2 libopenblas-dev zlib1g-dev libstb-dev libcli11-dev nlohmann-json3-dev)
for arg in "$@"; do
  case "$arg" in
    --tests) packages+=(python3-torch python3-numpy) ;;
    -h | --help) sed -n '2,4p' "$0"; exit 0 ;;
    *) echo "install_deps.sh: unknown option '$arg' (expected --tests)" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install_deps: all ${#packages[@]} packages present"
  exit 0
fi

sudo=""
if [ "$(id -u)" != 0 ]; then
  command -v sudo >/dev/null || { echo "install_deps: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
  sudo=sudo
fi
echo "install_deps: installing ${missing[*]}"
# Update the package lists only when they are missing or older than a day.
if [ -z "$(find /var/lib/apt/lists -maxdepth 1 -name '*Packages*' -mtime -1 2>/dev/null | head -1)" ]; then
  $sudo apt-get update -qq
fi
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install_deps: done"
