// The render backend choice (issue 11): auto/cpu/gpu selection and its
// reasons, the CPU fallback when an accelerator cannot take or finish a render,
// device memory per render, and GPU/CPU parity where a CUDA device is present
// (skipped, with the reason, where not).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "render/backend.h"
#include "render/passes.h"
#include "render/passes_cuda.h"
#include "render/renderer.h"

namespace danqing::render {
namespace {

const char* const kPoems[] = {
    "白日依山尽，黄河入海流。欲穷千里目，更上一层楼。",
    "千山鸟飞绝，万径人踪灭。孤舟蓑笠翁，独钓寒江雪。",
};

CudaProbe Compiled(int devices, std::string error = "") {
  CudaProbe p;
  p.compiled = true;
  p.devices = devices;
  p.error = std::move(error);
  return p;
}

TEST(BackendTest, ParseChoice) {
  EXPECT_EQ(ParseBackendChoice("auto"), BackendChoice::kAuto);
  EXPECT_EQ(ParseBackendChoice("cpu"), BackendChoice::kCpu);
  EXPECT_EQ(ParseBackendChoice("gpu"), BackendChoice::kGpu);
  EXPECT_EQ(ParseBackendChoice("cuda"), BackendChoice::kGpu);
  EXPECT_FALSE(ParseBackendChoice("GPU").has_value());
  EXPECT_FALSE(ParseBackendChoice("").has_value());
}

TEST(BackendTest, AutoPicksGpuOnlyWithAVisibleDevice) {
  auto d = DecideBackend(BackendChoice::kAuto, nullptr, Compiled(1));
  EXPECT_TRUE(d.gpu);
  EXPECT_TRUE(d.status.ok());
  EXPECT_NE(d.reason.find("1 CUDA device"), std::string::npos) << d.reason;

  d = DecideBackend(BackendChoice::kAuto, "all", Compiled(0, "cudaGetDeviceCount: cudaErrorNoDevice"));
  EXPECT_FALSE(d.gpu);
  EXPECT_TRUE(d.status.ok());
  EXPECT_NE(d.reason.find("cudaErrorNoDevice"), std::string::npos) << d.reason;

  for (const char* v : {"void", "none"}) {
    d = DecideBackend(BackendChoice::kAuto, v, Compiled(2));
    EXPECT_FALSE(d.gpu) << v;
    EXPECT_NE(d.reason.find(std::string("NVIDIA_VISIBLE_DEVICES=") + v), std::string::npos) << d.reason;
  }
  d = DecideBackend(BackendChoice::kAuto, nullptr, CudaProbe{});  // not compiled in
  EXPECT_FALSE(d.gpu);
  EXPECT_NE(d.reason.find("built without CUDA"), std::string::npos) << d.reason;
}

TEST(BackendTest, ForcedChoices) {
  auto d = DecideBackend(BackendChoice::kCpu, nullptr, Compiled(4));
  EXPECT_FALSE(d.gpu);
  EXPECT_TRUE(d.status.ok());
  EXPECT_NE(d.reason.find("forced"), std::string::npos);

  d = DecideBackend(BackendChoice::kGpu, nullptr, Compiled(0, "cudaErrorInsufficientDriver"));
  EXPECT_FALSE(d.gpu);
  EXPECT_EQ(d.status.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(d.status.message().find("cudaErrorInsufficientDriver"), std::string::npos) << d.status.message();

  d = DecideBackend(BackendChoice::kGpu, "void", Compiled(1));
  EXPECT_EQ(d.status.code(), StatusCode::kFailedPrecondition);
  d = DecideBackend(BackendChoice::kGpu, nullptr, Compiled(1));
  EXPECT_TRUE(d.gpu);
  EXPECT_TRUE(d.status.ok());
}

TEST(BackendTest, DeviceMemoryPerRender) {
  // 1080p: ink 1920*1080*4 + wet 2*960*540*4 + wash/blotch 2*640*360*4 +
  // RGB 1920*1080*3 + ridge table 16*(640*4+36).
  const size_t fixed_1080 = 8294400u + 4147200u + 1843200u + 6220800u + 16u * (640u * 4u + sizeof(Ridge));
  EXPECT_EQ(DeviceBytesPerRender(1920, 1080, 0), fixed_1080);
  EXPECT_EQ(DeviceBytesPerRender(1920, 1080, 1000), fixed_1080 + 1000 * sizeof(Dab));
  const size_t fixed_4k = 33177600u + 16588800u + 7372800u + 24883200u + 16u * (1280u * 4u + sizeof(Ridge));
  EXPECT_EQ(DeviceBytesPerRender(3840, 2160, 0), fixed_4k);
  EXPECT_EQ(DeviceTextureBytes(), (512u * 512u + 256u * 256u + 4096u) * 4u);
  std::printf("device bytes per render: 1080p %zu (+%zu per dab), 4K %zu; shared textures %zu\n", fixed_1080,
              sizeof(Dab), fixed_4k, DeviceTextureBytes());
}

bool HaveGpu() {
  CudaProbe p = ProbeCuda();
  const char* v = std::getenv("NVIDIA_VISIBLE_DEVICES");
  return DecideBackend(BackendChoice::kAuto, v, p).gpu;
}

std::string NoGpuReason() {
  return DecideBackend(BackendChoice::kAuto, std::getenv("NVIDIA_VISIBLE_DEVICES"), ProbeCuda()).reason;
}

RenderOptions Opts(uint64_t seed, Background bg = Background::kLandscape, int w = 960, int h = 540) {
  RenderOptions o;
  o.width = w;
  o.height = h;
  o.seed = seed;
  o.background = bg;
  o.style = Style::kCao;  // dry strokes: the bristle path
  return o;
}

Inscription Poem(int i) { return {kPoems[i % 2], "登高", "王之涣", "甲辰春"}; }

TEST(RendererBackendTest, AutoWithoutADeviceRendersOnTheCpuAndSaysWhy) {
  if (HaveGpu()) GTEST_SKIP() << "a CUDA device is visible: " << NoGpuReason();
  RendererConfig c;
  c.backend = "auto";
  auto r = Renderer::Create(c);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)->backend(), "cpu");
  EXPECT_EQ((*r)->backend_reason().rfind("cpu: ", 0), 0u) << (*r)->backend_reason();
  RenderStats st;
  auto img = (*r)->Render(Poem(0), Opts(3), &st);
  ASSERT_TRUE(img.ok()) << img.status().ToString();
  EXPECT_EQ(st.backend, "cpu");
  EXPECT_TRUE(st.gpu_error.empty()) << st.gpu_error;
}

TEST(RendererBackendTest, VisibleDevicesVoidMeansCpu) {
  const char* old = std::getenv("NVIDIA_VISIBLE_DEVICES");
  std::string saved = old != nullptr ? old : "";
  setenv("NVIDIA_VISIBLE_DEVICES", "void", 1);
  auto r = Renderer::Create();
  if (old != nullptr) setenv("NVIDIA_VISIBLE_DEVICES", saved.c_str(), 1); else unsetenv("NVIDIA_VISIBLE_DEVICES");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)->backend(), "cpu");
  // A build without CUDA says so first; with CUDA, the variable is the reason.
  const std::string& why = (*r)->backend_reason();
  EXPECT_TRUE(why.find("NVIDIA_VISIBLE_DEVICES=void") != std::string::npos ||
              why.find("built without CUDA") != std::string::npos)
      << why;
}

