#include "image/image.h"

// clang-format off
#include <csetjmp>
#include <cstdio>   // jpeglib.h needs FILE
#include <jpeglib.h>
#include <libdeflate.h>
#include <jerror.h>
#include <png.h>
// clang-format on

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <system_error>

#include "common/atomic_file.h"

// libpng and libjpeg report errors by longjmp. The rule kept here: every
// setjmp lives in a small "phase" function whose frame holds only trivially
// destructible locals and that only returns false after the jump; the codec
// state and every buffer live in an RAII context owned by the caller, so a
// jump skips no destructor and leaks nothing. Callbacks never longjmp from
// inside a catch block.

namespace danqing::image {
namespace {

constexpr uint8_t kPngSignature[8] = {0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A};
// A progressive JPEG's scans each pass over all of its coefficients: a
// 1000-scan file pinned a worker ~6 s. Scans are bounded by work, scans x
// pixels (kJpegScanWork, ~0.1 s of decode on this project's VM), between
// kMinJpegScans (every encoder's scripts fit: libjpeg's progression has 10
// for colour, 6 for grey) and kMaxJpegScans.
constexpr int kMinJpegScans = 16;
constexpr int kMaxJpegScans = 100;
constexpr uint64_t kJpegScanWork = 400'000'000;
constexpr size_t kMessageSize = 256;

uint32_t Be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

void CopyMessage(char (&dst)[kMessageSize], const char* src) {
  std::snprintf(dst, sizeof dst, "%s", src != nullptr ? src : "unknown error");
}

std::string Dims(uint64_t w, uint64_t h) {
  return std::to_string(w) + "x" + std::to_string(h);
}

Status CheckLimits(const Header& h, const Limits& limits) {
  std::string what(FormatName(h.format));
  if (h.width > limits.max_side || h.height > limits.max_side) {
    return ResourceExhausted(what + " image is " + Dims(h.width, h.height) +
                             ", over the limit of " + std::to_string(limits.max_side) +
                             " pixels per side");
  }
  uint64_t pixels = uint64_t(h.width) * uint64_t(h.height);
  if (pixels > limits.max_pixels) {
    return ResourceExhausted(what + " image is " + Dims(h.width, h.height) + " = " +
                             std::to_string(pixels) + " pixels, over the limit of " +
                             std::to_string(limits.max_pixels));
  }
  return Status::Ok();
}

// ---------------------------------------------------------------- PNG read

Result<Header> ReadPngHeader(std::span<const uint8_t> bytes) {
  // signature(8) | length(4) "IHDR"(4) width(4) height(4) depth colour ...
  if (bytes.size() < 8 + 8 + 13) return InvalidArgument("truncated PNG: no complete IHDR chunk");
  const uint8_t* p = bytes.data() + 8;
  if (Be32(p) != 13 || std::memcmp(p + 4, "IHDR", 4) != 0) {
    return InvalidArgument("malformed PNG: the first chunk is not a 13-byte IHDR");
  }
  uint32_t w = Be32(p + 8), h = Be32(p + 12);
  if (w == 0 || h == 0 || w > 0x7fffffffu || h > 0x7fffffffu) {
    return InvalidArgument("malformed PNG: invalid dimensions " + Dims(w, h));
  }
  return Header{Format::kPng, int(w), int(h), 1};
}

struct PngReadContext {
  png_structp png = nullptr;
  png_infop info = nullptr;
  std::span<const uint8_t> src;
  size_t pos = 0;
  char message[kMessageSize] = {};

