// Fuzzes image::Decode and image::DecodeAtLeast (the upload path: sniff,
// header, limits, libpng / libjpeg-turbo, JPEG DCT scaling and the PNG area
// resize, EXIF orientation, conversion to RGB8). Limits are small so a
// hostile header is refused instead of allocating; the oracle checks that a
// decoded image is whole and agrees with ReadHeader, and that a scaled one
// covers the size asked (within the photo) and is no larger than the photo.
// The size asked comes from the input's first two bytes, so the fuzzer
// steers it as it steers the rest.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "image/image.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace img = danqing::image;
  std::span<const uint8_t> bytes(data, size);
  img::Limits limits;
  limits.max_pixels = 1u << 22;
  limits.max_side = 4096;
  const int min_w = size > 0 ? data[0] * 3 : 0, min_h = size > 1 ? data[1] * 3 : 0;
  auto scaled = img::DecodeAtLeast(bytes, min_w, min_h, limits);
  if (!scaled.ok()) {
    if (scaled.status().message().empty()) std::abort();
  } else {
    const img::Image& s = *scaled;
    if (s.width <= 0 || s.height <= 0 ||
        s.rgb.size() != static_cast<size_t>(s.width) * static_cast<size_t>(s.height) * 3) {
      std::abort();
    }
    auto header = img::ReadHeader(bytes);
    if (!header.ok()) std::abort();
    const bool swapped = header->exif_orientation >= 5;
    const int w = swapped ? header->height : header->width;
    const int h = swapped ? header->width : header->height;
    if (s.width > w || s.height > h) std::abort();
    if (s.width < std::min(min_w, w) || s.height < std::min(min_h, h)) std::abort();
  }
  auto decoded = img::Decode(bytes, limits);
  if (!decoded.ok()) {
    if (decoded.status().message().empty()) std::abort();
    return 0;
  }
  const img::Image& im = *decoded;
  if (im.width <= 0 || im.height <= 0 ||
      im.rgb.size() != static_cast<size_t>(im.width) * static_cast<size_t>(im.height) * 3) {
    std::abort();
  }
  auto header = img::ReadHeader(bytes);
  if (!header.ok()) std::abort();
  bool swapped = header->exif_orientation >= 5;
  int w = swapped ? header->height : header->width;
  int h = swapped ? header->width : header->height;
  if (w != im.width || h != im.height) std::abort();
  return 0;
}
