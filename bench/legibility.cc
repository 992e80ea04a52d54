// Legibility benchmark (issue 27): what PaddleOCR PP-OCRv4 (through ONNX
// Runtime) reads of the renderer's inscriptions, per style, over the project's
// poems x seeds x backgrounds at 1920x1080, and of the plain fonts typeset on
// white (the ceiling). Prints a Markdown table: characters read in the right
// order / characters written (ocr/legibility.h).
//
//   build/default/bench/legibility [--poems N] [--seeds N] [--threads N]
//                                  [--styles kai,xing,cao] [--verbose] [--forms]
//
// Then the forms as rendered (--forms: only this): per style, over the same
// poems x seeds x backgrounds, each poem character's ink (sampled through its
// placement into its 1024 box, 256 x 256, ink >= 0.2) and the glyph of the
// style's font and of UKai (centred, thresholded at half), each cropped to its
// ink and fitted to the square; the IoU of the ink with each, the share of
// characters closer to their font than to kai, and the coefficient of
// variation of the characters' ink heights within a column (mean over the
// columns of three or more characters).
//
// Then, for the forms recovered from the calligraphers' fonts (tools/cursive,
// cursive-*.bin in the build's data directory): per font, over every
// character of data/verse/poems.tsv the file has, the IoU of its paths drawn
// back with their widths (RasterizeStrokes, 256 x 256) against the glyph
// (centred, thresholded at half): how faithfully the paths recover the form.
#include "ocr/legibility.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "common/utf8.h"
#include "render/cursive_forms.h"
#include "render/glyph_font.h"
#include "render/glyph_skeleton.h"
#include "render/renderer.h"
#include "testing/support/render_fixtures.h"

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

struct FormsRow {
  std::vector<double> iou_font, iou_kai;
  int closer = 0, characters = 0, from_form = 0;
  double cv_sum = 0;
  int columns = 0;
};

// The forms as rendered for one style (see the header).
danqing::Status MeasureForms(const render::Renderer& renderer, render::Style style,
                             const render::GlyphFont* style_font, const render::GlyphFont& kai_font,
                             int poems, int seeds, FormsRow* row);

int Fail(const danqing::Status& s) {
  std::fprintf(stderr, "legibility: %s\n", s.ToString().c_str());
  return 1;
}

// One row of the legibility table: the images scored and their characters
// written and read.
struct Tally {
  LegibilityScore total;
  int images = 0;
};

// Scores what the OCR reads of `img` against the poem's `lines` into
// `tally`; with `verbose`, prints "<label>: read/written read "<text>"" on
// stderr.
danqing::Status Score(const danqing::ocr::Ocr& ocr, const danqing::image::Image& img,
                      const std::vector<std::u32string>& lines, bool verbose,
                      const std::string& label, Tally* tally) {
  std::u32string text;
  auto score = danqing::ocr::ScoreImage(ocr, img, lines, true, &text);
  if (!score.ok()) return score.status();
  tally->total += *score;
  ++tally->images;
  if (verbose) {
    std::fprintf(stderr, "%s: %d/%d read \"%s\"\n", label.c_str(), score->read, score->written,
                 danqing::EncodeUtf8(text).c_str());
  }
  return danqing::Status::Ok();
}

