#!/usr/bin/env bash
# Installs the Debian packages dtensor builds against. Idempotent: when every package is already
# installed it only runs dpkg-query and returns (well under a second).
set -euo pipefail

PACKAGES=(
  build-essential cmake pkg-config
  ninja-build              # the sanitizer builds (Makefile: asan, tsan, fuzz)
  libopenblas-dev          # GEMM for the matmul family
  googletest libgtest-dev  # unit tests
  libbenchmark-dev         # microbenchmarks
  nlohmann-json3-dev       # JSON output, plans, safetensors headers
  libcli11-dev             # the dtensor CLI
  libfmt-dev               # formatting
  libopenmpi-dev openmpi-bin  # the mpi backend (DTENSOR_WITH_MPI)
  clang libclang-rt-14-dev    # make fuzz: libFuzzer, ASan + UBSan runtimes for clang
  libtsan2                    # make tsan: GCC's ThreadSanitizer runtime
  libonnx-dev libprotobuf-dev # dtensor import: the official ONNX protobuf classes
  libonnx-testdata            # the ONNX conformance node tests (tests/onnx)
  pybind11-dev python3-dev    # the Python module (python/)
  python3-numpy python3-pytest  # its arrays and its tests (tests/python)
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq || echo "install-deps: apt-get update failed, trying the cached package lists"
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
