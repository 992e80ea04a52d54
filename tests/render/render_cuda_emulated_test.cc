// The CUDA render backend's own code (src/render/passes_cuda.cu: its kernels,
// Run, the memory pool, the error paths) on the host emulation of the CUDA
// runtime (testing/cuda-host). The emulation runs each kernel thread by thread
// on the CPU and checks every copy and memset against the device allocations
// (kernel loads and stores are checked only in the ASan build), so these tests
// catch kernel logic, plane sizing and which-buffer mistakes, and check the
// fallback and lost-context logic without a GPU. Stream work runs only when
// the stream is synchronised, and a launch runs its threads in a shuffled
// order, so a missing synchronisation, a host buffer that dies too early and a
// kernel that depends on which thread runs first also show. They say nothing
// about the GPU's float rounding, its memory model or speed: GpuParityTest and
// render_gpu_bench do, on a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "cuda_runtime.h"
#include "render/backend.h"
#include "render/passes.h"
#include "render/renderer.h"
#include "testing/cuda-host/emulated_cuda.h"
#include "testing/support/malloc_perturb.h"
#include "testing/support/render_fixtures.h"

namespace danqing::render {
namespace {

using testing_fixtures::Opts;
using testing_fixtures::Poem;

image::Image Photo() { return testing_fixtures::GradientDiscPhoto(160, 120); }

class EmulatedCudaTest : public ::testing::Test {
 protected:
  // Every allocation, emulated device memory included, starts filled with
  // 0x3e bytes (where the allocator does that: not under the sanitizers), a
  // float of 0.19, visible as ink: a kernel or a copy that reads device
  // memory nothing wrote, or leaves part of the image unwritten, then
  // differs from the CPU.
  void SetUp() override {
    testing_support::SetMallocPerturb(0x3e ^ 0xff);
    cudahost::Reset();
    RendererConfig cc;
    cc.backend = "cpu";
    auto c = Renderer::Create(cc);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    cpu_ = std::move(c).value();
  }
  void TearDown() override {
    gpu_.reset();
    device_.reset();
    EXPECT_EQ(cudahost::Violations(), 0) << cudahost::LastViolation();
    EXPECT_EQ(cudahost::BytesInUse(), 0u) << "device memory left allocated";
    testing_support::SetMallocPerturb(0);
  }

  // A Renderer whose heavy passes run on the emulated CUDA backend.
  void MakeGpu(size_t budget = 0) {
    auto d = EmulatedCuda::Create(budget);
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    device_ = std::move(d).value();
    RendererConfig gc;
    EmulatedCuda* dev = device_.get();
    gc.accelerator = [dev](const PassPlan& plan) { return dev->MakePasses(plan); };
    auto g = Renderer::Create(gc);
    ASSERT_TRUE(g.ok()) << g.status().ToString();
    gpu_ = std::move(g).value();
  }

  // After a lost context: the device's memory is gone with it, and the
  // emulation keeps the blocks its frees could not release; check for
  // violations, then let them go so TearDown does not count them as leaked.
  void ForgetLostDevice() {
    gpu_.reset();
    device_.reset();
    EXPECT_EQ(cudahost::Violations(), 0) << cudahost::LastViolation();
    cudahost::Reset();
    cudahost::ReleaseAll();
  }

  image::Image Cpu(const Inscription& text, const RenderOptions& o) {
    auto img = cpu_->Render(text, o);
    EXPECT_TRUE(img.ok()) << img.status().ToString();
    return img.ok() ? *img : image::Image{};
  }

  // One render on the emulated GPU that must fall back: it succeeds, on the
  // CPU, with `error` in its reason, and nothing of the GPU's attempt is left
  // in the image (it equals the CPU reference's).
  RenderStats ExpectFallback(int poem, const RenderOptions& o, const std::string& error) {
    RenderStats st;
    auto img = gpu_->Render(Poem(poem), o, &st);
    EXPECT_TRUE(img.ok()) << img.status().ToString();
    EXPECT_EQ(st.backend, "cpu");
    EXPECT_NE(st.gpu_error.find(error), std::string::npos) << st.gpu_error;
    if (img.ok()) {
      EXPECT_EQ(img->rgb, Cpu(Poem(poem), o).rgb) << "the CPU redid every pass";
    }
    return st;
  }