danqing::Status MeasureForms(const render::Renderer& renderer, render::Style style,
                             const render::GlyphFont* style_font, const render::GlyphFont& kai_font,
                             int poems, int seeds, FormsRow* row) {
  constexpr int kRes = 256, kFit = 128;
  for (int p = 0; p < poems; ++p) {
    for (render::Background bg : {render::Background::kLandscape, render::Background::kPaper}) {
      for (int s = 0; s < seeds; ++s) {
        render::RenderOptions o;
        o.style = style;
        o.background = bg;
        o.seed = static_cast<uint64_t>(11 + s);
        render::Renderer::Detail detail;
        auto img = renderer.RenderDetailed({kPoems[p], "", "", ""}, o, nullptr, &detail);
        if (!img.ok()) return img.status();
        std::vector<std::vector<double>> heights;
        for (const auto& pl : detail.placements) {
          if (pl.role != 0) continue;
          // The ink through the placement: box point (bx, by) -> canvas.
          std::vector<uint8_t> ink(static_cast<size_t>(kRes * kRes), 0);
          int top = kRes, bottom = -1;
          for (int y = 0; y < kRes; ++y) {
            for (int x = 0; x < kRes; ++x) {
              const auto px = danqing::render::testing_fixtures::BoxSampleOnCanvas(pl, x, y, kRes, o.width, o.height);
              if (!px) continue;
              const int cx = px->x, cy = px->y;
              if (detail.ink[static_cast<size_t>(cy) * static_cast<size_t>(o.width) +
                             static_cast<size_t>(cx)] < 0.2f)
                continue;
              ink[static_cast<size_t>(y * kRes + x)] = 1;
              top = std::min(top, y);
              bottom = std::max(bottom, y);
            }
          }
          const float scale = std::sqrt(std::fabs(pl.m[0] * pl.m[4] - pl.m[1] * pl.m[3]));
          if (static_cast<size_t>(pl.run) >= heights.size())
            heights.resize(static_cast<size_t>(pl.run) + 1);
          heights[static_cast<size_t>(pl.run)].push_back(
              bottom >= top ? (bottom - top + 1) * 1024.0 / kRes * scale : 0.0);
          std::vector<uint8_t> cov;
          if (style_font == nullptr || !render::CentredGlyphCoverage(*style_font, pl.c, kRes, &cov))
            continue;
          const double f = render::MaskIoU(render::FitToSquare(ink, kRes, kFit),
                                           render::FitToSquare(render::Threshold(cov), kRes, kFit));
          if (!render::CentredGlyphCoverage(kai_font, pl.c, kRes, &cov)) continue;
          const double k = render::MaskIoU(render::FitToSquare(ink, kRes, kFit),
                                           render::FitToSquare(render::Threshold(cov), kRes, kFit));
          row->iou_font.push_back(f);
          row->iou_kai.push_back(k);
          ++row->characters;
          if (pl.form >= 0) ++row->from_form;
          if (f > k) ++row->closer;
        }
        for (const auto& col : heights) {
          if (col.size() < 3) continue;
          double mean = 0, var = 0;
          for (double v : col) mean += v;
          mean /= static_cast<double>(col.size());
          for (double v : col) var += (v - mean) * (v - mean);
          var /= static_cast<double>(col.size());
          if (mean <= 0) continue;
          row->cv_sum += std::sqrt(var) / mean;
          ++row->columns;
        }
      }
    }
  }
  return danqing::Status::Ok();
}

double Quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1) + 0.5)];
}

}  // namespace

