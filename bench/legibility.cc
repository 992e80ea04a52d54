// Legibility benchmark (issue 27): what PaddleOCR PP-OCRv4 (through ONNX
// Runtime) reads of the renderer's inscriptions, per style, over the project's
// poems x seeds x backgrounds at 1920x1080, and of the plain fonts typeset on
// white (the ceiling). Prints a Markdown table: characters read in the right
// order / characters written (ocr/legibility.h).
//
//   build/default/bench/legibility [--poems N] [--seeds N] [--threads N]
//                                  [--styles kai,xing,cao] [--verbose]
//
// Then, for the forms recovered from the calligraphers' fonts (tools/cursive,
// cursive-*.bin in the build's data directory): per font, over every
// character of data/verse/poems.tsv the file has, the IoU of its paths drawn
// back with their widths (RasterizeStrokes, 256 x 256) against the glyph
// (centred, thresholded at half): how faithfully the paths recover the form.
#include "ocr/legibility.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "common/utf8.h"
#include "render/cursive_forms.h"
#include "render/glyph_font.h"
#include "render/glyph_skeleton.h"
#include "render/renderer.h"

namespace {

using danqing::ocr::LegibilityScore;
namespace render = danqing::render;

// The poems of the renderer's legibility test (tests/render/render_test.cc).
const char* const kPoems[] = {
    "白日依山尽，黄河入海流。欲穷千里目，更上一层楼。",
    "朝辞白帝彩云间，千里江陵一日还。两岸猿声啼不住，轻舟已过万重山。",
    "床前明月光，疑是地上霜。举头望明月，低头思故乡。",
    "千山鸟飞绝，万径人踪灭。孤舟蓑笠翁，独钓寒江雪。",
};

struct FontRow {
  const char* name;
  std::string path;
};

int Fail(const danqing::Status& s) {
  std::fprintf(stderr, "legibility: %s\n", s.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  int poems = 4, seeds = 2, threads = 1;
  bool verbose = false;
  std::vector<render::Style> styles = {render::Style::kKai, render::Style::kXing,
                                       render::Style::kCao};
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> const char* { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--poems") {
      poems = std::atoi(next());
    } else if (a == "--seeds") {
      seeds = std::atoi(next());
    } else if (a == "--threads") {
      threads = std::atoi(next());
    } else if (a == "--verbose") {
      verbose = true;
    } else if (a == "--styles") {
      styles.clear();
      std::string list = next();
      size_t p = 0;
      while (p <= list.size()) {
        size_t q = list.find(',', p);
        if (q == std::string::npos) q = list.size();
        auto s = render::ParseStyle(list.substr(p, q - p));
        if (!s) {
          std::fprintf(stderr, "legibility: --styles: unknown style '%s'\n",
                       list.substr(p, q - p).c_str());
          return 2;
        }
        styles.push_back(*s);
        p = q + 1;
      }
    } else {
      std::fprintf(stderr,
                   "usage: legibility [--poems 1..4] [--seeds N] [--threads N] [--styles "
                   "kai,xing,cao] [--verbose]\n");
      return 2;
    }
  }
  if (poems < 1 || poems > 4 || seeds < 1 || threads < 1) {
    std::fprintf(stderr, "legibility: --poems 1..4, --seeds >= 1, --threads >= 1\n");
    return 2;
  }
  danqing::ocr::OcrConfig oc;
  oc.threads = threads;
  auto ocr = danqing::ocr::Ocr::Open(oc);
  if (!ocr.ok()) return Fail(ocr.status());
  auto renderer = render::Renderer::Create();
  if (!renderer.ok()) return Fail(renderer.status());

  const int w = 1920, h = 1080;
  std::printf(
      "| what | images | characters | read in order | legibility |\n|---|---:|---:|---:|---:|\n");
  auto t0 = std::chrono::steady_clock::now();
  for (render::Style style : styles) {
    LegibilityScore total;
    int images = 0;
    for (int p = 0; p < poems; ++p) {
      auto lines = danqing::ocr::PoemLines(kPoems[p]);
      if (!lines.ok()) return Fail(lines.status());
      for (render::Background bg : {render::Background::kLandscape, render::Background::kPaper}) {
        for (int s = 0; s < seeds; ++s) {
          render::RenderOptions o;
          o.width = w;
          o.height = h;
          o.style = style;
          o.background = bg;
          o.seed = static_cast<uint64_t>(11 + s);
          o.threads = threads;
          auto img = (*renderer)->Render({kPoems[p], "", "", ""}, o);
          if (!img.ok()) return Fail(img.status());
          std::u32string text;
          auto score = danqing::ocr::ScoreImage(**ocr, *img, *lines, true, &text);
          if (!score.ok()) return Fail(score.status());
          total += *score;
          ++images;
          if (verbose) {
            std::fprintf(stderr, "%s %s seed %d poem %d: %d/%d read \"%s\"\n",
                         std::string(render::StyleName(style)).c_str(),
                         std::string(render::BackgroundName(bg)).c_str(), 11 + s, p, score->read,
                         score->written, danqing::EncodeUtf8(text).c_str());
          }
        }
      }
    }
    std::printf("| renderer %s (landscape, paper) | %d | %d | %d | %.1f%% |\n",
                std::string(render::StyleName(style)).c_str(), images, total.written, total.read,
                100.0 * total.Ratio());
    std::fflush(stdout);
  }
  const std::string nm = DANQING_SOURCE_DIR "/node_modules/@fontsource/";
  const FontRow fonts[] = {
      {"UKai (fonts-arphic-ukai)", "/usr/share/fonts/truetype/arphic/ukai.ttc"},
      {"Ma Shan Zheng (brush kai)",
       nm + "ma-shan-zheng/files/ma-shan-zheng-chinese-simplified-400-normal.woff"},
      {"Zhi Mang Xing (running)",
       nm + "zhi-mang-xing/files/zhi-mang-xing-chinese-simplified-400-normal.woff"},
      {"Liu Jian Mao Cao (cursive)",
       nm + "liu-jian-mao-cao/files/liu-jian-mao-cao-chinese-simplified-400-normal.woff"},
  };
  for (const FontRow& f : fonts) {
    auto font = render::GlyphFont::Open(f.path);
    if (!font.ok()) {
      std::printf("| font %s | - | - | - | absent: %s |\n", f.name,
                  font.status().message().c_str());
      continue;
    }
    LegibilityScore total;
    int images = 0;
    for (int p = 0; p < poems; ++p) {
      auto lines = danqing::ocr::PoemLines(kPoems[p]);
      if (!lines.ok()) return Fail(lines.status());
      auto img = danqing::ocr::TypesetColumns(**font, *lines, w, h);
      if (!img.ok()) return Fail(img.status());
      std::u32string text;
      auto score = danqing::ocr::ScoreImage(**ocr, *img, *lines, true, &text);
      if (!score.ok()) return Fail(score.status());
      total += *score;
      ++images;
      if (verbose) {
        std::fprintf(stderr, "%s poem %d: %d/%d read \"%s\"\n", f.name, p, score->read,
                     score->written, danqing::EncodeUtf8(text).c_str());
      }
    }
    std::printf("| font %s on white | %d | %d | %d | %.1f%% |\n", f.name, images, total.written,
                total.read, 100.0 * total.Ratio());
    std::fflush(stdout);
  }
  // Fidelity of the recovered forms.
  auto forms = render::CursiveForms::Open();
  if (!forms.ok()) {
    std::printf("\ncursive forms: %s\n", forms.status().ToString().c_str());
  } else {
    std::ifstream pf(DANQING_SOURCE_DIR "/data/verse/poems.tsv", std::ios::binary);
    std::stringstream ss;
    ss << pf.rdbuf();
    auto cps = danqing::DecodeUtf8(ss.str());
    if (!cps.ok()) return Fail(cps.status());
    std::set<char32_t> chars;
    for (char32_t c : *cps)
      if (c >= 0x4E00 && c <= 0x9FFF) chars.insert(c);
    // The recovered forms drawn plainly (paths with their widths, black on
    // white) in the same columns: does the recovery keep what OCR reads?
    std::printf(
        "\n| forms drawn from the paths, on white | images | characters | read in order | "
        "legibility |\n"
        "|---|---:|---:|---:|---:|\n");
    for (render::Style style : {render::Style::kKai, render::Style::kXing, render::Style::kCao}) {
      if ((*forms)->forms(style) == nullptr) continue;
      danqing::ocr::GlyphRaster raster = [&](char32_t c, int res, std::vector<uint8_t>* cov) {
        render::CharStrokes cs;
        if (!(*forms)->forms(style)->Lookup(c, &cs)) return false;
        *cov = render::RasterizeStrokes(cs, res);
        for (uint8_t& v : *cov) v = v != 0 ? 255 : 0;
        return true;
      };
      LegibilityScore total;
      int images = 0;
      for (int p = 0; p < poems; ++p) {
        auto lines = danqing::ocr::PoemLines(kPoems[p]);
        if (!lines.ok()) return Fail(lines.status());
        auto img = danqing::ocr::TypesetColumns(raster, *lines, w, h);
        if (!img.ok()) return Fail(img.status());
        std::u32string text;
        auto score = danqing::ocr::ScoreImage(**ocr, *img, *lines, true, &text);
        if (!score.ok()) return Fail(score.status());
        total += *score;
        ++images;
        if (verbose) {
          std::fprintf(stderr, "%s forms poem %d: %d/%d read \"%s\"\n",
                       render::CursiveFileName(style).c_str(), p, score->read, score->written,
                       danqing::EncodeUtf8(text).c_str());
        }
      }
      std::printf("| %s | %d | %d | %d | %.1f%% |\n", render::CursiveFileName(style).c_str(),
                  images, total.written, total.read, 100.0 * total.Ratio());
    }
    std::printf(
        "\n| font (form file) | glyphs | paths per glyph | IoU mean | IoU p10 | IoU min | worst |\n"
        "|---|---:|---:|---:|---:|---:|---|\n");
    const std::pair<render::Style, int> rows[] = {
        {render::Style::kKai, 1}, {render::Style::kXing, 2}, {render::Style::kCao, 3}};
    for (const auto& [style, font_index] : rows) {
      const render::StrokeData* file = (*forms)->forms(style);
      auto font = render::GlyphFont::Open(fonts[font_index].path);
      if (file == nullptr || !font.ok()) continue;
      std::vector<double> ious;
      double paths = 0;
      char32_t worst = 0;
      double worst_iou = 2;
      std::vector<uint8_t> cov;
      for (char32_t c : chars) {
        render::CharStrokes cs;
        if (!file->Lookup(c, &cs) || !render::CentredGlyphCoverage(**font, c, 256, &cov)) continue;
        const double iou =
            render::MaskIoU(render::RasterizeStrokes(cs, 256), render::Threshold(cov));
        ious.push_back(iou);
        paths += static_cast<double>(cs.strokes.size());
        if (iou < worst_iou) {
          worst_iou = iou;
          worst = c;
        }
      }
      if (ious.empty()) continue;
      std::sort(ious.begin(), ious.end());
      double sum = 0;
      for (double v : ious) sum += v;
      std::printf("| %s (%s) | %zu | %.1f | %.3f | %.3f | %.3f | %s |\n", fonts[font_index].name,
                  render::CursiveFileName(style).c_str(), ious.size(),
                  paths / static_cast<double>(ious.size()), sum / static_cast<double>(ious.size()),
                  ious[ious.size() / 10], ious.front(),
                  danqing::EncodeUtf8(std::u32string(1, worst)).c_str());
    }
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(stderr, "legibility: %.1f s\n", secs);
  return 0;
}
