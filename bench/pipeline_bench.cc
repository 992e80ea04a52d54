// The request pipeline's stages on this machine (issue 30): a 4 MP JPEG photo
// (2560x1600, made from a bundled photo, JPEG quality 92) to a 1920x1080 xing
// inscription, one request at a time on one core, through the same Pipeline
// the service runs. Prints the median of each stage over --runs requests per
// case, and the host share (decode + perceive + verse + encode).
//
//   build/default/bench/pipeline_bench [--runs 5] [--photo FILE] [--size WxH]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "image/image.h"
#include "perceive/perceiver.h"
#include "service/assets.h"
#include "service/inscription_renderer.h"
#include "service/pipeline.h"
#include "verse/corpus.h"
#include "verse/selector.h"

namespace {

using namespace danqing;

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "pipeline_bench: %s\n", what.c_str());
  std::exit(1);
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int runs = 5;
  std::string photo_path = DANQING_SOURCE_DIR "/tests/data/photos/astronaut.jpg";
  int width = 1920, height = 1080;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--runs" && i + 1 < argc) {
      runs = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--photo" && i + 1 < argc) {
      photo_path = argv[++i];
    } else if (a == "--size" && i + 1 < argc) {
      if (std::sscanf(argv[++i], "%dx%d", &width, &height) != 2) Die("--size WxH");
    } else {
      Die("usage: pipeline_bench [--runs N] [--photo FILE] [--size WxH]");
    }
  }
  auto small = image::ReadFile(photo_path);
  if (!small.ok()) Die(photo_path + ": " + small.status().ToString());
  // A 4 MP photo as a phone would send it (the bundled photos are small).
  auto big = image::EncodeJpeg(image::Resize(*small, 2560, 1600), 92);
  if (!big.ok()) Die(big.status().ToString());
  const std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(big->data()), big->size());

  auto corpus = verse::Corpus::Parse(service::BundledPoems(), "bundled poems.tsv");
  if (!corpus.ok()) Die(corpus.status().ToString());
  verse::VerseSelector selector(*corpus);
  auto perceiver = perceive::CreateCvPerceiver();
  if (!perceiver.ok()) Die(perceiver.status().ToString());
  auto renderer = service::CreateInscriptionRenderer(
      {.strokes_path = "", .font_path = "", .threads_per_render = 1, .backend = "cpu"});
  if (!renderer.ok()) Die(renderer.status().ToString());
  service::PipelineLimits limits;
  limits.max_canvas_side = 8192;
  service::Pipeline pipeline(perceiver->get(), &selector, renderer->get(), limits);

  std::printf(
      "pipeline_bench: photo 2560x1600 JPEG (%zu bytes, from %s), answer %dx%d xing, "
      "median of %d, ms\n",
      big->size(), photo_path.c_str(), width, height, runs);
  std::printf("%-10s %-6s %7s %8s %6s %7s %7s %6s %6s %9s\n", "background", "format", "decode",
              "perceive", "verse", "render", "encode", "total", "host", "bytes");
  for (const char* background : {"landscape", "paper", "photo"}) {
    for (const char* format : {"png", "jpeg"}) {
      service::InscribeOptions o;
      o.width = width;
      o.height = height;
      o.style = "xing";
      o.background = background;
      o.format = format;
      std::vector<double> decode, perceive, verse, render, encode, total, host;
      size_t out_bytes = 0;
      for (int i = 0; i < runs; ++i) {
        auto r = pipeline.Run(bytes, o);
        if (!r.ok()) Die(r.status().ToString());
        const auto& t = r->timings;
        decode.push_back(t.decode_ms);
        perceive.push_back(t.perceive_ms);
        verse.push_back(t.verse_ms);
        render.push_back(t.render_ms);
        encode.push_back(t.encode_ms);
        total.push_back(t.total_ms);
        host.push_back(t.decode_ms + t.perceive_ms + t.verse_ms + t.encode_ms);
        out_bytes = r->image.size();
      }
      std::printf("%-10s %-6s %7.1f %8.1f %6.2f %7.1f %7.1f %6.1f %6.1f %9zu\n", background, format,
                  Median(decode), Median(perceive), Median(verse), Median(render), Median(encode),
                  Median(total), Median(host), out_bytes);
    }
  }
  return 0;
}
