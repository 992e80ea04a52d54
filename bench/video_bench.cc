// The writing as a video (issue 28): 1080p, 30 fps, 8 s of the writing of a
// quatrain encoded with libx264 on one thread (run it under `taskset -c 0`
// for one core), at the presets the service may use; and the bytes the page
// needs for its animation (background JPEG + write-time plane PNG, beside
// the final JPEG it shows anyway) against the MP4 of the same clip.
//
// Frame composition (the encoder's input, EncodeResult::compose_seconds) of
// the same 240 frames: on the CPU, on the CUDA composer (a row only where a
// GPU is visible), and on the CUDA composer's kernel under the host emulation
// of the CUDA runtime (testing/cuda-host; where tests are built): the
// emulation runs every GPU thread one after another on one CPU core, so its
// time says nothing about a GPU, only that the path works end to end.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "image/image.h"
#include "image/png16.h"
#include "render/renderer.h"
#include "video/writing_video.h"
#ifdef DANQING_VIDEO_BENCH_EMULATION
#include "testing/cuda-host/emulated_video_compose.h"
#endif

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

// The clip every case encodes: 8 s at 30 fps through libx264 at `preset` on
// one thread.
video::ClipOptions EightSeconds(const char* preset) {
  video::ClipOptions clip;
  clip.fps = 30;
  clip.seconds = 8;
  clip.preset = preset;
  clip.threads = 1;
  clip.encoder = "libx264";
  return clip;
}

video::WritingFrames FramesOf(const Clip& c) {
  return {&c.final_image,        &c.writing.background,  c.writing.ms.data(),
          c.writing.plane_width, c.writing.plane_height, c.writing.end_ms};
}

// Where a case writes its MP4 (removed when it ends).
std::string ScratchMp4() {
  return (std::filesystem::temp_directory_path() /
          ("danqing-video-bench-" + std::to_string(::getpid()) + ".mp4"))
      .string();
}

void Encode(benchmark::State& state, const char* preset) {
  const Clip& c = Shared();
  const video::ClipOptions clip = EightSeconds(preset);
  const video::WritingFrames frames = FramesOf(c);
  const std::string path = ScratchMp4();
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
// 240 frames composed (and encoded with libx264 ultrafast, not counted):
// compose_ms is the whole clip's composition, per_frame_ms one frame's.
void Compose(benchmark::State& state, video::DeviceComposerFactory device) {
  const Clip& c = Shared();
  video::ClipOptions clip = EightSeconds("ultrafast");
  clip.device_composer = device;
  const video::WritingFrames frames = FramesOf(c);
  const std::string path = ScratchMp4();
  double compose = 0;
  int frames_n = 0;
  for (auto _ : state) {
    auto r = video::EncodeWritingMp4(frames, clip, path);
    if (!r.ok()) {
      state.SkipWithError(r.status().ToString().c_str());
      return;
    }
    if (device != nullptr && r->composer != "cuda") {
      state.SkipWithError(("no device composer: " + r->compose_fallback).c_str());
      return;
    }
    compose += r->compose_seconds;
    frames_n = r->frames;
  }
  std::filesystem::remove(path);
  const double n = static_cast<double>(state.iterations());
  state.counters["compose_ms"] = compose * 1000.0 / n;
  state.counters["per_frame_ms"] = compose * 1000.0 / n / std::max(1, frames_n);
}
void BM_Compose1080p240FramesCpu(benchmark::State& s) {
  Compose(s, nullptr);
}
void BM_Compose1080p240FramesCuda(benchmark::State& s) {
  Compose(s, video::DANQING_VIDEO_CUDA_NS::MakeCudaComposer);  // the build's, not the emulation's
}
BENCHMARK(BM_Compose1080p240FramesCpu)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(3);
BENCHMARK(BM_Compose1080p240FramesCuda)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Iterations(3);
#ifdef DANQING_VIDEO_BENCH_EMULATION
void BM_Compose1080p240FramesEmulatedCudaNotAGpuFigure(benchmark::State& s) {
  Compose(s, video::cuda_host_emulation::MakeCudaComposer);
}
BENCHMARK(BM_Compose1080p240FramesEmulatedCudaNotAGpuFigure)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Iterations(1);
#endif

BENCHMARK(BM_Video1080p30x8sVeryfast)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(3);
BENCHMARK(BM_Video1080p30x8sSuperfast)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(3);

}  // namespace

BENCHMARK_MAIN();