TEST(RendererBackendTest, ForcedGpuWithoutADeviceIsAClearError) {
  if (HaveGpu()) GTEST_SKIP() << "a CUDA device is visible: " << NoGpuReason();
  RendererConfig c;
  c.backend = "gpu";
  auto r = Renderer::Create(c);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("gpu requested but unavailable"), std::string::npos)
      << r.status().ToString();
}

TEST(RendererBackendTest, ForcedCpuAndBadNames) {
  RendererConfig c;
  c.backend = "cpu";
  auto r = Renderer::Create(c);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)->backend(), "cpu");
  EXPECT_NE((*r)->backend_reason().find("forced"), std::string::npos);
  c.backend = "tpu";
  auto bad = Renderer::Create(c);
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("tpu"), std::string::npos);
}

// A stand-in accelerator: the CPU passes, optionally failing after the dab
// pass with the ink plane scribbled over (as a lost device would leave it).
class FakeAccel final : public Passes {
 public:
  explicit FakeAccel(bool fail) : cpu_(MakeCpuPasses(2)), fail_(fail) {}
  void StampDabs(const std::vector<Dab>& d, const Textures& t, Plane* ink) override {
    if (!status_.ok()) return;
    cpu_->StampDabs(d, t, ink);
    if (fail_) {
      std::fill(ink->v.begin(), ink->v.end(), 1.0f);
      status_ = Unavailable("fake: cudaErrorDevicesUnavailable");
    }
  }
  void StampWet(const std::vector<Dab>& d, float s, Plane* wet) override {
    if (status_.ok()) cpu_->StampWet(d, s, wet);
  }
  void Diffuse(const Textures& t, int it, Plane* wet) override {
    if (status_.ok()) cpu_->Diffuse(t, it, wet);
  }
  void Landscape(const LandscapeParams& p, const Textures& t, Plane* wash) override {
    if (status_.ok()) cpu_->Landscape(p, t, wash);
  }
  void Compose(const ComposeInputs& in, const Textures& t, int w, int h, uint8_t* rgb) override {
    if (status_.ok()) cpu_->Compose(in, t, w, h, rgb);
  }
  const char* name() const override { return "fake"; }
  Status status() const override { return status_; }

