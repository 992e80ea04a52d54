// danqing::image: the one place that turns bytes into pixels and back.
//
// An Image is plain RGB8 (no alpha, no colour management): every decoder
// converts to it (grey, palette, 16-bit and alpha PNGs; greyscale and CMYK
// JPEGs), alpha is composited on white and a JPEG's EXIF orientation is applied,
// so callers see the photo the way a viewer shows it. PNG via libpng, JPEG via
// libjpeg-turbo; their longjmp error paths are contained in image.cc.
//
// Untrusted input: Decode reads the header first and refuses, before any pixel
// buffer is allocated, inputs over Limits (RESOURCE_EXHAUSTED); empty, unknown,
// truncated or corrupt inputs are INVALID_ARGUMENT with a message that says
// what was wrong. A failed decode never returns a partial image.
//
// Thread-safety: every function is reentrant; Images are values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "common/status.h"

namespace danqing::image {

// std::allocator, except that resize() leaves new bytes uninitialised instead
// of zeroing them: every writer of an Image's pixels fills the whole buffer
// (decoders, the renderer's passes, the resampler), so the zeroing was a
// wasted pass over up to 150 MB. Only value-initialisation is skipped; an
// explicit value (assign(n, v), resize(n, v)) still fills.
template <typename T>
struct DefaultInitAllocator : std::allocator<T> {
  template <typename U>
  struct rebind {
    using other = DefaultInitAllocator<U>;
  };
  using std::allocator<T>::allocator;
  template <typename U>
  void construct(U* p) noexcept(std::is_nothrow_default_constructible_v<U>) {
    ::new (static_cast<void*>(p)) U;
  }
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};
// A vector whose resize() and sized constructor leave elements uninitialised:
// for buffers that are filled completely right after (pixels, float planes).
template <typename T>
using UninitVector = std::vector<T, DefaultInitAllocator<T>>;
using PixelBuffer = UninitVector<uint8_t>;

struct Image {
  int width = 0;
  int height = 0;
  PixelBuffer rgb;  // RGB8, row-major, tightly packed (size = w*h*3)

  uint8_t* row(int y) {
    return rgb.data() + static_cast<size_t>(y) * static_cast<size_t>(width) * 3;
  }
  const uint8_t* row(int y) const {
    return rgb.data() + static_cast<size_t>(y) * static_cast<size_t>(width) * 3;
  }
  bool empty() const { return width <= 0 || height <= 0 || rgb.empty(); }