  PngReadContext() = default;
  PngReadContext(const PngReadContext&) = delete;
  PngReadContext& operator=(const PngReadContext&) = delete;
  ~PngReadContext() {
    if (png != nullptr) png_destroy_read_struct(&png, info != nullptr ? &info : nullptr, nullptr);
  }
};

void PngOnError(png_structp png, png_const_charp msg) {
  auto* ctx = static_cast<PngReadContext*>(png_get_error_ptr(png));
  CopyMessage(ctx->message, msg);
  png_longjmp(png, 1);
}
void PngOnWarning(png_structp, png_const_charp) {}  // benign: ancillary chunk CRC, etc.

void PngReadBytes(png_structp png, png_bytep data, size_t length) {
  auto* ctx = static_cast<PngReadContext*>(png_get_io_ptr(png));
  if (length > ctx->src.size() - ctx->pos) png_error(png, "truncated PNG data");
  std::memcpy(data, ctx->src.data() + ctx->pos, length);
  ctx->pos += length;
}

struct PngLayout {
  uint32_t width = 0, height = 0;
  int channels = 0;  // after transforms: 3 (RGB) or 4 (RGBA)
};

// Phase 1: IHDR and friends, transforms to 8-bit RGB(A).
bool PngReadInfo(PngReadContext* ctx, const Limits* limits, PngLayout* out) {
  if (setjmp(png_jmpbuf(ctx->png))) return false;
  png_structp png = ctx->png;
  png_set_user_limits(png, uint32_t(limits->max_side), uint32_t(limits->max_side));
  // Skip every ancillary chunk but tRNS (num_chunks -1: all chunks except
  // IHDR, PLTE, tRNS, IDAT and IEND): nothing else is used, and libpng sizes
  // a text or ICC chunk's buffer by its declared length, so a 100-byte upload
  // declaring a 2 GB tEXt chunk made it allocate 2 GB (its over-length check
  // only warns). Skipped chunks are read past in small pieces.
  png_set_keep_unknown_chunks(png, PNG_HANDLE_CHUNK_NEVER, nullptr, -1);
  png_set_read_fn(png, ctx, PngReadBytes);
  png_read_info(png, ctx->info);
  int depth = png_get_bit_depth(png, ctx->info);
  int colour = png_get_color_type(png, ctx->info);
  if (depth == 16) png_set_scale_16(png);
  if (colour == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (colour == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  if (png_get_valid(png, ctx->info, PNG_INFO_tRNS)) png_set_tRNS_to_alpha(png);
  if (colour == PNG_COLOR_TYPE_GRAY || colour == PNG_COLOR_TYPE_GRAY_ALPHA) {
    png_set_gray_to_rgb(png);
  }
  png_set_interlace_handling(png);
  png_read_update_info(png, ctx->info);
  out->width = png_get_image_width(png, ctx->info);
  out->height = png_get_image_height(png, ctx->info);
  out->channels = png_get_channels(png, ctx->info);
  // 3 or 4 channels: DecodePng writes every byte of the image from exactly
  // these layouts (its buffers are not zeroed).
  if (png_get_bit_depth(png, ctx->info) != 8 || (out->channels != 3 && out->channels != 4) ||
      png_get_rowbytes(png, ctx->info) != size_t(out->width) * size_t(out->channels)) {
    png_error(png, "unexpected row layout after conversion to 8-bit RGB");
  }
  return true;
}

// Phase 2: every row (all interlace passes), then the chunks after IDAT.
bool PngReadRows(PngReadContext* ctx, png_bytepp rows) {
  if (setjmp(png_jmpbuf(ctx->png))) return false;
  png_read_image(ctx->png, rows);
  png_read_end(ctx->png, nullptr);
  return true;
}

Result<Image> DecodePng(std::span<const uint8_t> bytes, const Limits& limits) {
  PngReadContext ctx;
  ctx.src = bytes;
  ctx.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &ctx, PngOnError, PngOnWarning);
  if (ctx.png == nullptr) return Internal("png_create_read_struct failed");
  ctx.info = png_create_info_struct(ctx.png);
  if (ctx.info == nullptr) return Internal("png_create_info_struct failed");

  PngLayout layout;
  if (!PngReadInfo(&ctx, &limits, &layout)) {
    return InvalidArgument(std::string("corrupt PNG: ") + ctx.message);
  }
  Header h{Format::kPng, int(layout.width), int(layout.height), 1};
  if (Status s = CheckLimits(h, limits); !s.ok()) return s;

  Image img;
  img.width = h.width;
  img.height = h.height;
  const size_t w = layout.width, hh = layout.height;
  img.rgb.resize(w * hh * 3);
  PixelBuffer rgba;  // every byte written by the PNG reader
  std::vector<png_bytep> rows(hh);
  if (layout.channels == 3) {
    for (size_t y = 0; y < hh; ++y) rows[y] = img.rgb.data() + y * w * 3;
  } else {
    rgba.resize(w * hh * 4);
    for (size_t y = 0; y < hh; ++y) rows[y] = rgba.data() + y * w * 4;
  }
  if (!PngReadRows(&ctx, rows.data())) {
    return InvalidArgument(std::string("corrupt or truncated PNG: ") + ctx.message);
  }
  if (layout.channels == 4) {  // composite on white
    const uint8_t* s = rgba.data();
    uint8_t* d = img.rgb.data();
    for (size_t i = 0, n = w * hh; i < n; ++i, s += 4, d += 3) {
      unsigned a = s[3];
      for (int c = 0; c < 3; ++c) d[c] = uint8_t((s[c] * a + 255u * (255u - a) + 127u) / 255u);
    }
  }
  return img;
}

// ---------------------------------------------------------------- JPEG read

struct JpegErrorManager {
  jpeg_error_mgr mgr;  // first: libjpeg's cinfo->err points here
  std::jmp_buf jump;
  char message[kMessageSize];
  int max_scans;        // JpegOnProgress refuses the scan after this one
  bool too_many_scans;  // why it jumped
};

}  // namespace

int MaxJpegScans(int width, int height) {
  const uint64_t pixels = uint64_t(std::max(width, 1)) * uint64_t(std::max(height, 1));
  return int(std::clamp<uint64_t>(kJpegScanWork / pixels, kMinJpegScans, kMaxJpegScans));
}

namespace {

void JpegOnError(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<JpegErrorManager*>(cinfo->err);
  char buf[JMSG_LENGTH_MAX];
  (*cinfo->err->format_message)(cinfo, buf);
  CopyMessage(err->message, buf);
  std::longjmp(err->jump, 1);
}

// Warnings that mean the pixels are not what the file meant (truncation,
// corrupt entropy data) are fatal: no partially decoded photo is returned.
void JpegOnMessage(j_common_ptr cinfo, int level) {
  if (level != -1) return;
  switch (cinfo->err->msg_code) {
    case JWRN_ARITH_BAD_CODE:
    case JWRN_HIT_MARKER:
    case JWRN_HUFF_BAD_CODE:
    case JWRN_JPEG_EOF:
    case JWRN_MUST_RESYNC:
    case JWRN_BOGUS_PROGRESSION:
    case JWRN_NOT_SEQUENTIAL: JpegOnError(cinfo); break;
    default: break;  // extraneous bytes, unknown JFIF revision, bad ICC: pixels are fine
  }
}

void JpegOnProgress(j_common_ptr cinfo) {
  if (!cinfo->is_decompressor) return;
  auto* d = reinterpret_cast<j_decompress_ptr>(cinfo);
  auto* err = reinterpret_cast<JpegErrorManager*>(cinfo->err);
  if (err->max_scans > 0 && d->input_scan_number > err->max_scans) {
    err->too_many_scans = true;
    CopyMessage(err->message, "too many progressive scans");
    std::longjmp(err->jump, 1);
  }
}

struct JpegReadContext {
  jpeg_decompress_struct cinfo;
  JpegErrorManager err;
  jpeg_progress_mgr progress;
  bool created = false;

