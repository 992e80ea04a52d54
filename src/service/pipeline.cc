#include "service/pipeline.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <ctime>
#include <set>

#include "common/utf8.h"
#include "image/png16.h"
#include "render/passes.h"
#include "render/renderer.h"

namespace danqing::service {
namespace {

using Clock = std::chrono::steady_clock;

double Ms(Clock::time_point since) {
  return std::chrono::duration<double, std::milli>(Clock::now() - since).count();
}

// This thread's CPU time so far, in milliseconds.
double ThreadCpuMs() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) / 1e6;
}

// Characters that separate lines and are not written.
bool IsBreak(char32_t c) {
  static const std::u32string kBreaks = U" \t\r\n,.;:!?、，。；：！？·「」『』“”‘’（）()";
  return kBreaks.find(c) != std::u32string::npos;
}

}  // namespace

std::string ResolveFormat(const std::string& format) {
  return format == "auto" ? "jpeg" : format;
}

DecodeSize DecodeSizeFor(int photo_width, int photo_height, int analysis_side,
                         const InscribeOptions& o) {
  DecodeSize need;
  // Twice the analysis side: the perceiver's own area reduction then
  // averages 2x2 pixels or more, as it did from the full photo. A DCT-scaled
  // decode straight to about the analysis side (451x300 -> 339x225 -> 320)
  // lost the cat of chelsea.jpg (the Haar cat cascade is that fragile).
  const int side = 2 * analysis_side;
  if (analysis_side <= 0) {
    need = {photo_width, photo_height};  // the perceiver wants the full photo
  } else if (photo_width >= photo_height) {
    need.width = side;
  } else {
    need.height = side;
  }
  if (o.background == "photo") {
    // The wash plane the photo's cover-fit window is resampled to.
    const render::CanvasPlanes planes = render::PlanesFor(o.width, o.height);
    need.width = std::max(need.width, planes.lw);
    need.height = std::max(need.height, planes.lh);
  }
  need.width = std::min(need.width, photo_width);
  need.height = std::min(need.height, photo_height);
  return need;
}

uint64_t PhotoHash(std::span<const uint8_t> bytes) {
  // FNV-1a's step on 8 bytes at a time, then the tail byte by byte, and a
  // final mix (SplitMix64's) so that every input bit reaches every output
  // bit. Byte by byte it was 0.42 ms of a 443 KB photo (one multiply's
  // latency per byte); 8 at a time, 0.06.
  uint64_t h = 0xcbf29ce484222325ULL;
  size_t i = 0;
  for (; i + 8 <= bytes.size(); i += 8) {
    uint64_t word;
    std::memcpy(&word, bytes.data() + i, 8);
    h = (h ^ word) * 0x100000001b3ULL;
  }
  for (; i < bytes.size(); ++i) h = (h ^ bytes[i]) * 0x100000001b3ULL;
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ULL;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebULL;
  return h ^ (h >> 31);
}

Pipeline::Pipeline(perceive::Perceiver* perceiver, verse::VerseSelector* selector,
                   const InscriptionRenderer* renderer, PipelineLimits limits)
    : perceiver_(perceiver), selector_(selector), renderer_(renderer), limits_(limits) {}

Result<image::Header> Pipeline::Check(std::span<const uint8_t> bytes) const {
  if (bytes.empty()) return InvalidArgument("the upload is empty");
  if (bytes.size() > limits_.image.max_bytes) {
    return ResourceExhausted("the upload is " + std::to_string(bytes.size()) +
                             " bytes; the limit is " + std::to_string(limits_.image.max_bytes));
  }
  if (image::Sniff(bytes) == image::Format::kUnknown) {
    return InvalidArgument("the upload is not a PNG or JPEG image");
  }
  auto header = image::ReadHeader(bytes);
  if (!header.ok()) return header.status();
  const uint64_t pixels =
      static_cast<uint64_t>(header->width) * static_cast<uint64_t>(header->height);
  if (header->width > limits_.image.max_side || header->height > limits_.image.max_side ||
      pixels > limits_.image.max_pixels) {
    return ResourceExhausted("the image is " + std::to_string(header->width) + "x" +
                             std::to_string(header->height) + "; the limit is " +
                             std::to_string(limits_.image.max_pixels) + " pixels and " +
                             std::to_string(limits_.image.max_side) + " per side");
  }
  return header;
}