  // A width x height image filled with one colour (white by default).
  static Image Filled(int width, int height, uint8_t r = 255, uint8_t g = 255, uint8_t b = 255);
};

enum class Format { kUnknown, kPng, kJpeg };

// By magic bytes only (never by a client's content type or a file name).
Format Sniff(std::span<const uint8_t> bytes);
// "png", "jpeg", "unknown".
std::string_view FormatName(Format format);

struct Limits {
  size_t max_bytes = 25u << 20;      // encoded input size
  uint64_t max_pixels = 50'000'000;  // width * height
  int max_side = 16384;              // width and height each
};

struct Header {
  Format format = Format::kUnknown;
  int width = 0;  // as stored (before EXIF orientation)
  int height = 0;
  int exif_orientation = 1;  // 1..8, 1 if none or invalid
};

// Format, size and orientation without decoding pixels. INVALID_ARGUMENT for
// empty, unknown or malformed headers.
Result<Header> ReadHeader(std::span<const uint8_t> bytes);

// Full decode to RGB8, oriented upright. RESOURCE_EXHAUSTED when the input or
// the header's dimensions exceed `limits` (checked before pixels are decoded).
Result<Image> Decode(std::span<const uint8_t> bytes, const Limits& limits = {});
// Decode for a consumer that needs at least min_width x min_height (upright)
// of the photo: the smallest image of the photo's aspect (within rounding)
// that is at least that large on both sides, or the full photo when it is
// not larger. JPEG: decoded at that size by libjpeg-turbo's DCT scaling
// (M/8, M = 1..8), never a full-size pixel buffer; PNG: decoded whole, then
// one area resize. Same limits, errors and orientation as Decode (the limits
// apply to the photo's stored size, not the scaled one). 0 x 0: the full photo.
Result<Image> DecodeAtLeast(std::span<const uint8_t> bytes, int min_width, int min_height,
                            const Limits& limits = {});
// The most scans a progressive JPEG of this size may have (a bound on the
// decode's work: scans x pixels, between 16 and 100); more is
// INVALID_ARGUMENT, refused at the first scan over.
int MaxJpegScans(int width, int height);
// Decode of a file's content; NOT_FOUND / UNAVAILABLE when it cannot be read.
Result<Image> ReadFile(const std::string& path, const Limits& limits = {});

// compression_level 0..9; quality 1..100. INVALID_ARGUMENT for an empty or
// inconsistent image (rgb.size() != w*h*3) or an out-of-range parameter.
Result<std::string> EncodePng(const Image& img, int compression_level = 6);
Result<std::string> EncodeJpeg(const Image& img, int quality = 90);

// The format a file of this name is written in, from its extension (.png,
// .jpg, .jpeg; case-insensitive); INVALID_ARGUMENT for any other.
Result<Format> FormatForPath(const std::string& path);

// Format from FormatForPath, written atomically (temp file + rename), so a
// reader never sees a partial file.
Status WriteFile(const std::string& path, const Image& img);

// Resampled copy: area averaging along an axis that shrinks, bilinear along
// one that grows. An empty source or a non-positive size gives an empty Image.
Image Resize(const Image& src, int width, int height);
// Resize of the region_w x region_h window at (x0, y0) of src, without
// copying it out first. Empty when the window is empty or not inside src.
Image ResizeRegion(const Image& src, int x0, int y0, int region_w, int region_h, int width, int height);

// The resampling ResizeRegion does, one axis at a time, for code that
// repeats it elsewhere (the CUDA render backend resamples a photo on the
// device and must round as this does). Output pixel i of the axis reads
// count[i] source pixels from first[i] on, with weights[offsets[i] + k]:
// area averaging when dst < src, bilinear on pixel centres otherwise. An
// output value is sum_k w_k * p_k along x, in k order from 0.0f, then the
// same along y over those row sums, then RoundToByte.
struct ResampleTaps {
  std::vector<int> first;
  std::vector<int> count;
  std::vector<int> offsets;
  std::vector<float> weights;
};
// Empty tables when src or dst is below 1. Offsets are ints: at most
// src + 2 * dst weights, far below 2^31 for any image Decode accepts.
ResampleTaps MakeResampleTaps(int src, int dst);
// The nearest byte to v, halves up (std::lround then clamped to 0..255,
// without the libm call), for every v below 2^31: below 0 or NaN gives 0,
// from 255 up 255; in between the truncation is the floor and v minus it
// is exact. Also device code: the CUDA render backend rounds its resample
// with it.
#if defined(__CUDACC__)
__host__ __device__
#endif
inline uint8_t RoundToByte(float v) {
  if (!(v > 0.0f)) return 0;
  if (v >= 255.0f) return 255;
  const int whole = static_cast<int>(v);
  return static_cast<uint8_t>(whole + (v - static_cast<float>(whole) >= 0.5f ? 1 : 0));
}

// Helpers, public for tests and callers that handle orientation themselves.
// The EXIF orientation (1..8) in a JPEG APP1 "Exif" segment's payload
// (starting at "Exif\0\0"); 1 when absent or malformed.
int ParseExifOrientation(std::span<const uint8_t> app1_payload);
// Rotates/flips `img` so that an image stored with EXIF `orientation` is upright.
// An empty Image when img.rgb is not width*height*3 bytes.
Image ApplyOrientation(const Image& img, int orientation);

}  // namespace danqing::image