  JpegReadContext() {
    std::memset(&cinfo, 0, sizeof cinfo);
    std::memset(&err, 0, sizeof err);
    std::memset(&progress, 0, sizeof progress);
  }
  JpegReadContext(const JpegReadContext&) = delete;
  JpegReadContext& operator=(const JpegReadContext&) = delete;
  ~JpegReadContext() {
    if (created) jpeg_destroy_decompress(&cinfo);
  }
};

struct JpegInfo {
  int width = 0, height = 0;
  bool cmyk = false;
  bool adobe = false;
  int orientation = 1;
};

bool JpegReadInfo(JpegReadContext* ctx, std::span<const uint8_t> bytes, JpegInfo* out) {
  ctx->cinfo.err = jpeg_std_error(&ctx->err.mgr);
  ctx->err.mgr.error_exit = JpegOnError;
  ctx->err.mgr.emit_message = JpegOnMessage;
  if (setjmp(ctx->err.jump)) return false;
  jpeg_create_decompress(&ctx->cinfo);
  ctx->created = true;
  ctx->progress.progress_monitor = JpegOnProgress;
  ctx->cinfo.progress = &ctx->progress;
  jpeg_mem_src(&ctx->cinfo, bytes.data(), static_cast<unsigned long>(bytes.size()));
  jpeg_save_markers(&ctx->cinfo, JPEG_APP0 + 1, 0xFFFF);
  jpeg_read_header(&ctx->cinfo, TRUE);
  out->width = int(ctx->cinfo.image_width);
  out->height = int(ctx->cinfo.image_height);
  ctx->err.max_scans = MaxJpegScans(out->width, out->height);
  out->cmyk = ctx->cinfo.jpeg_color_space == JCS_CMYK || ctx->cinfo.jpeg_color_space == JCS_YCCK;
  out->adobe = ctx->cinfo.saw_Adobe_marker != 0;
  for (jpeg_saved_marker_ptr m = ctx->cinfo.marker_list; m != nullptr; m = m->next) {
    if (m->marker != JPEG_APP0 + 1) continue;
    int o = ParseExifOrientation({m->data, m->data_length});
    if (o != 1 || out->orientation == 1) out->orientation = o;
    if (o != 1) break;
  }
  return true;
}

// Ink (CMYK) to RGB for one row of `n` pixels. Adobe (Photoshop) CMYK JPEGs
// store inverted values; others store plain ink.
void CmykRowToRgb(const uint8_t* s, uint8_t* d, size_t n, bool adobe) {
  for (size_t i = 0; i < n; ++i, s += 4, d += 3) {
    unsigned k = adobe ? s[3] : 255u - s[3];
    for (int c = 0; c < 3; ++c) {
      unsigned v = adobe ? s[c] : 255u - s[c];
      d[c] = uint8_t((v * k + 127u) / 255u);
    }
  }
}

// Decodes every scanline into `dst` as RGB8. A CMYK JPEG is read a row at a
// time through a one-row buffer and converted there, so the decode never
// holds a whole 4-byte-a-pixel plane beside the RGB one (a 40 Mpx CMYK photo
// needed 160 MB more). jpeg_finish_decompress frees the image's working
// memory, progressive coefficients included, before the caller goes on.
// `out_w` x `out_h` is the (DCT-scaled) size jpeg_calc_output_dimensions gave.
bool JpegReadPixels(JpegReadContext* ctx, uint8_t* dst, const JpegInfo& info, int out_w,
                    int out_h) {
  const int components = info.cmyk ? 4 : 3;
  // Sized before setjmp: nothing it owns may change between the jump's set
  // and a longjmp back to it.
  PixelBuffer ink(info.cmyk ? size_t(out_w) * 4 : 0);  // one CMYK row
  if (setjmp(ctx->err.jump)) return false;
  j_decompress_ptr c = &ctx->cinfo;
  jpeg_start_decompress(c);
  if (int(c->output_width) != out_w || int(c->output_height) != out_h ||
      c->output_components != components) {
    ERREXIT(c, JERR_CONVERSION_NOTIMPL);
  }
  const size_t width = size_t(c->output_width);
  while (c->output_scanline < c->output_height) {
    uint8_t* out = dst + size_t(c->output_scanline) * width * 3;
    JSAMPROW row = info.cmyk ? ink.data() : out;
    if (jpeg_read_scanlines(c, &row, 1) != 1) ERREXIT(c, JERR_INPUT_EMPTY);
    if (info.cmyk) CmykRowToRgb(ink.data(), out, width, info.adobe);
  }
  jpeg_finish_decompress(c);
  return true;
}

Result<Header> ReadJpegHeader(std::span<const uint8_t> bytes) {
  JpegReadContext ctx;
  JpegInfo info;
  if (!JpegReadInfo(&ctx, bytes, &info)) {
    return InvalidArgument(std::string("corrupt JPEG header: ") + ctx.err.message);
  }
  return Header{Format::kJpeg, info.width, info.height, info.orientation};
}

// The smallest M/8 scale whose output covers min_w x min_h (as stored), 8 if
// none below does.
int JpegScaleNum(int width, int height, int min_w, int min_h) {
  if (min_w <= 0 && min_h <= 0) return 8;  // nothing asked: the full size
  for (int m = 1; m < 8; ++m) {
    // libjpeg rounds the scaled size up (jdiv_round_up).
    const int64_t sw = (int64_t{width} * m + 7) / 8, sh = (int64_t{height} * m + 7) / 8;
    if (sw >= min_w && sh >= min_h) return m;
  }
  return 8;
}

// The output size at scale_num/8 (a phase: libjpeg may refuse the state).
bool JpegScale(JpegReadContext* ctx, int scale_num) {
  if (setjmp(ctx->err.jump)) return false;
  ctx->cinfo.scale_num = unsigned(scale_num);
  ctx->cinfo.scale_denom = 8;
  jpeg_calc_output_dimensions(&ctx->cinfo);
  return true;
}

// min_w x min_h: the smallest output wanted, as stored (before orientation);
// 0 x 0 for the full size.
Result<Image> DecodeJpeg(std::span<const uint8_t> bytes, const Limits& limits, int min_w = 0,
                         int min_h = 0) {
  JpegReadContext ctx;
  JpegInfo info;
  if (!JpegReadInfo(&ctx, bytes, &info)) {
    return InvalidArgument(std::string("corrupt JPEG header: ") + ctx.err.message);
  }
  Header h{Format::kJpeg, info.width, info.height, info.orientation};
  if (Status s = CheckLimits(h, limits); !s.ok()) return s;

  ctx.cinfo.out_color_space = info.cmyk ? JCS_CMYK : JCS_RGB;
  // DCT scaling: libjpeg-turbo's inverse DCT writes M/8 of the size directly
  // (the entropy decoding is the same, the IDCT, colour conversion and
  // upsampling shrink with the output).
  if (!JpegScale(&ctx, JpegScaleNum(info.width, info.height, min_w, min_h))) {
    return InvalidArgument(std::string("corrupt JPEG header: ") + ctx.err.message);
  }
  const int out_w = int(ctx.cinfo.output_width), out_h = int(ctx.cinfo.output_height);
  const size_t w = size_t(out_w), hh = size_t(out_h);
  Image img;
  img.width = out_w;
  img.height = out_h;
  // A progressive (or multi-scan) JPEG is held whole as DCT coefficients,
  // 2 bytes a sample of every component, before a pixel comes out: a 40 Mpx
  // progressive CMYK one took 320 MB beside its pixels. The coefficients may
  // take what 4.6 bytes a pixel of the limit make (~7.6 with the output, as
  // a PNG's decode); libjpeg, here without a backing store, refuses beyond.
  ctx.cinfo.mem->max_memory_to_use =
      static_cast<long>(std::min<uint64_t>(limits.max_pixels * 46 / 10, uint64_t{1} << 40));
  img.rgb.resize(w * hh * 3);
  if (!JpegReadPixels(&ctx, img.rgb.data(), info, out_w, out_h)) {
    if (ctx.err.too_many_scans) {
      return InvalidArgument("progressive JPEG of " + Dims(info.width, info.height) +
                             " has more than " + std::to_string(ctx.err.max_scans) +
                             " scans, the most this service decodes for a photo of its size "
                             "(send it as a baseline JPEG)");
    }
    if (ctx.cinfo.err->msg_code == JERR_NO_BACKING_STORE) {
      return ResourceExhausted(
          "progressive JPEG of " + Dims(info.width, info.height) +
          " needs more memory to decode than this service allows a photo of its size "
          "(send it as a baseline JPEG, or smaller)");
    }
    return InvalidArgument(std::string("corrupt or truncated JPEG: ") + ctx.err.message);
  }
  // The decoder's own memory is gone (finished above); what is turned
  // upright next holds two RGB planes at most: 6 bytes a pixel.
  if (info.orientation != 1) return ApplyOrientation(img, info.orientation);
  return img;
}

// ---------------------------------------------------------------- writers

Status CheckEncodable(const Image& img) {
  if (img.width <= 0 || img.height <= 0) {
    return InvalidArgument(
        "cannot encode an empty image (" +
        Dims(uint64_t(std::max(img.width, 0)), uint64_t(std::max(img.height, 0))) + ")");
  }
  size_t want = size_t(img.width) * size_t(img.height) * 3;
  if (img.rgb.size() != want) {
    return InvalidArgument("image buffer holds " + std::to_string(img.rgb.size()) + " bytes, " +
                           Dims(img.width, img.height) + " RGB8 needs " + std::to_string(want));
  }
  return Status::Ok();
}

// ---- PNG writer: the rows filtered here, the stream compressed by libdeflate.
// libpng's writer runs zlib's deflate, which took ~140 ms for a 1080p
// inscription at level 3; libdeflate compresses the same rows several times
// faster at a similar size (docs/benchmarks.md, "Encoding").

void PutBe32(std::string& out, uint32_t v) {
  const char b[4] = {char(v >> 24), char(v >> 16), char(v >> 8), char(v)};
  out.append(b, 4);
}

void PutChunk(std::string& out, const char type[4], const uint8_t* data, size_t size) {
  PutBe32(out, uint32_t(size));
  const size_t at = out.size();
  out.append(type, 4);
  out.append(reinterpret_cast<const char*>(data), size);
  PutBe32(out, uint32_t(libdeflate_crc32(0, out.data() + at, size + 4)));
}

uint8_t Paeth(int a, int b, int c) {
  const int p = a + b - c;
  const int pa = std::abs(p - a), pb = std::abs(p - b), pc = std::abs(p - c);
  return uint8_t(pa <= pb && pa <= pc ? a : pb <= pc ? b : c);
}

// One row, filtered: each of Sub, Up and Paeth is tried and the one whose
// bytes, read as signed, sum to the least is kept (the usual heuristic, as
// libpng's adaptive filtering). `out` holds the filter byte and the row.
void FilterRow(const uint8_t* row, const uint8_t* prev, size_t n, uint8_t* out, uint8_t* scratch) {
  constexpr size_t bpp = 3;
  uint64_t best_cost = UINT64_MAX;
  for (uint8_t type : {uint8_t{1}, uint8_t{2}, uint8_t{4}}) {
    if (prev == nullptr && type != 1) continue;  // the first row has no row above
    uint8_t* f = scratch;
    uint64_t cost = 0;
    for (size_t i = 0; i < n; ++i) {
      const int a = i >= bpp ? row[i - bpp] : 0;
      const int b = prev != nullptr ? prev[i] : 0;
      const int c = prev != nullptr && i >= bpp ? prev[i - bpp] : 0;
      const uint8_t v = type == 1   ? uint8_t(row[i] - a)
                        : type == 2 ? uint8_t(row[i] - b)
                                    : uint8_t(row[i] - Paeth(a, b, c));
      f[i] = v;
      cost += v < 128 ? v : 256 - v;
    }
    if (cost < best_cost) {
      best_cost = cost;
      out[0] = type;
      std::memcpy(out + 1, f, n);
    }
  }
}

struct DeflateCompressor {
  libdeflate_compressor* c;
  explicit DeflateCompressor(int level) : c(libdeflate_alloc_compressor(level)) {}
  ~DeflateCompressor() {
    if (c != nullptr) libdeflate_free_compressor(c);
  }
  DeflateCompressor(const DeflateCompressor&) = delete;
  DeflateCompressor& operator=(const DeflateCompressor&) = delete;
};

constexpr size_t kJpegChunk = 64 * 1024;

struct JpegWriteContext {
  jpeg_compress_struct cinfo;
  JpegErrorManager err;
  jpeg_destination_mgr dest;
  std::string out;
  std::vector<uint8_t> chunk = std::vector<uint8_t>(kJpegChunk);
  bool created = false;

