// The verse-fit measurement shared by bench/verse_fit.cc and
// tests/verse/verse_fit_test.cc: for each labelled photo of
// data/verse/fit_photos.tsv, perceive it, choose a poem the way the service's
// pipeline does (the perceived themes above 0.05, at most 5, strongest first),
// and count a hit when the chosen poem's themes include the photo's label.
// The selector varies its choice per photo among the near-best poems (and
// never repeats one within its window), so each photo is chosen for `draws`
// times, as if that many visitors brought it, and its fit is the share of
// those choices that carry the label: one draw per photo would measure luck.
#pragma once

#include <algorithm>
#include <cstdint>
#include <ctime>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/status.h"
#include "image/image.h"
#include "perceive/perceiver.h"
#include "verse/corpus.h"
#include "verse/selector.h"

namespace danqing::testing {

struct FitPhoto {
  std::string package;
  std::string path;
  std::string theme;  // the label a person gave
  std::string note;
};

// Parses the manifest; INVALID_ARGUMENT names the line and the field.
inline Result<std::vector<FitPhoto>> LoadFitManifest(const std::string& path) {
  std::ifstream in(path);
  if (!in) return NotFound("verse-fit manifest " + path + ": cannot open");
  std::vector<FitPhoto> out;
  std::string line;
  int no = 0;
  while (std::getline(in, line)) {
    ++no;
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> f;
    std::stringstream ss(line);
    std::string field;
    while (std::getline(ss, field, '\t')) f.push_back(field);
    const std::string where = path + ":" + std::to_string(no) + ": ";
    if (f.size() < 3) return InvalidArgument(where + "expected package, path, theme");
    if (f[1].empty() || f[1][0] != '/') return InvalidArgument(where + "path must be absolute");
    if (f[2].empty()) return InvalidArgument(where + "empty theme");
    out.push_back({f[0], f[1], f[2], f.size() > 3 ? f[3] : ""});
  }
  if (out.empty()) return InvalidArgument(path + ": no photos");
  return out;
}

struct FitOutcome {
  const FitPhoto* photo = nullptr;
  perceive::SceneFeatures features;
  std::vector<perceive::ThemeScore> perceived;  // the themes handed to the selector
  const verse::Poem* poem = nullptr;            // the first draw's poem
  double hit = 0;                               // share of the draws whose poem carries the label
  double quatrains = 0;                         // share of the draws that chose a quatrain
  double perceive_ms = 0;  // Perceive() on a 320 px copy: thread CPU time, best of 10 runs
};

inline uint64_t FitSeed(const std::string& s) {
  uint64_t h = 1469598103934665603ULL;  // FNV-1a
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ULL;
  return h;
}

// One photo; the selector keeps its no-repeat window across calls, as in the
// service. NOT_FOUND when the photo is missing (its package not installed).
inline Result<FitOutcome> FitOne(const FitPhoto& photo, perceive::Perceiver& perceiver,
                                 verse::VerseSelector& selector, int draws = 20) {
  auto img = image::ReadFile(photo.path);
  if (!img.ok()) return img.status().WithContext(photo.package);
  FitOutcome o;
  o.photo = &photo;
  perceive::ImageView view{img->width, img->height, img->rgb.data(),
                           static_cast<size_t>(img->width) * 3};
  auto p = perceiver.Perceive(view);
  if (!p.ok()) return p.status();
  o.features = p->features;
  {  // the analysis alone, on the size the perceiver reduces a photo to
    const int side = std::max(img->width, img->height);
    const image::Image small = image::Resize(*img, std::max(1, img->width * 320 / side),
                                             std::max(1, img->height * 320 / side));
    const perceive::ImageView sv{small.width, small.height, small.rgb.data(),
                                 static_cast<size_t>(small.width) * 3};
    o.perceive_ms = 1e9;
    const auto cpu_ms = [] {
      timespec ts{};
      ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
      return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) / 1e6;
    };
    for (int i = 0; i < 10; ++i) {
      const double t0 = cpu_ms();
      if (!perceiver.Perceive(sv).ok()) break;
      o.perceive_ms = std::min(o.perceive_ms, cpu_ms() - t0);
    }
  }
  std::vector<verse::ThemeWeight> themes;
  for (const auto& s : p->themes) {
    if (s.score > 0.05 && themes.size() < 5) {
      themes.push_back({s.theme, s.score});
      o.perceived.push_back(s);
    }
  }
  for (int d = 0; d < draws; ++d) {
    const verse::Poem& poem =
        selector.Choose(themes, FitSeed(photo.path) + static_cast<uint64_t>(d));
    if (d == 0) o.poem = &poem;
    bool hit = false;
    for (const auto& t : poem.themes) hit = hit || t == photo.theme;
    o.hit += hit ? 1.0 / draws : 0.0;
    o.quatrains += poem.lines.size() == 4 ? 1.0 / draws : 0.0;
  }
  return o;
}

}  // namespace danqing::testing
