#include "render/cursive_forms.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include "render/glyph_font.h"

namespace danqing::render {

bool CentredGlyphCoverage(const GlyphFont& font, char32_t c, int res, std::vector<uint8_t>* out) {
  std::vector<uint8_t> cov;
  if (!font.RasterizeBox(c, res, &cov)) return false;
  int x0 = res, y0 = res, x1 = -1, y1 = -1;
  for (int y = 0; y < res; ++y) {
    for (int x = 0; x < res; ++x) {
      if (cov[static_cast<size_t>(y * res + x)] < 64) continue;
      x0 = std::min(x0, x);
      x1 = std::max(x1, x);
      y0 = std::min(y0, y);
      y1 = std::max(y1, y);
    }
  }
  if (x1 < 0) return false;
  const int dx = (res - 1 - x1 - x0) / 2, dy = (res - 1 - y1 - y0) / 2;
  out->assign(cov.size(), 0);
  for (int y = 0; y < res; ++y) {
    const int ty = y + dy;
    if (ty < 0 || ty >= res) continue;
    for (int x = 0; x < res; ++x) {
      const int tx = x + dx;
      if (tx < 0 || tx >= res) continue;
      (*out)[static_cast<size_t>(ty * res + tx)] = cov[static_cast<size_t>(y * res + x)];
    }
  }
  return true;
}

std::string CursiveFileName(Style style) {
  return "cursive-" + std::string(StyleName(style)) + ".bin";
}

std::string DefaultCursiveDir() {
  if (const char* env = std::getenv("DANQING_DATA_DIR"); env != nullptr && *env != '\0') return env;
#ifdef DANQING_BUILD_DATA_DIR
  return DANQING_BUILD_DATA_DIR;
#else
  return "";
#endif
}

Result<std::unique_ptr<CursiveForms>> CursiveForms::Open(const std::string& dir_in) {
  const std::string dir = dir_in.empty() ? DefaultCursiveDir() : dir_in;
  std::unique_ptr<CursiveForms> f(new CursiveForms());
  int found = 0;
  for (Style s : {Style::kKai, Style::kXing, Style::kCao}) {
    const std::string path = (std::filesystem::path(dir) / CursiveFileName(s)).string();
    auto d = StrokeData::Open(path);
    if (!d.ok()) {
      if (d.status().code() == StatusCode::kNotFound) continue;
      return d.status().WithContext("cursive forms");
    }
    ++found;
    (s == Style::kKai ? f->kai_ : s == Style::kXing ? f->xing_ : f->cao_) = std::move(d).value();
  }
  if (found == 0) return NotFound("cursive forms: no cursive-{kai,xing,cao}.bin in " + dir);
  return f;
}

CursiveForms::~CursiveForms() = default;

const StrokeData* CursiveForms::forms(Style style) const {
  switch (style) {
    case Style::kKai: return kai_.get();
    case Style::kXing: return xing_.get();
    case Style::kCao: return cao_.get();
  }
  return nullptr;
}

bool CursiveForms::Lookup(Style style, char32_t c, CharStrokes* out, Style* from) const {
  for (Style s = style;;) {
    const StrokeData* d = forms(s);
    if (d != nullptr && d->Lookup(c, out)) {
      if (from != nullptr) *from = s;
      return true;
    }
    if (s != Style::kCao) return false;
    s = Style::kXing;
  }
}

bool CursiveForms::Has(Style style, char32_t c) const {
  CharStrokes tmp;
  return Lookup(style, c, &tmp);
}

}  // namespace danqing::render
