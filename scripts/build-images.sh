#!/usr/bin/env bash
# Builds the two container images as OCI archives with Debian's buildah
# (vfs storage, chroot isolation, FROM scratch: no daemon, no registry), then
# proves each is complete by unpacking the archive again and running the
# binary's --version inside the image root (chroot, as the image's user); the
# service must also start there (`serve` on a loopback port, then SIGTERM).
#
#   scripts/build-images.sh [--agent PATH] [--service PATH] [--data DIR]
#                           [--out DIR] [--tag TAG]
#
#   --agent PATH    danqing-device-plugin (default build/default/cmd/danqing-device-plugin/...)
#   --service PATH  danqing (default build/default/cmd/danqing/danqing)
#   --data DIR      the service's data files, copied to /usr/share/danqing
#                   (default: data/ of the repository, when present)
#   --strokes FILE  the built stroke data (default: data/strokes.bin of the
#                   build tree the service binary is in)
#   --cascades DIR  where the Haar cascades are (default /usr/share/opencv4/haarcascades)
#   --font FILE     the fallback Kai font for characters without stroke data
#                   (default /usr/share/fonts/truetype/arphic/ukai.ttc)
#   --out DIR       where the archives go (default build/images)
#   --tag TAG       image tag (default: the project version from CMakeLists.txt)
#
# Output: DIR/danqing-device-plugin-TAG.oci.tar, DIR/danqing-TAG.oci.tar.
# Exit 0: every image built and checked; 1: a build or check failed;
# 77: nothing failed but an image was skipped because its binary is not built
# (said on a SKIP line); 2: usage error or buildah missing.
#
# Both binaries answer --version. One that does not (an older build) is probed with
# --help instead, which still proves that the loader resolves every library;
# a WARN line says so. DANQING_IMAGES_REQUIRE_VERSION=1 makes that a failure.
set -uo pipefail
cd "$(dirname "$0")/.."
repo="$(pwd)"

version="$(sed -n 's/^project(danqing VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)"
agent="build/default/cmd/danqing-device-plugin/danqing-device-plugin"
service="build/default/cmd/danqing/danqing"
data="data"
strokes=""
cascades="/usr/share/opencv4/haarcascades"
font="/usr/share/fonts/truetype/arphic/ukai.ttc"
out="build/images"
tag="${version:-dev}"
while (($#)); do
  case "$1" in
    --agent) agent="$2"; shift 2 ;;
    --service) service="$2"; shift 2 ;;
    --data) data="$2"; shift 2 ;;
    --strokes) strokes="$2"; shift 2 ;;
    --cascades) cascades="$2"; shift 2 ;;
    --font) font="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --tag) tag="$2"; shift 2 ;;
    *) echo "build-images: unknown argument $1" >&2; exit 2 ;;
  esac
done

# build/<preset>/cmd/danqing/danqing → build/<preset>/data/strokes.bin
[ -n "$strokes" ] || strokes="$(dirname "$service")/../../data/strokes.bin"

if ! command -v buildah >/dev/null 2>&1; then
  echo "build-images: buildah not found (Debian package buildah; scripts/setup.sh installs it)" >&2
  exit 2
fi

