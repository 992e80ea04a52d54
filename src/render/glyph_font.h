// GlyphFont: a Kai font read with FreeType, for characters the stroke data
// lacks and as the reference raster for legibility checks.
//
// Rasters are laid out in the stroke data's 1024 box (screen orientation), so
// a glyph and a character's strokes land in the same place: the font's em is
// the box, its baseline 900 box units from the top (hanzi-writer's convention,
// whose data was drawn from the Arphic Kai fonts).
//
// Thread-safety: RasterizeBox() and Has() take an internal mutex (a FreeType
// face is not thread-safe); safe to call from many threads.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/status.h"

namespace danqing::render {

class GlyphFont {
 public:
  // Errors: NotFound (no such file), InvalidArgument (FreeType cannot read it).
  static Result<std::unique_ptr<GlyphFont>> Open(const std::string& path);
  ~GlyphFont();
  GlyphFont(const GlyphFont&) = delete;
  GlyphFont& operator=(const GlyphFont&) = delete;

  bool Has(char32_t c) const;
  // Coverage (0..255) of the glyph in a res x res raster of the 1024 box.
  // False when the font has no glyph for c.
  bool RasterizeBox(char32_t c, int res, std::vector<uint8_t>* out) const;

 private:
  GlyphFont() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace danqing::render
