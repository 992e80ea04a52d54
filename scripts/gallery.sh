#!/usr/bin/env bash
# Regenerates the renderer's pictures with the danqing CLI of a build tree:
# docs/gallery/ (kai, xing and cao on the landscape, on paper and over a
# photo, a horizontal xing and two close-ups; README.md and docs/render.md show
# them) and the backgrounds' pictures under docs/render/ (docs/render.md, "The
# painting"). Every picture is deterministic (fixed seed), so a change to the
# renderer shows as a change to these files. docs/gallery/before/ (xing and cao
# before issue 27) and docs/gallery/writing/ (the writing frames, made by
# docs/render.md's own `danqing render --frames` command) are not touched.
#
#   scripts/gallery.sh            # docs/gallery/ and docs/render/after_*
#   DANQING=/old/build/cmd/danqing/danqing scripts/gallery.sh --before
#                                 # docs/render/before_* only, with an older CLI
# Environment: DANQING (the CLI; default build/default/cmd/danqing/danqing).
set -euo pipefail
cd "$(dirname "$0")/.."
DANQING=${DANQING:-build/default/cmd/danqing/danqing}
[[ -x $DANQING ]] || { echo "gallery.sh: no danqing CLI at $DANQING (build the danqing target)" >&2; exit 1; }

POEM="朝辞白帝彩云间，千里江陵一日还。两岸猿声啼不住，轻舟已过万重山。"
SNOW="孤舟蓑笠翁，独钓寒江雪。"
render() {
  echo "gallery.sh: danqing render $*" >&2
  "$DANQING" render "$@" >/dev/null 2>&1 || { echo "gallery.sh: danqing render $* failed" >&2; exit 1; }
}

prefix=after
[[ ${1:-} == --before ]] && prefix=before

if [[ $prefix == after ]]; then
  G=docs/gallery
  poem=(--text "$POEM" --title 早发白帝城 --signature 李白 --date 甲辰春)
  for style in kai xing cao; do
    render "${poem[@]}" --style "$style" --seed 11 --size 1440x810 -o "$G/${style}_landscape.jpg"
    render "${poem[@]}" --style "$style" --seed 11 --background paper --size 1000x750 \
      -o "$G/${style}_paper.jpg"
    render "${poem[@]}" --style "$style" --seed 11 --photo tests/data/photos/chelsea.jpg \
      --size 1440x810 -o "$G/${style}_photo.jpg"
  done
  render "${poem[@]}" --style xing --seed 11 --horizontal --size 900x900 -o "$G/xing_horizontal.jpg"
  render --text "$SNOW" --style xing --seed 3 --background paper --size 700x560 -o "$G/xing_closeup.jpg"
  render --text "$SNOW" --style cao --seed 3 --background paper --size 700x560 -o "$G/cao_closeup.jpg"
fi

# The backgrounds (docs/render.md, "The painting"): whole canvases at 960x540
# and 3x close-ups of a ridge edge and of the paper (PNG, so the edges are not
# JPEG's).
out=docs/render
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
PHOTO=tests/data/photos/astronaut.jpg
render --text "$POEM" --title 早发白帝城 --signature 李白 --seed 11 --size 960x540 -o "$out/${prefix}_landscape.jpg"
render --text "$POEM" --signature 李白 --seed 11 --style kai --background paper --size 960x540 -o "$out/${prefix}_paper.jpg"
render --text "$POEM" --signature 李白 --seed 11 --photo $PHOTO --size 960x540 -o "$out/${prefix}_photo.jpg"
render --text "$POEM" --title 早发白帝城 --signature 李白 --seed 11 --size 1920x1080 -o "$tmp/land.png"
render --text "山" --seed 11 --style kai --background paper --size 1920x1080 -o "$tmp/paper.png"
python3 scripts/png_crop.py "$tmp/land.png" 760 440 200 120 3 "$out/${prefix}_ridge_closeup.png"
python3 scripts/png_crop.py "$tmp/paper.png" 100 100 200 120 3 "$out/${prefix}_paper_closeup.png"
ls -l docs/gallery "$out"/${prefix}_*
