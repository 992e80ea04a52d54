#!/usr/bin/env bash
# The GPU checks of the CUDA render backend (issue 11), on a machine with an
# NVIDIA GPU and driver: parity with the CPU, the renderer's tests on the GPU
# backend, compute-sanitizer's memcheck, and render_gpu_bench. Needs only the
# binaries, not a toolchain.
#
# Usage: scripts/gpu-run.sh DIR
#   DIR is a build tree (scripts/gpu-check.sh: build/gpu) or a bundle made by
#   scripts/gpu-bundle.sh (.gpu: bin/, lib/, data/, font/), for a machine
#   without the project's build dependencies. Logs also go to $OUT when set.
# Exit status: 0 when every check passed and the parity test really ran.
set -uo pipefail
DIR=$(cd "${1:?usage: scripts/gpu-run.sh DIR}" && pwd) || exit 2
LOG=${OUT:-/tmp}/gpu-run
mkdir -p "$LOG"

find_bin() {  # a binary by name: DIR/bin, DIR/tests, DIR/bench, DIR
  local d
  for d in "$DIR/bin" "$DIR/tests" "$DIR/bench" "$DIR"; do
    if [ -x "$d/$1" ]; then echo "$d/$1"; return 0; fi
  done
  echo "gpu-run: $1 not found under $DIR" >&2
  return 1
}

if [ -d "$DIR/lib" ]; then export LD_LIBRARY_PATH="$DIR/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"; fi
# The bundle's C++ runtime only where the machine's own is too old for the binaries.
if [ -d "$DIR/lib-cxx" ] && [ -x "$DIR/bin/render_test" ] && ldd "$DIR/bin/render_test" 2>&1 | grep "not found" >/dev/null; then
  export LD_LIBRARY_PATH="$DIR/lib-cxx${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  echo "gpu-run: using the bundle's libstdc++/libgcc_s"
fi
if [ -f "$DIR/data/strokes.bin" ]; then export DANQING_DATA_DIR="$DIR/data"; fi
FONT=/usr/share/fonts/truetype/arphic/ukai.ttc
if [ ! -f "$FONT" ] && [ -f "$DIR/font/ukai.ttc" ]; then
  mkdir -p "$(dirname "$FONT")" && cp "$DIR/font/ukai.ttc" "$FONT" || echo "gpu-run: could not install the font; font tests skip"
fi

BACKEND_TEST=$(find_bin render_backend_test) || exit 2
RENDER_TEST=$(find_bin render_test) || exit 2
BENCH=$(find_bin render_gpu_bench) || exit 2

rc=0
notes=""
step() { echo; echo "== $*"; }
# A test that must have run and passed, by its gtest name, in a log.
passed() { grep -F "[       OK ] $1 " "$2" >/dev/null; }

step "nvidia-smi"
nvidia-smi || echo "nvidia-smi failed (no driver?)"
nvidia-smi --query-gpu=name,driver_version,memory.total,mig.mode.current --format=csv || true

step "backend and parity tests (GpuParityTest must RUN, not skip)"
"$BACKEND_TEST" --gtest_color=no 2>&1 | tee "$LOG/render_backend_test.log" || rc=1
for t in GpuParityTest.GpuMatchesCpuWithin40dB GpuParityTest.BudgetLimitsAndConcurrentRenders; do
  if ! passed "$t" "$LOG/render_backend_test.log" || grep -F "SKIPPED ] $t" "$LOG/render_backend_test.log" >/dev/null; then
    echo "FAIL: $t did not run and pass: no usable GPU?"
    rc=1
  fi
done

step "renderer tests on the GPU backend (DANQING_RENDER_BACKEND=gpu)"
DANQING_RENDER_BACKEND=gpu "$RENDER_TEST" --gtest_color=no \
  --gtest_filter='RenderTest.SameSeed*:RenderTest.OddInputs*:RenderTest.EightK*:RenderTest.Concurrent*:RenderTest.Photo*' \
  2>&1 | tee "$LOG/render_test_gpu.log" | tail -15 || rc=1
if grep -F "runs on the CPU" "$LOG/render_test_gpu.log" >/dev/null; then
  echo "FAIL: renders fell back to the CPU:"
  grep -F "runs on the CPU" "$LOG/render_test_gpu.log" | head -5
  rc=1
fi

SANITIZER=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)
if [ -n "$SANITIZER" ]; then
  step "compute-sanitizer memcheck: concurrent renders under a budget, odd canvas sizes"
  timeout 240 "$SANITIZER" --tool memcheck --error-exitcode 9 --print-limit 20 \
    "$BACKEND_TEST" --gtest_color=no --gtest_filter='GpuParityTest.BudgetLimitsAndConcurrentRenders' \
    2>&1 | tee "$LOG/memcheck_backend.log" | tail -8 || rc=1
  DANQING_RENDER_BACKEND=gpu timeout 240 "$SANITIZER" --tool memcheck --error-exitcode 9 --print-limit 20 \
    "$RENDER_TEST" --gtest_color=no --gtest_filter='RenderTest.OddInputs*:RenderTest.SameSeed*' \
    2>&1 | tee "$LOG/memcheck_render.log" | tail -8 || rc=1
else
  echo "compute-sanitizer not found: memcheck skipped"
  notes="$notes; memcheck NOT run (no compute-sanitizer)"
fi

step "GPU benchmark (1080p, 4K; 1/4/16 concurrent; GPU vs CPU)"
"$BENCH" --renders 16 2>&1 | tee "$LOG/render_gpu_bench.log" || rc=1
step "host share on this machine's CPU (the passes skipped): the floor of a GPU render"
"$BENCH" --host-only --renders 40 2>&1 | tee "$LOG/render_host_share.log" || rc=1
PHOTO="$DIR/photos/astronaut.jpg"
[ -f "$PHOTO" ] || PHOTO="$(dirname "$0")/../tests/data/photos/astronaut.jpg"
if [ -f "$PHOTO" ]; then
  step "GPU benchmark on a photo background (the service's usual case; its wash is made on the device)"
  "$BENCH" --renders 8 --photo "$PHOTO" 2>&1 | tee "$LOG/render_gpu_bench_photo.log" || rc=1
  step "host share of a photo render on this machine's CPU"
  "$BENCH" --host-only --renders 20 --photo "$PHOTO" 2>&1 | tee "$LOG/render_host_share_photo.log" || rc=1
  step "GPU benchmark on a 12 MP phone-size photo (synthetic; its 27 MB window is uploaded per render)"
  "$BENCH" --renders 8 --photo-size 4000x3000 2>&1 | tee "$LOG/render_gpu_bench_photo12mp.log" || rc=1
else
  echo "no test photo found: photo rows skipped"
  notes="$notes; photo rows NOT run"
fi

TRANSFER=$(find_bin transfer_bench 2>/dev/null) || TRANSFER=""
if [ -n "$TRANSFER" ]; then
  step "PCIe copies of a render: pageable (the backend now) against pinned"
  "$TRANSFER" 2>&1 | tee "$LOG/transfer_bench.log" || rc=1
else
  notes="$notes; transfer_bench NOT run (not built)"
fi

step "nvidia-smi after"
nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv || true
echo
echo "gpu-run: $([ $rc -eq 0 ] && echo PASSED || echo FAILED)${notes} (logs in $LOG)"
exit $rc
