// Stroke paths recovered from a glyph's outline (issue 27): a calligrapher's
// font gives the form of a running (行) or cursive (草) character; the brush
// needs paths to write it along, with a width per point, in a plausible
// writing order. tools/cursive/build_cursive.cc turns fonts into the
// renderer's stroke files with this; the renderer reads them through
// render/cursive_forms.h.
//
// Method: the glyph's coverage thresholded at half; the exact Euclidean
// distance transform (Felzenszwalb-Huttenlocher) gives the half-width;
// Zhang-Suen thinning gives a one-pixel skeleton; the skeleton becomes a graph
// (end points, junction clusters, the pixel chains between them); spurs
// shorter than the stroke's half-width at their junction are pruned (a
// thinning artefact at a stroke's corners); at each junction the chains that
// continue most straight (within 45 degrees) are joined, so a stroke crossing
// another stays one path (十 is two paths, not four), and a junction left with
// two chains joins them (a turn, 横折). Each path is oriented as a brush
// writes it (a mostly horizontal path left to right, otherwise top to bottom),
// simplified (Douglas-Peucker, 0.75 px), and the paths are ordered top to
// bottom, then left to right, a horizontal path before a more vertical one
// that crosses it (十: 一 then 丨).
//
// Coordinates are the stroke data's: the 1024 box, y down (render/stroke_data.h).
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <vector>

#include "render/stroke_data.h"

namespace danqing::render {

struct SkeletonParams {
  uint8_t threshold = 128;   // coverage counted as ink
  float spur_factor = 1.0f;  // spurs shorter than this x the junction's half-width (+2 px) go
  int min_component = 4;     // ink components smaller than this (pixels) are ignored
};

// Paths of a res x res coverage raster of the 1024 box (row-major, 0..255).
// Empty when the raster has no ink.
CharStrokes SkeletonStrokes(const std::vector<uint8_t>& coverage, int res,
                            const SkeletonParams& params = {});

// Consecutive paths where one ends where the next begins (within 0.9 x the
// sum of their half-widths there, + 6 box units: a join the font draws, 连笔)
// merged into one path, so the brush keeps moving through the join; paths
// apart stay apart (the brush lifts). Empty paths are dropped.
void JoinTouchingPaths(CharStrokes* ch);

// The strokes drawn back as round-capped capsules of their half-widths into a
// res x res mask of the 1024 box (1 = ink).
std::vector<uint8_t> RasterizeStrokes(const CharStrokes& strokes, int res);

// Intersection over union of two masks (nonzero = ink); 1 when both are empty.
double MaskIoU(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b);

class GlyphFont;
// A glyph of `font` rasterised into res x res of the 1024 box (GlyphFont::
// RasterizeBox) and shifted so its ink's bounding box is centred in the box,
// as the stroke data's characters are. False when the font lacks c or the
// glyph has no ink.
bool CentredGlyphCoverage(const GlyphFont& font, char32_t c, int res, std::vector<uint8_t>* out);

// A res x res mask (nonzero = ink) cropped to its ink's box and scaled
// (nearest) to fit an out x out square, centred: two shapes compared after
// fitting each to its cell. No ink: all zero.
std::vector<uint8_t> FitToSquare(const std::vector<uint8_t>& mask, int res, int out);

// Coverage thresholded into a 0/1 mask.
std::vector<uint8_t> Threshold(const std::vector<uint8_t>& coverage, uint8_t threshold = 128);

}  // namespace danqing::render