  JpegWriteContext() {
    std::memset(&cinfo, 0, sizeof cinfo);
    std::memset(&err, 0, sizeof err);
    std::memset(&dest, 0, sizeof dest);
  }
  JpegWriteContext(const JpegWriteContext&) = delete;
  JpegWriteContext& operator=(const JpegWriteContext&) = delete;
  ~JpegWriteContext() {
    if (created) jpeg_destroy_compress(&cinfo);
  }
};

JpegWriteContext* WriteContextOf(j_compress_ptr c) {
  return static_cast<JpegWriteContext*>(c->client_data);
}

void JpegDestInit(j_compress_ptr c) {
  JpegWriteContext* ctx = WriteContextOf(c);
  c->dest->next_output_byte = ctx->chunk.data();
  c->dest->free_in_buffer = ctx->chunk.size();
}

// Appends `n` bytes of the chunk; longjmps (outside any catch) on bad_alloc.
void JpegDestAppend(j_compress_ptr c, size_t n) {
  JpegWriteContext* ctx = WriteContextOf(c);
  bool failed = false;
  try {
    ctx->out.append(reinterpret_cast<const char*>(ctx->chunk.data()), n);
  } catch (const std::bad_alloc&) {
    failed = true;
  }
  if (failed) ERREXIT(c, JERR_OUT_OF_MEMORY);
}

boolean JpegDestEmpty(j_compress_ptr c) {
  JpegDestAppend(c, WriteContextOf(c)->chunk.size());
  JpegDestInit(c);
  return TRUE;
}

void JpegDestTerm(j_compress_ptr c) {
  JpegDestAppend(c, WriteContextOf(c)->chunk.size() - c->dest->free_in_buffer);
}

bool JpegWriteAll(JpegWriteContext* ctx, const Image* img, int quality) {
  ctx->cinfo.err = jpeg_std_error(&ctx->err.mgr);
  ctx->err.mgr.error_exit = JpegOnError;
  if (setjmp(ctx->err.jump)) return false;
  j_compress_ptr c = &ctx->cinfo;
  jpeg_create_compress(c);
  ctx->created = true;
  c->client_data = ctx;
  ctx->dest.init_destination = JpegDestInit;
  ctx->dest.empty_output_buffer = JpegDestEmpty;
  ctx->dest.term_destination = JpegDestTerm;
  c->dest = &ctx->dest;
  c->image_width = JDIMENSION(img->width);
  c->image_height = JDIMENSION(img->height);
  c->input_components = 3;
  c->in_color_space = JCS_RGB;
  jpeg_set_defaults(c);
  jpeg_set_quality(c, quality, TRUE);
  jpeg_start_compress(c, TRUE);
  while (c->next_scanline < c->image_height) {
    // libjpeg's API takes non-const rows; it does not write to them.
    JSAMPROW row = const_cast<uint8_t*>(img->row(int(c->next_scanline)));
    jpeg_write_scanlines(c, &row, 1);
  }
  jpeg_finish_compress(c);
  return true;
}

std::string LowerExtension(const std::string& path) {
  std::string ext = std::filesystem::path(path).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char ch) { return char(std::tolower(ch)); });
  return ext;
}

}  // namespace

