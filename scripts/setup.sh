#!/usr/bin/env bash
# Installs what the project needs on Debian 12 (bookworm). Idempotent: packages
# already present are skipped, so a second run costs a dpkg query and nothing else.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config git
  # libraries
  nlohmann-json3-dev libspdlog-dev libfmt-dev libcli11-dev libyaml-cpp-dev
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc
  libpng-dev libjpeg62-turbo-dev libdeflate-dev
  # the writing as a video (issue 28): H.264 in MP4 through FFmpeg's libraries (libx264 inside libavcodec)
  libavcodec-dev libavformat-dev libavutil-dev libswscale-dev
  # the node agent's Kubernetes API client (src/kube): HTTPS through cpp-httplib + OpenSSL
  libssl-dev
  # renderer: FreeType and the Kai font for characters the stroke data lacks
  libfreetype-dev fonts-arphic-ukai
  # the danqing service: OpenCV components and Haar cascades (perception), HTTP
  libopencv-core-dev libopencv-imgproc-dev libopencv-objdetect-dev opencv-data libcpp-httplib-dev
  # tests, benchmarks, sanitizers
  libgtest-dev libgmock-dev libbenchmark-dev clang libclang-rt-14-dev
  # deploy/: container images (scripts/build-images.sh)
  buildah
  # the service's web-page test (headless) and load test
  chromium wrk
  # metrics: a real Prometheus for the integration test
  prometheus
  # the shared queue and store (danqing serve --redis): Redis, its C client,
  # QR codes for results, and a round-robin proxy for the multi-replica test
  redis-server libhiredis-dev libqrencode-dev haproxy
  # photos for the verse-fit bench and test (data/verse/fit_photos.tsv): nature
  # photos Debian ships as desktop wallpapers, login screens and jigsaw puzzles
  plasma-workspace-wallpapers ukui-wallpapers lomiri-wallpapers-20.04
  lomiri-wallpapers-16.04 lxqt-themes palapeli-data sddm-theme-maldives
  # the Kubernetes API client through an HTTP proxy (HTTPS_PROXY, CONNECT):
  # a real forward proxy on loopback for tests/kube
  tinyproxy-bin
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done

if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: all Debian packages present"
fi

# npm packages (exact versions in package.json / package-lock.json): stroke
# data for the renderer, the calligraphers' fonts for its running/cursive
# forms, the OCR models and ONNX Runtime for the legibility bench and test,
# and the browser driver for the web-page tests. Node.js
# comes from Debian when the machine has none.
cd "$(dirname "$0")/.."
if ! command -v npm >/dev/null 2>&1; then
  echo "setup: installing nodejs npm"
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends nodejs npm
fi
if ! cmp -s package-lock.json node_modules/.danqing-lock 2>/dev/null; then
  # npm ci installs exactly the lock file; the copy of the lock it installed
  # makes an unchanged lock a no-op next time.
  echo "setup: npm ci"
  npm ci --no-audit --no-fund --loglevel=error
  cp package-lock.json node_modules/.danqing-lock
else
  echo "setup: npm packages present"
fi

# deploy/ checks: the OpenAPI validator's npm packages (tests/deploy/package.json,
# exact versions) in their own folder; kubectl (with kustomize v4+) renders
# the kustomizations. Debian's kubernetes-client (kubectl 1.20, kustomize
# v2.0.3) is too old for them, so a missing kubectl is reported, not installed.
if ! cmp -s tests/deploy/package-lock.json tests/deploy/node_modules/.danqing-lock 2>/dev/null; then
  echo "setup: npm ci (tests/deploy)"
  npm ci --prefix tests/deploy --no-audit --no-fund --loglevel=error
  cp tests/deploy/package-lock.json tests/deploy/node_modules/.danqing-lock
else
  echo "setup: tests/deploy npm packages present"
fi
if ! command -v kubectl >/dev/null 2>&1; then
  echo "setup: WARNING: kubectl not found; the deploy checks (deploy_check) need kubectl 1.21+"
fi
