#include "video/writing_video.h"

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/error.h>
#include <libavutil/log.h>
#include <libavutil/opt.h>
#include <libswscale/swscale.h>
}

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <numeric>

namespace danqing::video {

NvencSupport GpuNvenc(const std::string& gpu_name, int cc_major, int cc_minor) {
  const std::string cc = std::to_string(cc_major) + "." + std::to_string(cc_minor);
  if (gpu_name.empty()) return {false, "no GPU"};
  // GA100 and GH100 are the compute capability 8.0 and 9.0 dies. Without a
  // capability (0.0) the name decides, word by word ("RTX A3000" is not A30).
  bool compute_die = (cc_major == 8 && cc_minor == 0) || (cc_major == 9 && cc_minor == 0);
  bool named = false;
  if (cc_major == 0) {
    std::string word;
    for (size_t i = 0; i <= gpu_name.size(); ++i) {
      const char ch = i < gpu_name.size() ? gpu_name[i] : ' ';
      if (ch == ' ' || ch == '-') {
        for (const char* die : {"A100", "A30", "A800", "H100", "H200", "H800", "GH200"}) {
          if (word == die) named = true;
        }
        word.clear();
      } else {
        word.push_back(ch);
      }
    }
    compute_die = named;
  }
  if (compute_die) {
    return {false, gpu_name + " (compute capability " + cc +
                       ") has no NVENC (GA100/GH100 compute die): libx264"};
  }
  if (cc_major > 0 && cc_major < 3)
    return {false, gpu_name + " (compute capability " + cc + ") predates NVENC"};
  return {true, gpu_name + " (compute capability " + cc + ") has NVENC: h264_nvenc"};
}
namespace {

using rule::kNever;
using rule::kSheenRgb;
using rule::kSheenStrength;

std::string AvError(int err) {
  char buf[AV_ERROR_MAX_STRING_SIZE] = {};
  av_strerror(err, buf, sizeof buf);
  return buf;
}

// How wet a block written at `written` is at time t: 1 just laid, 0 dry.
float Wetness(uint16_t written, uint32_t t) {
  if (written == kNever || written > t) return 0.0f;
  const uint32_t age = t - written;
  return age >= kSheenMs ? 0.0f : 1.0f - static_cast<float>(age) / static_cast<float>(kSheenMs);
}

uint16_t BlockTime(const WritingFrames& f, int x, int y) {
  const int px = std::min(x / 2, f.ww - 1), py = std::min(y / 2, f.wh - 1);
  return f.ms[static_cast<size_t>(py) * static_cast<size_t>(f.ww) + static_cast<size_t>(px)];
}

struct CodecDeleter {
  void operator()(AVCodecContext* c) const { avcodec_free_context(&c); }
};
struct FrameDeleter {
  void operator()(AVFrame* f) const { av_frame_free(&f); }
};
struct PacketDeleter {
  void operator()(AVPacket* p) const { av_packet_free(&p); }
};
struct FormatDeleter {
  void operator()(AVFormatContext* f) const {
    if (f->pb != nullptr) avio_closep(&f->pb);
    avformat_free_context(f);
  }
};

// The clip's YUV 4:2:0 planes (tightly packed).
struct Yuv {
  int w = 0, h = 0;
  std::vector<uint8_t> y, u, v;
  void Reset(int width, int height) {
    w = width;
    h = height;
    y.assign(static_cast<size_t>(w) * static_cast<size_t>(h), 0);
    u.assign(static_cast<size_t>(w / 2) * static_cast<size_t>(h / 2), 128);
    v.assign(u.size(), 128);
  }
};

// RGB (w x h, the top-left even part of `img`) to BT.601 limited-range YUV 4:2:0.
// swscale's SIMD paths read and write a little past a line's end: both sides
// go through buffers with 64-byte aligned strides and 64 bytes of slack
// (tightly packed, the last line's overrun left the buffer: a SEGV seen
// under TSan's allocator).
Status ToYuv(const image::Image& img, int w, int h, Yuv* out) {
  out->Reset(w, h);
  const auto align = [](int n) { return (n + 63) & ~63; };
  const int in_stride = align(w * 3), y_stride = align(w), c_stride = align(w / 2);
  const size_t slack = 64;
  std::vector<uint8_t> in(static_cast<size_t>(in_stride) * static_cast<size_t>(h) + slack, 0);
  for (int row = 0; row < h; ++row) {
    std::memcpy(in.data() + static_cast<size_t>(row) * static_cast<size_t>(in_stride),
                img.rgb.data() + static_cast<size_t>(row) * static_cast<size_t>(img.width) * 3,
                static_cast<size_t>(w) * 3);
  }
  std::vector<uint8_t> py(static_cast<size_t>(y_stride) * static_cast<size_t>(h) + slack);
  std::vector<uint8_t> pu(static_cast<size_t>(c_stride) * static_cast<size_t>(h / 2) + slack);
  std::vector<uint8_t> pv(pu.size());
  SwsContext* sws = sws_getContext(w, h, AV_PIX_FMT_RGB24, w, h, AV_PIX_FMT_YUV420P, SWS_BILINEAR,
                                   nullptr, nullptr, nullptr);
  if (sws == nullptr) return Internal("sws_getContext failed");
  const uint8_t* src[1] = {in.data()};
  const int src_stride[1] = {in_stride};
  uint8_t* dst[3] = {py.data(), pu.data(), pv.data()};
  const int dst_stride[3] = {y_stride, c_stride, c_stride};
  sws_scale(sws, src, src_stride, 0, h, dst, dst_stride);
  sws_freeContext(sws);
  for (int row = 0; row < h; ++row) {
    std::memcpy(out->y.data() + static_cast<size_t>(row) * static_cast<size_t>(w),
                py.data() + static_cast<size_t>(row) * static_cast<size_t>(y_stride),
                static_cast<size_t>(w));
  }
  for (int row = 0; row < h / 2; ++row) {
    const size_t to = static_cast<size_t>(row) * static_cast<size_t>(w / 2);
    const size_t from = static_cast<size_t>(row) * static_cast<size_t>(c_stride);
    std::memcpy(out->u.data() + to, pu.data() + from, static_cast<size_t>(w / 2));
    std::memcpy(out->v.data() + to, pv.data() + from, static_cast<size_t>(w / 2));
  }
  return Status::Ok();
}

// The sheen colour in the frames' YUV (BT.601 limited range).
void SheenYuv(float out[3]) {
  const float* c = kSheenRgb;
  out[0] = 16.0f + (65.481f * c[0] + 128.553f * c[1] + 24.966f * c[2]) / 255.0f;
  out[1] = 128.0f + (-37.797f * c[0] - 74.203f * c[1] + 112.0f * c[2]) / 255.0f;
  out[2] = 128.0f + (112.0f * c[0] - 93.786f * c[1] - 18.214f * c[2]) / 255.0f;
}

ComposeInputs Inputs(const WritingFrames& f, const Yuv& fin, const Yuv& bg) {
  ComposeInputs in;
  in.w = fin.w;
  in.h = fin.h;
  in.fin[0] = fin.y.data();
  in.fin[1] = fin.u.data();
  in.fin[2] = fin.v.data();
  in.bg[0] = bg.y.data();
  in.bg[1] = bg.u.data();
  in.bg[2] = bg.v.data();
  in.ms = f.ms;
  in.ms_stride = f.ww;
  SheenYuv(in.sheen);
  return in;
}

// The CPU composer: keeps the previous frame and rewrites only the blocks
// whose state changed (compose.h's rule, block by block in writing order).
class CpuComposer final : public FrameComposer {
 public:
  explicit CpuComposer(const ComposeInputs& in) : in_(in), bw_(in.w / 2), bh_(in.h / 2) {
    cur_[0].assign(in.fin[0], in.fin[0] + static_cast<size_t>(in.w) * static_cast<size_t>(in.h));
    for (int k = 1; k < 3; ++k)
      cur_[k].assign(in.fin[k], in.fin[k] + static_cast<size_t>(bw_) * static_cast<size_t>(bh_));
    // Blocks with a time, in writing order; the rest show the final image throughout.
    order_.reserve(static_cast<size_t>(bw_) * static_cast<size_t>(bh_));
    for (int by = 0; by < bh_; ++by) {
      for (int bx = 0; bx < bw_; ++bx) {
        const uint32_t b =
            static_cast<uint32_t>(by) * static_cast<uint32_t>(bw_) + static_cast<uint32_t>(bx);
        if (BlockTime(b) != kNever) order_.push_back(b);
      }
    }
    std::stable_sort(order_.begin(), order_.end(),
                     [&](uint32_t a, uint32_t b) { return BlockTime(a) < BlockTime(b); });
    for (uint32_t b : order_) Put(b, in_.bg);  // every timed block starts as background
  }

