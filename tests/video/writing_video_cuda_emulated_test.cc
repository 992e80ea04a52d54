// The video's frames composed by the CUDA composer (src/video/compose_cuda.cu)
// on the host emulation of the CUDA runtime (testing/cuda-host): byte for
// byte the CPU composer's frames, vertical and horizontal, before the seal is
// stamped, while it is wet and after; a CUDA error at the start or mid-clip
// hands the rest of the frames to the CPU, with the same bytes and the reason
// reported. The two composers are different code (the CPU's rewrites only the
// blocks that changed since the previous frame, in writing order; the kernel
// recomputes every block of every frame), sharing only compose.h's rule.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "cuda_runtime.h"
#include "render/renderer.h"
#include "testing/cuda-host/emulated_video_compose.h"
#include "testing/support/malloc_perturb.h"
#include "testing/support/render_fixtures.h"
#include "video/writing_video.h"

namespace danqing::video {
namespace {

namespace fs = std::filesystem;

const DeviceComposerFactory kEmulated = cuda_host_emulation::MakeCudaComposer;

struct Clip {
  image::Image final_image;
  render::Writing writing;
  WritingFrames Frames() const {
    return WritingFrames{&final_image,        &writing.background,  writing.ms.data(),
                         writing.plane_width, writing.plane_height, writing.end_ms};
  }
  // Before the seal, the seal wet, the seal dry, and times through the
  // writing, several of them in the sheen of the last strokes.
  std::vector<uint32_t> Times() const {
    const uint32_t s = writing.seal_ms;
    std::vector<uint32_t> t = {0,     s / 5, s / 3,   s / 3 + 90,   s / 2 + 17,    s - 200,
                               s - 1, s,     s + 120, s + kSheenMs, writing.end_ms};
    std::sort(t.begin(), t.end());
    return t;
  }
};

Clip Render(bool vertical, int w, int h) {
  render::RendererConfig c;
  c.backend = "cpu";
  auto r = render::Renderer::Create(c);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  Clip clip;
  if (!r.ok()) return clip;
  render::RenderOptions o =
      render::testing_fixtures::Opts(7, render::Background::kLandscape, w, h, render::Style::kXing);
  o.vertical = vertical;
  auto img = (*r)->Render(render::testing_fixtures::Poem(0), o, nullptr, &clip.writing);
  EXPECT_TRUE(img.ok()) << img.status().ToString();
  if (img.ok()) clip.final_image = *img;
  return clip;
}

class WritingVideoCudaEmulatedTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    vertical_ = new Clip(Render(true, 321, 203));
    horizontal_ = new Clip(Render(false, 256, 330));
  }
  static void TearDownTestSuite() {
    delete vertical_;
    delete horizontal_;
  }
  // Emulated device memory starts filled with 0x3e bytes: a frame the kernel
  // leaves partly unwritten differs from the CPU's.
  void SetUp() override {
    testing_support::SetMallocPerturb(0x3e ^ 0xff);
    cudahost::Reset();
  }
  void TearDown() override {
    EXPECT_EQ(cudahost::Violations(), 0) << cudahost::LastViolation();
    cudahost::ReleaseAll();
    testing_support::SetMallocPerturb(0);
  }

  static Clip* vertical_;
  static Clip* horizontal_;
};
Clip* WritingVideoCudaEmulatedTest::vertical_ = nullptr;
Clip* WritingVideoCudaEmulatedTest::horizontal_ = nullptr;

// Where two frames differ, in bytes.
size_t Diff(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  size_t n = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) n += a[i] != b[i];
  return n + std::max(a.size(), b.size()) - std::min(a.size(), b.size());
}

TEST_F(WritingVideoCudaEmulatedTest, FramesEqualTheCpuComposersByteForByte) {
  for (const Clip* clip : {vertical_, horizontal_}) {
    ASSERT_FALSE(clip->final_image.rgb.empty());
    ASSERT_GT(clip->writing.seal_ms, 1000u);
    const std::vector<uint32_t> times = clip->Times();
    EncodeResult cpu_info, gpu_info;
    auto cpu = ComposeYuvFrames(clip->Frames(), times, nullptr, &cpu_info);
    ASSERT_TRUE(cpu.ok()) << cpu.status().ToString();
    const size_t live_before = cudahost::BytesInUse();
    const int launches_before = cudahost::Calls("launch");
    auto gpu = ComposeYuvFrames(clip->Frames(), times, kEmulated, &gpu_info);
    ASSERT_TRUE(gpu.ok()) << gpu.status().ToString();
    EXPECT_EQ(cudahost::BytesInUse(), live_before) << "device memory left allocated";
    EXPECT_EQ(cpu_info.composer, "cpu");
    EXPECT_EQ(gpu_info.composer, "cuda");
    EXPECT_EQ(gpu_info.compose_fallback, "");
    EXPECT_EQ(cudahost::Calls("launch") - launches_before, static_cast<int>(times.size()))
        << "one kernel a frame";
    ASSERT_EQ(cpu->size(), times.size());
    ASSERT_EQ(gpu->size(), times.size());
    const int w = clip->final_image.width & ~1, h = clip->final_image.height & ~1;
    for (size_t i = 0; i < times.size(); ++i) {
      ASSERT_EQ((*cpu)[i].size(), static_cast<size_t>(w) * h * 3 / 2);
      EXPECT_EQ(Diff((*cpu)[i], (*gpu)[i]), 0u)
          << (clip == vertical_ ? "vertical" : "horizontal") << ", t=" << times[i] << " ms";
    }
    // The frames move: the seal appears between seal_ms - 1 and seal_ms + 120,
    // and its sheen dries by seal_ms + kSheenMs.
    const auto at = [&](uint32_t t) {
      return (*gpu)[static_cast<size_t>(std::find(times.begin(), times.end(), t) - times.begin())];
    };
    const uint32_t s = clip->writing.seal_ms;
    EXPECT_GT(Diff(at(s - 1), at(s + 120)), 100u) << "the seal is stamped";
    EXPECT_GT(Diff(at(s + 120), at(s + kSheenMs)), 0u) << "the seal's sheen dries";
    EXPECT_GT(Diff(at(0), at(s - 1)), 1000u) << "the writing";
  }
}

