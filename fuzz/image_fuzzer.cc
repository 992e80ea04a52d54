// Fuzzes image::Decode (the upload path: sniff, header, limits, libpng /
// libjpeg-turbo, EXIF orientation, conversion to RGB8). Limits are small so a
// hostile header is refused instead of allocating; the oracle checks that a
// decoded image is whole and agrees with ReadHeader.
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