  Status Frame(uint32_t t, uint8_t* const* dst, const int* stride) override {
    while (written_ < order_.size() && BlockTime(order_[written_]) <= t) ++written_;
    while (dry_ < written_ && rule::StateAt(BlockTime(order_[dry_]), t) == rule::kFinal)
      Put(order_[dry_++], in_.fin);
    for (size_t k = dry_; k < written_; ++k) Wet(order_[k], t);
    const int widths[3] = {in_.w, bw_, bw_}, heights[3] = {in_.h, bh_, bh_};
    for (int k = 0; k < 3; ++k) {
      for (int y = 0; y < heights[k]; ++y) {
        std::copy_n(cur_[k].data() + static_cast<size_t>(y) * static_cast<size_t>(widths[k]),
                    widths[k], dst[k] + static_cast<ptrdiff_t>(y) * stride[k]);
      }
    }
    return Status::Ok();
  }
  const char* name() const override { return "cpu"; }

 private:
  uint16_t BlockTime(uint32_t b) const {
    return in_.ms[static_cast<size_t>(b / static_cast<uint32_t>(bw_)) *
                      static_cast<size_t>(in_.ms_stride) +
                  b % static_cast<uint32_t>(bw_)];
  }
  void Put(uint32_t b, const uint8_t* const* src) {
    const size_t bx = b % static_cast<uint32_t>(bw_), by = b / static_cast<uint32_t>(bw_);
    for (size_t dy = 0; dy < 2; ++dy) {
      const size_t o = (by * 2 + dy) * static_cast<size_t>(in_.w) + bx * 2;
      cur_[0][o] = src[0][o];
      cur_[0][o + 1] = src[0][o + 1];
    }
    const size_t c = by * static_cast<size_t>(bw_) + bx;
    cur_[1][c] = src[1][c];
    cur_[2][c] = src[2][c];
  }
  void Wet(uint32_t b, uint32_t t) {
    const float k0 = rule::SheenK(BlockTime(b), t);
    const size_t bx = b % static_cast<uint32_t>(bw_), by = b / static_cast<uint32_t>(bw_);
    float ink_sum = 0;
    for (size_t dy = 0; dy < 2; ++dy) {
      for (size_t dx = 0; dx < 2; ++dx) {
        const size_t o = (by * 2 + dy) * static_cast<size_t>(in_.w) + bx * 2 + dx;
        const float ink = rule::InkOf(in_.bg[0][o], in_.fin[0][o]);
        ink_sum += ink;
        cur_[0][o] = rule::WetLuma(in_.fin[0][o], in_.sheen[0], k0, ink);
      }
    }
    const size_t c = by * static_cast<size_t>(bw_) + bx;
    cur_[1][c] = rule::WetChroma(in_.fin[1][c], in_.sheen[1], k0, ink_sum);
    cur_[2][c] = rule::WetChroma(in_.fin[2][c], in_.sheen[2], k0, ink_sum);
  }

