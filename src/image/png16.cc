#include "image/png16.h"

#include <libdeflate.h>

#include <cstdlib>
#include <cstring>
#include <memory>

namespace danqing::image {
namespace {

constexpr uint8_t kSignature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
constexpr size_t kBpp = 2;  // bytes per pixel: one 16-bit sample

void PutBe32(std::string& out, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<char>((v >> s) & 0xff));
}
uint32_t Be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}
void PutChunk(std::string& out, const char* type, const uint8_t* data, size_t n) {
  PutBe32(out, static_cast<uint32_t>(n));
  const size_t at = out.size();
  out.append(type, 4);
  if (n > 0) out.append(reinterpret_cast<const char*>(data), n);
  PutBe32(out, static_cast<uint32_t>(libdeflate_crc32(0, out.data() + at, n + 4)));
}
int Paeth(int a, int b, int c) {
  const int p = a + b - c;
  const int pa = std::abs(p - a), pb = std::abs(p - b), pc = std::abs(p - c);
  return pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
}

}  // namespace

Result<std::string> EncodePngGrey16(const Grey16& plane, int compression_level) {
  if (plane.width <= 0 || plane.height <= 0 ||
      plane.v.size() != static_cast<size_t>(plane.width) * static_cast<size_t>(plane.height)) {
    return InvalidArgument("16-bit plane: empty, or its values are not width*height");
  }
  if (compression_level < 0 || compression_level > 12) {
    return InvalidArgument("PNG compression level " + std::to_string(compression_level) +
                           " is outside 0..12");
  }
  const size_t row_bytes = static_cast<size_t>(plane.width) * kBpp;
  std::vector<uint8_t> raw(row_bytes), prev(row_bytes), scratch(row_bytes);
  std::vector<uint8_t> filtered((row_bytes + 1) * static_cast<size_t>(plane.height));
  for (int y = 0; y < plane.height; ++y) {
    const uint16_t* src =
        plane.v.data() + static_cast<size_t>(y) * static_cast<size_t>(plane.width);
    for (int x = 0; x < plane.width; ++x) {
      raw[static_cast<size_t>(x) * 2] = static_cast<uint8_t>(src[x] >> 8);
      raw[static_cast<size_t>(x) * 2 + 1] = static_cast<uint8_t>(src[x] & 0xff);
    }
    uint8_t* out = filtered.data() + static_cast<size_t>(y) * (row_bytes + 1);
    uint64_t best = UINT64_MAX;
    for (uint8_t type : {uint8_t{1}, uint8_t{2}, uint8_t{4}}) {
      if (y == 0 && type != 1) continue;
      uint64_t cost = 0;
      for (size_t i = 0; i < row_bytes; ++i) {
        const int a = i >= kBpp ? raw[i - kBpp] : 0;
        const int b = y > 0 ? prev[i] : 0;
        const int c = y > 0 && i >= kBpp ? prev[i - kBpp] : 0;
        const uint8_t v = static_cast<uint8_t>(type == 1   ? raw[i] - a
                                               : type == 2 ? raw[i] - b
                                                           : raw[i] - Paeth(a, b, c));
        scratch[i] = v;
        cost += v < 128 ? v : 256u - v;
      }
      if (cost < best) {
        best = cost;
        out[0] = type;
        std::memcpy(out + 1, scratch.data(), row_bytes);
      }
    }
    raw.swap(prev);
  }
  std::unique_ptr<libdeflate_compressor, void (*)(libdeflate_compressor*)> c(
      libdeflate_alloc_compressor(compression_level), libdeflate_free_compressor);
  if (c == nullptr) return Internal("libdeflate_alloc_compressor failed");
  std::vector<uint8_t> idat(libdeflate_zlib_compress_bound(c.get(), filtered.size()));
  const size_t n =
      libdeflate_zlib_compress(c.get(), filtered.data(), filtered.size(), idat.data(), idat.size());
  if (n == 0) return Internal("16-bit PNG: the compressed rows overran their bound");
  std::string out(reinterpret_cast<const char*>(kSignature), 8);
  uint8_t ihdr[13] = {};
  for (int i = 0; i < 4; ++i) {
    ihdr[i] = static_cast<uint8_t>(static_cast<uint32_t>(plane.width) >> (24 - 8 * i));
    ihdr[4 + i] = static_cast<uint8_t>(static_cast<uint32_t>(plane.height) >> (24 - 8 * i));
  }
  ihdr[8] = 16;  // bit depth
  ihdr[9] = 0;   // greyscale
  PutChunk(out, "IHDR", ihdr, sizeof ihdr);
  PutChunk(out, "IDAT", idat.data(), n);
  PutChunk(out, "IEND", nullptr, 0);
  return out;
}

