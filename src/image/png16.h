// 16-bit greyscale PNG for planes of 16-bit values (the renderer's
// write-time plane, issue 28): a lossless, compact container that any image
// tool opens and a browser can inflate itself. Encoded as colour type 0, bit
// depth 16, no interlace, big-endian samples (as PNG stores them), rows
// filtered adaptively (Sub, Up or Paeth), zlib by libdeflate. The decoder
// reads exactly that (the plane's own round trip and its tests); other PNGs
// are INVALID_ARGUMENT naming what differs.
//
// Thread-safety: reentrant.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"

namespace danqing::image {

struct Grey16 {
  int width = 0, height = 0;
  std::vector<uint16_t> v;  // width*height, row-major
};

// INVALID_ARGUMENT for an empty plane or v.size() != width*height.
Result<std::string> EncodePngGrey16(const Grey16& plane, int compression_level = 6);
// RESOURCE_EXHAUSTED above max_pixels (checked before inflating).
Result<Grey16> DecodePngGrey16(std::span<const uint8_t> bytes,
                               int64_t max_pixels = 7680LL * 4320LL);

}  // namespace danqing::image