  ComposeInputs in_;
  int bw_, bh_;
  std::vector<uint8_t> cur_[3];
  std::vector<uint32_t> order_;
  size_t written_ = 0,
         dry_ = 0;  // order_[0, dry_): final; [dry_, written_): wet; the rest: background
};

// The device composer when one is asked for and starts, else the CPU's.
std::unique_ptr<FrameComposer> StartComposer(const WritingFrames& f, const Yuv& fin, const Yuv& bg,
                                             DeviceComposerFactory device, EncodeResult* result) {
  const ComposeInputs in = Inputs(f, fin, bg);
  if (device != nullptr) {
    auto c = device(in);
    if (c.ok()) {
      result->composer = (*c)->name();
      return std::move(c).value();
    }
    result->compose_fallback = c.status().ToString();
    spdlog::warn("video: frames composed on the CPU: the device composer did not start: {}",
                 result->compose_fallback);
  }
  result->composer = "cpu";
  return std::make_unique<CpuComposer>(in);
}

// One frame; a device composer that fails gives way to the CPU's from this
// frame on (the CPU composer starts from the background and catches up).
Status ComposeOne(const WritingFrames& f, const Yuv& fin, const Yuv& bg, uint32_t t,
                  uint8_t* const* dst, const int* stride, std::unique_ptr<FrameComposer>* composer,
                  EncodeResult* result) {
  Status s = (*composer)->Frame(t, dst, stride);
  if (s.ok() || std::string((*composer)->name()) == "cpu") return s;
  result->compose_fallback = s.ToString();
  spdlog::warn("video: frames composed on the CPU from t={} ms: the device composer failed: {}", t,
               result->compose_fallback);
  composer->reset();
  *composer = std::make_unique<CpuComposer>(Inputs(f, fin, bg));
  result->composer = "cpu";
  return (*composer)->Frame(t, dst, stride);
}

// The encoder for `name`, opened for w x h at fps; nullptr and the reason when it does not open.
std::unique_ptr<AVCodecContext, CodecDeleter> OpenEncoder(const std::string& name,
                                                          const ClipOptions& clip, int w, int h,
                                                          bool global_header, std::string* why) {
  const AVCodec* codec = avcodec_find_encoder_by_name(name.c_str());
  if (codec == nullptr) {
    *why = name + " is not in this libavcodec";
    return nullptr;
  }
  std::unique_ptr<AVCodecContext, CodecDeleter> c(avcodec_alloc_context3(codec));
  if (!c) {
    *why = "avcodec_alloc_context3 failed";
    return nullptr;
  }
  c->width = w;
  c->height = h;
  c->pix_fmt = AV_PIX_FMT_YUV420P;
  c->time_base = AVRational{1, clip.fps};
  c->framerate = AVRational{clip.fps, 1};
  c->gop_size = clip.fps * 2;
  c->max_b_frames = 2;
  c->thread_count = clip.threads;
  c->color_range = AVCOL_RANGE_MPEG;
  c->colorspace = AVCOL_SPC_SMPTE170M;
  c->color_primaries = AVCOL_PRI_SMPTE170M;
  c->color_trc = AVCOL_TRC_SMPTE170M;
  if (global_header) c->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
  if (name == "libx264") {
    av_opt_set(c->priv_data, "preset", clip.preset.c_str(), 0);
    av_opt_set(c->priv_data, "crf", std::to_string(clip.crf).c_str(), 0);
    av_opt_set(c->priv_data, "profile", "high", 0);
  } else {
    av_opt_set(c->priv_data, "preset", "p4", 0);
    av_opt_set(c->priv_data, "rc", "vbr", 0);
    av_opt_set(c->priv_data, "cq", std::to_string(clip.crf).c_str(), 0);
  }
  const int err = avcodec_open2(c.get(), codec, nullptr);
  if (err < 0) {
    *why = name + " does not open: " + AvError(err);
    return nullptr;
  }
  return c;
}

}  // namespace

Status CheckClipOptions(const ClipOptions& clip) {
  if (clip.fps < kMinFps || clip.fps > kMaxFps) {
    return InvalidArgument("fps " + std::to_string(clip.fps) + " is outside " +
                           std::to_string(kMinFps) + ".." + std::to_string(kMaxFps));
  }
  if (!(clip.seconds >= kMinSeconds && clip.seconds <= kMaxSeconds)) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "seconds %g is outside %g..%g", clip.seconds, kMinSeconds,
                  kMaxSeconds);
    return InvalidArgument(buf);
  }
  if (clip.encoder != "auto" && clip.encoder != "libx264" && clip.encoder != "h264_nvenc") {
    return InvalidArgument("encoder '" + clip.encoder + "' is not auto, libx264 or h264_nvenc");
  }
  static const char* const kPresets[] = {"ultrafast", "superfast", "veryfast", "faster",  "fast",
                                         "medium",    "slow",      "slower",   "veryslow"};
  if (std::none_of(std::begin(kPresets), std::end(kPresets),
                   [&](const char* p) { return clip.preset == p; })) {
    return InvalidArgument("preset '" + clip.preset +
                           "' is not an x264 preset (ultrafast .. veryslow)");
  }
  if (clip.crf < 0 || clip.crf > 51)
    return InvalidArgument("crf " + std::to_string(clip.crf) + " is outside 0..51");
  if (clip.threads < 1 || clip.threads > 64) {
    return InvalidArgument("threads " + std::to_string(clip.threads) + " is outside 1..64");
  }
  return Status::Ok();
}

