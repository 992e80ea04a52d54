// Legibility of an inscription as a real OCR model reads it (issue 27): the
// characters written, read back in the right order, over the characters
// written. Shared by bench/legibility and its test.
//
// Columns are read right to left (Ocr::Read), their text concatenated, and
// aligned against what was written by minimum edit distance (AlignedMatches):
// a character counts when the alignment matches it. Characters read that were
// not written (the seal, a stray mark) cost nothing; characters missed,
// misread or read out of order do.
//
// Thread-safety: pure functions over const inputs.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "image/image.h"
#include "ocr/ocr.h"
#include "render/glyph_font.h"

namespace danqing::ocr {

struct LegibilityScore {
  int written = 0;
  int read = 0;  // read in the right order
  double Ratio() const { return written > 0 ? static_cast<double>(read) / written : 0.0; }
  LegibilityScore& operator+=(const LegibilityScore& o) {
    written += o.written;
    read += o.read;
    return *this;
  }
};

// The lines of a poem as the renderer writes them: punctuation and spaces
// end a line and are not written. INVALID_ARGUMENT for malformed UTF-8.
Result<std::vector<std::u32string>> PoemLines(std::string_view utf8);

// The lines typeset in black on a white w x h canvas with `font`, as columns
// right to left (each line one column, top to bottom), centred, one cell size
// for all (the largest that fits with a 0.3-cell gap between columns and a
// 10% margin). NOT_FOUND names the first character the font lacks;
// INVALID_ARGUMENT when there is nothing to set or the canvas is too small.
Result<image::Image> TypesetColumns(const render::GlyphFont& font,
                                    const std::vector<std::u32string>& lines, int w, int h);

// The same with any source of glyph rasters: raster(c, res, &coverage) fills
// res x res coverage (0..255) of the 1024 box, false when it has no glyph for c.
using GlyphRaster = std::function<bool(char32_t c, int res, std::vector<uint8_t>* coverage)>;
Result<image::Image> TypesetColumns(const GlyphRaster& raster,
                                    const std::vector<std::u32string>& lines, int w, int h);

// What `ocr` reads of `img` (columns when vertical), scored against `written`
// (the lines, concatenated in reading order). *text: what was read.
Result<LegibilityScore> ScoreImage(const Ocr& ocr, const image::Image& img,
                                   const std::vector<std::u32string>& written, bool vertical = true,
                                   std::u32string* text = nullptr);

}  // namespace danqing::ocr