Result<Grey16> DecodePngGrey16(std::span<const uint8_t> bytes, int64_t max_pixels) {
  if (bytes.size() < 8 + 25 || std::memcmp(bytes.data(), kSignature, 8) != 0) {
    return InvalidArgument("16-bit PNG: not a PNG");
  }
  size_t at = 8;
  Grey16 g;
  std::vector<uint8_t> z;
  bool have_header = false, end = false;
  while (!end) {
    if (bytes.size() - at < 12) return InvalidArgument("16-bit PNG: truncated chunk");
    const uint32_t n = Be32(bytes.data() + at);
    if (n > bytes.size() - at - 12) return InvalidArgument("16-bit PNG: truncated chunk");
    const uint8_t* type = bytes.data() + at + 4;
    const uint8_t* data = type + 4;
    if (Be32(data + n) != static_cast<uint32_t>(libdeflate_crc32(0, type, n + 4))) {
      return InvalidArgument("16-bit PNG: chunk CRC mismatch");
    }
    if (std::memcmp(type, "IHDR", 4) == 0) {
      if (n != 13) return InvalidArgument("16-bit PNG: bad IHDR");
      g.width = static_cast<int>(Be32(data));
      g.height = static_cast<int>(Be32(data + 4));
      if (data[8] != 16 || data[9] != 0 || data[12] != 0) {
        return InvalidArgument("16-bit PNG: not 16-bit greyscale without interlace");
      }
      if (g.width <= 0 || g.height <= 0) return InvalidArgument("16-bit PNG: empty");
      if (static_cast<int64_t>(g.width) * g.height > max_pixels) {
        return ResourceExhausted("16-bit PNG: " + std::to_string(g.width) + "x" +
                                 std::to_string(g.height) + " is over the pixel limit");
      }
      have_header = true;
    } else if (std::memcmp(type, "IDAT", 4) == 0) {
      z.insert(z.end(), data, data + n);
    } else if (std::memcmp(type, "IEND", 4) == 0) {
      end = true;
    }
    at += 12 + n;
  }
  if (!have_header) return InvalidArgument("16-bit PNG: no IHDR");
  const size_t row_bytes = static_cast<size_t>(g.width) * kBpp;
  std::vector<uint8_t> f((row_bytes + 1) * static_cast<size_t>(g.height));
  std::unique_ptr<libdeflate_decompressor, void (*)(libdeflate_decompressor*)> d(
      libdeflate_alloc_decompressor(), libdeflate_free_decompressor);
  if (d == nullptr) return Internal("libdeflate_alloc_decompressor failed");
  if (libdeflate_zlib_decompress(d.get(), z.data(), z.size(), f.data(), f.size(), nullptr) !=
      LIBDEFLATE_SUCCESS) {
    return InvalidArgument("16-bit PNG: corrupt or short image data");
  }
  std::vector<uint8_t> prev(row_bytes, 0), cur(row_bytes);
  g.v.resize(static_cast<size_t>(g.width) * static_cast<size_t>(g.height));
  for (int y = 0; y < g.height; ++y) {
    const uint8_t* in = f.data() + static_cast<size_t>(y) * (row_bytes + 1);
    const uint8_t type = in[0];
    if (type > 4) return InvalidArgument("16-bit PNG: unknown filter type");
    for (size_t i = 0; i < row_bytes; ++i) {
      const int a = i >= kBpp ? cur[i - kBpp] : 0, b = prev[i], c = i >= kBpp ? prev[i - kBpp] : 0;
      const int p = type == 0   ? 0
                    : type == 1 ? a
                    : type == 2 ? b
                    : type == 3 ? (a + b) / 2
                                : Paeth(a, b, c);
      cur[i] = static_cast<uint8_t>(in[1 + i] + p);
    }
    uint16_t* out = g.v.data() + static_cast<size_t>(y) * static_cast<size_t>(g.width);
    for (int x = 0; x < g.width; ++x) {
      out[x] = static_cast<uint16_t>((cur[static_cast<size_t>(x) * 2] << 8) |
                                     cur[static_cast<size_t>(x) * 2 + 1]);
    }
    prev.swap(cur);
  }
  return g;
}

}  // namespace danqing::image