TEST_F(WritingVideoCudaEmulatedTest, InOrderAndReversedLaunchesGiveTheSameFrames) {
  const std::vector<uint32_t> times = vertical_->Times();
  auto cpu = ComposeYuvFrames(vertical_->Frames(), times, nullptr);
  ASSERT_TRUE(cpu.ok());
  for (auto order : {cudahost::LaunchOrder::kInOrder, cudahost::LaunchOrder::kReversed}) {
    cudahost::Config config;
    config.order = order;
    cudahost::Reset(config);
    auto gpu = ComposeYuvFrames(vertical_->Frames(), times, kEmulated);
    ASSERT_TRUE(gpu.ok());
    EXPECT_TRUE(*gpu == *cpu);
  }
}

TEST_F(WritingVideoCudaEmulatedTest, CudaErrorMidClipHandsTheRestToTheCpu) {
  const std::vector<uint32_t> times = horizontal_->Times();
  auto cpu = ComposeYuvFrames(horizontal_->Frames(), times, nullptr);
  ASSERT_TRUE(cpu.ok());
  // The fourth frame's kernel fails (a lost context: sticky).
  cudahost::FailCall("launch", cudaErrorLaunchFailure, 3);
  EncodeResult info;
  auto gpu = ComposeYuvFrames(horizontal_->Frames(), times, kEmulated, &info);
  ASSERT_TRUE(gpu.ok()) << gpu.status().ToString();
  EXPECT_TRUE(*gpu == *cpu) << "the CPU takes over at the failed frame, from the same state";
  EXPECT_EQ(info.composer, "cpu");
  EXPECT_NE(info.compose_fallback.find("ComposeKernel"), std::string::npos)
      << info.compose_fallback;
  EXPECT_NE(info.compose_fallback.find("cudaErrorLaunchFailure"), std::string::npos);

  // A copy back failing (not sticky) does the same. (The lost context's
  // memory cannot be freed, as on a device: released here.)
  cudahost::ReleaseAll();
  cudahost::Reset();
  cudahost::FailCall("cudaMemcpy2DAsync", cudaErrorInvalidValue, 4);
  info = EncodeResult{};
  gpu = ComposeYuvFrames(horizontal_->Frames(), times, kEmulated, &info);
  ASSERT_TRUE(gpu.ok());
  EXPECT_TRUE(*gpu == *cpu);
  EXPECT_NE(info.compose_fallback.find("cudaMemcpy2DAsync"), std::string::npos)
      << info.compose_fallback;
  EXPECT_EQ(cudahost::BytesInUse(), 0u) << "the failed composer freed its device memory";
}

TEST_F(WritingVideoCudaEmulatedTest, NoDeviceMemoryComposesOnTheCpuFromTheStart) {
  const std::vector<uint32_t> times = vertical_->Times();
  auto cpu = ComposeYuvFrames(vertical_->Frames(), times, nullptr);
  ASSERT_TRUE(cpu.ok());
  cudahost::FailCall("cudaMalloc", cudaErrorMemoryAllocation);
  EncodeResult info;
  auto gpu = ComposeYuvFrames(vertical_->Frames(), times, kEmulated, &info);
  ASSERT_TRUE(gpu.ok());
  EXPECT_TRUE(*gpu == *cpu);
  EXPECT_EQ(info.composer, "cpu");
  EXPECT_NE(info.compose_fallback.find("cudaMalloc"), std::string::npos) << info.compose_fallback;
  EXPECT_EQ(cudahost::Calls("launch"), 0);
  EXPECT_EQ(cudahost::BytesInUse(), 0u);
}

TEST_F(WritingVideoCudaEmulatedTest, EncoderTakesItsFramesFromTheDevice) {
  const fs::path dir =
      fs::temp_directory_path() / ("danqing-video-cuda-test-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  ClipOptions clip;
  clip.fps = 10;
  clip.seconds = 2;
  clip.device_composer = kEmulated;
  auto r = EncodeWritingMp4(vertical_->Frames(), clip, (dir / "w.mp4").string());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->composer, "cuda");
  EXPECT_EQ(r->compose_fallback, "");
  EXPECT_EQ(r->frames, 20);
  EXPECT_EQ(cudahost::Calls("launch"), 20);
  EXPECT_GT(r->compose_seconds, 0.0);
  EXPECT_LT(r->compose_seconds, r->encode_seconds);
  // A failure mid-clip: the video is still whole, composed on the CPU from there.
  cudahost::FailCall("launch", cudaErrorIllegalAddress, 5);
  r = EncodeWritingMp4(vertical_->Frames(), clip, (dir / "w2.mp4").string());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->composer, "cpu");
  EXPECT_NE(r->compose_fallback.find("cudaErrorIllegalAddress"), std::string::npos);
  EXPECT_EQ(r->frames, 20);
  EXPECT_GT(fs::file_size(dir / "w2.mp4"), 0u);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace danqing::video
