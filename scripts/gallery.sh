#!/usr/bin/env bash
# Regenerates docs/gallery/ with `danqing render` (issue 27): kai, xing and cao
# on the landscape, on paper and over a photo, a horizontal xing and two
# close-ups. docs/gallery/before/ keeps the xing and cao of before issue 27
# (kai skeletons with jitter) and docs/gallery/writing/ the frames of issue 28;
# this script touches neither.
#
#   scripts/gallery.sh [path/to/danqing]     (default build/default/cmd/danqing/danqing)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-build/default/cmd/danqing/danqing}
if [[ ! -x $bin ]]; then
  echo "gallery: $bin not found; build the danqing target first" >&2
  exit 1
fi
out=docs/gallery
photo=tests/data/photos/chelsea.jpg
poem=(--text "朝辞白帝彩云间，千里江陵一日还。两岸猿声啼不住，轻舟已过万重山。"
      --title 早发白帝城 --signature 李白 --date 甲辰春)
render() {
  echo "gallery: $*" >&2
  "$bin" render "$@" >/dev/null
}
for style in kai xing cao; do
  render "${poem[@]}" --style "$style" --seed 11 --size 1440x810 -o "$out/${style}_landscape.jpg"
  render "${poem[@]}" --style "$style" --seed 11 --background paper --size 1000x750 \
    -o "$out/${style}_paper.jpg"
  render "${poem[@]}" --style "$style" --seed 11 --photo "$photo" --size 1440x810 \
    -o "$out/${style}_photo.jpg"
done
render "${poem[@]}" --style xing --seed 11 --horizontal --size 900x900 -o "$out/xing_horizontal.jpg"
render --text "孤舟蓑笠翁，独钓寒江雪。" --style xing --seed 3 --background paper --size 700x560 \
  -o "$out/xing_closeup.jpg"
render --text "孤舟蓑笠翁，独钓寒江雪。" --style cao --seed 3 --background paper --size 700x560 \
  -o "$out/cao_closeup.jpg"