Status CheckClip(const ClipOptions& clip, const WritingFrames& f) {
  if (Status s = CheckClipOptions(clip); !s.ok()) return s;
  if (f.final_image == nullptr || f.background == nullptr || f.ms == nullptr) {
    return InvalidArgument(
        "writing: the final image, background and write-time plane are all needed");
  }
  const int w = f.final_image->width, h = f.final_image->height;
  if (w < 16 || h < 16 || w > kMaxVideoSide || h > kMaxVideoSide ||
      static_cast<int64_t>(w) * h > kMaxVideoPixels) {
    return InvalidArgument("size " + std::to_string(w) + "x" + std::to_string(h) +
                           " is outside 16.." + std::to_string(kMaxVideoSide) +
                           " a side, at most 3840x2160 pixels");
  }
  if (f.background->width != w || f.background->height != h ||
      f.final_image->rgb.size() != static_cast<size_t>(w) * static_cast<size_t>(h) * 3 ||
      f.background->rgb.size() != f.final_image->rgb.size() || f.ww != std::max(1, w / 2) ||
      f.wh != std::max(1, h / 2)) {
    return InvalidArgument(
        "writing: the background and write-time plane do not match the image's size");
  }
  return Status::Ok();
}

uint32_t FrameTime(int i, const ClipOptions& clip, uint32_t end_ms) {
  const int n = std::max(1, static_cast<int>(std::lround(clip.seconds * clip.fps)));
  const int play = std::max(2, n - static_cast<int>(std::lround(0.5 * clip.fps)));
  if (i >= play - 1) return end_ms;
  return static_cast<uint32_t>(static_cast<uint64_t>(i) * end_ms / static_cast<uint64_t>(play - 1));
}

