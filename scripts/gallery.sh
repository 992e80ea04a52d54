#!/usr/bin/env bash
# Regenerates docs/gallery/ (README.md and docs/render.md show it) and the
# backgrounds' pictures under docs/render/ with the danqing CLI of a build
# tree. Every picture is deterministic (fixed seed), so a change to the
# renderer shows as a change to these files.
#
#   scripts/gallery.sh            # the gallery and docs/render/after_*
#   DANQING=/old/build/cmd/danqing/danqing scripts/gallery.sh --before
#                                 # docs/render/before_* only, with an older CLI
# Environment: DANQING (the CLI; default build/default/cmd/danqing/danqing).
# The writing frames (docs/gallery/writing/) come from docs/render.md's own
# command (danqing render --frames).
set -euo pipefail
cd "$(dirname "$0")/.."
DANQING=${DANQING:-build/default/cmd/danqing/danqing}
[[ -x $DANQING ]] || { echo "gallery.sh: no danqing CLI at $DANQING (build the danqing target)" >&2; exit 1; }

POEM="朝辞白帝彩云间，千里江陵一日还。两岸猿声啼不住，轻舟已过万重山。"
SNOW="千山鸟飞绝，万径人踪灭。孤舟蓑笠翁，独钓寒江雪。"
PHOTO=tests/data/photos/astronaut.jpg
render() { "$DANQING" render "$@" >/dev/null 2>&1 || { echo "gallery.sh: danqing render $* failed" >&2; exit 1; }; }

out=docs/render
prefix=after
[[ ${1:-} == --before ]] && prefix=before
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The gallery (README, docs/render.md).
G=docs/gallery
if [[ $prefix == after ]]; then
render --text "$POEM" --title 早发白帝城 --signature 李白 --date 甲辰春 --seed 11 --size 1440x810 -o $G/xing_landscape.jpg
render --text "$POEM" --title 早发白帝城 --signature 李白 --seed 11 --style cao --size 1440x810 -o $G/cao_landscape.jpg
render --text "$POEM" --signature 李白 --seed 11 --photo $PHOTO --size 1440x810 -o $G/xing_photo.jpg
render --text "$SNOW" --title 江雪 --signature 柳宗元 --seed 3 --style kai --background paper --size 1000x750 -o $G/kai_paper.jpg
render --text "$SNOW" --title 江雪 --signature 柳宗元 --seed 9 --horizontal --size 900x900 -o $G/xing_horizontal.jpg
render --text "山水" --seed 5 --background paper --size 700x560 -o $G/xing_closeup.jpg
fi

# The backgrounds (docs/render.md, "The painting"): whole canvases at
# 960x540 and 3x close-ups of a ridge edge and of the paper (PNG, so the
# edges are not JPEG's).
render --text "$POEM" --title 早发白帝城 --signature 李白 --seed 11 --size 960x540 -o "$out/${prefix}_landscape.jpg"
render --text "$POEM" --signature 李白 --seed 11 --style kai --background paper --size 960x540 -o "$out/${prefix}_paper.jpg"
render --text "$POEM" --signature 李白 --seed 11 --photo $PHOTO --size 960x540 -o "$out/${prefix}_photo.jpg"
render --text "$POEM" --title 早发白帝城 --signature 李白 --seed 11 --size 1920x1080 -o "$tmp/land.png"
render --text "山" --seed 11 --style kai --background paper --size 1920x1080 -o "$tmp/paper.png"
python3 scripts/png_crop.py "$tmp/land.png" 760 440 200 120 3 "$out/${prefix}_ridge_closeup.png"
python3 scripts/png_crop.py "$tmp/paper.png" 100 100 200 120 3 "$out/${prefix}_paper_closeup.png"
ls -l "$out"/${prefix}_*