mkdir -p "$out"
out="$(cd "$out" && pwd)"
work="$(mktemp -d)"
# A private buildah store so that CI and developers' own images never mix.
store=(--root "$work/storage" --runroot "$work/run" --storage-driver vfs)
cleanup() {
  buildah "${store[@]}" rm --all >/dev/null 2>&1
  # vfs layers may hold read-only directories.
  chmod -R u+w "$work" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

failed=0
skipped=0

# Copies BIN to ROOT/usr/bin/NAME with every shared library `ldd` names and
# the dynamic loader, each at its own path (symlinks resolved, soname kept).
stage_binary() {
  local bin="$1" root="$2" name="$3"
  install -D -m 0755 "$bin" "$root/usr/bin/$name" || return 1
  # Debug sections stay in the build tree; the image needs the code only.
  strip --strip-debug "$root/usr/bin/$name" 2>/dev/null || true
  local lib
  while read -r lib; do
    [ -n "$lib" ] || continue
    mkdir -p "$root$(dirname "$lib")"
    cp -L "$lib" "$root$lib" || return 1
  done < <(ldd "$bin" | awk '/=> \//{print $3} /^[ \t]*\/[^ ]+ \(/{print $1}')
  if ldd "$bin" | grep -q 'not found'; then
    echo "build-images: $bin: $(ldd "$bin" | grep 'not found' | tr '\n' ' ')" >&2
    return 1
  fi
  # The loader's search path for libraries mounted at run time (NVML by the
  # NVIDIA runtime, whose hook also runs ldconfig on this root).
  mkdir -p "$root/etc" "$root/tmp"
  chmod 1777 "$root/tmp"
  printf '/usr/lib/x86_64-linux-gnu\n/lib/x86_64-linux-gnu\n' >"$root/etc/ld.so.conf"
}

# What `danqing serve` opens at start besides the verse corpus it carries:
# the stroke skeletons (built, not in the repository; their licence is next to
# them), two cascades of Debian's opencv-data (the Haar cat face, the LBP face; their licence is in
# each file's header) and the fallback font of fonts-arphic-ukai (its Debian
# copyright file goes with it), at the paths the service looks in by default.
stage_service_data() {
  local root="$1" f
  if [ ! -f "$strokes" ]; then
    echo "FAIL danqing image: stroke data '$strokes' not found (build the danqing_strokes target, or --strokes FILE)"
    return 1
  fi
  install -D -m 0644 "$strokes" "$root/usr/share/danqing/strokes.bin" || return 1
  if [ -f "$(dirname "$strokes")/ARPHICPL.TXT" ]; then
    install -m 0644 "$(dirname "$strokes")/ARPHICPL.TXT" "$root/usr/share/danqing/ARPHICPL.TXT" || return 1
  fi
  # The running and cursive forms (issue 27), read beside the stroke data,
  # with their fonts' OFL texts; without them xing and cao fall back to kai.
  for f in cursive-xing.bin cursive-cao.bin OFL.zhi-mang-xing.txt OFL.liu-jian-mao-cao.txt; do
    if [ -f "$(dirname "$strokes")/$f" ]; then
      install -m 0644 "$(dirname "$strokes")/$f" "$root/usr/share/danqing/$f" || return 1
    else
      echo "WARN danqing image: $(dirname "$strokes")/$f not built: xing and cao will be written from the kai stroke data"
    fi
  done
  for f in haarcascades/haarcascade_frontalcatface.xml lbpcascades/lbpcascade_frontalface.xml; do
    # --cascades names the Haar directory; the LBP one is beside it (opencv-data's layout).
    local src="$cascades/../$f"
    [ "${f%%/*}" = haarcascades ] && src="$cascades/${f#*/}"
    if [ ! -f "$src" ]; then
      echo "FAIL danqing image: $src not found (Debian package opencv-data, or --cascades DIR)"
      return 1
    fi
    install -D -m 0644 "$src" "$root/usr/share/opencv4/$f" || return 1
  done
  if [ ! -f "$font" ]; then
    echo "FAIL danqing image: font '$font' not found (Debian package fonts-arphic-ukai, or --font FILE)"
    return 1
  fi
  install -D -m 0644 "$font" "$root/usr/share/fonts/truetype/arphic/ukai.ttc" || return 1
  if [ -f /usr/share/doc/fonts-arphic-ukai/copyright ]; then
    install -D -m 0644 /usr/share/doc/fonts-arphic-ukai/copyright "$root/usr/share/doc/fonts-arphic-ukai/copyright" || return 1
  fi
}

# build NAME BINARY CONTAINERFILE USERSPEC [DATA_DIR]
build() {
  local name="$1" bin="$2" containerfile="$3" userspec="$4" datadir="${5:-}"
  if [ ! -x "$bin" ]; then
    echo "SKIP $name image: $bin is not built"
    skipped=1
    return
  fi
  local start ctx archive ctr mnt
  start=$(date +%s%N)
  ctx="$work/$name"
  mkdir -p "$ctx/rootfs"
  if ! stage_binary "$bin" "$ctx/rootfs" "$name"; then
    echo "FAIL $name image: could not stage $bin and its libraries"
    failed=1
    return
  fi
  if [ -n "$datadir" ]; then
    mkdir -p "$ctx/rootfs/usr/share/danqing"
    cp -a "$datadir/." "$ctx/rootfs/usr/share/danqing/"
  fi
  if [ "$name" = danqing ] && ! stage_service_data "$ctx/rootfs"; then
    failed=1
    return
  fi
  cp "$containerfile" "$ctx/Containerfile"
  archive="$out/$name-$tag.oci.tar"
  rm -f "$archive"
  if ! buildah "${store[@]}" build --isolation chroot --quiet \
      --layers=false --timestamp 0 -f "$ctx/Containerfile" -t "localhost/$name:$tag" "$ctx" \
      >"$work/$name.build.log" 2>&1 ||
     ! buildah "${store[@]}" push --quiet "localhost/$name:$tag" "oci-archive:$archive:localhost/$name:$tag" \
      >>"$work/$name.build.log" 2>&1; then
    echo "FAIL $name image: buildah: $(tail -5 "$work/$name.build.log" | tr '\n' ' ')"
    failed=1
    return
  fi
  # Check the archive itself, not the store it came from.
  ctr="$(buildah "${store[@]}" from --quiet "oci-archive:$archive" 2>>"$work/$name.build.log")" &&
    mnt="$(buildah "${store[@]}" mount "$ctr" 2>>"$work/$name.build.log")"
  if [ -z "${mnt:-}" ]; then
    echo "FAIL $name image: cannot unpack $archive: $(tail -3 "$work/$name.build.log" | tr '\n' ' ')"
    failed=1
    return
  fi
  # The image's own user must be the one the check runs as (the service: not root).
  local user
  user="$(buildah "${store[@]}" inspect --format '{{.OCIv1.Config.User}}' "$ctr" 2>/dev/null)"
  if [ "$user" != "$userspec" ]; then
    echo "FAIL $name image: runs as '$user', expected $userspec"
    failed=1
    return
  fi
  local probe="--version" output rc
  output="$(chroot --userspec="$userspec" "$mnt" "/usr/bin/$name" --version 2>&1)"
  rc=$?
  if [ $rc -ne 0 ] && grep -q -- '--version' <<<"$output"; then
    if [ "${DANQING_IMAGES_REQUIRE_VERSION:-0}" = 1 ]; then
      echo "FAIL $name image: /usr/bin/$name has no --version"
      failed=1
      return
    fi
    echo "WARN $name: /usr/bin/$name has no --version yet; probing with --help"
    probe="--help"
    output="$(chroot --userspec="$userspec" "$mnt" "/usr/bin/$name" --help 2>&1)"
    rc=$?
  fi
  if [ $rc -ne 0 ]; then
    echo "FAIL $name image: /usr/bin/$name $probe in the image root exited $rc: $(head -3 <<<"$output" | tr '\n' ' ')"
    failed=1
    return
  fi
  # The service must also start from what the image holds (stroke data,
  # cascades, corpus): serve on a loopback port, then SIGTERM; a clean drain
  # exits 0, a missing file exits 1 at once with the reason.
  if [ "$name" = danqing ]; then
    local version_line
    version_line="$(head -1 <<<"$output")"
    output="$(timeout --preserve-status -s TERM 3 chroot --userspec="$userspec" "$mnt" \
      /usr/bin/danqing serve --host 127.0.0.1 --port 0 --drain-delay 0 2>&1)"
    rc=$?
    if [ $rc -ne 0 ] || ! grep -q 'serving on http://127.0.0.1:' <<<"$output"; then
      echo "FAIL danqing image: serve in the image root exited $rc: $(grep -v '^$' <<<"$output" | tail -3 | tr '\n' ' ')"
      failed=1
      return
    fi
    if grep -q 'warning' <<<"$output"; then
      echo "FAIL danqing image: serve in the image root warned: $(grep warning <<<"$output" | head -2 | tr '\n' ' ')"
      failed=1
      return
    fi
    probe="$probe and serve"
    output="$version_line"
  fi
  local size files secs
  size=$(du -h "$archive" | cut -f1)
  files=$(find "$mnt" -type f | wc -l)
  secs=$(( ($(date +%s%N) - start) / 100000000 ))
  secs="$((secs / 10)).$((secs % 10))"
  echo "ok $name image: $archive ($size, $files files); $probe in the image root: $(head -1 <<<"$output"); ${secs} s"
}

overall=$(date +%s)
build danqing-device-plugin "$agent" deploy/images/device-plugin.Containerfile 0:0
if [ -d "$data" ]; then
  build danqing "$service" deploy/images/danqing.Containerfile 65532:65532 "$data"
else
  build danqing "$service" deploy/images/danqing.Containerfile 65532:65532
fi
echo "build-images: $(( $(date +%s) - overall )) s in all"
if ((failed)); then exit 1; fi
if ((skipped)); then exit 77; fi
exit 0