Status Pipeline::Validate(const InscribeOptions& o) const {
  const int max = limits_.max_canvas_side;
  if (o.width < 256 || o.width > max || o.height < 256 || o.height > max) {
    return InvalidArgument("width and height must be between 256 and " + std::to_string(max));
  }
  // The renderer's own cap on the area, checked before any work is queued.
  if (static_cast<int64_t>(o.width) * o.height > render::kMaxPixels) {
    return InvalidArgument("width x height must be at most " + std::to_string(render::kMaxPixels) +
                           " pixels (7680x4320)");
  }
  static const std::set<std::string> kStyles = {"kai", "xing", "cao"};
  static const std::set<std::string> kBackgrounds = {"landscape", "paper", "photo"};
  static const std::set<std::string> kFormats = {"auto", "png", "jpeg"};
  if (!kStyles.count(o.style)) return InvalidArgument("style must be kai, xing or cao");
  if (!kBackgrounds.count(o.background)) {
    return InvalidArgument("background must be landscape, paper or photo");
  }
  if (!kFormats.count(o.format)) return InvalidArgument("format must be auto, png or jpeg");
  for (const auto& [name, field] : {std::pair{"text", &o.text}, std::pair{"title", &o.title},
                                    std::pair{"signature", &o.signature}}) {
    // Bytes first: spaces and punctuation are not written, so only the bytes
    // bound what a request makes the service hold, echo and keep.
    if (field->size() > limits_.max_text_bytes) {
      return InvalidArgument(std::string(name) + " is longer than " +
                             std::to_string(limits_.max_text_bytes) + " bytes");
    }
    auto cps = DecodeUtf8(*field);
    if (!cps.ok()) return InvalidArgument(std::string(name) + " is " + cps.status().message());
    size_t written = 0;
    std::u32string missing;
    for (char32_t c : *cps) {
      if (IsBreak(c)) continue;
      ++written;
      if (!renderer_->CanRender(c) && missing.find(c) == std::u32string::npos) missing.push_back(c);
    }
    if (written > limits_.max_text_chars) {
      return InvalidArgument(std::string(name) + " is longer than " +
                             std::to_string(limits_.max_text_chars) + " characters");
    }
    // Given, but nothing to brush (only spaces and punctuation): a blank
    // inscription would look like a fault.
    if (!cps->empty() && written == 0) {
      return InvalidArgument(std::string(name) +
                             " has no character to write, only spaces and punctuation");
    }
    if (!missing.empty()) {
      return InvalidArgument(std::string(name) +
                             " has characters that cannot be written: " + EncodeUtf8(missing));
    }
  }
  return Status::Ok();
}

Result<InscriptionResult> Pipeline::Run(std::span<const uint8_t> bytes,
                                        const InscribeOptions& o) const {
  auto rendered = RunToCanvas(bytes, o);
  if (!rendered.ok()) return rendered.status();
  return Encode(std::move(rendered).value());
}

Result<Pipeline::Rendered> Pipeline::RunToCanvas(std::span<const uint8_t> bytes,
                                                 const InscribeOptions& o) const {
  auto prepared = Prepare(bytes, o);
  if (!prepared.ok()) return prepared.status();
  return Render(std::move(prepared).value());
}

