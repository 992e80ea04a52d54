// How often the poem chosen for a photo carries the theme a person gives the
// photo: the labelled set data/verse/fit_photos.tsv (Debian wallpaper
// packages), the service's perceiver, corpus and selector.
//
//   build/default/bench/verse_fit [--manifest data/verse/fit_photos.tsv]
//       [--corpus data/verse/poems.tsv] [--quatrain-bonus X] [--near-best X]
//       [--rank-discount X]   (the selector's options; defaults as the service's)
//
// Prints one line per photo and the fit rate; docs/benchmarks.md records it.
#include "testing/support/verse_fit.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

using namespace danqing;

int main(int argc, char** argv) {
  std::string manifest = DANQING_SOURCE_DIR "/data/verse/fit_photos.tsv";
  std::string corpus_path = DANQING_SOURCE_DIR "/data/verse/poems.tsv";
  verse::SelectorOptions options;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--manifest")) manifest = argv[i + 1];
#ifndef VERSE_FIT_BEFORE  // today's selector had none of these (the "before" build)
    else if (!std::strcmp(argv[i], "--near-best"))
      options.near_best = std::atof(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--quatrain-bonus"))
      options.quatrain_bonus = std::atof(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--rank-discount"))
      options.rank_discount = std::atof(argv[i + 1]);
#endif
    else if (!std::strcmp(argv[i], "--corpus"))
      corpus_path = argv[i + 1];
    else {
      std::fprintf(stderr, "unknown flag %s\n", argv[i]);
      return 2;
    }
  }
  auto photos = testing::LoadFitManifest(manifest);
  auto corpus = verse::Corpus::Load(corpus_path);
  auto perceiver = perceive::CreateCvPerceiver();
  for (const Status& s : {photos.status(), corpus.status(), perceiver.status()}) {
    if (!s.ok()) {
      std::fprintf(stderr, "verse_fit: %s\n", s.ToString().c_str());
      return 1;
    }
  }
  verse::VerseSelector selector(*corpus, options);
  double hits = 0, quatrains = 0, perceive_ms = 0;
  int n = 0;
  for (const auto& photo : *photos) {
    auto o = testing::FitOne(photo, **perceiver, selector);
    if (!o.ok()) {
      std::fprintf(stderr, "verse_fit: %s\n", o.status().ToString().c_str());
      return 1;
    }
    ++n;
    hits += o->hit;
    quatrains += o->quatrains;
    perceive_ms += o->perceive_ms;
    std::string perceived, poem_themes;
    for (const auto& t : o->perceived)
      perceived += t.theme + " " + std::to_string(t.score).substr(0, 4) + " ";
    for (const auto& t : o->poem->themes) poem_themes += t + ",";
    std::printf("%3.0f%% %-60s label %-8s perceived [%s] poem %d %s (%zu lines) [%s]\n",
                100.0 * o->hit, photo.path.c_str(), photo.theme.c_str(), perceived.c_str(),
                o->poem->id, o->poem->title.c_str(), o->poem->lines.size(), poem_themes.c_str());
#ifndef VERSE_FIT_BEFORE
    if (std::getenv("VERSE_FIT_FEATURES")) {  // the cues behind the themes, for tuning
      const auto& f = o->features;
      std::printf(
          "     bright %.2f sat %.2f warm %.2f sky %.2f water %.2f sunset %.2f top_edges %.3f "
          "flower %.2f highlights %.4f grass %.2f texture %.2f storm %.2f drops %.4f dark_sky %.2f "
          "bottom_earth %.2f bottom_dark %.2f edges %.3f\n",
          f.brightness, f.saturation, f.warmth, f.sky, f.water, f.sunset, f.top_edges, f.flower,
          f.highlights, f.grass, f.bottom_texture, f.storm, f.drops, f.dark_sky, f.bottom_earth,
          f.bottom_dark, f.edge_density);
    }
#endif
  }
  std::printf(
      "fit: %.1f%% of the choices carry the photo's label (%d photos x 20 draws); "
      "quatrains: %.0f%%\n",
      100.0 * hits / n, n, 100.0 * quatrains / n);
  std::printf("perceive on a 320 px copy: %.2f ms CPU, mean of the per-photo best of 10\n",
              perceive_ms / n);
  return 0;
}