 private:
  std::unique_ptr<Passes> cpu_;
  bool fail_;
  Status status_;
};

std::unique_ptr<Renderer> WithAccel(std::function<Result<std::unique_ptr<Passes>>(int, int, size_t)> f) {
  RendererConfig c;
  c.accelerator = std::move(f);
  auto r = Renderer::Create(c);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? std::move(r).value() : nullptr;
}

image::Image CpuImage(const Inscription& text, const RenderOptions& o) {
  RendererConfig c;
  c.backend = "cpu";
  auto r = Renderer::Create(c);
  EXPECT_TRUE(r.ok());
  auto img = (*r)->Render(text, o);
  EXPECT_TRUE(img.ok());
  return img.ok() ? *img : image::Image{};
}

TEST(RendererBackendTest, AcceleratorThatWorksIsReported) {
  auto r = WithAccel([](int, int, size_t) -> Result<std::unique_ptr<Passes>> {
    return std::unique_ptr<Passes>(std::make_unique<FakeAccel>(false));
  });
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->backend(), "accelerator");
  RenderStats st;
  auto img = r->Render(Poem(1), Opts(5), &st);
  ASSERT_TRUE(img.ok());
  EXPECT_EQ(st.backend, "fake");
  EXPECT_TRUE(st.gpu_error.empty());
  EXPECT_EQ(img->rgb, CpuImage(Poem(1), Opts(5)).rgb);
}

TEST(RendererBackendTest, AcceleratorFailingMidRenderFallsBackToTheCpu) {
  auto r = WithAccel([](int, int, size_t) -> Result<std::unique_ptr<Passes>> {
    return std::unique_ptr<Passes>(std::make_unique<FakeAccel>(true));
  });
  ASSERT_NE(r, nullptr);
  for (Background bg : {Background::kLandscape, Background::kPaper}) {
    RenderStats st;
    auto img = r->Render(Poem(0), Opts(9, bg), &st);
    ASSERT_TRUE(img.ok()) << img.status().ToString();
    EXPECT_EQ(st.backend, "cpu");
    EXPECT_NE(st.gpu_error.find("cudaErrorDevicesUnavailable"), std::string::npos) << st.gpu_error;
    EXPECT_EQ(img->rgb, CpuImage(Poem(0), Opts(9, bg)).rgb) << "the fallback redoes every heavy pass";
  }
}

TEST(RendererBackendTest, AcceleratorThatCannotTakeARenderFallsBack) {
  size_t asked = 0;
  auto r = WithAccel([&asked](int w, int h, size_t dabs) -> Result<std::unique_ptr<Passes>> {
    asked = DeviceBytesPerRender(w, h, dabs);
    return ResourceExhausted("render needs more than the budget");
  });
  ASSERT_NE(r, nullptr);
  RenderStats st;
  auto img = r->Render(Poem(0), Opts(2), &st);
  ASSERT_TRUE(img.ok());
  EXPECT_EQ(st.backend, "cpu");
  EXPECT_NE(st.gpu_error.find("RESOURCE_EXHAUSTED"), std::string::npos) << st.gpu_error;
  EXPECT_EQ(asked, DeviceBytesPerRender(960, 540, st.dabs));
}

