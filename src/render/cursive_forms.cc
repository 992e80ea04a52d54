#include "render/cursive_forms.h"

#include <cstdlib>
#include <filesystem>

namespace danqing::render {

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
