// One inscription, start to end: check the upload, decode, perceive, choose a
// verse (or take the visitor's text), render, encode. The HTTP server runs
// Check() and Validate() on its own thread (cheap, before queueing) and Run()
// on a render worker.
//
// Thread-safety: every method may be called from many threads at once.
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "image/image.h"
#include "perceive/perceiver.h"
#include "service/inscription_renderer.h"
#include "verse/selector.h"

namespace danqing::service {

struct InscribeOptions {
  int width = 1024;
  int height = 768;
  std::string style = "xing";            // kai, xing, cao
  std::string background = "landscape";  // landscape, paper, photo
  // png, jpeg, or auto: JPEG for every background (see FormatFor).
  std::string format = "auto";
  bool vertical = true;
  std::string text;       // the visitor's own verse; empty: choose one
  std::string title;      // with text: optional title
  std::string signature;  // with text: optional signature
  bool writing = false;   // also record the writing (issue 28): InscriptionResult::writing_*
};

struct Timings {
  double queue_ms = 0, decode_ms = 0, perceive_ms = 0, verse_ms = 0, render_ms = 0, encode_ms = 0,
         total_ms = 0;
  // CPU time of the calling thread in each stage (CLOCK_THREAD_CPUTIME_ID):
  // what the stage cost a core, whatever else shared it (the benchmarks'
  // figure on a busy machine). Work the stage hands to other threads (a
  // render with threads_per_render > 1, a GPU) is not in it.
  double decode_cpu_ms = 0, perceive_cpu_ms = 0, verse_cpu_ms = 0, render_cpu_ms = 0,
         encode_cpu_ms = 0;
};

struct InscriptionResult {
  std::string image;         // encoded PNG or JPEG
  std::string content_type;  // image/png, image/jpeg
  int width = 0, height = 0;
  int photo_width = 0, photo_height = 0;  // upright
  std::string verse_source;               // "corpus" or "visitor"
  int poem_id = 0;                        // with "corpus"
  std::string title, author;
  std::vector<std::string> lines;
  perceive::Perception perception;
  Timings timings;
  // When the render stage began and ended (the busy-share metrics).
  std::chrono::steady_clock::time_point render_began, render_ended;
  std::string backend;        // which backend drew it: "cpu", "cuda"
  bool gpu_fallback = false;  // the GPU could not take or finish it; the CPU did
  // The writing (issue 28), with InscribeOptions::writing: the write-time
  // plane as a 16-bit grey PNG (ms, half resolution, 0xFFFF never) and the
  // page before the writing (JPEG, quality 90); empty without.
  std::string writing_png, background_jpeg;
  uint32_t writing_end_ms = 0, writing_seal_ms = 0;
};

struct PipelineLimits {
  image::Limits image;  // upload bytes, pixels, side
  int max_canvas_side = 2048;
  size_t max_text_chars = 64;  // written characters of text, title or signature
  // Bytes of text, title or signature, whatever they hold (spaces and
  // punctuation are not written, so they do not count as characters).
  size_t max_text_bytes = 1024;
};

class Pipeline {
 public:
  // All pointers must outlive the pipeline.
  Pipeline(perceive::Perceiver* perceiver, verse::VerseSelector* selector,
           const InscriptionRenderer* renderer, PipelineLimits limits);

  // The upload's format and size from its header, by content (magic bytes),
  // never by the client's content type. INVALID_ARGUMENT: empty, not an image,
  // malformed header; RESOURCE_EXHAUSTED: over a byte, pixel or side limit.
  Result<image::Header> Check(std::span<const uint8_t> bytes) const;
  // INVALID_ARGUMENT naming the option that is wrong (size, style, background,
  // format, or characters the renderer cannot write).
  Status Validate(const InscribeOptions& options) const;
  // Everything after the checks. Errors as Check() for images whose header
  // passed but whose data is corrupt or truncated.
  Result<InscriptionResult> Run(std::span<const uint8_t> bytes,
                                const InscribeOptions& options) const;

  // Run() in two parts, so the encode can leave the render worker: every
  // stage up to the render, then the encode (on any thread). Run() is
  // RunToCanvas then Encode.
  struct Rendered {
    InscriptionResult result;  // all but the image, content type and encode times
    image::Image canvas;
    bool jpeg = true;
    std::chrono::steady_clock::time_point start;  // of the decode
    std::shared_ptr<WritingPlanes> writing;       // when asked for (issue 28)
  };
  Result<Rendered> RunToCanvas(std::span<const uint8_t> bytes,
                               const InscribeOptions& options) const;
  // RunToCanvas in two parts, so the host work of the next request can run
  // while the current one renders (RenderQueue::SubmitPrepared): the decode,
  // the perception and the verse; then the render (on the render worker).
  struct Prepared {
    InscriptionResult result;  // all but the render's and encode's parts
    image::Image photo;        // decoded to DecodeSizeFor
    InscriptionJob job;        // all but `photo` (set by Render)
    bool jpeg = true;
    std::chrono::steady_clock::time_point start;  // of the decode
  };
  Result<Prepared> Prepare(std::span<const uint8_t> bytes, const InscribeOptions& options) const;
  Result<Rendered> Render(Prepared prepared) const;
  Result<InscriptionResult> Encode(Rendered rendered) const;

  const PipelineLimits& limits() const { return limits_; }
  const InscriptionRenderer& renderer() const { return *renderer_; }
  const verse::VerseSelector& selector() const { return *selector_; }

 private:
  perceive::Perceiver* const perceiver_;
  verse::VerseSelector* const selector_;
  const InscriptionRenderer* const renderer_;
  const PipelineLimits limits_;
};

// The format an answer is encoded in: "png" and "jpeg" as asked; "auto" is
// JPEG (quality 90) whatever the background. Every inscription is continuous
// tone (rice-paper grain, ink diffusion, the wash): at 1920x1080 the PNG is
// 5-7x the JPEG on landscape, paper and photo alike, and 8x slower to encode
// (docs/benchmarks.md, "The request's host share").
std::string ResolveFormat(const std::string& format);

// The least of the photo (upright) a request decodes: what the perceiver
// looks at (twice its analysis side on the longer side, so that its own area
// reduction averages; the whole photo when it reports none) and, for a photo background, the
// render's wash plane (the photo's cover-fit window is resampled to it), never more than the photo.
// Pipeline::Run decodes with image::DecodeAtLeast to this.
struct DecodeSize {
  int width = 0, height = 0;
};
DecodeSize DecodeSizeFor(int photo_width, int photo_height, int analysis_side,
                         const InscribeOptions& options);

// A 64-bit hash of the bytes (FNV-1a on 8-byte words, mixed): the photo's seed for verse choice and
// brushwork.
uint64_t PhotoHash(std::span<const uint8_t> bytes);

}  // namespace danqing::service
