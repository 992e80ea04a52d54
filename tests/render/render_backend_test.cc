// The render backend choice (issue 11): auto/cpu/gpu selection and its
// reasons, the CPU fallback when an accelerator cannot take or finish a render,
// device memory per render, and GPU/CPU parity where a CUDA device is present
// (skipped, with the reason, where not).
#include <gtest/gtest.h>

#include <random>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "render/backend.h"
#include "render/passes.h"
#include "render/passes_cuda.h"
#include "render/renderer.h"
#include "testing/support/render_fixtures.h"

namespace danqing::render {
namespace {

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

  // void/none: the NVIDIA runtime injected nothing. A CDI runtime injects the
  // GPU and sets void itself (NVIDIA's specs do), so the probe decides.
  for (const char* v : {"void", "none"}) {
    d = DecideBackend(BackendChoice::kAuto, v, Compiled(2));
    EXPECT_TRUE(d.gpu) << v;
    EXPECT_NE(d.reason.find(std::string("NVIDIA_VISIBLE_DEVICES=") + v + ", yet CUDA sees it"), std::string::npos)
        << d.reason;
    d = DecideBackend(BackendChoice::kAuto, v, Compiled(0, "cudaGetDeviceCount: cudaErrorNoDevice"));
    EXPECT_FALSE(d.gpu) << v;
    EXPECT_NE(d.reason.find(std::string("cudaErrorNoDevice (NVIDIA_VISIBLE_DEVICES=") + v + ")"), std::string::npos)
        << d.reason;
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

  d = DecideBackend(BackendChoice::kGpu, "void", Compiled(0, "cudaErrorNoDevice"));
  EXPECT_EQ(d.status.code(), StatusCode::kFailedPrecondition);
  d = DecideBackend(BackendChoice::kGpu, "void", Compiled(1));  // injected through CDI
  EXPECT_TRUE(d.gpu);
  d = DecideBackend(BackendChoice::kGpu, nullptr, Compiled(1));
  EXPECT_TRUE(d.gpu);
  EXPECT_TRUE(d.status.ok());
}

TEST(BackendTest, DeviceMemoryPerRender) {
  // 1080p: ink 1920*1080*4 + wet 2*960*540*4 + wash/blotch 2*640*360*4 +
  // RGB 1920*1080*3 + ridge table 16*(640*4+sizeof(Ridge)), 32 bytes a ridge.
  const size_t fixed_1080 = 8294400u + 4147200u + 1843200u + 6220800u + 16u * (640u * 4u + sizeof(Ridge));
  EXPECT_EQ(DeviceBytesPerRender(1920, 1080, 0), fixed_1080);
  EXPECT_EQ(DeviceBytesPerRender(1920, 1080, 1000), fixed_1080 + 1000 * sizeof(Dab));
  const size_t fixed_4k = 33177600u + 16588800u + 7372800u + 24883200u + 16u * (1280u * 4u + sizeof(Ridge));
  EXPECT_EQ(DeviceBytesPerRender(3840, 2160, 0), fixed_4k);
  // A photo adds its window (3 bytes a pixel) and the resampling tables: per
  // axis 3 ints per wash pixel and at most src + 2 * dst weights.
  const size_t taps_4k = (1280u * 3u * 4u + (4000u + 2u * 1280u) * 4u) + (720u * 3u * 4u + (2250u + 2u * 720u) * 4u);
  EXPECT_EQ(ResampleTapsBytes(4000, 2250, 1280, 720), taps_4k);
  EXPECT_EQ(DeviceBytesPerRender(3840, 2160, 0, 4000, 2250), fixed_4k + 4000u * 2250u * 3u + taps_4k);
  // The figures docs/render.md and the time-sliced overlay quote: a 12 MP
  // photo at 4K, a 512x512 one at 4K, a 12 MP one on a 2048x2048 canvas.
  EXPECT_EQ(DeviceBytesPerRender(3840, 2160, 0, 4000, 2250), 109169832u);
  EXPECT_EQ(DeviceBytesPerRender(3840, 2160, 0, 512, 288), 82590400u);
  EXPECT_EQ(DeviceBytesPerRender(2048, 2048, 0, 3000, 3000), 68565168u);
  // The bound holds for growing, shrinking and equal sizes.
  for (auto [src, dst] : {std::pair{1, 1}, std::pair{1, 640}, std::pair{7, 3}, std::pair{640, 640}, std::pair{641, 640},
                          std::pair{4000, 1280}, std::pair{12345, 7}, std::pair{300, 1279}}) {
    const image::ResampleTaps t = image::MakeResampleTaps(src, dst);
    const size_t bytes = (t.first.size() + t.count.size() + t.offsets.size()) * sizeof(int) +
                         t.weights.size() * sizeof(float);
    EXPECT_LE(2 * bytes, ResampleTapsBytes(src, src, dst, dst)) << src << " -> " << dst;
  }
  // The plan's overload reads the same numbers from the plan.
  std::vector<Dab> dabs(1000);
  const image::Image photo = image::Image::Filled(4000, 3000, 1, 2, 3);
  const CanvasPlanes planes = PlanesFor(3840, 2160);
  const PhotoInput in = CoverPhoto(photo, planes, 0, 0, 0, 0);
  EXPECT_EQ(in.w, 4000);
  EXPECT_EQ(in.h, 2250);
  EXPECT_EQ(in.x0, 0);
  EXPECT_EQ(in.y0, 375);
  PassPlan plan;
  plan.planes = planes;
  plan.dabs = &dabs;
  plan.photo = &in;
  EXPECT_EQ(DeviceBytesPerRender(plan), DeviceBytesPerRender(3840, 2160, 1000, 4000, 2250));
  LandscapeParams land;
  plan.photo = nullptr;
  plan.landscape = &land;
  EXPECT_EQ(DeviceBytesPerRender(plan), DeviceBytesPerRender(3840, 2160, 1000));
  EXPECT_EQ(DeviceTextureBytes(), (512u * 512u + 256u * 256u + 4096u) * 4u + 2048u * 2048u);
  std::printf("device bytes per render: 1080p %zu (+%zu per dab), 4K %zu; shared textures %zu\n", fixed_1080,
              sizeof(Dab), fixed_4k, DeviceTextureBytes());
}

TEST(BackendTest, PlanesForACanvas) {
  const CanvasPlanes p = PlanesFor(1920, 1080);
  EXPECT_EQ(p.ww, 960);
  EXPECT_EQ(p.wh, 540);
  EXPECT_EQ(p.lw, 640);
  EXPECT_EQ(p.lh, 360);
  EXPECT_FLOAT_EQ(p.wet_scale(), 0.5f);
  const CanvasPlanes tiny = PlanesFor(3, 2);  // the low planes never shrink below 8 pixels
  EXPECT_EQ(tiny.ww, 1);
  EXPECT_EQ(tiny.wh, 1);
  EXPECT_EQ(tiny.lw, 8);
  EXPECT_EQ(tiny.lh, 8);
}

// The CUDA backend diffuses over WetBounds instead of reading the wet plane
// back: every pixel the CPU's StampWet wets must lie inside it.
TEST(BackendTest, WetBoundsHoldEveryWettedPixel) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  const CanvasPlanes p = PlanesFor(640, 360);
  CpuPasses cpu(1);
  for (int trial = 0; trial < 40; ++trial) {
    std::vector<Dab> dabs(1 + trial * 3);
    for (Dab& d : dabs) {
      // Centres up to a tenth outside the canvas; some dabs carry no water.
      d.x = (u(rng) * 1.2f - 0.1f) * static_cast<float>(p.w);
      d.y = (u(rng) * 1.2f - 0.1f) * static_cast<float>(p.h);
      d.r = 0.3f + u(rng) * 14.0f;
      d.wet = u(rng) < 0.3f ? 0.0f : u(rng);
    }
    Plane wet;
    wet.Reset(p.ww, p.wh);
    cpu.StampWet(dabs, p.wet_scale(), &wet);
    const PixelBox box = WetBounds(dabs, p.wet_scale(), p.ww, p.wh);
    int wetted = 0;
    for (int y = 0; y < wet.h; ++y) {
      for (int x = 0; x < wet.w; ++x) {
        if (wet.row(y)[x] <= 0.0f) continue;
        ++wetted;
        ASSERT_TRUE(x >= box.x0 && x <= box.x1 && y >= box.y0 && y <= box.y1)
            << "trial " << trial << ": (" << x << "," << y << ") outside [" << box.x0 << "," << box.x1 << "]x["
            << box.y0 << "," << box.y1 << "]";
      }
    }
    if (wetted > 0) {
      EXPECT_FALSE(box.empty());
      EXPECT_GE(box.x0, 0);
      EXPECT_GE(box.y0, 0);
      EXPECT_LT(box.x1, p.ww);
      EXPECT_LT(box.y1, p.wh);
    }
  }
  std::vector<Dab> dry(5);
  for (Dab& d : dry) d.wet = 0;
  EXPECT_TRUE(WetBounds(dry, 0.5f, 100, 100).empty());
  EXPECT_TRUE(WetBounds({}, 0.5f, 100, 100).empty());
  Dab far;
  far.x = -500;
  far.y = 50;
  far.wet = 1;
  EXPECT_TRUE(WetBounds({far}, 0.5f, 100, 100).empty()) << "a dab wholly off the plane wets nothing";
}

// A malformed plan is refused by both backends before any work (CheckPlan).
TEST(BackendTest, MalformedPlansAreRefused) {
  const Textures tex = Textures::Build();
  std::vector<Dab> dabs(3);
  LandscapeParams land;
  const image::Image image = testing_fixtures::GradientDiscPhoto(60, 40);
  const PhotoInput photo = CoverPhoto(image, PlanesFor(96, 64), 10, 10, 50, 30);
  auto good = [&] {
    PassPlan p;
    p.planes = PlanesFor(96, 64);
    p.dabs = &dabs;
    p.landscape = &land;
    return p;
  };
  EXPECT_TRUE(CheckPlan(good()).ok());
  std::vector<std::pair<std::string, PassPlan>> bad;
  PassPlan p = good();
  p.dabs = nullptr;
  bad.emplace_back("no dab list", p);
  p = good();
  p.photo = &photo;
  bad.emplace_back("exactly one of", p);
  p = good();
  p.landscape = nullptr;
  bad.emplace_back("exactly one of", p);
  p = good();
  p.planes.ww += 1;
  bad.emplace_back("plane sizes", p);
  p = good();
  p.landscape = nullptr;
  p.photo = &photo;
  EXPECT_TRUE(CheckPlan(p).ok());
  // Windows that reach outside the photo, or are empty.
  std::vector<PhotoInput> windows;
  for (auto [x0, y0, w, h] : {std::tuple{1, 0, 60, 40}, std::tuple{0, 1, 60, 40}, std::tuple{-1, 0, 10, 10},
                              std::tuple{0, -1, 10, 10}, std::tuple{0, 0, 0, 10}, std::tuple{0, 0, 10, 0},
                              std::tuple{55, 0, 6, 10}}) {
    PhotoInput out = photo;
    out.x0 = x0;
    out.y0 = y0;
    out.w = w;
    out.h = h;
    windows.push_back(out);
  }
  for (const PhotoInput& out : windows) {
    p.photo = &out;
    bad.emplace_back("photo window", p);
  }
  image::Image torn = image;
  torn.rgb.resize(torn.rgb.size() - 1);
  PhotoInput torn_in = photo;
  torn_in.image = &torn;
  p.photo = &torn_in;
  bad.emplace_back("width*height*3", p);
  PhotoInput none = photo;
  none.image = nullptr;
  p.photo = &none;
  bad.emplace_back("no pixels", p);
  LandscapeParams many;
  many.ridges.resize(kMaxRidges + 1);
  p = good();
  p.landscape = &many;
  bad.emplace_back("ridges", p);
  for (const auto& [why, plan] : bad) {
    Status st = CheckPlan(plan);
    EXPECT_EQ(st.code(), StatusCode::kInternal) << why;
    EXPECT_NE(st.message().find(why), std::string::npos) << st.message();
    std::vector<uint8_t> rgb(96 * 64 * 3, 42);
    CpuPasses cpu(1);
    cpu.Run(plan, tex, rgb.data(), nullptr, nullptr);
    EXPECT_EQ(cpu.status().code(), StatusCode::kInternal) << why;
    EXPECT_EQ(rgb, std::vector<uint8_t>(96 * 64 * 3, 42)) << why << ": nothing written";
  }
}

bool HaveGpu() {
  CudaProbe p = ProbeCuda();
  const char* v = std::getenv("NVIDIA_VISIBLE_DEVICES");
  return DecideBackend(BackendChoice::kAuto, v, p).gpu;
}

std::string NoGpuReason() {
  return DecideBackend(BackendChoice::kAuto, std::getenv("NVIDIA_VISIBLE_DEVICES"), ProbeCuda()).reason;
}

using testing_fixtures::Poem;

RenderOptions Opts(uint64_t seed, Background bg = Background::kLandscape, int w = 960, int h = 540) {
  return testing_fixtures::Opts(seed, bg, w, h);
}

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

TEST(RendererBackendTest, VisibleDevicesVoidWithoutADeviceMeansCpu) {
  if (HaveGpu()) GTEST_SKIP() << "a CUDA device is visible (void does not hide a GPU given by CDI): " << NoGpuReason();
  const char* old = std::getenv("NVIDIA_VISIBLE_DEVICES");
  std::string saved = old != nullptr ? old : "";
  setenv("NVIDIA_VISIBLE_DEVICES", "void", 1);
  auto r = Renderer::Create();
  if (old != nullptr) setenv("NVIDIA_VISIBLE_DEVICES", saved.c_str(), 1); else unsetenv("NVIDIA_VISIBLE_DEVICES");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)->backend(), "cpu");
  // A build without CUDA says so first; with CUDA, the probe's answer names the variable.
  const std::string& why = (*r)->backend_reason();
  EXPECT_TRUE(why.find("(NVIDIA_VISIBLE_DEVICES=void)") != std::string::npos ||
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

// A stand-in accelerator: the CPU passes, optionally failing at the end with
// the output scribbled over (as a device lost mid-render would leave it).
class FakeAccel final : public Passes {
 public:
  explicit FakeAccel(bool fail) : cpu_(2), fail_(fail) {}
  void Run(const PassPlan& plan, const Textures& tex, uint8_t* rgb, Plane* ink_out, PassTimes* times) override {
    cpu_.Run(plan, tex, rgb, ink_out, times);
    if (fail_) {
      std::fill_n(rgb, static_cast<size_t>(plan.planes.w) * static_cast<size_t>(plan.planes.h) * 3, uint8_t{7});
      status_ = Unavailable("fake: cudaErrorDevicesUnavailable");
    }
  }
  const char* name() const override { return "fake"; }
  Status status() const override { return status_; }

 private:
  CpuPasses cpu_;
  bool fail_;
  Status status_;
};

std::unique_ptr<Renderer> WithAccel(std::function<Result<std::unique_ptr<Passes>>(const PassPlan&)> f) {
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
  auto r = WithAccel([](const PassPlan&) -> Result<std::unique_ptr<Passes>> {
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
  auto r = WithAccel([](const PassPlan&) -> Result<std::unique_ptr<Passes>> {
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

// The accelerator is asked with the whole plan, so its reservation counts
// the photo's window (here a 400x300 photo on a 16:9 canvas: 400x225).
TEST(RendererBackendTest, AcceleratorThatCannotTakeARenderFallsBack) {
  size_t asked = 0;
  auto r = WithAccel([&asked](const PassPlan& plan) -> Result<std::unique_ptr<Passes>> {
    asked = DeviceBytesPerRender(plan);
    return ResourceExhausted("render needs more than the budget");
  });
  ASSERT_NE(r, nullptr);
  const image::Image photo = testing_fixtures::GradientDiscPhoto(400, 300);
  for (Background bg : {Background::kLandscape, Background::kPhoto}) {
    RenderOptions o = Opts(2, bg);
    o.photo = &photo;
    RenderStats st;
    auto img = r->Render(Poem(0), o, &st);
    ASSERT_TRUE(img.ok());
    EXPECT_EQ(st.backend, "cpu");
    EXPECT_NE(st.gpu_error.find("RESOURCE_EXHAUSTED"), std::string::npos) << st.gpu_error;
    EXPECT_EQ(img->rgb, CpuImage(Poem(0), o).rgb);
    if (bg == Background::kPhoto) {
      EXPECT_EQ(asked, DeviceBytesPerRender(960, 540, st.dabs, 400, 225));
    } else {
      EXPECT_EQ(asked, DeviceBytesPerRender(960, 540, st.dabs));
    }
  }
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
  const image::Image photo = testing_fixtures::GradientDiscPhoto(320, 240);  // edges and tones for the photo wash
  for (int poem = 0; poem < 2; ++poem) {
    for (uint64_t seed : {1u, 7u, 2024u}) {
      for (Background bg : {Background::kLandscape, Background::kPaper, Background::kPhoto}) {
        for (auto [w, h] : {std::pair{1280, 720}, std::pair{1920, 1080}}) {
          RenderOptions o = Opts(seed, bg, w, h);
          if (bg == Background::kPhoto) o.photo = &photo;  // a wash the host makes and uploads
          RenderStats gs;
          auto gi = (*g)->Render(Poem(poem), o, &gs);
          auto ci = (*c)->Render(Poem(poem), o);
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

// Issue 28: the write-time plane and the background from the GPU. The
// capsules' arithmetic has no libm call and no fused multiply-add, so the
// plane should be the CPU's exactly (a differing pixel is printed and must
// stay rare); the background goes through the wash like the image (40 dB).
TEST(GpuParityTest, WritingPlaneMatchesCpu) {
  if (!HaveGpu()) GTEST_SKIP() << "no GPU here, writing parity not checked: " << NoGpuReason();
  RendererConfig gc;
  gc.backend = "gpu";
  auto g = Renderer::Create(gc);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  RendererConfig cc;
  cc.backend = "cpu";
  auto c = Renderer::Create(cc);
  ASSERT_TRUE(c.ok());
  const image::Image photo = testing_fixtures::GradientDiscPhoto(320, 240);
  for (Background bg : {Background::kLandscape, Background::kPaper, Background::kPhoto}) {
    for (bool vertical : {true, false}) {
      RenderOptions o = Opts(7, bg, 1280, 720);
      o.vertical = vertical;
      if (bg == Background::kPhoto) o.photo = &photo;
      Writing gw, cw;
      RenderStats gs;
      ASSERT_TRUE((*g)->Render(Poem(0), o, &gs, &gw).ok());
      ASSERT_TRUE((*c)->Render(Poem(0), o, nullptr, &cw).ok());
      EXPECT_EQ(gs.backend, "cuda") << gs.gpu_error;
      ASSERT_EQ(gw.ms.size(), cw.ms.size());
      size_t differ = 0;
      for (size_t i = 0; i < gw.ms.size(); ++i) differ += gw.ms[i] != cw.ms[i];
      const double p = Psnr(gw.background, cw.background);
      std::printf(
          "writing parity bg %d vertical %d: %zu of %zu plane pixels differ, background %.2f dB\n",
          static_cast<int>(bg), vertical ? 1 : 0, differ, gw.ms.size(), p);
      EXPECT_LE(differ, gw.ms.size() / 10000);
      EXPECT_GE(p, 40.0);
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