// --- Where a CUDA device is present -------------------------------------

double Psnr(const image::Image& a, const image::Image& b) {
  if (a.rgb.size() != b.rgb.size() || a.rgb.empty()) return 0;
  double se = 0;
  for (size_t i = 0; i < a.rgb.size(); ++i) {
    double d = static_cast<double>(a.rgb[i]) - static_cast<double>(b.rgb[i]);
    se += d * d;
  }
  if (se == 0) return 99;
  return 10.0 * std::log10(255.0 * 255.0 / (se / static_cast<double>(a.rgb.size())));
}

TEST(GpuParityTest, GpuMatchesCpuWithin40dB) {
  if (!HaveGpu()) GTEST_SKIP() << "no GPU here, parity not checked: " << NoGpuReason();
  RendererConfig gc;
  gc.backend = "gpu";
  auto g = Renderer::Create(gc);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  RendererConfig cc;
  cc.backend = "cpu";
  auto c = Renderer::Create(cc);
  ASSERT_TRUE(c.ok());
  for (int poem = 0; poem < 2; ++poem) {
    for (uint64_t seed : {1u, 7u, 2024u}) {
      for (Background bg : {Background::kLandscape, Background::kPaper}) {
        for (auto [w, h] : {std::pair{1280, 720}, std::pair{1920, 1080}}) {
          RenderStats gs;
          auto gi = (*g)->Render(Poem(poem), Opts(seed, bg, w, h), &gs);
          auto ci = (*c)->Render(Poem(poem), Opts(seed, bg, w, h));
          ASSERT_TRUE(gi.ok() && ci.ok());
          EXPECT_EQ(gs.backend, "cuda") << gs.gpu_error;
          double p = Psnr(*gi, *ci);
          std::printf("parity poem %d seed %llu bg %d %dx%d: PSNR %.2f dB\n", poem,
                      static_cast<unsigned long long>(seed), static_cast<int>(bg), w, h, p);
          EXPECT_GE(p, 40.0) << "poem " << poem << " seed " << seed << " " << w << "x" << h;
        }
      }
    }
  }
}

TEST(GpuParityTest, BudgetLimitsAndConcurrentRenders) {
  if (!HaveGpu()) GTEST_SKIP() << "no GPU here, device budget not checked: " << NoGpuReason();
  // A budget below one 1080p render: that render goes to the CPU with the reason.
  RendererConfig small;
  small.backend = "gpu";
  small.gpu_memory_budget = 8u << 20;
  auto s = Renderer::Create(small);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  RenderStats st;
  ASSERT_TRUE((*s)->Render(Poem(0), Opts(1, Background::kLandscape, 1920, 1080), &st).ok());
  EXPECT_EQ(st.backend, "cpu");
  EXPECT_NE(st.gpu_error.find("RESOURCE_EXHAUSTED"), std::string::npos) << st.gpu_error;
  // A budget for about two renders: eight threads still all finish on the GPU.
  RendererConfig two;
  two.backend = "gpu";
  two.gpu_memory_budget = 2 * DeviceBytesPerRender(1280, 720, 400000);
  auto t = Renderer::Create(two);
  ASSERT_TRUE(t.ok());
  std::vector<std::thread> th;
  std::vector<RenderStats> stats(8);
  std::vector<int> ok(8, 0);
  for (int i = 0; i < 8; ++i) {
    th.emplace_back([&, i] {
      ok[static_cast<size_t>(i)] =
          (*t)->Render(Poem(i), Opts(static_cast<uint64_t>(i), Background::kLandscape, 1280, 720),
                       &stats[static_cast<size_t>(i)]).ok();
    });
  }
  for (auto& x : th) x.join();
  for (int i = 0; i < 8; ++i) {
    EXPECT_TRUE(ok[static_cast<size_t>(i)]);
    EXPECT_EQ(stats[static_cast<size_t>(i)].backend, "cuda") << stats[static_cast<size_t>(i)].gpu_error;
  }
}

}  // namespace
}  // namespace danqing::render
