// CursiveForms: running (行) and cursive (草) character forms from
// calligraphers' fonts, as stroke paths the brush can write (issue 27).
//
// tools/cursive/build_cursive.cc builds one file per style from the OFL fonts
// of the npm packages @fontsource/zhi-mang-xing (xing), liu-jian-mao-cao (cao)
// and ma-shan-zheng (a brush kai, kept for comparison), recovering each
// glyph's paths with render/glyph_skeleton.h: cursive-xing.bin,
// cursive-cao.bin, cursive-kai.bin in the stroke data's format (DQSTRK01,
// render/stroke_data.h), with OFL.txt beside them. The renderer writes xing
// and cao from cursive-xing.bin and cursive-cao.bin (render/renderer.h); kai
// keeps the stroke data.
//
// Fallback: a character the cao font lacks takes the xing form; one the xing
// font lacks has none here (the renderer uses the stroke data's kai and counts
// it, RenderStats::forms_to_kai). Lookup says which style's form it gave.
//
// Thread-safety: immutable after Open(); Lookup may run on many threads.
#pragma once

#include <memory>
#include <string>

#include "common/status.h"
#include "render/renderer.h"
#include "render/stroke_data.h"

namespace danqing::render {

class CursiveForms {
 public:
  // Opens the style files in `dir` (empty: DefaultCursiveDir()). A missing
  // file leaves that style without forms (styles() says which are there);
  // NOT_FOUND when none of them is; INVALID_ARGUMENT (naming the file) for a
  // corrupt one.
  static Result<std::unique_ptr<CursiveForms>> Open(const std::string& dir = "");
  ~CursiveForms();

  // The form of c for `style`, falling back cao -> xing; kai: the brush-kai
  // font's form. False when no file has c. *from: the style that gave it.
  bool Lookup(Style style, char32_t c, CharStrokes* out, Style* from = nullptr) const;
  bool Has(Style style, char32_t c) const;
  // The file of a style, or nullptr when it was absent.
  const StrokeData* forms(Style style) const;

 private:
  CursiveForms() = default;
  std::unique_ptr<StrokeData> kai_, xing_, cao_;
};

// The file name of a style's forms: "cursive-kai.bin", "cursive-xing.bin", "cursive-cao.bin".
std::string CursiveFileName(Style style);
// $DANQING_DATA_DIR, else the build tree's data directory.
std::string DefaultCursiveDir();

}  // namespace danqing::render
