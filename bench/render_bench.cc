// Renderer benchmarks: a 七言绝句 (28 characters) with title, signature, seal
// and landscape, 1080p and 4K, one and more threads. Target (issue 7): 1080p
// under 250 ms on one core.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>

#include "render/renderer.h"

namespace {

using danqing::render::Background;
using danqing::render::Renderer;
using danqing::render::RenderOptions;
using danqing::render::RenderStats;
using danqing::render::Style;

const Renderer& Shared() {
  static Renderer* r = [] {
    auto c = Renderer::Create();
    if (!c.ok()) {
      std::fprintf(stderr, "render_bench: %s\n", c.status().ToString().c_str());
      std::exit(1);
    }
    return std::move(c).value().release();
  }();
  return *r;
}

const danqing::render::Inscription kPoem{
    "朝辞白帝彩云间，千里江陵一日还。两岸猿声啼不住，轻舟已过万重山。", "早发白帝城", "李白", "甲辰春"};

// writing: also record the write-time plane and the background (issue 28);
// the Writing is reused across iterations, as a worker would.
void Run(benchmark::State& state, int w, int h, Style style, Background bg, bool writing = false) {
  const Renderer& r = Shared();
  RenderOptions o;
  o.width = w;
  o.height = h;
  o.style = style;
  o.background = bg;
  o.threads = static_cast<int>(state.range(0));
  RenderStats stats, sum;
  uint64_t seed = 1;
  danqing::render::Writing wr;
  for (auto _ : state) {
    o.seed = seed++;
    auto img = r.Render(kPoem, o, &stats, writing ? &wr : nullptr);
    if (!img.ok()) {
      state.SkipWithError(img.status().ToString().c_str());
      return;
    }
    benchmark::DoNotOptimize(img->rgb.data());
    sum.background_ms += stats.background_ms;
    sum.strokes_ms += stats.strokes_ms;
    sum.diffusion_ms += stats.diffusion_ms;
    sum.compose_ms += stats.compose_ms;
    sum.passes_ms += stats.passes_ms;
  }
  double n = static_cast<double>(state.iterations());
  state.counters["background_ms"] = sum.background_ms / n;
  state.counters["strokes_ms"] = sum.strokes_ms / n;
  state.counters["diffusion_ms"] = sum.diffusion_ms / n;
  state.counters["compose_ms"] = sum.compose_ms / n;
  state.counters["passes_ms"] = sum.passes_ms / n;
  state.counters["dabs"] = static_cast<double>(stats.dabs);
}

void BM_Render1080Xing(benchmark::State& s) { Run(s, 1920, 1080, Style::kXing, Background::kLandscape); }
void BM_Render1080Kai(benchmark::State& s) { Run(s, 1920, 1080, Style::kKai, Background::kLandscape); }
void BM_Render1080Cao(benchmark::State& s) { Run(s, 1920, 1080, Style::kCao, Background::kLandscape); }
void BM_Render4KXing(benchmark::State& s) { Run(s, 3840, 2160, Style::kXing, Background::kLandscape); }
// The same renders with the writing recorded (issue 28: < 15% more).
void BM_Render1080XingWriting(benchmark::State& s) {
  Run(s, 1920, 1080, Style::kXing, Background::kLandscape, true);
}
void BM_Render1080KaiWriting(benchmark::State& s) {
  Run(s, 1920, 1080, Style::kKai, Background::kLandscape, true);
}
void BM_Render1080CaoWriting(benchmark::State& s) {
  Run(s, 1920, 1080, Style::kCao, Background::kLandscape, true);
}
void BM_Render4KXingWriting(benchmark::State& s) {
  Run(s, 3840, 2160, Style::kXing, Background::kLandscape, true);
}

BENCHMARK(BM_Render1080Xing)->Arg(1)->Arg(2)->Arg(4)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Render1080Kai)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Render1080Cao)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Render4KXing)->Arg(1)->Arg(2)->Arg(4)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Render1080XingWriting)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Render1080KaiWriting)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Render1080CaoWriting)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Render4KXingWriting)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
