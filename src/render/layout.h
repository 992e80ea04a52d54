// Layout: where each character of the inscription goes, as cells on the
// canvas. Vertical: columns right to left (title, poem, signature); horizontal:
// rows top to bottom. The cell size is the largest that fits the region.
//
// Thread-safety: pure function.
#pragma once

#include <vector>

#include "common/status.h"

namespace danqing::render {

enum class Role { kPoem = 0, kTitle = 1, kSignature = 2 };

struct Cell {
  char32_t c = 0;
  Role role = Role::kPoem;
  float cx = 0, cy = 0, size = 0;  // centre and side, pixels
  int run = 0;                     // column (vertical) or row (horizontal) index
  bool line_start = false;         // the first character of one of the text's lines (a phrase)
};

struct Region {
  float x0 = 0, y0 = 0, x1 = 0, y1 = 0;
};

struct LayoutInput {
  std::vector<std::vector<char32_t>> lines;  // poem lines, punctuation removed
  std::vector<char32_t> title;
  std::vector<char32_t> signature;           // signature and date
  bool vertical = true;
};

struct LayoutResult {
  std::vector<Cell> cells;
  float body_size = 0;
  float seal_x = 0, seal_y = 0, seal_size = 0;  // seal square: top-left and side
  Region block;                                // the text block's bounds
};

// Fits the text into `region` (falling back to `fallback` when the text is too
// long for it). INVALID_ARGUMENT when it cannot fit with cells of min_cell px.
Result<LayoutResult> Layout(const LayoutInput& in, const Region& region, const Region& fallback,
                            float min_cell);

}  // namespace danqing::render