  std::unique_ptr<Renderer> cpu_, gpu_;
  std::unique_ptr<EmulatedCuda> device_;
};

// The same host compiler and the same math: the kernels must give exactly the
// CPU reference's bytes, for every background, odd and tiny canvas sizes.
TEST_F(EmulatedCudaTest, KernelsMatchTheCpuByteForByte) {
  MakeGpu();
  const image::Image photo = Photo();
  int compared = 0;
  for (auto [w, h] : {std::pair{480, 270}, std::pair{333, 217}, std::pair{64, 64}, std::pair{97, 65}}) {
    for (Background bg : {Background::kLandscape, Background::kPaper, Background::kPhoto}) {
      for (uint64_t seed : {3u, 2024u}) {
        RenderOptions o = Opts(seed, bg, w, h, seed == 3u ? Style::kCao : Style::kXing);
        if (bg == Background::kPhoto) o.photo = &photo;
        RenderStats st;
        auto g = gpu_->Render(Poem(static_cast<int>(seed)), o, &st);
        ASSERT_TRUE(g.ok()) << g.status().ToString();
        EXPECT_EQ(st.backend, "cuda") << st.gpu_error;
        EXPECT_TRUE(st.gpu_error.empty()) << st.gpu_error;
        const image::Image c = Cpu(Poem(static_cast<int>(seed)), o);
        ASSERT_EQ(g->rgb.size(), c.rgb.size());
        size_t differ = 0;
        for (size_t i = 0; i < c.rgb.size(); ++i) differ += g->rgb[i] != c.rgb[i] ? 1 : 0;
        EXPECT_EQ(differ, 0u) << w << "x" << h << " bg " << static_cast<int>(bg) << " seed " << seed;
        ++compared;
      }
    }
  }
  EXPECT_EQ(compared, 24);
  // Full HD: larger characters, so the wet ink diffuses over several steps.
  const RenderOptions o = Opts(11, Background::kLandscape, 1920, 1080, Style::kXing);
  RenderStats st;
  auto g = gpu_->Render(Poem(0), o, &st);
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(st.backend, "cuda") << st.gpu_error;
  EXPECT_TRUE(g->rgb == Cpu(Poem(0), o).rgb) << "1920x1080 differs";
  EXPECT_GT(cudahost::Calls("launch"), 24 * 5) << "every render ran its kernels";
}

// Every kernel gives the same bytes whichever order its threads run in: in
// order, reversed, and two other shuffles than the default's. (A GPU runs
// them in no fixed order; a kernel that read what another thread of the same
// launch writes would differ here.)
TEST_F(EmulatedCudaTest, KernelsDoNotDependOnTheOrderThreadsRun) {
  const image::Image photo = Photo();
  cudahost::Config in_order, reversed, shuffled7, shuffled8;
  in_order.order = cudahost::LaunchOrder::kInOrder;
  reversed.order = cudahost::LaunchOrder::kReversed;
  shuffled7.seed = 7;
  shuffled8.seed = 8;
  int compared = 0;
  for (const cudahost::Config& config : {in_order, reversed, shuffled7, shuffled8}) {
    gpu_.reset();
    device_.reset();
    cudahost::Reset(config);
    MakeGpu();
    for (Background bg : {Background::kLandscape, Background::kPaper, Background::kPhoto}) {
      RenderOptions o = Opts(5, bg, 333, 217, Style::kXing);
      if (bg == Background::kPhoto) o.photo = &photo;
      RenderStats st;
      auto g = gpu_->Render(Poem(2), o, &st);
      ASSERT_TRUE(g.ok()) << g.status().ToString();
      ASSERT_EQ(st.backend, "cuda") << st.gpu_error;
      EXPECT_TRUE(g->rgb == Cpu(Poem(2), o).rgb)
          << "order " << static_cast<int>(config.order) << " seed " << config.seed << " bg " << static_cast<int>(bg);
      ++compared;
    }
  }
  EXPECT_EQ(compared, 12);
}

// The writing (issue 28): the write-time plane and the background come back
// from the device equal to the CPU's, for every background and orientation,
// and the image is the one a plain render gives.
TEST_F(EmulatedCudaTest, WritingPlaneMatchesTheCpu) {
  MakeGpu();
  const image::Image photo = Photo();
  int compared = 0;
  for (auto [w, h] : {std::pair{480, 270}, std::pair{97, 65}}) {
    for (Background bg : {Background::kLandscape, Background::kPaper, Background::kPhoto}) {
      for (bool vertical : {true, false}) {
        RenderOptions o = Opts(9, bg, w, h, vertical ? Style::kXing : Style::kCao);
        o.vertical = vertical;
        if (bg == Background::kPhoto) o.photo = &photo;
        Writing gw, cw;
        RenderStats st;
        auto g = gpu_->Render(Poem(1), o, &st, &gw);
        ASSERT_TRUE(g.ok()) << g.status().ToString();
        EXPECT_EQ(st.backend, "cuda") << st.gpu_error;
        auto c = cpu_->Render(Poem(1), o, nullptr, &cw);
        ASSERT_TRUE(c.ok());
        EXPECT_TRUE(g->rgb == c->rgb) << w << "x" << h << " bg " << static_cast<int>(bg);
        EXPECT_TRUE(gw.ms == cw.ms)
            << "write times " << w << "x" << h << " bg " << static_cast<int>(bg);
        EXPECT_TRUE(gw.background.rgb == cw.background.rgb) << "background " << w << "x" << h;
        EXPECT_EQ(gw.seal_ms, cw.seal_ms);
        EXPECT_EQ(gw.end_ms, cw.end_ms);
        EXPECT_GT(
            std::count_if(gw.ms.begin(), gw.ms.end(), [](uint16_t v) { return v != kNotWritten; }),
            100);
        ++compared;
      }
    }
  }
  EXPECT_EQ(compared, 12);
}

// A plain render reserves nothing for the writing; one with it reserves its
// planes, and a copy failing on the way back falls back to the CPU, whose
// writing is then the one handed back.
TEST_F(EmulatedCudaTest, WritingCostsNothingUnlessAskedAndFallsBack) {
  MakeGpu();
  const RenderOptions o = Opts(4, Background::kPaper, 320, 200, Style::kXing);
  cudahost::ResetPeak();
  ASSERT_TRUE(gpu_->Render(Poem(0), o).ok());
  const size_t plain_peak = cudahost::PeakBytesInUse();
  cudahost::ResetPeak();
  Writing gw;
  RenderStats st;
  ASSERT_TRUE(gpu_->Render(Poem(0), o, &st, &gw).ok());
  EXPECT_EQ(st.backend, "cuda");
  EXPECT_GE(cudahost::PeakBytesInUse(), plain_peak + 320u * 200u * 3u + 160u * 100u * 6u)
      << "time planes (half resolution) and background";
  Writing cw;
  ASSERT_TRUE(cpu_->Render(Poem(0), o, nullptr, &cw).ok());
  // The write times' download (the render's last but one copy) fails.
  const int copies = cudahost::Calls("cudaMemcpyAsync");
  ASSERT_TRUE(gpu_->Render(Poem(0), o, nullptr, &gw).ok());
  const int per_render = cudahost::Calls("cudaMemcpyAsync") - copies;
  cudahost::FailCall("cudaMemcpyAsync", cudaErrorInvalidValue, per_render - 2);
  Writing fw;
  RenderStats fst;
  auto f = gpu_->Render(Poem(0), o, &fst, &fw);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(fst.backend, "cpu");
  EXPECT_NE(fst.gpu_error.find("download write times"), std::string::npos) << fst.gpu_error;
  EXPECT_TRUE(fw.ms == cw.ms);
  EXPECT_TRUE(fw.background.rgb == cw.background.rgb);
}

// Detail's ink plane comes back from the device and equals the CPU's.
TEST_F(EmulatedCudaTest, InkPlaneComesBackForDetail) {
  MakeGpu();
  const RenderOptions o = Opts(9, Background::kLandscape, 320, 200);
  Renderer::Detail gd, cd;
  RenderStats st;
  ASSERT_TRUE(gpu_->RenderDetailed(Poem(1), o, &st, &gd).ok());
  ASSERT_TRUE(cpu_->RenderDetailed(Poem(1), o, nullptr, &cd).ok());
  EXPECT_EQ(st.backend, "cuda");
  ASSERT_EQ(gd.ink.size(), 320u * 200u);
  EXPECT_EQ(gd.ink, cd.ink);
}

// The photo wash runs on the device (resample, luminance, blurs, tone and
// edges): photos smaller and larger than the wash, wider and taller than the
// canvas (the window then starts inside the photo), down to one pixel, give
// the CPU's bytes; and what the render allocates fits what it reserved.
TEST_F(EmulatedCudaTest, PhotoWashOnTheDeviceMatchesTheCpu) {
  MakeGpu();
  const size_t textures = cudahost::BytesInUse();
  int compared = 0;
  // 160x90 on 480x270 is the wash's own size: the CPU copies, the device
  // resamples with weights 1 and 0. 3000x1700 on 97x65 shrinks 94 times.
  for (auto [pw, ph] : {std::pair{40, 30}, std::pair{1000, 300}, std::pair{300, 900}, std::pair{1, 1},
                        std::pair{7, 500}, std::pair{161, 91}, std::pair{160, 90}, std::pair{3000, 1700}}) {
    const image::Image photo = testing_fixtures::ColourPhoto(pw, ph);
    for (auto [w, h] : {std::pair{480, 270}, std::pair{97, 65}}) {
      RenderOptions o = Opts(static_cast<uint64_t>(pw + w), Background::kPhoto, w, h, Style::kXing);
      o.photo = &photo;
      cudahost::ResetPeak();
      RenderStats st;
      auto g = gpu_->Render(Poem(compared), o, &st);
      ASSERT_TRUE(g.ok()) << g.status().ToString();
      ASSERT_EQ(st.backend, "cuda") << st.gpu_error;
      EXPECT_TRUE(g->rgb == Cpu(Poem(compared), o).rgb) << pw << "x" << ph << " photo, " << w << "x" << h;
      // The window: the photo's full width or height, at the wash's aspect.
      const PhotoInput in = CoverPhoto(photo, PlanesFor(w, h), 0, 0, 0, 0);
      EXPECT_LE(cudahost::PeakBytesInUse() - textures, DeviceBytesPerRender(w, h, st.dabs, in.w, in.h))
          << "allocated more than reserved";
      ++compared;
    }
  }
  EXPECT_EQ(compared, 16);
  EXPECT_EQ(cudahost::Calls("cudaMemcpy2DAsync"), 16) << "each render uploaded its window once";
}

// The passes on their own, on canvases below the Renderer's minimum, where
// the wash plane (at least 8x8) is larger than the wet planes the device
// uses as its scratch: they are sized for both.
TEST_F(EmulatedCudaTest, PhotoWashOnTinyCanvasesMatchesTheCpu) {
  MakeGpu();
  const Textures tex = Textures::Build();
  const image::Image photo = testing_fixtures::ColourPhoto(50, 37);
  const std::vector<Dab> dabs;
  for (auto [w, h] : {std::pair{10, 10}, std::pair{3, 17}, std::pair{1, 1}}) {
    PassPlan plan;
    plan.planes = PlanesFor(w, h);
    plan.dabs = &dabs;
    const PhotoInput in = CoverPhoto(photo, plan.planes, 0.2f * w, 0.2f * h, 0.7f * w, 0.6f * h);
    plan.photo = &in;
    ASSERT_GT(static_cast<size_t>(plan.planes.lw) * plan.planes.lh,
              static_cast<size_t>(plan.planes.ww) * plan.planes.wh);
    std::vector<uint8_t> want(static_cast<size_t>(w) * h * 3), got(want.size());
    CpuPasses cpu(2);
    cpu.Run(plan, tex, want.data(), nullptr, nullptr);
    ASSERT_TRUE(cpu.status().ok()) << cpu.status().ToString();
    auto passes = device_->MakePasses(plan);
    ASSERT_TRUE(passes.ok()) << passes.status().ToString();
    (*passes)->Run(plan, tex, got.data(), nullptr, nullptr);
    ASSERT_TRUE((*passes)->status().ok()) << (*passes)->status().ToString();
    EXPECT_EQ(got, want) << w << "x" << h;
  }
}

// The photo is part of the reservation: a render whose window does not fit
// the budget runs on the CPU, while a landscape of the same size fits.
TEST_F(EmulatedCudaTest, ThePhotoWindowCountsInTheBudget) {
  const int w = 240, h = 160;
  RenderStats cs;
  ASSERT_TRUE(cpu_->Render(Poem(0), Opts(3, Background::kLandscape, w, h), &cs).ok());
  MakeGpu(DeviceBytesPerRender(w, h, cs.dabs) + 64 * 1024);
  RenderStats st;
  ASSERT_TRUE(gpu_->Render(Poem(0), Opts(3, Background::kLandscape, w, h), &st).ok());
  EXPECT_EQ(st.backend, "cuda") << st.gpu_error;
  const image::Image small = testing_fixtures::GradientDiscPhoto(60, 40);
  RenderOptions o = Opts(3, Background::kPhoto, w, h);
  o.photo = &small;
  ASSERT_TRUE(gpu_->Render(Poem(0), o, &st).ok());
  EXPECT_EQ(st.backend, "cuda") << "a 60x40 photo fits in 64 KiB: " << st.gpu_error;
  const image::Image large = testing_fixtures::GradientDiscPhoto(600, 400);  // window 600x400: 720 kB
  o.photo = &large;
  const int before = cudahost::Calls("cudaMallocAsync");
  ExpectFallback(0, o, "RESOURCE_EXHAUSTED");
  EXPECT_EQ(cudahost::Calls("cudaMallocAsync"), before) << "refused before it took any device memory";
}

// The photo's upload fails: that render is redone on the CPU, the next is on
// the GPU again. And Passes reserved for one photo window refuse a plan with
// another (they hold a buffer of the first's size).
TEST_F(EmulatedCudaTest, PhotoUploadFailureFallsBackAndWindowsMustMatch) {
  MakeGpu();
  const image::Image photo = Photo();
  RenderOptions o = Opts(12, Background::kPhoto, 240, 160);
  o.photo = &photo;
  cudahost::FailCall("cudaMemcpy2DAsync", cudaErrorDevicesUnavailable);
  ExpectFallback(2, o, "upload photo");
  RenderStats st;
  ASSERT_TRUE(gpu_->Render(Poem(2), o, &st).ok());
  EXPECT_EQ(st.backend, "cuda") << st.gpu_error;

  const Textures tex = Textures::Build();
  const std::vector<Dab> dabs;
  const CanvasPlanes planes = PlanesFor(240, 160);
  const PhotoInput reserved = CoverPhoto(photo, planes, 0, 0, 0, 0);
  PassPlan plan;
  plan.planes = planes;
  plan.dabs = &dabs;
  plan.photo = &reserved;
  auto passes = device_->MakePasses(plan);
  ASSERT_TRUE(passes.ok()) << passes.status().ToString();
  PhotoInput other = reserved;
  other.w -= 1;
  plan.photo = &other;
  // A malformed window is refused before anything is reserved.
  PhotoInput outside = reserved;
  outside.x0 = photo.width;
  PassPlan bad = plan;
  bad.photo = &outside;
  const int allocations = cudahost::Calls("cudaMallocAsync");
  auto refused = device_->MakePasses(bad);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kInternal);
  EXPECT_NE(refused.status().message().find("photo window"), std::string::npos) << refused.status().message();
  EXPECT_EQ(cudahost::Calls("cudaMallocAsync"), allocations);
  std::vector<uint8_t> rgb(240 * 160 * 3, 42);
  (*passes)->Run(plan, tex, rgb.data(), nullptr, nullptr);
  EXPECT_EQ((*passes)->status().code(), StatusCode::kInternal);
  EXPECT_NE((*passes)->status().message().find("photo window"), std::string::npos) << (*passes)->status().message();
  EXPECT_EQ(rgb, std::vector<uint8_t>(240 * 160 * 3, 42)) << "nothing written";
}

// Planes come from the stream-ordered pool and go back to it; cudaFree (which
// waits for the whole device) is only the fallback where pools are missing.
TEST_F(EmulatedCudaTest, PlanesUseTheMemoryPoolWhenThereIsOne) {
  MakeGpu();
  EXPECT_TRUE(device_->lost_reason().empty());
  RenderStats st;
  ASSERT_TRUE(gpu_->Render(Poem(0), Opts(1, Background::kPaper, 200, 120), &st).ok());
  EXPECT_EQ(st.backend, "cuda");
  EXPECT_EQ(cudahost::Calls("cudaMallocAsync"), 9);
  EXPECT_EQ(cudahost::Calls("cudaFreeAsync"), 9);
  EXPECT_EQ(cudahost::Calls("cudaFree"), 0);
  EXPECT_GT(st.passes_ms, 0.0);

  gpu_.reset();
  device_.reset();
  EXPECT_EQ(cudahost::Violations(), 0) << cudahost::LastViolation();
  EXPECT_EQ(cudahost::BytesInUse(), 0u);
  cudahost::Config no_pools;
  no_pools.pools = false;
  cudahost::Reset(no_pools);
  MakeGpu();
  ASSERT_TRUE(gpu_->Render(Poem(0), Opts(1, Background::kPaper, 200, 120), &st).ok());
  EXPECT_EQ(st.backend, "cuda");
  EXPECT_EQ(cudahost::Calls("cudaMallocAsync"), 0);
  EXPECT_EQ(cudahost::Calls("cudaMalloc"), 9 + 1);  // the planes and the textures
  EXPECT_EQ(cudahost::Calls("cudaFree"), 9);
}

// Out of device memory while setting up a render: that render runs on the
// CPU, and the error does not linger to fail the thread's next render.
TEST_F(EmulatedCudaTest, AllocationFailureFallsBackOnceThenTheGpuWorksAgain) {
  MakeGpu();
  const RenderOptions o = Opts(5, Background::kLandscape, 240, 160);
  cudahost::FailCall("cudaMallocAsync", cudaErrorMemoryAllocation, 3);
  RenderStats st = ExpectFallback(0, o, "cudaErrorMemoryAllocation");
  EXPECT_NE(st.gpu_error.find("RESOURCE_EXHAUSTED"), std::string::npos) << st.gpu_error;
  EXPECT_EQ(cudahost::BytesInUse(), DeviceTextureBytes()) << "the planes already taken were given back";
  EXPECT_EQ(device_->in_use_bytes(), 0u) << "the budget reservation was returned";

  ASSERT_TRUE(gpu_->Render(Poem(0), o, &st).ok());
  EXPECT_EQ(st.backend, "cuda") << st.gpu_error;
}

// A transient error in the middle of a render (the copy back fails): the CPU
// redoes the render, and the next one is on the GPU again.
TEST_F(EmulatedCudaTest, CopyFailureMidRenderFallsBack) {
  MakeGpu();
  const RenderOptions o = Opts(6, Background::kPaper, 240, 160);
  cudahost::FailCall("cudaMemcpyAsync", cudaErrorDevicesUnavailable, 1);  // after the dab upload
  RenderStats st = ExpectFallback(1, o, "cudaErrorDevicesUnavailable");
  ASSERT_TRUE(gpu_->Render(Poem(1), o, &st).ok());
  EXPECT_EQ(st.backend, "cuda") << st.gpu_error;
}

// A kernel that faults loses the context for good (as on a device): that
// render and every later one run on the CPU, and later ones do not even try
// the device.
TEST_F(EmulatedCudaTest, ALostContextSendsEveryLaterRenderToTheCpu) {
  MakeGpu();
  const RenderOptions o = Opts(7, Background::kLandscape, 240, 160);
  cudahost::FailCall("launch", cudaErrorIllegalAddress, 1);
  ExpectFallback(0, o, "cudaErrorIllegalAddress");

  EXPECT_NE(device_->lost_reason().find("cudaErrorIllegalAddress"), std::string::npos) << device_->lost_reason();
  const int allocations = cudahost::Calls("cudaMallocAsync");
  RenderStats st = ExpectFallback(1, o, "unusable since");
  EXPECT_NE(st.gpu_error.find("cudaErrorIllegalAddress"), std::string::npos) << st.gpu_error;
  EXPECT_EQ(cudahost::Calls("cudaMallocAsync"), allocations) << "a lost context is not tried again";
  ForgetLostDevice();
}

// A kernel fault that surfaces only when the stream is synchronised, as it
// does on a device: the context is lost just the same.
TEST_F(EmulatedCudaTest, AFaultSeenAtTheSynchronisationLosesTheContext) {
  MakeGpu();
  const RenderOptions o = Opts(8, Background::kPaper, 200, 120);
  cudahost::FailCall("cudaStreamSynchronize", cudaErrorLaunchFailure);
  ExpectFallback(0, o, "cudaErrorLaunchFailure");
  ExpectFallback(0, o, "unusable since");
  ForgetLostDevice();
}

// Failures in setting a render up (its stream, its timing events) send it to
// the CPU; a failure only in reading the timings keeps the GPU's image.
TEST_F(EmulatedCudaTest, SetUpFailuresFallBackButATimingErrorKeepsTheImage) {
  MakeGpu();
  const RenderOptions o = Opts(4, Background::kLandscape, 200, 120);
  const image::Image want = Cpu(Poem(1), o);
  for (const char* api : {"cudaStreamCreate", "cudaEventCreate"}) {
    SCOPED_TRACE(api);
    cudahost::FailCall(api, cudaErrorMemoryAllocation);
    ExpectFallback(1, o, "RESOURCE_EXHAUSTED");
  }
  cudahost::FailCall("cudaEventElapsedTime", cudaErrorInvalidValue);
  RenderStats st;
  auto img = gpu_->Render(Poem(1), o, &st);
  ASSERT_TRUE(img.ok());
  EXPECT_EQ(st.backend, "cuda") << st.gpu_error;
  EXPECT_TRUE(st.gpu_error.empty()) << st.gpu_error;
  EXPECT_EQ(img->rgb, want.rgb);
  // And the thread's next render is not failed by that error.
  ASSERT_TRUE(gpu_->Render(Poem(1), o, &st).ok());
  EXPECT_EQ(st.backend, "cuda") << st.gpu_error;
}

// The emulation itself: it must catch what it claims to catch.
TEST(CudaHostTest, CatchesCopiesOutsideAnAllocationAndKeepsLostContextsLost) {
  cudahost::Reset();
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 64), cudaSuccess);
  std::vector<uint8_t> host(128, 1);
  EXPECT_EQ(cudaMemcpy(p, host.data(), 64, cudaMemcpyHostToDevice), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(p, host.data(), 65, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpy(host.data(), static_cast<uint8_t*>(p) + 8, 64, cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemsetAsync(static_cast<uint8_t*>(p) + 60, 0, 8, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cudahost::Violations(), 3);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "an ordinary error is cleared once read";
  int x = 0;
  cudahost::LaunchGrid(dim3(2, 70000), dim3(32), nullptr, [&] { ++x; });
  EXPECT_EQ(x, 0) << "grid.y over 65535 is refused";
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  cudahost::LaunchGrid(dim3(3, 2), dim3(4, 2), nullptr, [&] { ++x; });
  EXPECT_EQ(x, 3 * 2 * 4 * 2);
  // Faults on one API fire in order: the first after one call, the second at the next.
  cudahost::FailCall("cudaSetDevice", cudaErrorInvalidDevice, 1);
  cudahost::FailCall("cudaSetDevice", cudaErrorDevicesUnavailable);
  EXPECT_EQ(cudaSetDevice(0), cudaSuccess);
  EXPECT_EQ(cudaSetDevice(0), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaSetDevice(0), cudaErrorDevicesUnavailable);
  EXPECT_EQ(cudaSetDevice(0), cudaSuccess);
  // A context-losing error is sticky.
  cudahost::FailCall("cudaMemsetAsync", cudaErrorIllegalAddress);
  EXPECT_EQ(cudaMemsetAsync(p, 0, 8, nullptr), cudaErrorIllegalAddress);
  EXPECT_EQ(cudaGetLastError(), cudaErrorIllegalAddress);
  EXPECT_EQ(cudaGetLastError(), cudaErrorIllegalAddress);
  EXPECT_EQ(cudaSetDevice(0), cudaErrorIllegalAddress);
  cudahost::Reset();
  cudahost::ReleaseAll();
  EXPECT_EQ(cudahost::BytesInUse(), 0u);
}

// The emulation's streams: work waits in the queue until the stream is
// synchronised, reads and writes host memory only then, and a copy queued
// after a free of its memory is caught when it runs, as an illegal address.
// cudaMemcpy to the device is staged, as CUDA does with pageable memory.
TEST(CudaHostTest, StreamWorkRunsWhenTheStreamIsSynchronised) {
  cudahost::Reset();
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 16), cudaSuccess);
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  cudaEvent_t e0 = nullptr, e1 = nullptr, never = nullptr;
  ASSERT_EQ(cudaEventCreate(&e0), cudaSuccess);
  ASSERT_EQ(cudaEventCreate(&e1), cudaSuccess);
  ASSERT_EQ(cudaEventCreate(&never), cudaSuccess);
  std::vector<uint8_t> up(16, 7), down(16, 0);
  int threads = 0;
  EXPECT_EQ(cudaEventRecord(e0, s), cudaSuccess);
  EXPECT_EQ(cudaMemcpyAsync(p, up.data(), 16, cudaMemcpyHostToDevice, s), cudaSuccess);
  cudahost::LaunchGrid(dim3(2), dim3(3), s, [&] { ++threads; });
  EXPECT_EQ(cudaMemcpyAsync(down.data(), p, 16, cudaMemcpyDeviceToHost, s), cudaSuccess);
  EXPECT_EQ(cudaEventRecord(e1, s), cudaSuccess);
  up[0] = 9;  // the upload has not run: it reads this
  EXPECT_EQ(cudahost::Queued(s), 5u);
  EXPECT_EQ(threads, 0);
  EXPECT_EQ(down, std::vector<uint8_t>(16, 0)) << "nothing came back before the synchronisation";
  float ms = -1;
  EXPECT_EQ(cudaEventElapsedTime(&ms, e0, e1), cudaErrorNotReady);
  EXPECT_EQ(cudaEventElapsedTime(&ms, e0, never), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(cudahost::Queued(s), 0u);
  EXPECT_EQ(threads, 6);
  EXPECT_EQ(down[0], 9);
  EXPECT_EQ(down[15], 7);
  EXPECT_EQ(cudaEventElapsedTime(&ms, e0, e1), cudaSuccess);
  EXPECT_GE(ms, 0.0f);
  cudaGetLastError();
  // cudaMemcpy from the host (pageable) returns once the bytes are staged (a
  // later change of the host buffer does not reach the device); the legacy
  // stream's DMA writes them, which work on other streams does not wait for.
  std::vector<uint8_t> staged(16, 5);
  EXPECT_EQ(cudaMemcpy(p, staged.data(), 16, cudaMemcpyHostToDevice), cudaSuccess);
  staged[0] = 6;
  EXPECT_EQ(cudahost::Queued(nullptr), 1u);
  EXPECT_EQ(cudaMemcpyAsync(down.data(), p, 16, cudaMemcpyDeviceToHost, s), cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(down[0], 9) << "the other stream read the device before the DMA";
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(cudahost::Queued(nullptr), 0u);
  EXPECT_EQ(cudaMemcpy(down.data(), p, 16, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(down[0], 5);
  // An event destroyed while its record waits goes when the record runs (the
  // ASan build's leak check sees it go).
  EXPECT_EQ(cudaEventRecord(never, s), cudaSuccess);
  EXPECT_EQ(cudaEventDestroy(never), cudaSuccess);
  // The free is queued; the copy after it is checked when called (the memory
  // is still there) and again when it runs (it is gone): the context is lost.
  EXPECT_EQ(cudaFreeAsync(p, s), cudaSuccess);
  EXPECT_EQ(cudahost::BytesInUse(), 16u);
  EXPECT_EQ(cudaMemcpyAsync(down.data(), p, 16, cudaMemcpyDeviceToHost, s), cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(s), cudaErrorIllegalAddress);
  EXPECT_EQ(cudahost::BytesInUse(), 0u);
  EXPECT_EQ(cudahost::Violations(), 1);
  EXPECT_NE(cudahost::LastViolation().find("when it ran"), std::string::npos) << cudahost::LastViolation();
  // On the lost context, queued work is dropped.
  std::fill(down.begin(), down.end(), 0);
  void* q = nullptr;
  EXPECT_EQ(cudaMalloc(&q, 16), cudaErrorIllegalAddress);
  EXPECT_EQ(cudaStreamDestroy(s), cudaSuccess);
  EXPECT_EQ(cudaEventDestroy(e0), cudaSuccess);
  EXPECT_EQ(cudaEventDestroy(e1), cudaSuccess);
  cudahost::Reset();
  cudahost::ReleaseAll();
}

// A launch runs each thread of the grid once, in the configured order; the
// shuffled order differs from launch to launch, so a kernel that reads what
// another thread of its launch writes (here: each adds one to its left
// neighbour's value) gives another result.
TEST(CudaHostTest, LaunchesRunEveryThreadOnceInTheConfiguredOrder) {
  const dim3 grid(3, 2), block(4, 2);
  const int n = 3 * 2 * 4 * 2;
  auto run = [&](cudahost::LaunchOrder order) {
    cudahost::Config c;
    c.order = order;
    cudahost::Reset(c);
    std::vector<int> seen;  // global linear ids, x fastest, in the order run
    cudahost::LaunchGrid(grid, block, nullptr, [&] {
      EXPECT_EQ(blockDim.x, 4u);
      EXPECT_EQ(gridDim.y, 2u);
      const int gx = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
      const int gy = static_cast<int>(blockIdx.y * blockDim.y + threadIdx.y);
      seen.push_back(gy * 12 + gx);
    });
    return seen;
  };
  auto sorted = [](std::vector<int> v) {
    std::sort(v.begin(), v.end());
    return v;
  };
  std::vector<int> all(n);
  for (int i = 0; i < n; ++i) all[static_cast<size_t>(i)] = i;
  const std::vector<int> in_order = run(cudahost::LaunchOrder::kInOrder);
  const std::vector<int> reversed = run(cudahost::LaunchOrder::kReversed);
  const std::vector<int> shuffled = run(cudahost::LaunchOrder::kShuffled);
  EXPECT_EQ(sorted(in_order), all);
  EXPECT_EQ(sorted(reversed), all);
  EXPECT_EQ(sorted(shuffled), all);
  EXPECT_EQ(std::vector<int>(in_order.rbegin(), in_order.rend()), reversed);
  EXPECT_NE(shuffled, in_order);
  EXPECT_NE(shuffled, reversed);

  auto prefix = [&](cudahost::LaunchOrder order) {
    cudahost::Config c;
    c.order = order;
    cudahost::Reset(c);
    std::vector<int> v(64, 0);
    cudahost::LaunchGrid(dim3(2), dim3(32), nullptr, [&] {
      const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
      v[i] = i == 0 ? 1 : v[i - 1] + 1;  // depends on thread i-1 having run
    });
    return v;
  };
  EXPECT_EQ(prefix(cudahost::LaunchOrder::kInOrder).back(), 64);
  EXPECT_NE(prefix(cudahost::LaunchOrder::kShuffled).back(), 64);
  EXPECT_NE(prefix(cudahost::LaunchOrder::kReversed).back(), 64);
  cudahost::Reset();
}

// The budget: a render that alone exceeds it goes to the CPU without touching
// the device; renders that fit together wait for each other, never exceed it.
TEST_F(EmulatedCudaTest, TheBudgetBoundsWhatRendersHoldTogether) {
  MakeGpu(DeviceBytesPerRender(200, 120, 0) / 2);
  const int before = cudahost::Calls("cudaMallocAsync");
  ExpectFallback(0, Opts(2, Background::kPaper, 200, 120), "RESOURCE_EXHAUSTED");
  EXPECT_EQ(cudahost::Calls("cudaMallocAsync"), before);

  gpu_.reset();
  device_.reset();
  // Room for one render and a half: the six must take turns.
  size_t largest = 0;
  for (int i = 0; i < 6; ++i) {
    RenderStats cs;
    ASSERT_TRUE(cpu_->Render(Poem(i), Opts(static_cast<uint64_t>(i), Background::kLandscape, 480, 270), &cs).ok());
    largest = std::max(largest, DeviceBytesPerRender(480, 270, cs.dabs));
  }
  const size_t budget = largest * 3 / 2;
  MakeGpu(budget);
  std::atomic<size_t> peak{0};
  std::atomic<bool> done{false};
  std::thread watch([&] {
    while (!done.load()) {
      size_t now = device_->in_use_bytes();
      size_t p = peak.load();
      while (now > p && !peak.compare_exchange_weak(p, now)) {
      }
      std::this_thread::yield();
    }
  });
  std::vector<std::thread> th;
  std::vector<std::string> backend(6);
  for (int i = 0; i < 6; ++i) {
    th.emplace_back([&, i] {
      RenderStats s;
      if (gpu_->Render(Poem(i), Opts(static_cast<uint64_t>(i), Background::kLandscape, 480, 270), &s).ok()) {
        backend[static_cast<size_t>(i)] = s.backend;
      }
    });
  }
  for (auto& t : th) t.join();
  done = true;
  watch.join();
  for (int i = 0; i < 6; ++i) EXPECT_EQ(backend[static_cast<size_t>(i)], "cuda") << i;
  EXPECT_LE(peak.load(), budget) << "two renders never held the device at once";
  EXPECT_GT(peak.load(), 0u);
  EXPECT_EQ(device_->in_use_bytes(), 0u);
}

// No device: the context cannot be made, with the runtime's reason.
TEST_F(EmulatedCudaTest, NoDeviceIsAClearError) {
  cudahost::Config none;
  none.devices = 0;
  cudahost::Reset(none);
  auto d = EmulatedCuda::Create(0);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(d.status().message().find("cudaSetDevice"), std::string::npos) << d.status().message();
}

}  // namespace
}  // namespace danqing::render