int main(int argc, char** argv) {
  int poems = 4, seeds = 2, threads = 1;
  bool verbose = false, forms_only = false;
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
    } else if (a == "--forms") {
      forms_only = true;
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
                   "kai,xing,cao] [--verbose] [--forms]\n");
      return 2;
    }
  }
  if (poems < 1 || poems > 4 || seeds < 1 || threads < 1) {
    std::fprintf(stderr, "legibility: --poems 1..4, --seeds >= 1, --threads >= 1\n");
    return 2;
  }
  auto renderer = render::Renderer::Create();
  if (!renderer.ok()) return Fail(renderer.status());

  const int w = 1920, h = 1080;
  {
    const std::string fnm = DANQING_SOURCE_DIR "/node_modules/@fontsource/";
    auto ukai = render::GlyphFont::Open("/usr/share/fonts/truetype/arphic/ukai.ttc");
    if (!ukai.ok()) return Fail(ukai.status());
    std::printf(
        "| forms as rendered | characters | from the form | IoU with its font: p10 / median / p90 "
        "| "
        "IoU with kai: p10 / median / p90 | closer to its font | height CV in a column |\n"
        "|---|---:|---:|---:|---:|---:|---:|\n");
    for (render::Style style : styles) {
      std::string path;
      if (style == render::Style::kXing)
        path = fnm + "zhi-mang-xing/files/zhi-mang-xing-chinese-simplified-400-normal.woff";
      if (style == render::Style::kCao)
        path = fnm + "liu-jian-mao-cao/files/liu-jian-mao-cao-chinese-simplified-400-normal.woff";
      std::unique_ptr<render::GlyphFont> sf;
      if (!path.empty()) {
        auto f = render::GlyphFont::Open(path);
        if (!f.ok()) return Fail(f.status());
        sf = std::move(f).value();
      }
      FormsRow row;
      if (auto st = MeasureForms(**renderer, style, sf ? sf.get() : ukai->get(), **ukai, poems,
                                 seeds, &row);
          !st.ok())
        return Fail(st);
      std::printf("| %s | %d | %d | %.2f / %.2f / %.2f | %.2f / %.2f / %.2f | %.1f%% | %.3f |\n",
                  std::string(render::StyleName(style)).c_str(), row.characters, row.from_form,
                  Quantile(row.iou_font, 0.1), Quantile(row.iou_font, 0.5),
                  Quantile(row.iou_font, 0.9), Quantile(row.iou_kai, 0.1),
                  Quantile(row.iou_kai, 0.5), Quantile(row.iou_kai, 0.9),
                  100.0 * row.closer / std::max(1, row.characters),
                  row.columns > 0 ? row.cv_sum / row.columns : 0.0);
      std::fflush(stdout);
    }
    std::printf("\n");
    if (forms_only) return 0;
  }
  danqing::ocr::OcrConfig oc;
  oc.threads = threads;
  auto ocr = danqing::ocr::Ocr::Open(oc);
  if (!ocr.ok()) return Fail(ocr.status());
  std::printf(
      "| what | images | characters | read in order | legibility |\n|---|---:|---:|---:|---:|\n");
  auto t0 = std::chrono::steady_clock::now();
  for (render::Style style : styles) {
    Tally tally;
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
          const std::string label = std::string(render::StyleName(style)) + " " +
                                    std::string(render::BackgroundName(bg)) + " seed " +
                                    std::to_string(11 + s) + " poem " + std::to_string(p);
          if (auto st = Score(**ocr, *img, *lines, verbose, label, &tally); !st.ok())
            return Fail(st);
        }
      }
    }
    std::printf("| renderer %s (landscape, paper) | %d | %d | %d | %.1f%% |\n",
                std::string(render::StyleName(style)).c_str(), tally.images, tally.total.written,
                tally.total.read, 100.0 * tally.total.Ratio());
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
    Tally tally;
    for (int p = 0; p < poems; ++p) {
      auto lines = danqing::ocr::PoemLines(kPoems[p]);
      if (!lines.ok()) return Fail(lines.status());
      auto img = danqing::ocr::TypesetColumns(**font, *lines, w, h);
      if (!img.ok()) return Fail(img.status());
      const std::string label = std::string(f.name) + " poem " + std::to_string(p);
      if (auto st = Score(**ocr, *img, *lines, verbose, label, &tally); !st.ok()) return Fail(st);
    }
    std::printf("| font %s on white | %d | %d | %d | %.1f%% |\n", f.name, tally.images,
                tally.total.written, tally.total.read, 100.0 * tally.total.Ratio());
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
      Tally tally;
      for (int p = 0; p < poems; ++p) {
        auto lines = danqing::ocr::PoemLines(kPoems[p]);
        if (!lines.ok()) return Fail(lines.status());
        auto img = danqing::ocr::TypesetColumns(raster, *lines, w, h);
        if (!img.ok()) return Fail(img.status());
        const std::string label =
            render::CursiveFileName(style) + " forms poem " + std::to_string(p);
        if (auto st = Score(**ocr, *img, *lines, verbose, label, &tally); !st.ok()) return Fail(st);
      }
      std::printf("| %s | %d | %d | %d | %.1f%% |\n", render::CursiveFileName(style).c_str(),
                  tally.images, tally.total.written, tally.total.read, 100.0 * tally.total.Ratio());
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
