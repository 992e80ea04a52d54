// The writing as a video (issue 28): 1080p, 30 fps, 8 s of the writing of a
// quatrain encoded with libx264 on one thread (run it under `taskset -c 0`
// for one core), at the presets the service may use; and the bytes the page
// needs for its animation (background JPEG + write-time plane PNG, beside
// the final JPEG it shows anyway) against the MP4 of the same clip.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "image/image.h"
#include "image/png16.h"
#include "render/renderer.h"
#include "video/writing_video.h"

namespace {

using namespace danqing;

struct Clip {
  image::Image final_image;
  render::Writing writing;
};

const Clip& Shared() {
  static Clip* c = [] {
    auto r = render::Renderer::Create();
    if (!r.ok()) {
      std::fprintf(stderr, "video_bench: %s\n", r.status().ToString().c_str());
      std::exit(1);
    }
    auto* clip = new Clip;
    render::RenderOptions o;
    o.seed = 9;
    const render::Inscription poem{"千山鸟飞绝，万径人踪灭。孤舟蓑笠翁，独钓寒江雪。", "江雪",
                                   "柳宗元", ""};
    auto img = (*r)->Render(poem, o, nullptr, &clip->writing);
    if (!img.ok()) std::exit(1);
    clip->final_image = std::move(img).value();
    return clip;
  }();
  return *c;
}

void Encode(benchmark::State& state, const char* preset) {
  const Clip& c = Shared();
  video::ClipOptions clip;
  clip.fps = 30;
  clip.seconds = 8;
  clip.preset = preset;
  clip.threads = 1;
  clip.encoder = "libx264";
  const video::WritingFrames frames{&c.final_image,         &c.writing.background,
                                    c.writing.ms.data(),    c.writing.plane_width,
                                    c.writing.plane_height, c.writing.end_ms};
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("danqing-video-bench-" + std::to_string(::getpid()) + ".mp4"))
                               .string();
  uint64_t bytes = 0;
  for (auto _ : state) {
    auto r = video::EncodeWritingMp4(frames, clip, path);
    if (!r.ok()) {
      state.SkipWithError(r.status().ToString().c_str());
      return;
    }
    bytes = r->bytes;
  }
  std::filesystem::remove(path);
  // What the page fetches for the same animation (the final image it shows anyway).
  const auto plane = image::EncodePngGrey16(
      image::Grey16{c.writing.plane_width, c.writing.plane_height, c.writing.ms});
  const auto bg = image::EncodeJpeg(c.writing.background, 90);
  const auto fin = image::EncodeJpeg(c.final_image, 90);
  state.counters["mp4_bytes"] = static_cast<double>(bytes);
  state.counters["kbit_per_s"] = static_cast<double>(bytes) * 8.0 / 1000.0 / clip.seconds;
  state.counters["page_plane_png_bytes"] = plane.ok() ? static_cast<double>(plane->size()) : -1;
  state.counters["page_background_jpeg_bytes"] = bg.ok() ? static_cast<double>(bg->size()) : -1;
  state.counters["final_jpeg_bytes"] = fin.ok() ? static_cast<double>(fin->size()) : -1;
  state.counters["writing_ms"] = c.writing.end_ms;
}

void BM_Video1080p30x8sVeryfast(benchmark::State& s) {
  Encode(s, "veryfast");
}
void BM_Video1080p30x8sSuperfast(benchmark::State& s) {
  Encode(s, "superfast");
}
BENCHMARK(BM_Video1080p30x8sVeryfast)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(3);
BENCHMARK(BM_Video1080p30x8sSuperfast)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(3);

}  // namespace

BENCHMARK_MAIN();