Result<std::vector<std::vector<uint8_t>>> ComposeYuvFrames(const WritingFrames& f,
                                                           const std::vector<uint32_t>& times,
                                                           DeviceComposerFactory device,
                                                           EncodeResult* result) {
  if (Status s = CheckClip(ClipOptions{}, f); !s.ok()) return s;
  for (size_t i = 1; i < times.size(); ++i) {
    if (times[i] < times[i - 1]) return InvalidArgument("times: they must not decrease");
  }
  const int w = f.final_image->width & ~1, h = f.final_image->height & ~1;
  Yuv fin, bg;
  if (Status s = ToYuv(*f.final_image, w, h, &fin); !s.ok()) return s;
  if (Status s = ToYuv(*f.background, w, h, &bg); !s.ok()) return s;
  EncodeResult local;
  EncodeResult* r = result != nullptr ? result : &local;
  std::unique_ptr<FrameComposer> composer = StartComposer(f, fin, bg, device, r);
  const size_t ny = static_cast<size_t>(w) * static_cast<size_t>(h), nc = ny / 4;
  std::vector<std::vector<uint8_t>> out;
  for (uint32_t t : times) {
    std::vector<uint8_t> frame(ny + 2 * nc);
    uint8_t* const dst[3] = {frame.data(), frame.data() + ny, frame.data() + ny + nc};
    const int stride[3] = {w, w / 2, w / 2};
    if (Status s = ComposeOne(f, fin, bg, t, dst, stride, &composer, r); !s.ok()) return s;
    out.push_back(std::move(frame));
  }
  r->width = w;
  r->height = h;
  r->frames = static_cast<int>(times.size());
  return out;
}

