#include "render/glyph_font.h"

#include <ft2build.h>
#include FT_FREETYPE_H

#include <algorithm>
#include <filesystem>

namespace danqing::render {

struct GlyphFont::Impl {
  FT_Library lib = nullptr;
  FT_Face face = nullptr;
  mutable std::mutex mu;
  ~Impl() {
    if (face != nullptr) FT_Done_Face(face);
    if (lib != nullptr) FT_Done_FreeType(lib);
  }
};

Result<std::unique_ptr<GlyphFont>> GlyphFont::Open(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return NotFound("font " + path + ": no such file");
  std::unique_ptr<GlyphFont> f(new GlyphFont());
  f->impl_ = std::make_unique<Impl>();
  if (FT_Init_FreeType(&f->impl_->lib) != 0) return Internal("FreeType init failed");
  if (FT_New_Face(f->impl_->lib, path.c_str(), 0, &f->impl_->face) != 0) {
    f->impl_->face = nullptr;
    return InvalidArgument("font " + path + ": FreeType cannot read it");
  }
  if (FT_Select_Charmap(f->impl_->face, FT_ENCODING_UNICODE) != 0) {
    return InvalidArgument("font " + path + ": no Unicode character map");
  }
  return f;
}

GlyphFont::~GlyphFont() = default;

bool GlyphFont::Has(char32_t c) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return FT_Get_Char_Index(impl_->face, static_cast<FT_ULong>(c)) != 0;
}

bool GlyphFont::RasterizeBox(char32_t c, int res, std::vector<uint8_t>* out) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  FT_Face face = impl_->face;
  FT_UInt index = FT_Get_Char_Index(face, static_cast<FT_ULong>(c));
  if (index == 0 || res <= 0) return false;
  if (FT_Set_Pixel_Sizes(face, static_cast<FT_UInt>(res), static_cast<FT_UInt>(res)) != 0) return false;
  if (FT_Load_Glyph(face, index, FT_LOAD_DEFAULT | FT_LOAD_NO_HINTING) != 0) return false;
  if (FT_Render_Glyph(face->glyph, FT_RENDER_MODE_NORMAL) != 0) return false;
  const FT_Bitmap& bm = face->glyph->bitmap;
  out->assign(static_cast<size_t>(res) * static_cast<size_t>(res), 0);
  int baseline = res * 900 / 1024;
  int top = baseline - face->glyph->bitmap_top;
  int left = face->glyph->bitmap_left;
  for (unsigned r = 0; r < bm.rows; ++r) {
    int y = top + static_cast<int>(r);
    if (y < 0 || y >= res) continue;
    const uint8_t* src = bm.buffer + static_cast<ptrdiff_t>(r) * bm.pitch;
    for (unsigned col = 0; col < bm.width; ++col) {
      int x = left + static_cast<int>(col);
      if (x < 0 || x >= res) continue;
      (*out)[static_cast<size_t>(y) * static_cast<size_t>(res) + static_cast<size_t>(x)] = src[col];
    }
  }
  return true;
}

}  // namespace danqing::render
