// Builds the renderer's running/cursive forms (issue 27): for each style's
// calligrapher's font, the characters the project needs (every character of
// data/verse/poems.tsv and the 3,755 common characters of GB 2312 level 1),
// each glyph rasterised, centred, and turned into stroke paths with widths
// (render/glyph_skeleton.h), written in the stroke data's format (DQSTRK01).
//
// Usage: build_cursive --out DIR --poems poems.tsv [--res 256]
//                      STYLE=FONT... (STYLE: kai, xing, cao; FONT: .woff/.ttf)
// A style may be given several files (a font split into subsets): the first
// given that has a glyph gives it.
// It links only the skeleton, the font reader and common/ (not the renderer),
// so a change to the renderer does not rebuild the forms.
// Writes DIR/cursive-STYLE.bin (atomically; the names render/cursive_forms.h reads) and prints per
// style: glyphs written, characters the font lacks, glyphs whose skeleton came out empty, bytes,
// and the mean IoU of the re-rasterised paths against the glyph.
#include <iconv.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "common/utf8.h"
#include "render/glyph_font.h"
#include "render/glyph_skeleton.h"

namespace {

using danqing::render::CharStrokes;

bool IsHan(char32_t c) {
  return (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x4E00 && c <= 0x9FFF);
}

// GB 2312 level 1 (rows 16-55): the 3,755 most common characters.
std::set<char32_t> CommonCharacters() {
  std::set<char32_t> out;
  iconv_t cd = iconv_open("UTF-32LE", "GB2312");
  if (cd == reinterpret_cast<iconv_t>(-1)) return out;
  for (int row = 0xB0; row <= 0xD7; ++row) {
    for (int col = 0xA1; col <= 0xFE; ++col) {
      char in[2] = {static_cast<char>(row), static_cast<char>(col)};
      char outb[8];
      char* ip = in;
      char* op = outb;
      size_t il = 2, ol = sizeof outb;
      if (iconv(cd, &ip, &il, &op, &ol) == static_cast<size_t>(-1) || ol != 4) continue;
      const auto* u = reinterpret_cast<const unsigned char*>(outb);
      const char32_t c = static_cast<char32_t>(u[0] | (u[1] << 8) | (u[2] << 16) | (u[3] << 24));
      if (IsHan(c)) out.insert(c);
    }
  }
  iconv_close(cd);
  return out;
}

void PutU32(std::string* b, uint32_t v) {
  for (int i = 0; i < 4; ++i) b->push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}
void PutI16(std::string* b, int v) {
  const auto u = static_cast<uint16_t>(static_cast<int16_t>(std::clamp(v, -32768, 32767)));
  b->push_back(static_cast<char>(u & 0xFF));
  b->push_back(static_cast<char>(u >> 8));
}

std::string Record(const CharStrokes& cs) {
  std::string r;
  r.push_back(static_cast<char>(cs.strokes.size()));
  for (const auto& s : cs.strokes) {
    r.push_back(static_cast<char>(s.points.size()));
    for (const auto& p : s.points) {
      PutI16(&r, static_cast<int>(std::lround(p.x)));
      PutI16(&r, static_cast<int>(std::lround(900.0f - p.y)));  // the file is y up (hanzi-writer's)
      r.push_back(
          static_cast<char>(std::clamp(static_cast<int>(std::lround(p.half_width)), 1, 255)));
    }
  }
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  std::string out_dir, poems_path;
  int res = 256;
  std::vector<std::pair<std::string, std::string>> fonts;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--out" && i + 1 < argc) {
      out_dir = argv[++i];
    } else if (a == "--poems" && i + 1 < argc) {
      poems_path = argv[++i];
    } else if (a == "--res" && i + 1 < argc) {
      res = std::atoi(argv[++i]);
    } else if (a.find('=') != std::string::npos) {
      const std::string style = a.substr(0, a.find('='));
      if (style != "kai" && style != "xing" && style != "cao") {
        std::fprintf(stderr, "build_cursive: %s: unknown style (kai, xing, cao)\n", a.c_str());
        return 2;
      }
      fonts.emplace_back(style, a.substr(a.find('=') + 1));
    } else {
      std::fprintf(
          stderr,
          "usage: build_cursive --out DIR --poems poems.tsv [--res 64..1024] STYLE=FONT...\n");
      return 2;
    }
  }
  if (out_dir.empty() || poems_path.empty() || fonts.empty() || res < 64 || res > 1024) {
    std::fprintf(
        stderr,
        "usage: build_cursive --out DIR --poems poems.tsv [--res 64..1024] STYLE=FONT...\n");
    return 2;
  }
  std::ifstream pf(poems_path, std::ios::binary);
  if (!pf) {
    std::fprintf(stderr, "build_cursive: --poems %s: cannot read it\n", poems_path.c_str());
    return 1;
  }
  std::stringstream ss;
  ss << pf.rdbuf();
  auto cps = danqing::DecodeUtf8(ss.str());
  if (!cps.ok()) {
    std::fprintf(stderr, "build_cursive: --poems %s: %s\n", poems_path.c_str(),
                 cps.status().message().c_str());
    return 1;
  }
  std::set<char32_t> chars = CommonCharacters();
  const size_t common = chars.size();
  for (char32_t c : *cps)
    if (IsHan(c)) chars.insert(c);
  std::printf("build_cursive: %zu characters (%zu common, GB 2312 level 1; the rest from %s)\n",
              chars.size(), common, poems_path.c_str());
  std::filesystem::create_directories(out_dir);
  // Files of one style in the order given: the first that has a glyph gives it.
  std::vector<std::pair<std::string, std::vector<std::string>>> styles;
  for (const auto& [style_name, font_path] : fonts) {
    if (styles.empty() || styles.back().first != style_name) {
      auto it = std::find_if(styles.begin(), styles.end(),
                             [&](const auto& e) { return e.first == style_name; });
      if (it == styles.end()) {
        styles.push_back({style_name, {}});
      } else {
        it->second.push_back(font_path);
        continue;
      }
    }
    styles.back().second.push_back(font_path);
  }
  for (const auto& [style_name, paths] : styles) {
    std::vector<std::unique_ptr<danqing::render::GlyphFont>> files;
    for (const std::string& font_path : paths) {
      auto font = danqing::render::GlyphFont::Open(font_path);
      if (!font.ok()) {
        std::fprintf(stderr, "build_cursive: %s font: %s\n", style_name.c_str(),
                     font.status().ToString().c_str());
        return 1;
      }
      files.push_back(std::move(font).value());
    }
    const std::string& font_path = paths.front();
    std::map<char32_t, std::string> records;
    int missing = 0, empty = 0;
    double iou_sum = 0;
    std::vector<uint8_t> cov;
    for (char32_t c : chars) {
      bool found = false;
      for (const auto& f : files) {
        if (f->Has(c) && danqing::render::CentredGlyphCoverage(*f, c, res, &cov)) {
          found = true;
          break;
        }
      }
      if (!found) {
        ++missing;
        continue;
      }
      CharStrokes cs = danqing::render::SkeletonStrokes(cov, res);
      if (cs.strokes.empty()) {
        ++empty;
        continue;
      }
      iou_sum += danqing::render::MaskIoU(danqing::render::RasterizeStrokes(cs, res),
                                          danqing::render::Threshold(cov));
      records[c] = Record(cs);
    }
    std::string head = "DQSTRK01";
    PutU32(&head, static_cast<uint32_t>(records.size()));
    PutU32(&head, 0);
    uint32_t off = static_cast<uint32_t>(16 + records.size() * 8);
    std::string body;
    for (const auto& [c, r] : records) {
      PutU32(&head, static_cast<uint32_t>(c));
      PutU32(&head, off + static_cast<uint32_t>(body.size()));
      body += r;
    }
    const auto path = std::filesystem::path(out_dir) / ("cursive-" + style_name + ".bin");
    const auto tmp = path.string() + ".tmp";
    {
      std::ofstream o(tmp, std::ios::binary | std::ios::trunc);
      o << head << body;
      if (!o) {
        std::fprintf(stderr, "build_cursive: %s: cannot write\n", tmp.c_str());
        return 1;
      }
    }
    std::filesystem::rename(tmp, path);
    std::printf(
        "build_cursive: %s (%s and %zu more files): %zu glyphs, %d not in the font, %d empty "
        "skeletons, "
        "%zu bytes, mean IoU %.3f\n",
        path.string().c_str(), font_path.c_str(), paths.size() - 1, records.size(), missing, empty,
        head.size() + body.size(),
        records.empty() ? 0.0 : iou_sum / static_cast<double>(records.size()));
  }
  return 0;
}