// ---------------------------------------------------------------- public

Image Image::Filled(int width, int height, uint8_t r, uint8_t g, uint8_t b) {
  Image img;
  if (width <= 0 || height <= 0) return img;
  img.width = width;
  img.height = height;
  img.rgb.resize(size_t(width) * size_t(height) * 3);
  for (size_t i = 0; i < img.rgb.size(); i += 3) {
    img.rgb[i] = r;
    img.rgb[i + 1] = g;
    img.rgb[i + 2] = b;
  }
  return img;
}

Format Sniff(std::span<const uint8_t> bytes) {
  if (bytes.size() >= 8 && std::memcmp(bytes.data(), kPngSignature, 8) == 0) return Format::kPng;
  if (bytes.size() >= 3 && bytes[0] == 0xFF && bytes[1] == 0xD8 && bytes[2] == 0xFF) {
    return Format::kJpeg;
  }
  return Format::kUnknown;
}

std::string_view FormatName(Format format) {
  switch (format) {
    case Format::kPng: return "png";
    case Format::kJpeg: return "jpeg";
    case Format::kUnknown: break;
  }
  return "unknown";
}

Result<Header> ReadHeader(std::span<const uint8_t> bytes) {
  if (bytes.empty()) return InvalidArgument("empty input: zero bytes is not an image");
  switch (Sniff(bytes)) {
    case Format::kPng: return ReadPngHeader(bytes);
    case Format::kJpeg: return ReadJpegHeader(bytes);
    case Format::kUnknown: break;
  }
  return InvalidArgument("not a PNG or JPEG image (unrecognised leading bytes)");
}

