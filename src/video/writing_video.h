// The writing as a video (issue 28): H.264 in MP4 (yuv420p, moov before
// mdat: "faststart", so browsers and phones play it while it downloads),
// through FFmpeg's libraries (libavcodec/libavformat from Debian).
//
// Frames are composed from the final image, the background (the page before
// the writing) and the half-resolution write-time plane (render::Writing),
// never by rendering again: at writing time t a pixel shows the background
// where its time is later than t, else the final image, with a wet-ink sheen
// on what the brush laid down in the last kSheenMs. The composition works in
// YUV 4:2:0 directly: one plane pixel is one 2x2 luma block and one chroma
// sample, so a frame only rewrites the blocks whose state changed since the
// previous one.
//
// Where the frames are composed: on the device when ClipOptions::device_composer
// is given (the CUDA backend is in use: MakeCudaComposer) and it starts, else
// on the CPU; a device error at the start or mid-clip is logged, and the rest
// of the frames are composed on the CPU (EncodeResult::compose_fallback).
//
// Encoder: "auto" takes h264_nvenc when the caller says a GPU is in use
// (prefer_nvenc) and it opens, else libx264; a failed NVENC open (no NVENC
// on the GPU, as on Hopper H100/H200, or no driver) is logged and reported
// in EncodeResult::fallback. "libx264" and "h264_nvenc" force one.
//
// Thread-safety: EncodeWritingMp4 is reentrant (each call owns its codec).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "image/image.h"
#include "video/compose.h"

namespace danqing::video {

inline constexpr int kMinFps = 1, kMaxFps = 60;
inline constexpr double kMinSeconds = 1.0, kMaxSeconds = 30.0;
inline constexpr int kMaxVideoSide = 3840;
inline constexpr int64_t kMaxVideoPixels = 3840LL * 2160LL;

// Whether a GPU has an NVENC video encoder, from what the CUDA runtime
// says about it (cudaDeviceProp name and compute capability). The compute
// dies GA100 (A100, A30: 8.0) and GH100 (H100, H200, GH200: 9.0) have none
// (NVIDIA's NVENC support matrix: "No NVENC encoders available"); the other
// NVIDIA GPUs since Kepler (T4 7.5, A10 8.6, L4 and L40S 8.9, ...) have one.
// `reason` is one line for the log. An empty name (no GPU) has none.
struct NvencSupport {
  bool present = false;
  std::string reason;
};
NvencSupport GpuNvenc(const std::string& gpu_name, int cc_major, int cc_minor);

struct ClipOptions {
  int fps = 30;
  double seconds = 8.0;  // the whole clip; the writing plays in all but the last 0.5 s, then holds
  std::string encoder = "auto";  // auto, libx264, h264_nvenc
  bool prefer_nvenc = false;     // auto: a GPU is in use, try NVENC first
  std::string preset = "veryfast";
  int crf = 23;
  int threads = 1;  // encoder threads
  // Tests: the encoder fails after this many frames (-1: never), as a
  // full disk or a dying GPU encoder would.
  int fail_after_frames = -1;
  // Compose the frames on a device (MakeCudaComposer when the render backend
  // is CUDA); nullptr: on the CPU.
  DeviceComposerFactory device_composer = nullptr;
};

// The inputs of one clip: w x h final image and background, the ww x wh
// write-time plane (render::Writing), the writing's length.
struct WritingFrames {
  const image::Image* final_image = nullptr;
  const image::Image* background = nullptr;
  const uint16_t* ms = nullptr;
  int ww = 0, wh = 0;
  uint32_t end_ms = 0;
};

// INVALID_ARGUMENT naming the option out of bounds (fps, seconds, encoder,
// preset, crf, threads) or the frames that do not fit together, or a canvas
// over kMaxVideoSide / kMaxVideoPixels ("size").
Status CheckClip(const ClipOptions& clip, const WritingFrames& frames);
// The options alone (before there are frames).
Status CheckClipOptions(const ClipOptions& clip);

struct EncodeResult {
  std::string encoder;   // "libx264" or "h264_nvenc"
  std::string fallback;  // non-empty: why NVENC was not used though asked for
  int width = 0, height = 0, frames = 0;
  uint64_t bytes = 0;
  double encode_seconds = 0;
  std::string composer;          // "cuda" or "cpu": what composed the last frame
  std::string compose_fallback;  // non-empty: why the device composer gave way to the CPU
  double compose_seconds = 0;    // composing the frames (the encoder's input), in encode_seconds
};

// Writes the clip to `path` through a temporary file next to it, renamed into
// place only when the whole MP4 is written: a failure mid-stream leaves no
// file (and no partial one) behind. `cancel` (may be null) stops it early
// with DEADLINE_EXCEEDED ("video cancelled"). INTERNAL/UNAVAILABLE for encoder and muxer failures.
// `known` (may be null) gets the encoder and fallback as soon as they are
// chosen, so that a failure can still be counted under its encoder.
Result<EncodeResult> EncodeWritingMp4(const WritingFrames& frames, const ClipOptions& clip,
                                      const std::string& path,
                                      const std::atomic<bool>* cancel = nullptr,
                                      EncodeResult* known = nullptr);

// The writing time shown by frame i of a clip of n frames at fps (ms).
uint32_t FrameTime(int i, const ClipOptions& clip, uint32_t end_ms);

// The frames at `times` (not decreasing) as EncodeWritingMp4 composes them:
// packed YUV 4:2:0 of the even part of the canvas (Y, then U, then V), on
// the device composer `device` when given (falling back to the CPU as the
// encoder does, `result` says which and why; may be null), else on the CPU.
Result<std::vector<std::vector<uint8_t>>> ComposeYuvFrames(const WritingFrames& frames,
                                                           const std::vector<uint32_t>& times,
                                                           DeviceComposerFactory device,
                                                           EncodeResult* result = nullptr);

// One frame at writing time t, as RGB (tests and the frame strip): the same
// rule as the video's frames, before the YUV conversion.
image::Image ComposeFrameRgb(const WritingFrames& frames, uint32_t t);

}  // namespace danqing::video
