// The writing as an MP4 (issue 28): a real render's final image, background
// and write-time plane encoded, then read back with libavformat/libavcodec:
// H.264, yuv420p, the frame count and size asked for, moov before mdat
// (faststart), the first frame the page before the writing and the last the
// final image. Bounds, an encoder failing mid-stream and a cancel leave no
// file behind.
#include <gtest/gtest.h>

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
}

#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "render/renderer.h"
#include "testing/support/render_fixtures.h"
#include "video/writing_video.h"

namespace danqing::video {
namespace {

namespace fs = std::filesystem;

struct Decoded {
  int frames = 0, packets = 0, width = 0, height = 0;
  AVPixelFormat pix_fmt = AV_PIX_FMT_NONE;
  AVCodecID codec = AV_CODEC_ID_NONE;
  std::vector<uint8_t> first_y, last_y;  // luma of the first and last frames
};

Decoded DecodeMp4(const std::string& path) {
  Decoded d;
  AVFormatContext* fmt = nullptr;
  EXPECT_EQ(avformat_open_input(&fmt, path.c_str(), nullptr, nullptr), 0);
  if (fmt == nullptr) return d;
  EXPECT_GE(avformat_find_stream_info(fmt, nullptr), 0);
  const int si = av_find_best_stream(fmt, AVMEDIA_TYPE_VIDEO, -1, -1, nullptr, 0);
  EXPECT_GE(si, 0);
  const AVCodecParameters* par = fmt->streams[si]->codecpar;
  d.codec = par->codec_id;
  const AVCodec* codec = avcodec_find_decoder(par->codec_id);
  AVCodecContext* dec = avcodec_alloc_context3(codec);
  avcodec_parameters_to_context(dec, par);
  EXPECT_EQ(avcodec_open2(dec, codec, nullptr), 0);
  AVPacket* pkt = av_packet_alloc();
  AVFrame* frame = av_frame_alloc();
  auto take = [&] {
    while (avcodec_receive_frame(dec, frame) == 0) {
      d.width = frame->width;
      d.height = frame->height;
      d.pix_fmt = static_cast<AVPixelFormat>(frame->format);
      std::vector<uint8_t> y(static_cast<size_t>(frame->width) *
                             static_cast<size_t>(frame->height));
      for (int r = 0; r < frame->height; ++r) {
        std::copy_n(frame->data[0] + r * frame->linesize[0], frame->width,
                    y.data() + static_cast<size_t>(r) * frame->width);
      }
      if (d.frames == 0) d.first_y = y;
      d.last_y = std::move(y);
      ++d.frames;
    }
  };
  while (av_read_frame(fmt, pkt) >= 0) {
    if (pkt->stream_index == si) {
      ++d.packets;
      EXPECT_EQ(pkt->flags & AV_PKT_FLAG_DISCARD, 0) << "a frame players would drop";
      EXPECT_EQ(avcodec_send_packet(dec, pkt), 0);
      take();
    }
    av_packet_unref(pkt);
  }
  avcodec_send_packet(dec, nullptr);
  take();
  av_frame_free(&frame);
  av_packet_free(&pkt);
  avcodec_free_context(&dec);
  avformat_close_input(&fmt);
  return d;
}

// Top-level MP4 boxes in file order.
std::vector<std::string> Boxes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> b((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> out;
  size_t at = 0;
  while (at + 8 <= b.size()) {
    uint64_t size = (uint64_t{static_cast<uint8_t>(b[at])} << 24) |
                    (uint64_t{static_cast<uint8_t>(b[at + 1])} << 16) |
                    (uint64_t{static_cast<uint8_t>(b[at + 2])} << 8) |
                    uint64_t{static_cast<uint8_t>(b[at + 3])};
    out.emplace_back(b.data() + at + 4, 4);
    if (size == 1 && at + 16 <= b.size()) {
      size = 0;
      for (int k = 0; k < 8; ++k)
        size = (size << 8) | static_cast<uint8_t>(b[at + 8 + static_cast<size_t>(k)]);
    }
    if (size < 8) break;
    at += size;
  }
  return out;
}

// BT.601 limited-range luma of an RGB image (what sws_scale gives).
std::vector<double> Luma(const image::Image& img, int w, int h) {
  std::vector<double> y(static_cast<size_t>(w) * static_cast<size_t>(h));
  for (int r = 0; r < h; ++r) {
    for (int c = 0; c < w; ++c) {
      const uint8_t* p = img.row(r) + static_cast<size_t>(c) * 3;
      y[static_cast<size_t>(r) * w + c] =
          16 + (65.481 * p[0] + 128.553 * p[1] + 24.966 * p[2]) / 255.0;
    }
  }
  return y;
}

double MeanAbs(const std::vector<uint8_t>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += std::fabs(a[i] - b[i]);
  return s / static_cast<double>(a.size());
}

class WritingVideoTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    render::RendererConfig c;
    c.backend = "cpu";
    auto r = render::Renderer::Create(c);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    render::RenderOptions o = render::testing_fixtures::Opts(5, render::Background::kLandscape, 321,
                                                             203, render::Style::kXing);
    auto img = (*r)->Render(render::testing_fixtures::Poem(0), o, nullptr, &writing_);
    ASSERT_TRUE(img.ok());
    final_ = *img;
  }
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("danqing-video-test-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  WritingFrames Frames() const {
    return WritingFrames{&final_,
                         &writing_.background,
                         writing_.ms.data(),
                         writing_.plane_width,
                         writing_.plane_height,
                         writing_.end_ms};
  }
  bool DirEmpty() const { return fs::is_empty(dir_); }