namespace {

// The header of an upload within `limits`: bytes, then pixels and memory from
// the header alone, so bombs are refused before any pixel buffer exists.
Result<Header> AdmittedHeader(std::span<const uint8_t> bytes, const Limits& limits) {
  if (bytes.size() > limits.max_bytes) {
    return ResourceExhausted("image is " + std::to_string(bytes.size()) +
                             " bytes, over the limit of " + std::to_string(limits.max_bytes));
  }
  Result<Header> header = ReadHeader(bytes);
  if (!header.ok()) return header.status();
  if (Status s = CheckLimits(*header, limits); !s.ok()) return s;
  return header;
}

}  // namespace

Result<Image> Decode(std::span<const uint8_t> bytes, const Limits& limits) {
  Result<Header> header = AdmittedHeader(bytes, limits);
  if (!header.ok()) return header.status();
  if (header->format == Format::kPng) return DecodePng(bytes, limits);
  return DecodeJpeg(bytes, limits);
}

Result<Image> DecodeAtLeast(std::span<const uint8_t> bytes, int min_width, int min_height,
                            const Limits& limits) {
  Result<Header> header = AdmittedHeader(bytes, limits);
  if (!header.ok()) return header.status();
  min_width = std::max(min_width, 0);
  min_height = std::max(min_height, 0);
  if (min_width == 0 && min_height == 0) {
    if (header->format == Format::kPng) return DecodePng(bytes, limits);
    return DecodeJpeg(bytes, limits);
  }
  if (header->format == Format::kJpeg) {
    // The wanted size as stored: orientations 5-8 swap the sides.
    const bool swapped = header->exif_orientation >= 5;
    return DecodeJpeg(bytes, limits, swapped ? min_height : min_width,
                      swapped ? min_width : min_height);
  }
  Result<Image> full = DecodePng(bytes, limits);
  if (!full.ok()) return full;
  // One area resize to the smallest size of the same aspect that covers the
  // wanted one (a PNG has no scaled decode).
  const double s = std::max(double(min_width) / full->width, double(min_height) / full->height);
  if (s >= 1.0) return full;
  const int w = std::max({1, min_width, int(std::ceil(full->width * s - 1e-9))});
  const int h = std::max({1, min_height, int(std::ceil(full->height * s - 1e-9))});
  if (w >= full->width || h >= full->height) return full;
  return Resize(*full, w, h);
}

