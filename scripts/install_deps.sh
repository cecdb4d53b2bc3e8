#!/usr/bin/env bash
# Installs the Debian packages ember builds with (idempotent: installs only what is missing).
#   scripts/install_deps.sh           what the library and programs need (Open MPI: training across processes;
#                                     curl: scripts/fetch_mnist.sh's download)
#   scripts/install_deps.sh --tests   also what the tests need (PyTorch for interop and parity, Fashion-MNIST,
#                                     clang-format and flake8 for scripts/check_format.sh, clang and boost.context
#                                     for the software GPU, iproute2 and util-linux for the hosts made of
#                                     namespaces, and .venv: PyPI's safetensors over Debian's Python)
set -euo pipefail
tests=0

packages=(cmake g++ make catch2 libopenblas-dev zlib1g-dev libstb-dev libcli11-dev nlohmann-json3-dev libssl-dev
          openmpi-bin libopenmpi-dev curl ca-certificates)
for arg in "$@"; do
  case "$arg" in
    --tests) packages+=(python3-torch python3-numpy python3-venv python3-pip dataset-fashion-mnist clang-format flake8
                        pkgconf clang libclang-rt-dev libboost-context-dev iproute2 util-linux); tests=1 ;;
    -h | --help) sed -n '2,8p' "$0"; exit 0 ;;
    *) echo "install_deps.sh: unknown option '$arg' (expected --tests)" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install_deps: all ${#packages[@]} packages present"
else
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
fi

# The tests' Python: a virtual environment over Debian's (so python3-torch stays visible) with
# PyPI's safetensors, the reference reader the interop tests load ember's files with.
if [ $tests = 1 ]; then
  venv=$(cd "$(dirname "$0")/.." && pwd)/.venv
  if ! "$venv/bin/python" -c "import safetensors, torch" 2>/dev/null; then
    /usr/bin/python3 -m venv --system-site-packages "$venv"
    if "$venv/bin/pip" install -q --disable-pip-version-check safetensors; then
      echo "install_deps: .venv with safetensors $("$venv/bin/python" -c 'import safetensors; print(safetensors.__version__)')"
    else
      echo "install_deps: warning: could not install safetensors from PyPI; the interop tests use their own reader" >&2
    fi
  fi
fi
