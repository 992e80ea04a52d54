#!/usr/bin/env bash
# GPU check for the CUDA render backend (issue 11) on a GPU machine that has the
# project's build dependencies (scripts/setup.sh) and nvcc (/usr/local/cuda):
# builds with CUDA into build/gpu, then runs scripts/gpu-run.sh on it.
# For a GPU machine without them (the device tool's H200), build a bundle here
# with scripts/gpu-bundle.sh and run scripts/gpu-run.sh .gpu there.
# Usage: scripts/gpu-check.sh [build-dir]   (default build/gpu)
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build/gpu}
export CCACHE_BASEDIR=$PWD CCACHE_NOHASHDIR=1
JOBS=$(nproc 2>/dev/null || echo 4)

echo "== configure + build (DANQING_CUDA=ON, RelWithDebInfo)"
start=$(date +%s)
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDANQING_CUDA=ON \
  -DCUDAToolkit_ROOT=/usr/local/cuda -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc || exit 1
cmake --build "$BUILD" -j "$JOBS" --target render_backend_test render_test render_gpu_bench || exit 1
echo "build: $(( $(date +%s) - start )) s"
exec scripts/gpu-run.sh "$BUILD"