Result<Image> ReadFile(const std::string& path, const Limits& limits) {
  std::error_code ec;
  auto size = std::filesystem::file_size(path, ec);
  if (ec) {
    if (ec == std::errc::no_such_file_or_directory) {
      return NotFound("image file " + path + ": " + ec.message());
    }
    return Unavailable("image file " + path + ": " + ec.message());
  }
  if (size > limits.max_bytes) {
    return ResourceExhausted("image file " + path + " is " + std::to_string(size) +
                             " bytes, over the limit of " + std::to_string(limits.max_bytes));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return Unavailable("image file " + path + ": cannot open");
  std::vector<uint8_t> bytes(size_t{size});
  in.read(reinterpret_cast<char*>(bytes.data()), std::streamsize(bytes.size()));
  if (in.gcount() != std::streamsize(bytes.size())) {
    return Unavailable("image file " + path + ": short read");
  }
  Result<Image> img = Decode(bytes, limits);
  if (!img.ok()) return img.status().WithContext(path);
  return img;
}

Result<std::string> EncodePng(const Image& img, int compression_level) {
  if (Status s = CheckEncodable(img); !s.ok()) return s;
  if (compression_level < 0 || compression_level > 9) {
    return InvalidArgument("PNG compression level " + std::to_string(compression_level) +
                           " is outside 0..9");
  }
  const size_t row_bytes = size_t(img.width) * 3;
  const size_t filtered_size = (row_bytes + 1) * size_t(img.height);
  PixelBuffer filtered(filtered_size);
  PixelBuffer scratch(row_bytes);
  for (int y = 0; y < img.height; ++y) {
    FilterRow(img.row(y), y > 0 ? img.row(y - 1) : nullptr, row_bytes,
              filtered.data() + size_t(y) * (row_bytes + 1), scratch.data());
  }
  DeflateCompressor compressor(compression_level);
  if (compressor.c == nullptr) return Internal("libdeflate_alloc_compressor failed");
  PixelBuffer idat(libdeflate_zlib_compress_bound(compressor.c, filtered_size));
  const size_t idat_size = libdeflate_zlib_compress(compressor.c, filtered.data(), filtered_size,
                                                    idat.data(), idat.size());
  if (idat_size == 0)
    return Internal("PNG encoding failed: the compressed rows overran their bound");
  filtered = PixelBuffer();

  std::string out;
  out.reserve(idat_size + 128);
  out.append("\x89PNG\r\n\x1a\n", 8);
  uint8_t ihdr[13] = {};
  for (int i = 0; i < 4; ++i) {
    ihdr[i] = uint8_t(uint32_t(img.width) >> (24 - 8 * i));
    ihdr[4 + i] = uint8_t(uint32_t(img.height) >> (24 - 8 * i));
  }
  ihdr[8] = 8;  // bits per sample
  ihdr[9] = 2;  // RGB; compression, filter method and interlace 0
  PutChunk(out, "IHDR", ihdr, sizeof ihdr);
  // IDAT chunks of at most 1 MiB, as encoders commonly write them.
  constexpr size_t kIdatChunk = size_t{1} << 20;
  for (size_t at = 0; at < idat_size; at += kIdatChunk) {
    PutChunk(out, "IDAT", idat.data() + at, std::min(kIdatChunk, idat_size - at));
  }
  PutChunk(out, "IEND", ihdr, 0);
  return out;
}

Result<std::string> EncodeJpeg(const Image& img, int quality) {
  if (Status s = CheckEncodable(img); !s.ok()) return s;
  if (quality < 1 || quality > 100) {
    return InvalidArgument("JPEG quality " + std::to_string(quality) + " is outside 1..100");
  }
  if (img.width > JPEG_MAX_DIMENSION || img.height > JPEG_MAX_DIMENSION) {
    return InvalidArgument("JPEG cannot store " + Dims(img.width, img.height) + " (max side " +
                           std::to_string(JPEG_MAX_DIMENSION) + ")");
  }
  JpegWriteContext ctx;
  if (!JpegWriteAll(&ctx, &img, quality)) {
    return Internal(std::string("JPEG encoding failed: ") + ctx.err.message);
  }
  return std::move(ctx.out);
}

Result<Format> FormatForPath(const std::string& path) {
  const std::string ext = LowerExtension(path);
  if (ext == ".png") return Format::kPng;
  if (ext == ".jpg" || ext == ".jpeg") return Format::kJpeg;
  return InvalidArgument("cannot tell the image format of " + path +
                         " (extension must be .png, .jpg or .jpeg)");
}

Status WriteFile(const std::string& path, const Image& img) {
  const Result<Format> format = FormatForPath(path);
  if (!format.ok()) return format.status();
  Result<std::string> bytes = *format == Format::kPng ? EncodePng(img) : EncodeJpeg(img);
  if (!bytes.ok()) return bytes.status().WithContext(path);
  return WriteFileAtomically(path, *bytes);
}

Image Resize(const Image& src, int width, int height) {
  return ResizeRegion(src, 0, 0, src.width, src.height, width, height);
}

ResampleTaps MakeResampleTaps(int src, int dst) {
  ResampleTaps t;
  if (src < 1 || dst < 1) return t;
  t.first.resize(size_t(dst));
  t.count.resize(size_t(dst));
  t.offsets.resize(size_t(dst));
  const double scale = double(src) / double(dst);
  for (int d = 0; d < dst; ++d) {
    t.offsets[size_t(d)] = int(t.weights.size());
    if (dst < src) {  // area: each source pixel weighted by how much of it the dst pixel covers
      double start = d * scale, end = (d + 1) * scale;
      int s0 = int(std::floor(start));
      int s1 = std::min(src, int(std::ceil(end)));
      t.first[size_t(d)] = s0;
      t.count[size_t(d)] = s1 - s0;
      for (int s = s0; s < s1; ++s) {
        double cover = std::min(end, double(s + 1)) - std::max(start, double(s));
        t.weights.push_back(float(cover / scale));
      }
    } else {  // bilinear on pixel centres, clamped at the edges
      double centre = std::clamp((d + 0.5) * scale - 0.5, 0.0, double(src - 1));
      int s0 = int(std::floor(centre));
      int s1 = std::min(s0 + 1, src - 1);
      float f = float(centre - s0);
      t.first[size_t(d)] = s0;
      t.count[size_t(d)] = s1 - s0 + 1;
      t.weights.push_back(s1 == s0 ? 1.0f : 1.0f - f);
      if (s1 != s0) t.weights.push_back(f);
    }
  }
  return t;
}

Image ResizeRegion(const Image& src, int x0, int y0, int region_w, int region_h, int width, int height) {
  if (src.empty() || width <= 0 || height <= 0 || region_w <= 0 || region_h <= 0 || x0 < 0 || y0 < 0 ||
      x0 > src.width - region_w || y0 > src.height - region_h ||
      src.rgb.size() != size_t(src.width) * size_t(src.height) * 3) {
    return {};
  }
  const size_t src_offset = size_t(x0) * 3;
  Image dst;
  dst.width = width;
  dst.height = height;
  dst.rgb.resize(size_t(width) * size_t(height) * 3);
  const size_t stride = size_t(width) * 3;
  if (width == region_w && height == region_h) {
    for (int y = 0; y < height; ++y) std::copy_n(src.row(y0 + y) + src_offset, stride, dst.row(y));
    return dst;
  }
  const ResampleTaps tx = MakeResampleTaps(region_w, width);
  const ResampleTaps ty = MakeResampleTaps(region_h, height);
  // Horizontal pass into float rows (width wide), then vertical. The rows
  // live in a ring of as many as one output row reads: each source row is
  // resampled once, when first needed (ty.first never decreases), and a
  // 12-megapixel photo needs no full-size float copy.
  const int window = *std::max_element(ty.count.begin(), ty.count.end());
  UninitVector<float> ring(size_t(window) * stride);  // every row written before it is read
  auto ring_row = [&](int sy) { return ring.data() + size_t(sy % window) * stride; };
  int next_row = 0;  // the next source row (of the region) to resample
  std::vector<float> acc(stride);
  for (int y = 0; y < height; ++y) {
    const int first = ty.first[size_t(y)], count = ty.count[size_t(y)];
    for (; next_row < first + count; ++next_row) {
      const uint8_t* in = src.row(y0 + next_row) + src_offset;
      float* out = ring_row(next_row);
      for (int x = 0; x < width; ++x) {
        const float* w = tx.weights.data() + size_t(tx.offsets[size_t(x)]);
        const uint8_t* p = in + size_t(tx.first[size_t(x)]) * 3;
        float sum[3] = {0, 0, 0};
        for (int k = 0; k < tx.count[size_t(x)]; ++k, p += 3) {
          for (int c = 0; c < 3; ++c) sum[c] += w[k] * float(p[c]);
        }
        for (int c = 0; c < 3; ++c) out[size_t(x) * 3 + size_t(c)] = sum[c];
      }
    }
    std::fill(acc.begin(), acc.end(), 0.0f);
    const float* w = ty.weights.data() + size_t(ty.offsets[size_t(y)]);
    for (int k = 0; k < count; ++k) {
      const float* in = ring_row(first + k);
      for (size_t i = 0; i < stride; ++i) acc[i] += w[k] * in[i];
    }
    uint8_t* out = dst.row(y);
    for (size_t i = 0; i < stride; ++i) out[i] = RoundToByte(acc[i]);
  }
  return dst;
}

int ParseExifOrientation(std::span<const uint8_t> p) {
  // "Exif\0\0" then a TIFF header: "II*\0" or "MM\0*", offset of IFD0.
  if (p.size() < 6 + 8 || std::memcmp(p.data(), "Exif\0\0", 6) != 0) return 1;
  std::span<const uint8_t> tiff = p.subspan(6);
  bool little;
  if (tiff[0] == 'I' && tiff[1] == 'I') {
    little = true;
  } else if (tiff[0] == 'M' && tiff[1] == 'M') {
    little = false;
  } else {
    return 1;
  }
  auto u16 = [&](size_t at) -> uint32_t {
    return little ? uint32_t(tiff[at]) | uint32_t(tiff[at + 1]) << 8
                  : uint32_t(tiff[at]) << 8 | uint32_t(tiff[at + 1]);
  };
  auto u32 = [&](size_t at) -> uint32_t {
    return little ? u16(at) | u16(at + 2) << 16 : u16(at) << 16 | u16(at + 2);
  };
  if (u16(2) != 42) return 1;
  size_t ifd = u32(4);
  if (ifd < 8 || ifd + 2 > tiff.size()) return 1;
  size_t entries = u16(ifd);
  for (size_t i = 0; i < entries; ++i) {
    size_t e = ifd + 2 + i * 12;
    if (e + 12 > tiff.size()) return 1;
    if (u16(e) != 0x0112) continue;  // Orientation
    uint32_t type = u16(e + 2), count = u32(e + 4);
    if (type != 3 || count != 1) return 1;  // SHORT x 1, value in the first two bytes
    uint32_t v = u16(e + 8);
    return v >= 1 && v <= 8 ? int(v) : 1;
  }
  return 1;
}

Image ApplyOrientation(const Image& img, int orientation) {
  if (orientation < 2 || orientation > 8 || img.empty()) return img;
  const int w = img.width, h = img.height;
  if (img.rgb.size() != size_t(w) * size_t(h) * 3) return {};  // as Resize: a malformed Image
  const bool swap = orientation >= 5;
  Image out;
  out.width = swap ? h : w;
  out.height = swap ? w : h;
  out.rgb.resize(size_t(w) * size_t(h) * 3);
  for (int y = 0; y < out.height; ++y) {
    uint8_t* d = out.row(y);
    for (int x = 0; x < out.width; ++x, d += 3) {
      int sx = x, sy = y;
      switch (orientation) {
        case 2: sx = w - 1 - x; break;  // mirror horizontally
        case 3:
          sx = w - 1 - x;
          sy = h - 1 - y;
          break;                        // rotate 180
        case 4: sy = h - 1 - y; break;  // mirror vertically
        case 5:
          sx = y;
          sy = x;
          break;  // transpose
        case 6:
          sx = y;
          sy = h - 1 - x;
          break;  // rotate 90 clockwise
        case 7:
          sx = w - 1 - y;
          sy = h - 1 - x;
          break;  // transverse
        case 8:
          sx = w - 1 - y;
          sy = x;
          break;  // rotate 90 counter-clockwise
        default: break;
      }
      std::memcpy(d, img.row(sy) + size_t(sx) * 3, 3);
    }
  }
  return out;
}

}  // namespace danqing::image
