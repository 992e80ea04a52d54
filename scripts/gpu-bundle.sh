#!/usr/bin/env bash
# Packs the GPU checks of the CUDA render backend (issue 11) into .gpu/ for a
# GPU machine that has a driver but none of the project's build dependencies
# (the device tool's H200: no package registry there). Builds the four test
# and bench binaries and the node agent (for its check on the real NVML) here with CUDA (build/default, sm_80 + sm_90 + PTX, static
# cudart), strips them, and copies the shared libraries they load from this
# Debian 12 machine (glibc itself excepted), the stroke data and the UKai font.
#   here:  scripts/gpu-bundle.sh
#   there: scripts/gpu-run.sh .gpu        (the device tool: carry [".gpu"])
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build/default}
export CCACHE_BASEDIR=$PWD CCACHE_NOHASHDIR=1
if ! grep -q '^DANQING_CUDA:BOOL=ON' "$BUILD/CMakeCache.txt" 2>/dev/null; then
  echo "gpu-bundle: $BUILD is not configured with DANQING_CUDA=ON (is nvcc at /usr/local/cuda?)" >&2
  exit 1
fi
cmake --build "$BUILD" --target render_backend_test render_test render_gpu_bench transfer_bench danqing_strokes \
  danqing-device-plugin pipeline_bench

OUTDIR=.gpu
rm -rf "$OUTDIR"
mkdir -p "$OUTDIR"/{bin,lib,lib-cxx,data,font,photos,cascades/haarcascades,cascades/lbpcascades}
for b in tests/render_backend_test tests/render_test bench/render_gpu_bench bench/transfer_bench bench/pipeline_bench \
         cmd/danqing-device-plugin/danqing-device-plugin; do
  strip --strip-debug -o "$OUTDIR/bin/$(basename "$b")" "$BUILD/$b"
done
# Every shared library the binaries load, except the C library's own parts
# (the target's glibc must be as new as this machine's, 2.36).
for b in "$OUTDIR"/bin/*; do
  ldd "$b" | awk '$3 ~ /^\// {print $3}'
done | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so.*|libm.so.*|libpthread.so.*|libdl.so.*|librt.so.*|ld-linux*) ;;
    # The C++ runtime: used there only when the machine's own is older.
    libstdc++.so.*|libgcc_s.so.*) cp -L "$lib" "$OUTDIR/lib-cxx/" ;;
    *) cp -L "$lib" "$OUTDIR/lib/" ;;
  esac
done
cp "$BUILD/data/strokes.bin" "$BUILD/data/ARPHICPL.TXT" "$OUTDIR/data/"
# The running and cursive forms (issue 27), when built: the GPU parity tests
# then render xing and cao from them as the CPU does.
for f in cursive-xing.bin cursive-cao.bin OFL.zhi-mang-xing.txt OFL.liu-jian-mao-cao.txt; do
  if [ -f "$BUILD/data/$f" ]; then cp "$BUILD/data/$f" "$OUTDIR/data/"; fi
done
# The perceiver's two cascades (Debian's opencv-data) for pipeline_bench.
cp /usr/share/opencv4/haarcascades/haarcascade_frontalcatface.xml "$OUTDIR/cascades/haarcascades/"
cp /usr/share/opencv4/lbpcascades/lbpcascade_frontalface.xml "$OUTDIR/cascades/lbpcascades/"
# A test photo (public domain; its README gives the source) for the photo rows.
cp tests/data/photos/astronaut.jpg tests/data/photos/README.md "$OUTDIR/photos/"
FONT=/usr/share/fonts/truetype/arphic/ukai.ttc
if [ -f "$FONT" ]; then
  cp "$FONT" "$OUTDIR/font/"
  cp /usr/share/doc/fonts-arphic-ukai/copyright "$OUTDIR/font/COPYRIGHT" 2>/dev/null || true
fi
# The bundle must load nothing from this machine beyond glibc.
for b in "$OUTDIR"/bin/*; do
  if LD_LIBRARY_PATH="$OUTDIR/lib:$OUTDIR/lib-cxx" ldd "$b" |
     grep -v -E "$OUTDIR/lib(-cxx)?/|lib(c|m|pthread|dl|rt)\.so|ld-linux|linux-vdso" | grep "=>" >/dev/null; then
    echo "gpu-bundle: $b loads a library outside the bundle:" >&2
    LD_LIBRARY_PATH="$OUTDIR/lib:$OUTDIR/lib-cxx" ldd "$b" >&2
    exit 1
  fi
done
du -sh "$OUTDIR" "$OUTDIR"/*
echo "gpu-bundle: done; on the GPU machine: scripts/gpu-run.sh $OUTDIR"