Result<Pipeline::Prepared> Pipeline::Prepare(std::span<const uint8_t> bytes,
                                             const InscribeOptions& o) const {
  const auto start = Clock::now();
  Prepared out;
  out.start = start;
  out.jpeg = ResolveFormat(o.format) == "jpeg";
  InscriptionResult& r = out.result;

  auto t = Clock::now();
  double cpu = ThreadCpuMs();
  // The CPU time since the last call, for the stage that just ended.
  const auto cpu_lap = [&cpu] {
    const double now = ThreadCpuMs(), lap = now - cpu;
    cpu = now;
    return lap;
  };
  auto header = image::ReadHeader(bytes);
  if (!header.ok()) return header.status();
  const bool turned = header->exif_orientation >= 5;
  r.photo_width = turned ? header->height : header->width;
  r.photo_height = turned ? header->width : header->height;
  const DecodeSize need =
      DecodeSizeFor(r.photo_width, r.photo_height, perceiver_->AnalysisSide(), o);
  auto photo = image::DecodeAtLeast(bytes, need.width, need.height, limits_.image);
  if (!photo.ok()) return photo.status();
  out.photo = std::move(photo).value();
  r.timings.decode_ms = Ms(t);
  r.timings.decode_cpu_ms = cpu_lap();

  t = Clock::now();
  perceive::ImageView view{out.photo.width, out.photo.height, out.photo.rgb.data(),
                           static_cast<size_t>(out.photo.width) * 3};
  auto perception = perceiver_->Perceive(view);
  if (!perception.ok()) return perception.status();
  r.perception = std::move(perception).value();
  r.timings.perceive_ms = Ms(t);
  r.timings.perceive_cpu_ms = cpu_lap();

  t = Clock::now();
  const uint64_t seed = PhotoHash(bytes);
  InscriptionJob& job = out.job;
  if (!o.text.empty()) {
    r.verse_source = "visitor";
    job.text = o.text;
    job.title = o.title;
    job.signature = o.signature;
    r.title = o.title;
    r.author = o.signature;
    r.lines.push_back(o.text);
  } else {
    std::vector<verse::ThemeWeight> themes;
    for (const auto& s : r.perception.themes) {
      if (s.score > 0.05 && themes.size() < 5) themes.push_back({s.theme, s.score});
    }
    const verse::Poem& poem = selector_->Choose(themes, seed);
    r.verse_source = "corpus";
    r.poem_id = poem.id;
    r.title = poem.title;
    r.author = poem.author;
    r.lines = poem.lines;
    job.text = poem.Text();
    job.title = poem.title;
    job.signature = poem.author;
  }
  r.timings.verse_ms = Ms(t);
  r.timings.verse_cpu_ms = cpu_lap();

  job.width = o.width;
  job.height = o.height;
  job.style = o.style;
  job.background = o.background;
  job.vertical = o.vertical;
  job.seed = seed;
  if (o.writing) job.writing = std::make_shared<WritingPlanes>();
  return out;
}

Result<Pipeline::Rendered> Pipeline::Render(Prepared prepared) const {
  Rendered out;
  out.start = prepared.start;
  out.jpeg = prepared.jpeg;
  out.result = std::move(prepared.result);
  InscriptionResult& r = out.result;
  InscriptionJob& job = prepared.job;
  job.photo = &prepared.photo;
  const auto t = Clock::now();
  const double cpu = ThreadCpuMs();
  RenderOutcome outcome;
  auto canvas = renderer_->Render(job, &outcome);
  if (!canvas.ok()) return canvas.status();
  r.backend = outcome.backend;
  r.gpu_fallback = !outcome.gpu_error.empty();
  r.render_began = t;
  r.render_ended = Clock::now();
  r.timings.render_ms =
      std::chrono::duration<double, std::milli>(r.render_ended - r.render_began).count();
  r.timings.render_cpu_ms = ThreadCpuMs() - cpu;
  r.width = canvas->width;
  r.height = canvas->height;
  out.canvas = std::move(canvas).value();
  out.writing = std::move(job.writing);
  return out;
}

Result<InscriptionResult> Pipeline::Encode(Rendered rendered) const {
  InscriptionResult& r = rendered.result;
  const auto t = Clock::now();
  const double cpu = ThreadCpuMs();
  // PNG at deflate level 1: on a 1080p inscription 3-5% larger than libpng's
  // level 3 and 4x faster (docs/benchmarks.md, "Encoding").
  const bool jpeg = rendered.jpeg;
  auto encoded =
      jpeg ? image::EncodeJpeg(rendered.canvas, 90) : image::EncodePng(rendered.canvas, 1);
  if (!encoded.ok()) return encoded.status();
  r.image = std::move(encoded).value();
  r.content_type = jpeg ? "image/jpeg" : "image/png";
  if (rendered.writing != nullptr &&
      !rendered.writing->ms.empty()) {  // issue 28: the writing's plane and background
    const WritingPlanes& wp = *rendered.writing;
    auto png = image::EncodePngGrey16(image::Grey16{wp.plane_width, wp.plane_height, wp.ms});
    if (!png.ok()) return png.status();
    auto bg = image::EncodeJpeg(wp.background, 90);
    if (!bg.ok()) return bg.status();
    r.writing_png = std::move(png).value();
    r.background_jpeg = std::move(bg).value();
    r.writing_end_ms = wp.end_ms;
    r.writing_seal_ms = wp.seal_ms;
  }
  r.timings.encode_ms = Ms(t);
  r.timings.encode_cpu_ms = ThreadCpuMs() - cpu;
  // From the start of the decode: includes any wait between the render
  // worker and the thread that encodes.
  r.timings.total_ms = Ms(rendered.start);
  return std::move(r);
}

}  // namespace danqing::service
