#!/usr/bin/env bash
# GPU check for the CUDA render backend (issue 11), in one go on a machine with
# an NVIDIA GPU (e.g. the device tool's H200): build with CUDA, run the backend
# and parity tests, run the GPU benchmark, print nvidia-smi. Needs nvcc
# (/usr/local/cuda) and the project's build dependencies (scripts/setup.sh).
# Usage: scripts/gpu-check.sh [build-dir]   (default build/gpu)
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build/gpu}
export CCACHE_BASEDIR=$PWD CCACHE_NOHASHDIR=1
JOBS=$(nproc 2>/dev/null || echo 4)

echo "== nvidia-smi"
nvidia-smi || echo "nvidia-smi failed (no driver?)"
nvidia-smi --query-gpu=name,driver_version,memory.total,mig.mode.current --format=csv || true

echo "== configure + build (DANQING_CUDA=ON, RelWithDebInfo)"
start=$(date +%s)
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDANQING_CUDA=ON \
  -DCUDAToolkit_ROOT=/usr/local/cuda -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc || exit 1
cmake --build "$BUILD" -j "$JOBS" --target render_backend_test render_test render_gpu_bench || exit 1
echo "build: $(( $(date +%s) - start )) s"

rc=0
echo "== backend + parity tests (GpuParityTest must RUN, not skip)"
"$BUILD"/tests/render_backend_test --gtest_color=no 2>&1 | tee /tmp/render_backend_test.log || rc=1
if grep -q "SKIPPED.*GpuParityTest" /tmp/render_backend_test.log; then
  echo "FAIL: GpuParityTest was skipped: no usable GPU"; rc=1
fi
echo "== renderer tests on the GPU backend (DANQING_RENDER_BACKEND=gpu)"
DANQING_RENDER_BACKEND=gpu "$BUILD"/tests/render_test --gtest_color=no \
  --gtest_filter='RenderTest.SameSeed*:RenderTest.OddInputs*:RenderTest.EightK*:RenderTest.Concurrent*:RenderTest.Photo*' \
  2>&1 | tail -15 || rc=1

echo "== one 4K inscription on the GPU: per-stage device times (events) and the host share"
cmake --build "$BUILD" -j "$JOBS" --target danqing >/dev/null || rc=1
for i in 1 2 3; do
  DANQING_RENDER_BACKEND=gpu "$BUILD"/cmd/danqing/danqing render --text "朝辞白帝彩云间，千里江陵一日还。两岸猿声啼不住，轻舟已过万重山。" \
    --title 早发白帝城 --signature 李白 --size 3840x2160 --seed "$i" -o /tmp/gpu-check-4k.png 2>&1 | tail -1 || rc=1
done

echo "== GPU benchmark (1080p, 4K; 1/4/16 concurrent; GPU vs CPU)"
"$BUILD"/bench/render_gpu_bench --renders 16 || rc=1

echo "== nvidia-smi after"
nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv || true
exit $rc