image::Image ComposeFrameRgb(const WritingFrames& f, uint32_t t) {
  image::Image out = *f.final_image;
  const int w = out.width, h = out.height;
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      const uint16_t at = BlockTime(f, x, y);
      if (at == kNever || (at <= t && t - at >= kSheenMs)) continue;
      const size_t i =
          (static_cast<size_t>(y) * static_cast<size_t>(w) + static_cast<size_t>(x)) * 3;
      if (at > t) {
        std::copy_n(f.background->rgb.data() + i, 3, out.rgb.data() + i);
        continue;
      }
      const uint8_t* fin = f.final_image->rgb.data() + i;
      const uint8_t* bg = f.background->rgb.data() + i;
      const float lf = 0.299f * fin[0] + 0.587f * fin[1] + 0.114f * fin[2];
      const float lb = 0.299f * bg[0] + 0.587f * bg[1] + 0.114f * bg[2];
      const float k = kSheenStrength * Wetness(at, t) * std::clamp((lb - lf) / 255.0f, 0.0f, 1.0f);
      for (int c = 0; c < 3; ++c) {
        out.rgb[i + static_cast<size_t>(c)] =
            static_cast<uint8_t>(std::lround(fin[c] + (kSheenRgb[c] - fin[c]) * k));
      }
    }
  }
  return out;
}