  static render::Writing writing_;
  static image::Image final_;
  fs::path dir_;
};
render::Writing WritingVideoTest::writing_;
image::Image WritingVideoTest::final_;

TEST_F(WritingVideoTest, ValidFaststartMp4FromBackgroundToFinalImage) {
  ClipOptions clip;
  clip.fps = 10;
  clip.seconds = 2;
  const std::string path = (dir_ / "w.mp4").string();
  auto r = EncodeWritingMp4(Frames(), clip, path);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->encoder, "libx264");
  EXPECT_EQ(r->frames, 20);
  EXPECT_EQ(r->width, 320) << "even sides for 4:2:0";
  EXPECT_EQ(r->height, 202);
  EXPECT_EQ(r->bytes, fs::file_size(path));
  const Decoded d = DecodeMp4(path);
  EXPECT_EQ(d.codec, AV_CODEC_ID_H264);
  EXPECT_EQ(d.pix_fmt, AV_PIX_FMT_YUV420P);
  EXPECT_EQ(d.frames, 20);
  EXPECT_EQ(d.packets, 20);
  EXPECT_EQ(d.width, 320);
  EXPECT_EQ(d.height, 202);
  const std::vector<std::string> boxes = Boxes(path);
  const auto moov = std::find(boxes.begin(), boxes.end(), "moov");
  const auto mdat = std::find(boxes.begin(), boxes.end(), "mdat");
  ASSERT_NE(moov, boxes.end());
  ASSERT_NE(mdat, boxes.end());
  EXPECT_LT(moov - boxes.begin(), mdat - boxes.begin()) << "faststart: moov before mdat";
  // First frame: the page before the writing; last: the final image.
  const std::vector<double> fin = Luma(final_, 320, 202), bg = Luma(writing_.background, 320, 202);
  EXPECT_LT(MeanAbs(d.last_y, fin), 3.0);
  EXPECT_GT(MeanAbs(d.last_y, bg), MeanAbs(d.last_y, fin) + 1.0);
  EXPECT_LT(MeanAbs(d.first_y, bg), 3.0);
  EXPECT_GT(MeanAbs(d.first_y, fin), MeanAbs(d.first_y, bg) + 1.0);
}

TEST_F(WritingVideoTest, FramesRevealMoreInkOverTime) {
  ClipOptions clip;
  size_t prev = 0;
  for (int i = 0; i <= 240; i += 40) {
    const image::Image f = ComposeFrameRgb(Frames(), FrameTime(i, clip, writing_.end_ms));
    size_t same = 0;
    for (size_t k = 0; k < f.rgb.size(); ++k) same += f.rgb[k] == final_.rgb[k];
    EXPECT_GE(same, prev) << "frame " << i;
    prev = same;
  }
  EXPECT_EQ(FrameTime(239, clip, writing_.end_ms), writing_.end_ms);
  EXPECT_TRUE(ComposeFrameRgb(Frames(), writing_.end_ms).rgb == final_.rgb);
}

