#include "ocr/legibility.h"

#include <algorithm>
#include <cmath>

#include "common/utf8.h"

namespace danqing::ocr {

namespace {

// The renderer's rule (render/renderer.cc IsBreak): ASCII controls, spaces and
// punctuation, general and CJK punctuation, full-width punctuation.
bool IsBreak(char32_t c) {
  if (c <= 0x20 || c == 0x7F) return true;
  if ((c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x60) ||
      (c >= 0x7B && c <= 0x7E))
    return true;
  if (c >= 0x2000 && c <= 0x206F) return true;
  if (c >= 0x3000 && c <= 0x303F) return true;
  if (c >= 0xFE30 && c <= 0xFE4F) return true;
  if ((c >= 0xFF01 && c <= 0xFF0F) || (c >= 0xFF1A && c <= 0xFF20) ||
      (c >= 0xFF3B && c <= 0xFF40) || (c >= 0xFF5B && c <= 0xFF65))
    return true;
  return c == 0xFFFD || c == 0xFEFF || c == 0x00B7 || c == 0x00A0;
}

}  // namespace

Result<std::vector<std::u32string>> PoemLines(std::string_view utf8) {
  auto cps = DecodeUtf8(utf8);
  if (!cps.ok()) return cps.status().WithContext("poem");
  std::vector<std::u32string> lines(1);
  for (char32_t c : *cps) {
    if (IsBreak(c)) {
      if (!lines.back().empty()) lines.emplace_back();
    } else {
      lines.back().push_back(c);
    }
  }
  if (lines.back().empty()) lines.pop_back();
  return lines;
}

Result<image::Image> TypesetColumns(const render::GlyphFont& font,
                                    const std::vector<std::u32string>& lines, int w, int h) {
  for (const auto& l : lines) {
    for (char32_t c : l) {
      if (!font.Has(c)) {
        return NotFound("typeset: the font has no glyph for " + EncodeUtf8(std::u32string(1, c)));
      }
    }
  }
  return TypesetColumns(
      [&font](char32_t c, int res, std::vector<uint8_t>* cov) {
        return font.RasterizeBox(c, res, cov);
      },
      lines, w, h);
}

Result<image::Image> TypesetColumns(const GlyphRaster& raster,
                                    const std::vector<std::u32string>& lines, int w, int h) {
  size_t longest = 0;
  for (const auto& l : lines) longest = std::max(longest, l.size());
  if (lines.empty() || longest == 0) return InvalidArgument("typeset: no characters");
  const float n = static_cast<float>(lines.size());
  const float cell = std::floor(std::min(0.8f * static_cast<float>(h) / static_cast<float>(longest),
                                         0.8f * static_cast<float>(w) / (n * 1.3f - 0.3f)));
  if (cell < 8) return InvalidArgument("typeset: canvas too small for the lines");
  const int res = static_cast<int>(cell);
  image::Image img = image::Image::Filled(w, h);
  const float block_w = (n * 1.3f - 0.3f) * cell;
  const float right = (static_cast<float>(w) + block_w) / 2;
  const float top = (static_cast<float>(h) - static_cast<float>(longest) * cell) / 2;
  std::vector<uint8_t> cov;
  for (size_t col = 0; col < lines.size(); ++col) {
    const int x0 = static_cast<int>(right - (static_cast<float>(col) * 1.3f + 1) * cell);
    for (size_t k = 0; k < lines[col].size(); ++k) {
      const int y0 = static_cast<int>(top + static_cast<float>(k) * cell);
      if (!raster(lines[col][k], res, &cov) ||
          cov.size() != static_cast<size_t>(res) * static_cast<size_t>(res)) {
        return NotFound("typeset: no glyph for " + EncodeUtf8(std::u32string(1, lines[col][k])));
      }
      for (int y = 0; y < res; ++y) {
        if (y0 + y < 0 || y0 + y >= h) continue;
        uint8_t* row = img.row(y0 + y);
        for (int x = 0; x < res; ++x) {
          if (x0 + x < 0 || x0 + x >= w) continue;
          const uint8_t v = static_cast<uint8_t>(255 - cov[static_cast<size_t>(y * res + x)]);
          uint8_t* px = row + static_cast<ptrdiff_t>(x0 + x) * 3;
          px[0] = px[1] = px[2] = std::min(px[0], v);
        }
      }
    }
  }
  return img;
}

Result<LegibilityScore> ScoreImage(const Ocr& ocr, const image::Image& img,
                                   const std::vector<std::u32string>& written, bool vertical,
                                   std::u32string* text) {
  auto lines = ocr.Read(img, vertical);
  if (!lines.ok()) return lines.status();
  std::u32string read, want;
  for (const auto& l : *lines) read += l.text;
  for (const auto& l : written) want += l;
  LegibilityScore s;
  s.written = static_cast<int>(want.size());
  s.read = AlignedMatches(want, read);
  if (text != nullptr) *text = read;
  return s;
}

}  // namespace danqing::ocr