Result<EncodeResult> EncodeWritingMp4(const WritingFrames& f, const ClipOptions& clip,
                                      const std::string& path, const std::atomic<bool>* cancel,
                                      EncodeResult* known) {
  if (Status s = CheckClip(clip, f); !s.ok()) return s;
  // libav's own log: warnings and errors only (x264 prints its settings at info).
  static std::once_flag quiet;
  std::call_once(quiet, [] { av_log_set_level(AV_LOG_WARNING); });
  const auto start = std::chrono::steady_clock::now();
  const int w = f.final_image->width & ~1,
            h = f.final_image->height & ~1;  // 4:2:0 wants even sides
  Yuv fin, bg;
  if (Status s = ToYuv(*f.final_image, w, h, &fin); !s.ok()) return s;
  if (Status s = ToYuv(*f.background, w, h, &bg); !s.ok()) return s;
  EncodeResult result;
  std::unique_ptr<FrameComposer> composer =
      StartComposer(f, fin, bg, clip.device_composer, &result);

  // The muxer and the encoder.
  const std::string tmp = path + ".part-" + std::to_string(::getpid()) + "-" +
                          std::to_string(reinterpret_cast<uintptr_t>(&fin) & 0xffffff);
  auto fail = [&tmp](Status s) {
    std::error_code ec;
    std::filesystem::remove(tmp, ec);
    return s;
  };
  AVFormatContext* raw_fmt = nullptr;
  if (avformat_alloc_output_context2(&raw_fmt, nullptr, "mp4", tmp.c_str()) < 0 ||
      raw_fmt == nullptr) {
    return Internal("mp4 muxer unavailable");
  }
  std::unique_ptr<AVFormatContext, FormatDeleter> fmt(raw_fmt);
  const bool global_header = (fmt->oformat->flags & AVFMT_GLOBALHEADER) != 0;
  std::unique_ptr<AVCodecContext, CodecDeleter> enc;
  std::string why;
  if (clip.encoder == "h264_nvenc" || (clip.encoder == "auto" && clip.prefer_nvenc)) {
    enc = OpenEncoder("h264_nvenc", clip, w, h, global_header, &why);
    if (!enc) {
      if (clip.encoder == "h264_nvenc") return Unavailable("encoder h264_nvenc: " + why);
      result.fallback = why;
      spdlog::warn("video: h264_nvenc unavailable ({}); encoding with libx264", why);
    } else {
      result.encoder = "h264_nvenc";
    }
  }
  if (!enc) {
    enc = OpenEncoder("libx264", clip, w, h, global_header, &why);
    if (!enc) return Unavailable("encoder libx264: " + why);
    result.encoder = "libx264";
  }
  if (known != nullptr) *known = result;
  AVStream* st = avformat_new_stream(fmt.get(), nullptr);
  if (st == nullptr) return Internal("avformat_new_stream failed");
  st->time_base = enc->time_base;
  if (int err = avcodec_parameters_from_context(st->codecpar, enc.get()); err < 0) {
    return Internal("avcodec_parameters_from_context: " + AvError(err));
  }
  if (int err = avio_open(&fmt->pb, tmp.c_str(), AVIO_FLAG_WRITE); err < 0) {
    return Unavailable("cannot write " + tmp + ": " + AvError(err));
  }
  AVDictionary* mux_opts = nullptr;
  av_dict_set(&mux_opts, "movflags", "+faststart", 0);
  int err = avformat_write_header(fmt.get(), &mux_opts);
  av_dict_free(&mux_opts);
  if (err < 0) return fail(Internal("mp4 header: " + AvError(err)));

  std::unique_ptr<AVFrame, FrameDeleter> frame(av_frame_alloc());
  std::unique_ptr<AVPacket, PacketDeleter> pkt(av_packet_alloc());
  if (!frame || !pkt) return fail(Internal("out of memory for a frame"));
  frame->format = AV_PIX_FMT_YUV420P;
  frame->width = w;
  frame->height = h;
  if ((err = av_frame_get_buffer(frame.get(), 0)) < 0)
    return fail(Internal("av_frame_get_buffer: " + AvError(err)));

  auto drain = [&](bool flushing) -> Status {
    while (true) {
      const int r = avcodec_receive_packet(enc.get(), pkt.get());
      if (r == AVERROR(EAGAIN) || (flushing && r == AVERROR_EOF)) return Status::Ok();
      if (r < 0) return Internal("encoder " + result.encoder + ": " + AvError(r));
      // One frame long: without a duration the muxer ends the track (and its
      // edit list) at the last frame's start, and players drop that frame.
      if (pkt->duration <= 0) pkt->duration = 1;
      av_packet_rescale_ts(pkt.get(), enc->time_base, st->time_base);
      pkt->stream_index = st->index;
      const int wr = av_interleaved_write_frame(fmt.get(), pkt.get());
      if (wr < 0) return Internal("mp4 write: " + AvError(wr));
    }
  };
  const int n = std::max(1, static_cast<int>(std::lround(clip.seconds * clip.fps)));
  for (int i = 0; i < n; ++i) {
    if (cancel != nullptr && cancel->load())
      return fail(Status(StatusCode::kDeadlineExceeded, "video cancelled"));
    if (clip.fail_after_frames >= 0 && i >= clip.fail_after_frames) {
      return fail(Internal("encoder " + result.encoder + ": injected failure after " +
                           std::to_string(i) + " frames"));
    }
    const uint32_t t = FrameTime(i, clip, f.end_ms);
    if ((err = av_frame_make_writable(frame.get())) < 0)
      return fail(Internal("frame: " + AvError(err)));
    const auto c0 = std::chrono::steady_clock::now();
    if (Status s = ComposeOne(f, fin, bg, t, frame->data, frame->linesize, &composer, &result);
        !s.ok())
      return fail(s);
    result.compose_seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - c0).count();
    frame->pts = i;
    if ((err = avcodec_send_frame(enc.get(), frame.get())) < 0) {
      return fail(Internal("encoder " + result.encoder + ": " + AvError(err)));
    }
    if (Status s = drain(false); !s.ok()) return fail(s);
  }
  if ((err = avcodec_send_frame(enc.get(), nullptr)) < 0)
    return fail(Internal("encoder flush: " + AvError(err)));
  if (Status s = drain(true); !s.ok()) return fail(s);
  if ((err = av_write_trailer(fmt.get())) < 0)
    return fail(Internal("mp4 trailer: " + AvError(err)));
  if ((err = avio_closep(&fmt->pb)) < 0) return fail(Internal("mp4 close: " + AvError(err)));
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return fail(Unavailable("cannot move the video into " + path + ": " + ec.message()));
  result.width = w;
  result.height = h;
  result.frames = n;
  result.composer = composer->name();
  result.bytes = std::filesystem::file_size(path, ec);
  result.encode_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace danqing::video