// NVENC by the GPU (cudaDeviceProp name and compute capability): the
// compute dies A100 (8.0) and H100/H200 (9.0) have none, L4 and T4 do.
TEST(NvencSupportTest, ByGpuArchitecture) {
  EXPECT_FALSE(GpuNvenc("NVIDIA H100 80GB HBM3", 9, 0).present);
  EXPECT_FALSE(GpuNvenc("NVIDIA H200", 9, 0).present);
  EXPECT_FALSE(GpuNvenc("NVIDIA A100-SXM4-80GB", 8, 0).present);
  EXPECT_TRUE(GpuNvenc("NVIDIA L4", 8, 9).present);
  EXPECT_TRUE(GpuNvenc("Tesla T4", 7, 5).present);
  EXPECT_TRUE(GpuNvenc("NVIDIA A10", 8, 6).present);
  // No capability reported: the name decides, word by word.
  EXPECT_FALSE(GpuNvenc("NVIDIA H100 PCIe", 0, 0).present);
  EXPECT_FALSE(GpuNvenc("NVIDIA A100-PCIE-40GB", 0, 0).present);
  EXPECT_TRUE(GpuNvenc("NVIDIA RTX A3000 Laptop GPU", 0, 0).present);
  EXPECT_FALSE(GpuNvenc("", 0, 0).present);
  const auto h200 = GpuNvenc("NVIDIA H200", 9, 0);
  EXPECT_NE(h200.reason.find("no NVENC"), std::string::npos) << h200.reason;
  EXPECT_NE(h200.reason.find("9.0"), std::string::npos) << h200.reason;
}

TEST_F(WritingVideoTest, BoundsNameTheOption) {
  const std::string path = (dir_ / "b.mp4").string();
  auto expect = [&](ClipOptions c, const std::string& word) {
    auto r = EncodeWritingMp4(Frames(), c, path);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(word), std::string::npos) << r.status().message();
  };
  ClipOptions c;
  c.fps = 0;
  expect(c, "fps");
  c.fps = 61;
  expect(c, "fps");
  c = {};
  c.seconds = 0.5;
  expect(c, "seconds");
  c.seconds = 31;
  expect(c, "seconds");
  c = {};
  c.encoder = "vp9";
  expect(c, "encoder");
  c = {};
  c.preset = "quick";
  expect(c, "preset");
  c = {};
  c.crf = 60;
  expect(c, "crf");
  WritingFrames f = Frames();
  f.ww = 7;
  auto r = EncodeWritingMp4(f, ClipOptions{}, path);
  EXPECT_NE(r.status().message().find("do not match"), std::string::npos);
  EXPECT_TRUE(DirEmpty());
}

TEST_F(WritingVideoTest, FailureMidStreamOrCancelLeavesNoFile) {
  const std::string path = (dir_ / "f.mp4").string();
  ClipOptions c;
  c.fps = 10;
  c.seconds = 2;
  c.fail_after_frames = 7;
  auto r = EncodeWritingMp4(Frames(), c, path);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInternal);
  EXPECT_NE(r.status().message().find("after 7 frames"), std::string::npos);
  EXPECT_TRUE(DirEmpty()) << "no partial file";
  std::atomic<bool> cancel{true};
  c.fail_after_frames = -1;
  r = EncodeWritingMp4(Frames(), c, path, &cancel);
  EXPECT_EQ(r.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(DirEmpty());
  // NVENC asked for where there is none: a clear error; auto falls back and says why.
  c.encoder = "h264_nvenc";
  r = EncodeWritingMp4(Frames(), c, path);
  if (!r.ok()) {
    EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
    EXPECT_NE(r.status().message().find("h264_nvenc"), std::string::npos);
    c.encoder = "auto";
    c.prefer_nvenc = true;
    r = EncodeWritingMp4(Frames(), c, path);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->encoder, "libx264");
    EXPECT_NE(r->fallback.find("h264_nvenc"), std::string::npos);
  }
}

}  // namespace
}  // namespace danqing::video
