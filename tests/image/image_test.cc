#include "image/image.h"

#include "testing/support/malloc_perturb.h"
#include "testing/support/progressive_jpeg.h"

// clang-format off
#include <cstdio>
#include <jpeglib.h>
// clang-format on
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <malloc.h>
#include <unistd.h>
#include <zlib.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <new>
#include <string>
#include <vector>

// Replacing the global operator new/delete with malloc/free is legal C++, but
// GCC pairs the inlined calls and warns; the pairing is correct here.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

// The largest single operator-new request while tracking is on: proves that a
// bomb is refused before the pixel buffer is allocated.
namespace {
std::atomic<bool> g_track{false};
std::atomic<size_t> g_largest{0};
// Bytes held through operator new now, and the most held while tracking is on.
std::atomic<long long> g_live{0};
std::atomic<long long> g_peak{0};
}  // namespace

void* operator new(size_t n) {
  if (g_track.load(std::memory_order_relaxed)) {
    size_t prev = g_largest.load(std::memory_order_relaxed);
    while (n > prev && !g_largest.compare_exchange_weak(prev, n)) {
    }
  }
  void* p = std::malloc(n == 0 ? 1 : n);
  if (p == nullptr) throw std::bad_alloc();
  const long long live = g_live.fetch_add(static_cast<long long>(malloc_usable_size(p))) +
                         static_cast<long long>(malloc_usable_size(p));
  if (g_track.load(std::memory_order_relaxed)) {
    long long prev = g_peak.load(std::memory_order_relaxed);
    while (live > prev && !g_peak.compare_exchange_weak(prev, live)) {
    }
  }
  return p;
}
void operator delete(void* p) noexcept {
  if (p != nullptr) g_live.fetch_sub(static_cast<long long>(malloc_usable_size(p)));
  std::free(p);
}
void operator delete(void* p, size_t) noexcept {
  if (p != nullptr) g_live.fetch_sub(static_cast<long long>(malloc_usable_size(p)));
  std::free(p);
}

namespace danqing::image {
namespace {

using ::testing::HasSubstr;
using Bytes = std::vector<uint8_t>;

Bytes ToBytes(const std::string& s) {
  return Bytes(s.begin(), s.end());
}

// ------------------------------------------------------------ PNG builder
// Hand-built PNGs give every colour type, bit depth, interlace and corruption.

void PutBe32(Bytes& b, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) b.push_back(uint8_t(v >> s));
}

void PutChunk(Bytes& b, const char* type, const Bytes& data) {
  PutBe32(b, uint32_t(data.size()));
  size_t start = b.size();
  b.insert(b.end(), type, type + 4);
  b.insert(b.end(), data.begin(), data.end());
  uLong crc = crc32(0, b.data() + start, uInt(b.size() - start));
  PutBe32(b, uint32_t(crc));
}

struct PngSpec {
  uint32_t width = 1, height = 1;
  uint8_t depth = 8, colour = 2, interlace = 0;
  Bytes raw;  // filtered scanlines (filter byte 0 + row bytes, per row / pass)
  std::vector<std::pair<std::string, Bytes>> extra;  // chunks before IDAT
  bool with_idat = true;
};

Bytes MakePng(const PngSpec& s) {
  Bytes b = {0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A};
  Bytes ihdr;
  PutBe32(ihdr, s.width);
  PutBe32(ihdr, s.height);
  ihdr.insert(ihdr.end(), {s.depth, s.colour, 0, 0, s.interlace});
  PutChunk(b, "IHDR", ihdr);
  for (const auto& [type, data] : s.extra) PutChunk(b, type.c_str(), data);
  if (s.with_idat) {
    uLongf n = compressBound(uLong(s.raw.size()));
    Bytes z(n);
    EXPECT_EQ(compress2(z.data(), &n, s.raw.data(), uLong(s.raw.size()), 6), Z_OK);
    z.resize(n);
    PutChunk(b, "IDAT", z);
  }
  PutChunk(b, "IEND", {});
  return b;
}

void ExpectPixel(const Image& img, int x, int y, int r, int g, int b, int tol = 0) {
  ASSERT_GE(x, 0);
  ASSERT_LT(x, img.width);
  ASSERT_LT(y, img.height);
  const uint8_t* p = img.row(y) + x * 3;
  EXPECT_NEAR(p[0], r, tol) << "at " << x << "," << y;
  EXPECT_NEAR(p[1], g, tol) << "at " << x << "," << y;
  EXPECT_NEAR(p[2], b, tol) << "at " << x << "," << y;
}

Image Pattern(int w, int h) {
  Image img = Image::Filled(w, h);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      uint8_t* p = img.row(y) + x * 3;
      p[0] = uint8_t(x * 7 + y);
      p[1] = uint8_t(y * 13);
      p[2] = uint8_t((x ^ y) * 5);
    }
  }
  return img;
}

// Four flat quadrants: top-left red, top-right green, bottom-left blue,
// bottom-right white. Large enough that JPEG keeps the corners' colours.
Image Quadrants(int w, int h) {
  Image img = Image::Filled(w, h);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      uint8_t* p = img.row(y) + x * 3;
      bool right = x >= w / 2, bottom = y >= h / 2;
      uint8_t rgb[3];
      if (!right && !bottom) {
        rgb[0] = 255, rgb[1] = 0, rgb[2] = 0;
      } else if (right && !bottom) {
        rgb[0] = 0, rgb[1] = 255, rgb[2] = 0;
      } else if (!right && bottom) {
        rgb[0] = 0, rgb[1] = 0, rgb[2] = 255;
      } else {
        rgb[0] = 255, rgb[1] = 255, rgb[2] = 255;
      }
      std::copy(rgb, rgb + 3, p);
    }
  }
  return img;
}

Bytes EncodeJpegOrDie(const Image& img, int quality = 95) {
  Result<std::string> j = EncodeJpeg(img, quality);
  EXPECT_TRUE(j.ok()) << j.status().ToString();
  return j.ok() ? ToBytes(*j) : Bytes{};
}

// ------------------------------------------------------------ EXIF builder

Bytes ExifApp1(int orientation, bool big_endian) {
  Bytes tiff;
  auto u16 = [&](uint32_t v) {
    if (big_endian) {
      tiff.push_back(uint8_t(v >> 8)), tiff.push_back(uint8_t(v));
    } else {
      tiff.push_back(uint8_t(v)), tiff.push_back(uint8_t(v >> 8));
    }
  };
  auto u32 = [&](uint32_t v) {
    if (big_endian) {
      u16(v >> 16), u16(v & 0xFFFF);
    } else {
      u16(v & 0xFFFF), u16(v >> 16);
    }
  };
  tiff.push_back(big_endian ? 'M' : 'I');
  tiff.push_back(big_endian ? 'M' : 'I');
  u16(42);
  u32(8);  // IFD0 right after the header
  u16(2);  // two entries: ImageWidth (to be skipped), then Orientation
  u16(0x0100), u16(4), u32(1), u32(32);
  u16(0x0112), u16(3), u32(1), u16(uint32_t(orientation)), u16(0);
  u32(0);  // no next IFD
  Bytes payload = {'E', 'x', 'i', 'f', 0, 0};
  payload.insert(payload.end(), tiff.begin(), tiff.end());
  return payload;
}

// Inserts an APP1 segment after the JFIF APP0 that libjpeg writes.
Bytes WithApp1(const Bytes& jpeg, const Bytes& payload) {
  EXPECT_GE(jpeg.size(), 6u);
  size_t at = 2;
  if (jpeg[2] == 0xFF && jpeg[3] == 0xE0) at = 4 + (size_t(jpeg[4]) << 8 | jpeg[5]);
  Bytes seg = {0xFF, 0xE1, uint8_t((payload.size() + 2) >> 8), uint8_t(payload.size() + 2)};
  seg.insert(seg.end(), payload.begin(), payload.end());
  Bytes out(jpeg.begin(), jpeg.begin() + long(at));
  out.insert(out.end(), seg.begin(), seg.end());
  out.insert(out.end(), jpeg.begin() + long(at), jpeg.end());
  return out;
}

// A JPEG with 1 (grey) or 4 (Adobe CMYK, stored inverted as Photoshop does)
// components, written with libjpeg directly.
Bytes RawJpeg(int w, int h, int components, const Bytes& pixels, bool progressive = false) {
  jpeg_compress_struct c;
  jpeg_error_mgr err;
  c.err = jpeg_std_error(&err);
  jpeg_create_compress(&c);
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&c, &buf, &size);
  c.image_width = JDIMENSION(w);
  c.image_height = JDIMENSION(h);
  c.input_components = components;
  c.in_color_space = components == 1 ? JCS_GRAYSCALE : JCS_CMYK;
  jpeg_set_defaults(&c);
  jpeg_set_quality(&c, 95, TRUE);
  if (progressive) jpeg_simple_progression(&c);
  jpeg_start_compress(&c, TRUE);
  while (c.next_scanline < c.image_height) {
    JSAMPROW row = const_cast<uint8_t*>(pixels.data()) +
                   size_t(c.next_scanline) * size_t(w) * size_t(components);
    jpeg_write_scanlines(&c, &row, 1);
  }
  jpeg_finish_compress(&c);
  jpeg_destroy_compress(&c);
  Bytes out(buf, buf + size);
  std::free(buf);
  return out;
}

// ------------------------------------------------------------ sniffing

TEST(Sniff, ByMagicBytes) {
  EXPECT_EQ(Sniff(MakePng({})), Format::kPng);
  EXPECT_EQ(Sniff(Bytes{0xFF, 0xD8, 0xFF, 0xE0}), Format::kJpeg);
  EXPECT_EQ(Sniff(Bytes{0xFF, 0xD8}), Format::kUnknown);
  EXPECT_EQ(Sniff(ToBytes("GIF89a....")), Format::kUnknown);
  EXPECT_EQ(Sniff(Bytes{}), Format::kUnknown);
  EXPECT_EQ(FormatName(Format::kPng), "png");
  EXPECT_EQ(FormatName(Format::kJpeg), "jpeg");
  EXPECT_EQ(FormatName(Format::kUnknown), "unknown");
}

// ------------------------------------------------------------ round trips

TEST(RoundTrip, PngIsLossless) {
  Image src = Pattern(37, 23);
  for (int level : {0, 6, 9}) {
    Result<std::string> png = EncodePng(src, level);
    ASSERT_TRUE(png.ok()) << png.status().ToString();
    Result<Header> h = ReadHeader(ToBytes(*png));
    ASSERT_TRUE(h.ok());
    EXPECT_EQ(h->format, Format::kPng);
    EXPECT_EQ(h->width, 37);
    EXPECT_EQ(h->height, 23);
    EXPECT_EQ(h->exif_orientation, 1);
    Result<Image> back = Decode(ToBytes(*png));
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_EQ(back->width, 37);
    EXPECT_EQ(back->height, 23);
    EXPECT_EQ(back->rgb, src.rgb);
  }
}

// Rows that each filter wins (noise: Sub or none helps; vertical and diagonal
// gradients: Up and Paeth), over 1 MiB compressed so the stream spans several
// IDAT chunks; libpng reads back every byte.
TEST(RoundTrip, PngOfNoiseAndGradientsSpansIdatChunks) {
  Image src = Image::Filled(700, 640);
  uint32_t x = 12345;
  for (int y = 0; y < src.height; ++y) {
    uint8_t* row = src.row(y);
    for (int i = 0; i < src.width * 3; ++i) {
      x = x * 1664525u + 1013904223u;
      row[i] = y < 560 ? uint8_t(x >> 24) : y < 600 ? uint8_t(y + i / 3) : uint8_t(y * 2);
    }
  }
  for (int level : {1, 9}) {
    Result<std::string> png = EncodePng(src, level);
    ASSERT_TRUE(png.ok()) << png.status().ToString();
    EXPECT_GT(png->size(), size_t{1} << 20);
    Result<Image> back = Decode(ToBytes(*png));
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_EQ(back->rgb, src.rgb) << "level " << level;
  }
}

TEST(RoundTrip, JpegIsClose) {
  Image src = Quadrants(64, 48);
  Bytes jpeg = EncodeJpegOrDie(src, 90);
  Result<Header> h = ReadHeader(jpeg);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(h->format, Format::kJpeg);
  EXPECT_EQ(h->width, 64);
  EXPECT_EQ(h->height, 48);
  EXPECT_EQ(h->exif_orientation, 1);
  Result<Image> back = Decode(jpeg);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ASSERT_EQ(back->rgb.size(), src.rgb.size());
  double err = 0;
  for (size_t i = 0; i < src.rgb.size(); ++i) err += std::abs(int(src.rgb[i]) - int(back->rgb[i]));
  EXPECT_LT(err / double(src.rgb.size()), 4.0);
  ExpectPixel(*back, 4, 4, 255, 0, 0, 12);
}

TEST(RoundTrip, LargerQualityGivesLargerFile) {
  Image src = Pattern(64, 64);
  Result<std::string> lo = EncodeJpeg(src, 10), hi = EncodeJpeg(src, 100);
  ASSERT_TRUE(lo.ok());
  ASSERT_TRUE(hi.ok());
  EXPECT_LT(lo->size(), hi->size());
}

// ------------------------------------------------------------ PNG conversions

TEST(PngConvert, Grey8) {
  PngSpec s;
  s.width = 2, s.colour = 0, s.raw = {0, 100, 200};
  Result<Image> img = Decode(MakePng(s));
  ASSERT_TRUE(img.ok()) << img.status().ToString();
  ExpectPixel(*img, 0, 0, 100, 100, 100);
  ExpectPixel(*img, 1, 0, 200, 200, 200);
}

TEST(PngConvert, Grey1Bit) {
  PngSpec s;
  s.width = 3, s.colour = 0, s.depth = 1, s.raw = {0, 0b10100000};
  Result<Image> img = Decode(MakePng(s));
  ASSERT_TRUE(img.ok()) << img.status().ToString();
  ExpectPixel(*img, 0, 0, 255, 255, 255);
  ExpectPixel(*img, 1, 0, 0, 0, 0);
  ExpectPixel(*img, 2, 0, 255, 255, 255);
}

TEST(PngConvert, GreyAlphaOnWhite) {
  PngSpec s;
  s.width = 3, s.colour = 4, s.raw = {0, 0, 0, 0, 255, 0, 128};
  Result<Image> img = Decode(MakePng(s));
  ASSERT_TRUE(img.ok()) << img.status().ToString();
  ExpectPixel(*img, 0, 0, 255, 255, 255);  // transparent black -> white
  ExpectPixel(*img, 1, 0, 0, 0, 0);        // opaque black
  ExpectPixel(*img, 2, 0, 127, 127, 127);  // half: 255 * 127 / 255
}

TEST(PngConvert, GreyWithTrnsKey) {
  PngSpec s;
  s.width = 2, s.colour = 0, s.raw = {0, 7, 50};
  s.extra = {{"tRNS", {0, 7}}};  // grey 7 is transparent
  Result<Image> img = Decode(MakePng(s));
  ASSERT_TRUE(img.ok()) << img.status().ToString();
  ExpectPixel(*img, 0, 0, 255, 255, 255);
  ExpectPixel(*img, 1, 0, 50, 50, 50);
}

TEST(PngConvert, PaletteWithTransparency) {
  PngSpec s;
  s.width = 3, s.colour = 3, s.raw = {0, 0, 1, 2};
  s.extra = {{"PLTE", {10, 20, 30, 0, 0, 0, 200, 100, 50}}, {"tRNS", {255, 0}}};
  Result<Image> img = Decode(MakePng(s));
  ASSERT_TRUE(img.ok()) << img.status().ToString();
  ExpectPixel(*img, 0, 0, 10, 20, 30);
  ExpectPixel(*img, 1, 0, 255, 255, 255);  // entry 1 fully transparent
  ExpectPixel(*img, 2, 0, 200, 100, 50);   // past tRNS: opaque
}

TEST(PngConvert, Palette4Bit) {
  PngSpec s;
  s.width = 2, s.colour = 3, s.depth = 4, s.raw = {0, 0x10};
  s.extra = {{"PLTE", {1, 2, 3, 4, 5, 6}}};
  Result<Image> img = Decode(MakePng(s));
  ASSERT_TRUE(img.ok()) << img.status().ToString();
  ExpectPixel(*img, 0, 0, 4, 5, 6);
  ExpectPixel(*img, 1, 0, 1, 2, 3);
}

TEST(PngConvert, Rgb16Bit) {
  PngSpec s;
  s.width = 2, s.depth = 16;
  s.raw = {0, 0xFF, 0xFF, 0x80, 0x80, 0x00, 0x00, 0x00, 0x00, 0x12, 0x34, 0xFF, 0xFF};
  Result<Image> img = Decode(MakePng(s));
  ASSERT_TRUE(img.ok()) << img.status().ToString();
  ExpectPixel(*img, 0, 0, 255, 128, 0);
  ExpectPixel(*img, 1, 0, 0, 18, 255);
}

TEST(PngConvert, RgbaOnWhite) {
  PngSpec s;
  s.width = 2, s.colour = 6, s.raw = {0, 255, 0, 0, 0, 255, 0, 0, 255};
  Result<Image> img = Decode(MakePng(s));
  ASSERT_TRUE(img.ok()) << img.status().ToString();
  ExpectPixel(*img, 0, 0, 255, 255, 255);
  ExpectPixel(*img, 1, 0, 255, 0, 0);
}

TEST(PngConvert, Rgba16Bit) {
  PngSpec s;
  s.colour = 6, s.depth = 16, s.raw = {0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF};
  Result<Image> img = Decode(MakePng(s));
  ASSERT_TRUE(img.ok()) << img.status().ToString();
  ExpectPixel(*img, 0, 0, 0, 0, 0);
}

TEST(PngConvert, Interlaced) {
  // 2x2 Adam7: pass 1 has (0,0), pass 6 has (1,0), pass 7 has row 1.
  PngSpec s;
  s.width = 2, s.height = 2, s.colour = 0, s.interlace = 1;
  s.raw = {0, 10, 0, 20, 0, 30, 40};
  Result<Image> img = Decode(MakePng(s));
  ASSERT_TRUE(img.ok()) << img.status().ToString();
  ExpectPixel(*img, 0, 0, 10, 10, 10);
  ExpectPixel(*img, 1, 0, 20, 20, 20);
  ExpectPixel(*img, 0, 1, 30, 30, 30);
  ExpectPixel(*img, 1, 1, 40, 40, 40);
}

// ------------------------------------------------------------ JPEG conversions

TEST(JpegConvert, Greyscale) {
  Bytes grey(16 * 16, 90);
  Result<Image> img = Decode(RawJpeg(16, 16, 1, grey));
  ASSERT_TRUE(img.ok()) << img.status().ToString();
  ExpectPixel(*img, 8, 8, 90, 90, 90, 2);
}

TEST(JpegConvert, AdobeCmyk) {
  // Photoshop stores inverted ink: cyan ink (255,0,0,0) is written (0,255,255,255).
  Bytes px;
  for (int i = 0; i < 16 * 16; ++i) px.insert(px.end(), {0, 255, 255, 255});
  Bytes jpeg = RawJpeg(16, 16, 4, px);
  Result<Image> img = Decode(jpeg);
  ASSERT_TRUE(img.ok()) << img.status().ToString();
  ExpectPixel(*img, 8, 8, 0, 255, 255, 3);
  Result<Header> h = ReadHeader(jpeg);
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->width, 16);
}

// A progressive JPEG is decoded from all its coefficients held at once (8
// bytes a pixel for CMYK): more than 4.6 bytes a pixel of the pixel limit is
// refused as too large, not allocated. Baseline ones stream and always fit.
TEST(JpegLimits, ProgressiveCoefficientsAreBoundedByThePixelLimit) {
  Bytes px;
  for (int i = 0; i < 256 * 256; ++i) px.insert(px.end(), {uint8_t(i), uint8_t(i >> 8), 40, 200});
  const Bytes progressive = RawJpeg(256, 256, 4, px, true);
  const Bytes baseline = RawJpeg(256, 256, 4, px, false);
  Limits tight;
  tight.max_pixels = 256 * 256;  // 4.6 B/px: 301 KB for 512 KB of coefficients
  Result<Image> refused = Decode(progressive, tight);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted) << refused.status().ToString();
  EXPECT_THAT(refused.status().message(), HasSubstr("baseline"));
  EXPECT_TRUE(Decode(baseline, tight).ok());
  Limits roomy;
  roomy.max_pixels = 256 * 256 * 4;
  Result<Image> fits = Decode(progressive, roomy);
  ASSERT_TRUE(fits.ok()) << fits.status().ToString();
  EXPECT_EQ(fits->width, 256);
}

// A CMYK photo turned upright holds at most two RGB planes (6 bytes a pixel):
// it was decoded into a whole CMYK plane, converted beside it and turned
// beside both (10 bytes a pixel: a 40 Mpx one took ~415 MiB).
TEST(JpegLimits, CmykTurnedUprightHoldsTwoRgbPlanesAtMost) {
  const int w = 640, h = 400;
  Bytes px;
  px.reserve(size_t(w) * h * 4);
  for (int i = 0; i < w * h; ++i) px.insert(px.end(), {uint8_t(i), uint8_t(i >> 8), 40, 200});
  const Bytes jpeg = WithApp1(RawJpeg(w, h, 4, px), ExifApp1(6, false));
  px = Bytes();
  const long long before = g_live.load();
  g_peak = before;
  g_track = true;
  Result<Image> img = Decode(jpeg);
  g_track = false;
  ASSERT_TRUE(img.ok()) << img.status().ToString();
  EXPECT_EQ(img->width, h);  // turned a quarter
  EXPECT_EQ(img->height, w);
  const double per_pixel = double(g_peak.load() - before) / (double(w) * h);
  EXPECT_LE(per_pixel, 6.2);
}

// ------------------------------------------------------------ EXIF orientation

struct Corners {
  int orientation;
  int w, h;                       // upright size for a 32x16 stored image
  const char *tl, *tr, *bl, *br;  // colour names at the upright corners
};

void PrintTo(const Corners& c, std::ostream* os) {
  *os << "orientation " << c.orientation;
}

void ExpectColour(const Image& img, int x, int y, const char* name) {
  SCOPED_TRACE(name);
  std::string n = name;
  int r = (n == "red" || n == "white") ? 255 : 0;
  int g = (n == "green" || n == "white") ? 255 : 0;
  int b = (n == "blue" || n == "white") ? 255 : 0;
  ExpectPixel(img, x, y, r, g, b, 40);
}

class Orientation : public ::testing::TestWithParam<std::tuple<Corners, bool>> {};

TEST_P(Orientation, DecodedUpright) {
  const auto& [c, big_endian] = GetParam();
  Bytes jpeg = WithApp1(EncodeJpegOrDie(Quadrants(32, 16)), ExifApp1(c.orientation, big_endian));
  Result<Header> h = ReadHeader(jpeg);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(h->exif_orientation, c.orientation);
  EXPECT_EQ(h->width, 32);  // as stored
  EXPECT_EQ(h->height, 16);
  Result<Image> img = Decode(jpeg);
  ASSERT_TRUE(img.ok()) << img.status().ToString();
  ASSERT_EQ(img->width, c.w);
  ASSERT_EQ(img->height, c.h);
  ExpectColour(*img, 2, 2, c.tl);
  ExpectColour(*img, c.w - 3, 2, c.tr);
  ExpectColour(*img, 2, c.h - 3, c.bl);
  ExpectColour(*img, c.w - 3, c.h - 3, c.br);
}

// Stored: red green / blue white (32x16).
INSTANTIATE_TEST_SUITE_P(
    AllEight, Orientation,
    ::testing::Combine(::testing::Values(Corners{1, 32, 16, "red", "green", "blue", "white"},
                                         Corners{2, 32, 16, "green", "red", "white", "blue"},
                                         Corners{3, 32, 16, "white", "blue", "green", "red"},
                                         Corners{4, 32, 16, "blue", "white", "red", "green"},
                                         Corners{5, 16, 32, "red", "blue", "green", "white"},
                                         Corners{6, 16, 32, "blue", "red", "white", "green"},
                                         Corners{7, 16, 32, "white", "green", "blue", "red"},
                                         Corners{8, 16, 32, "green", "white", "red", "blue"}),
                       ::testing::Bool()),
    [](const auto& param_info) {
      return "O" + std::to_string(std::get<0>(param_info.param).orientation) +
             (std::get<1>(param_info.param) ? "_MM" : "_II");
    });

TEST(Exif, MalformedSegmentsMeanUpright) {
  EXPECT_EQ(ParseExifOrientation({}), 1);
  EXPECT_EQ(ParseExifOrientation(ToBytes("Exif")), 1);
  Bytes good = ExifApp1(6, false);
  EXPECT_EQ(ParseExifOrientation(good), 6);
  for (size_t n = 0; n < good.size(); ++n) {  // every truncation
    int o = ParseExifOrientation(std::span<const uint8_t>(good.data(), n));
    EXPECT_TRUE(o == 1 || o == 6) << n;
  }
  Bytes bad_magic = good;
  bad_magic[6] = 'X';
  EXPECT_EQ(ParseExifOrientation(bad_magic), 1);
  Bytes huge_offset = good;
  huge_offset[6 + 4] = 0xFF, huge_offset[6 + 7] = 0x7F;
  EXPECT_EQ(ParseExifOrientation(huge_offset), 1);
  Bytes out_of_range = ExifApp1(9, true);
  EXPECT_EQ(ParseExifOrientation(out_of_range), 1);
  // A decoder given a JPEG with a broken EXIF still decodes it, upright.
  Result<Image> img = Decode(WithApp1(EncodeJpegOrDie(Quadrants(32, 16)), huge_offset));
  ASSERT_TRUE(img.ok()) << img.status().ToString();
  EXPECT_EQ(img->width, 32);
}

TEST(Exif, ApplyOrientationIgnoresInvalidValues) {
  Image src = Pattern(3, 2);
  EXPECT_EQ(ApplyOrientation(src, 0).rgb, src.rgb);
  EXPECT_EQ(ApplyOrientation(src, 9).rgb, src.rgb);
  // 6 then 8 is the identity.
  Image back = ApplyOrientation(ApplyOrientation(src, 6), 8);
  EXPECT_EQ(back.width, 3);
  EXPECT_EQ(back.rgb, src.rgb);
}

TEST(Exif, ApplyOrientationRefusesAMalformedImage) {
  for (int extra : {-3, 3}) {  // a buffer too short (would be read past) or too long (tail never written)
    Image src = Pattern(4, 3);
    src.rgb.resize(src.rgb.size() + static_cast<size_t>(extra));
    EXPECT_TRUE(ApplyOrientation(src, 6).empty()) << extra;
  }
}

// ------------------------------------------------------------ bad input

void ExpectInvalid(const Bytes& bytes, const std::string& fragment) {
  Result<Image> img = Decode(bytes);
  ASSERT_FALSE(img.ok());
  EXPECT_EQ(img.status().code(), StatusCode::kInvalidArgument) << img.status().ToString();
  EXPECT_THAT(img.status().message(), HasSubstr(fragment));
}

TEST(BadInput, ZeroBytes) {
  ExpectInvalid({}, "zero bytes");
  EXPECT_EQ(ReadHeader({}).status().code(), StatusCode::kInvalidArgument);
}

TEST(BadInput, NotAnImage) {
  ExpectInvalid(ToBytes("<html>hello</html>"), "not a PNG or JPEG");
  ExpectInvalid(ToBytes("GIF89a\x01\x00\x01\x00"), "not a PNG or JPEG");
}

TEST(BadInput, PngSignatureOnly) {
  ExpectInvalid({0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A}, "truncated PNG");
}

TEST(BadInput, PngZeroWidth) {
  PngSpec s;
  s.width = 0;
  ExpectInvalid(MakePng(s), "invalid dimensions");
}

TEST(BadInput, PngEveryTruncationFails) {
  Bytes png = ToBytes(*EncodePng(Pattern(9, 7)));
  for (size_t n = 0; n < png.size(); ++n) {
    Result<Image> img = Decode(std::span<const uint8_t>(png.data(), n));
    ASSERT_FALSE(img.ok()) << "prefix " << n;
    EXPECT_EQ(img.status().code(), StatusCode::kInvalidArgument) << n;
  }
}

TEST(BadInput, JpegEveryTruncationFails) {
  Bytes jpeg = EncodeJpegOrDie(Pattern(20, 12));
  for (size_t n = 0; n < jpeg.size(); ++n) {
    Result<Image> img = Decode(std::span<const uint8_t>(jpeg.data(), n));
    ASSERT_FALSE(img.ok()) << "prefix " << n;
    EXPECT_EQ(img.status().code(), StatusCode::kInvalidArgument) << n;
  }
  ExpectInvalid(Bytes(jpeg.begin(), jpeg.begin() + long(jpeg.size() / 2)), "JPEG");
}

TEST(BadInput, PngBadCrc) {
  PngSpec s;
  s.width = 4, s.colour = 0, s.raw = {0, 1, 2, 3, 4};
  Bytes png = MakePng(s);
  png[33 + 8 + 2] ^= 0x55;  // inside IDAT's data (IHDR chunk ends at 33)
  ExpectInvalid(png, "corrupt");
}

TEST(BadInput, PngTooLittleImageData) {
  PngSpec s;
  s.width = 4, s.height = 4, s.colour = 0, s.raw = {0, 1, 2, 3, 4};  // one row of four
  ExpectInvalid(MakePng(s), "PNG");
}

TEST(BadInput, PngMissingPalette) {
  PngSpec s;
  s.colour = 3, s.raw = {0, 0};
  ExpectInvalid(MakePng(s), "PNG");
}

TEST(BadInput, JpegGarbageAfterSoi) {
  ExpectInvalid({0xFF, 0xD8, 0xFF, 0x00, 1, 2, 3, 4, 5}, "JPEG");
  EXPECT_EQ(ReadHeader(Bytes{0xFF, 0xD8, 0xFF, 0x00, 1, 2, 3}).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(BadInput, FlippedBytesNeverCrash) {
  // Every single-byte corruption either fails cleanly or yields a whole image.
  for (const Bytes& good : {ToBytes(*EncodePng(Pattern(6, 5))), EncodeJpegOrDie(Pattern(6, 5))}) {
    for (size_t i = 0; i < good.size(); ++i) {
      Bytes bad = good;
      bad[i] ^= 0xA5;
      Result<Image> img = Decode(bad);
      if (img.ok()) {
        EXPECT_EQ(img->rgb.size(), size_t(img->width) * size_t(img->height) * 3);
      } else {
        EXPECT_FALSE(img.status().message().empty());
      }
    }
  }
}

// ------------------------------------------------------------ limits

TEST(Limits, PngBombRefusedFromHeaderWithoutAllocating) {
  PngSpec s;
  s.width = 100000, s.height = 100000, s.with_idat = false;
  Bytes bomb = MakePng(s);
  g_largest = 0;
  g_track = true;
  Result<Image> img = Decode(bomb);
  g_track = false;
  ASSERT_FALSE(img.ok());
  EXPECT_EQ(img.status().code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(img.status().message(), HasSubstr("100000x100000"));
  EXPECT_LT(g_largest.load(), size_t{1} << 20);
  Result<Header> h = ReadHeader(bomb);  // the header itself is fine
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->width, 100000);
}

TEST(Limits, JpegBombRefusedFromHeaderWithoutAllocating) {
  Bytes jpeg = EncodeJpegOrDie(Pattern(16, 16));
  // Patch the SOF0 frame's height and width to 60000.
  bool patched = false;
  for (size_t i = 2; i + 9 < jpeg.size(); ++i) {
    if (jpeg[i] == 0xFF && jpeg[i + 1] == 0xC0) {
      jpeg[i + 5] = 0xEA, jpeg[i + 6] = 0x60, jpeg[i + 7] = 0xEA, jpeg[i + 8] = 0x60;
      patched = true;
      break;
    }
  }
  ASSERT_TRUE(patched);
  g_largest = 0;
  g_track = true;
  Result<Image> img = Decode(jpeg);
  g_track = false;
  ASSERT_FALSE(img.ok());
  EXPECT_EQ(img.status().code(), StatusCode::kResourceExhausted) << img.status().ToString();
  EXPECT_THAT(img.status().message(), HasSubstr("60000x60000"));
  EXPECT_LT(g_largest.load(), size_t{1} << 20);
}

TEST(Limits, EachLimitApplies) {
  Bytes png = ToBytes(*EncodePng(Pattern(64, 32)));
  Bytes jpeg = EncodeJpegOrDie(Pattern(64, 32));
  for (const Bytes& b : {png, jpeg}) {
    Limits side;
    side.max_side = 63;
    EXPECT_EQ(Decode(b, side).status().code(), StatusCode::kResourceExhausted);
    Limits pixels;
    pixels.max_pixels = 64 * 32 - 1;
    EXPECT_EQ(Decode(b, pixels).status().code(), StatusCode::kResourceExhausted);
    Limits bytes;
    bytes.max_bytes = b.size() - 1;
    EXPECT_EQ(Decode(b, bytes).status().code(), StatusCode::kResourceExhausted);
    Limits exact;
    exact.max_side = 64, exact.max_pixels = 64 * 32, exact.max_bytes = b.size();
    EXPECT_TRUE(Decode(b, exact).ok());
  }
}

// ------------------------------------------------------------ encoders

TEST(Encode, RejectsBadImagesAndParameters) {
  Image empty;
  EXPECT_EQ(EncodePng(empty).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(EncodeJpeg(empty).status().code(), StatusCode::kInvalidArgument);
  Image wrong = Pattern(4, 4);
  wrong.rgb.pop_back();
  EXPECT_THAT(EncodePng(wrong).status().message(), HasSubstr("needs 48"));
  EXPECT_EQ(EncodeJpeg(wrong).status().code(), StatusCode::kInvalidArgument);
  Image ok = Pattern(4, 4);
  EXPECT_EQ(EncodePng(ok, 10).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(EncodePng(ok, -1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(EncodeJpeg(ok, 0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(EncodeJpeg(ok, 101).status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(EncodeJpeg(ok, 1).ok());
}

TEST(Encode, LargeJpegSpansManyOutputChunks) {
  Image big = Pattern(700, 500);
  Result<std::string> j = EncodeJpeg(big, 100);
  ASSERT_TRUE(j.ok());
  EXPECT_GT(j->size(), 64u * 1024);  // more than one destination chunk
  Result<Image> back = Decode(ToBytes(*j));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->width, 700);
}

// ------------------------------------------------------------ files

class Files : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("danqing-image-test-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Path(const char* name) { return (dir_ / name).string(); }
  std::filesystem::path dir_;
};

TEST_F(Files, WriteAndReadBack) {
  Image src = Quadrants(32, 32);
  ASSERT_TRUE(WriteFile(Path("a.png"), src).ok());
  ASSERT_TRUE(WriteFile(Path("b.JPG"), src).ok());
  ASSERT_TRUE(WriteFile(Path("c.jpeg"), src).ok());
  Result<Image> png = ReadFile(Path("a.png"));
  ASSERT_TRUE(png.ok()) << png.status().ToString();
  EXPECT_EQ(png->rgb, src.rgb);
  for (const char* name : {"b.JPG", "c.jpeg"}) {
    Result<Image> jpg = ReadFile(Path(name));
    ASSERT_TRUE(jpg.ok()) << jpg.status().ToString();
    ExpectColour(*jpg, 4, 4, "red");
  }
  // The format comes from the bytes, never from the name.
  std::filesystem::rename(Path("a.png"), Path("a.jpg"));
  EXPECT_TRUE(ReadFile(Path("a.jpg")).ok());
}

TEST_F(Files, Errors) {
  Image src = Pattern(4, 4);
  Status bad_ext = WriteFile(Path("x.gif"), src);
  EXPECT_EQ(bad_ext.code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(std::filesystem::exists(Path("x.gif")));
  EXPECT_EQ(WriteFile(Path("y.png"), Image{}).code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(std::filesystem::exists(Path("y.png")));
  EXPECT_EQ(ReadFile(Path("missing.png")).status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(WriteFile(Path("z.png"), src).ok());
  Limits tiny;
  tiny.max_bytes = 10;
  EXPECT_EQ(ReadFile(Path("z.png"), tiny).status().code(), StatusCode::kResourceExhausted);
  std::ofstream(Path("text.png")) << "not really";
  Result<Image> text = ReadFile(Path("text.png"));
  EXPECT_EQ(text.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(text.status().message(), HasSubstr("text.png"));
}

// ------------------------------------------------------------ resize

TEST(Resize, AreaAveragesBlocks) {
  Image src = Image::Filled(4, 2, 0, 0, 0);
  // left 2x2 block: 0 and 100 alternating -> mean 50; right block all 200.
  for (int y = 0; y < 2; ++y) {
    src.row(y)[0] = uint8_t(y == 0 ? 0 : 100);
    src.row(y)[3] = uint8_t(y == 0 ? 100 : 0);
    for (int x = 2; x < 4; ++x) src.row(y)[x * 3] = 200;
  }
  Image out = Resize(src, 2, 1);
  ASSERT_EQ(out.width, 2);
  ASSERT_EQ(out.height, 1);
  ExpectPixel(out, 0, 0, 50, 0, 0);
  ExpectPixel(out, 1, 0, 200, 0, 0);
}

TEST(Resize, NonIntegerShrinkKeepsFlatColour) {
  Image src = Image::Filled(37, 23, 10, 120, 240);
  Image out = Resize(src, 10, 7);
  ASSERT_EQ(out.rgb.size(), size_t(10 * 7 * 3));
  for (int y = 0; y < 7; ++y) {
    for (int x = 0; x < 10; ++x) ExpectPixel(out, x, y, 10, 120, 240);
  }
}

// Resize's definition in doubles: per axis, area coverage when shrinking
// (every source pixel's overlap enumerated, independently of MakeResampleTaps' index
// arithmetic), bilinear between pixel centres (clamped, the same formula)
// when not.
std::vector<std::vector<std::pair<int, double>>> ReferenceTaps(int src, int dst) {
  std::vector<std::vector<std::pair<int, double>>> taps(static_cast<size_t>(dst));
  const double scale = double(src) / double(dst);
  for (int d = 0; d < dst; ++d) {
    if (dst < src) {
      const double start = d * scale, end = (d + 1) * scale;
      for (int s = 0; s < src; ++s) {
        const double cover = std::min(end, s + 1.0) - std::max(start, double(s));
        if (cover > 0) taps[size_t(d)].push_back({s, cover / scale});
      }
    } else {
      const double c = std::clamp((d + 0.5) * scale - 0.5, 0.0, double(src - 1));
      const int s0 = int(std::floor(c)), s1 = std::min(s0 + 1, src - 1);
      taps[size_t(d)].push_back({s0, s1 == s0 ? 1.0 : 1.0 - (c - s0)});
      if (s1 != s0) taps[size_t(d)].push_back({s1, c - s0});
    }
  }
  return taps;
}

// Every byte of ResizeRegion(src, window, w x h) equal to the reference on
// that window, rounded half away from zero; where the reference lies within
// 1e-3 of a half (the float sums, in another order, may round the other
// way) within 1.
void ExpectResizedWindow(const Image& src, int x0, int y0, int rw, int rh, int w, int h) {
  const Image got = ResizeRegion(src, x0, y0, rw, rh, w, h);
  ASSERT_EQ(got.width, w);
  ASSERT_EQ(got.height, h);
  const auto tx = ReferenceTaps(rw, w), ty = ReferenceTaps(rh, h);
  int wrong = 0;
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      for (int c = 0; c < 3; ++c) {
        double v = 0;
        for (auto [sy, wy] : ty[size_t(y)]) {
          for (auto [sx, wx] : tx[size_t(x)]) v += wy * wx * src.row(y0 + sy)[(x0 + sx) * 3 + c];
        }
        v = std::clamp(v, 0.0, 255.0);
        const int diff = std::abs(int(got.row(y)[x * 3 + c]) - int(std::lround(v)));
        const bool near_half = std::abs(v - std::floor(v) - 0.5) < 1e-3;
        if (diff > (near_half ? 1 : 0)) ++wrong;
      }
    }
  }
  EXPECT_EQ(wrong, 0) << "window " << rw << "x" << rh << " at " << x0 << "," << y0 << " to " << w << "x" << h;
}

// Shrinking by 1x to 9x per axis (the ring of source rows the vertical pass
// reads is as deep as the most rows one output row covers), growing, mixed,
// same size, one pixel; a window and the whole image.
TEST(Resize, RegionMatchesTheDefinition) {
  const Image src = Pattern(97, 61);
  for (auto [w, h] : {std::pair{8, 5}, std::pair{23, 31}, std::pair{140, 90}, std::pair{200, 20}, std::pair{71, 45},
                      std::pair{1, 1}}) {
    ExpectResizedWindow(src, 13, 7, 71, 45, w, h);
    ExpectResizedWindow(src, 0, 0, 97, 61, w, h);
  }
  // Resize is the whole-image region.
  EXPECT_TRUE(ResizeRegion(src, 0, 0, 97, 61, 30, 20).rgb == Resize(src, 30, 20).rgb);
  // One pixel, one row and one column, grown.
  ExpectResizedWindow(src, 5, 5, 1, 1, 7, 3);
  ExpectResizedWindow(src, 5, 5, 9, 1, 20, 4);
  ExpectResizedWindow(src, 5, 5, 1, 9, 3, 30);
}

// Means that land exactly on a half round up, as std::lround does.
TEST(Resize, HalvesRoundUp) {
  for (auto [a, b] : {std::pair{0, 1}, std::pair{100, 101}, std::pair{254, 255}, std::pair{7, 8}}) {
    Image src = Image::Filled(2, 1, 0, 0, 0);
    src.row(0)[0] = uint8_t(a);
    src.row(0)[3] = uint8_t(b);
    const Image out = Resize(src, 1, 1);  // (a + b) / 2, exactly x.5 in float
    ASSERT_EQ(out.rgb.size(), 3u);
    EXPECT_EQ(out.rgb[0], uint8_t(std::lround((a + b) / 2.0))) << a << "," << b;
    EXPECT_EQ(out.rgb[0], uint8_t(b)) << a << "," << b;
  }
}

TEST(Resize, RegionOutsideTheImageIsEmpty) {
  const Image src = Pattern(20, 10);
  EXPECT_TRUE(ResizeRegion(src, -1, 0, 5, 5, 4, 4).empty());
  EXPECT_TRUE(ResizeRegion(src, 16, 0, 5, 5, 4, 4).empty());  // 16 + 5 > 20
  EXPECT_TRUE(ResizeRegion(src, 0, 6, 5, 5, 4, 4).empty());
  EXPECT_TRUE(ResizeRegion(src, 0, 0, 0, 5, 4, 4).empty());
  EXPECT_TRUE(ResizeRegion(src, 0, 0, 5, 5, 0, 4).empty());
  EXPECT_FALSE(ResizeRegion(src, 15, 5, 5, 5, 4, 4).empty());  // flush with the corner
}

TEST(Resize, BilinearGrow) {
  Image src = Image::Filled(2, 1, 0, 0, 0);
  src.row(0)[3] = 200;
  Image out = Resize(src, 4, 1);
  ASSERT_EQ(out.width, 4);
  // Centres map to -0.25, 0.25, 0.75, 1.25 -> clamped 0, 0.25, 0.75, 1.
  ExpectPixel(out, 0, 0, 0, 0, 0);
  ExpectPixel(out, 1, 0, 50, 0, 0);
  ExpectPixel(out, 2, 0, 150, 0, 0);
  ExpectPixel(out, 3, 0, 200, 0, 0);
}

TEST(Resize, SameSizeAndBadArguments) {
  Image src = Pattern(5, 3);
  EXPECT_EQ(Resize(src, 5, 3).rgb, src.rgb);
  EXPECT_TRUE(Resize(src, 0, 3).empty());
  EXPECT_TRUE(Resize(src, 3, -1).empty());
  EXPECT_TRUE(Resize(Image{}, 3, 3).empty());
  Image mixed = Resize(src, 10, 2);  // grow one axis, shrink the other
  EXPECT_EQ(mixed.width, 10);
  EXPECT_EQ(mixed.height, 2);
}

// ------------------------------------------------------------ uninitialised buffers

// Pixel buffers are not zeroed when allocated (PixelBuffer), so every decoder
// and transform must write every byte: the same input under two different
// heap fill bytes (testing/support/malloc_perturb.h) must give the same
// image. Skipped where the allocator does not fill (the sanitizers'); the
// default build runs it. tests/render/render_cli_test.cc does the same for
// renders.
TEST(PixelBuffer, EveryByteWritten) {
  using testing_support::SetMallocPerturb;
  if (!SetMallocPerturb(0x11)) GTEST_SKIP() << "this allocator does not fill new allocations (mallopt M_PERTURB)";
  SetMallocPerturb(0);
  auto same_under_two_fills = [](const std::string& what, const std::function<Result<Image>()>& make) {
    Bytes first;
    for (int fill : {0x11, 0xee}) {
      ASSERT_TRUE(SetMallocPerturb(fill));
      Result<Image> img = make();
      SetMallocPerturb(0);
      ASSERT_TRUE(img.ok()) << what << ": " << img.status().ToString();
      Bytes rgb(img->rgb.begin(), img->rgb.end());
      if (fill == 0x11) {
        first = std::move(rgb);
      } else {
        EXPECT_TRUE(rgb == first) << what << " depends on uninitialised memory";
      }
    }
  };
  // Sizes over glibc's tcache limit (1032 bytes): allocations it serves are
  // not perturbed. Varied pixels in every PNG layout the reader converts.
  constexpr int kW = 40, kH = 24;
  auto png = [](uint8_t colour, uint8_t depth, uint8_t interlace) {
    const int channels = colour == 6 ? 4 : colour == 4 ? 2 : colour == 2 ? 3 : 1;
    PngSpec s;
    s.width = kW, s.height = kH, s.colour = colour, s.depth = depth, s.interlace = interlace;
    const int bytes_per_px = channels * depth / 8;
    // Filtered scanlines: the whole image, or each non-empty Adam7 pass.
    struct Pass {
      int x0, y0, dx, dy;
    };
    const std::vector<Pass> passes =
        interlace != 0 ? std::vector<Pass>{{0, 0, 8, 8}, {4, 0, 8, 8}, {0, 4, 4, 8}, {2, 0, 4, 4},
                                           {0, 2, 2, 4}, {1, 0, 2, 2}, {0, 1, 1, 2}}
                       : std::vector<Pass>{{0, 0, 1, 1}};
    int n = 0;
    for (const Pass& p : passes) {
      const int cols = kW > p.x0 ? (kW - p.x0 + p.dx - 1) / p.dx : 0;
      const int rows = kH > p.y0 ? (kH - p.y0 + p.dy - 1) / p.dy : 0;
      if (cols == 0) continue;
      for (int y = 0; y < rows; ++y) {
        s.raw.push_back(0);
        for (int i = 0; i < cols * bytes_per_px; ++i) s.raw.push_back(uint8_t(37 * n++ + 3));
      }
    }
    return MakePng(s);
  };
  same_under_two_fills("RGB PNG", [&] { return Decode(png(2, 8, 0)); });
  same_under_two_fills("RGBA PNG", [&] { return Decode(png(6, 8, 0)); });
  same_under_two_fills("16-bit RGBA PNG", [&] { return Decode(png(6, 16, 0)); });
  same_under_two_fills("grey+alpha PNG", [&] { return Decode(png(4, 8, 0)); });
  same_under_two_fills("interlaced grey PNG", [&] { return Decode(png(0, 8, 1)); });
  Bytes cmyk, grey;
  for (int i = 0; i < 48 * 32; ++i) {
    cmyk.insert(cmyk.end(), {uint8_t(i), uint8_t(255 - i), uint8_t(i * 3), uint8_t(i * 7)});
    grey.push_back(uint8_t(i * 5));
  }
  same_under_two_fills("CMYK JPEG", [&] { return Decode(RawJpeg(48, 32, 4, cmyk)); });
  same_under_two_fills("grey JPEG", [&] { return Decode(RawJpeg(48, 32, 1, grey)); });
  for (int orientation = 2; orientation <= 8; ++orientation) {
    same_under_two_fills("JPEG with EXIF orientation " + std::to_string(orientation), [&] {
      return Decode(WithApp1(EncodeJpegOrDie(Pattern(41, 27)), ExifApp1(orientation, false)));
    });
  }
  const Image src = Pattern(61, 43);
  same_under_two_fills("Resize down", [&] { return Result<Image>(Resize(src, 29, 17)); });
  same_under_two_fills("Resize up", [&] { return Result<Image>(Resize(src, 90, 50)); });
  same_under_two_fills("ResizeRegion", [&] { return Result<Image>(ResizeRegion(src, 5, 3, 50, 37, 33, 21)); });
  same_under_two_fills("ResizeRegion, same size", [&] { return Result<Image>(ResizeRegion(src, 5, 3, 50, 37, 50, 37)); });
}

// ------------------------------------------------------------ scaled decode

Bytes ManyScanJpeg(int w, int h, int scans) {
  const auto jpeg = danqing::testing::ManyScanJpeg(w, h, scans);
  return Bytes(jpeg.begin(), jpeg.end());
}

TEST(JpegScans, BoundedByWork) {
  EXPECT_EQ(MaxJpegScans(640, 480), 100);
  EXPECT_EQ(MaxJpegScans(2560, 1600), 97);  // 4.1 Mpx
  EXPECT_EQ(MaxJpegScans(8000, 5000), 16);  // 40 Mpx: the floor, above any encoder's script
  EXPECT_EQ(MaxJpegScans(0, 0), 100);
}

// A progressive JPEG with more scans than its size allows is refused at the
// first scan over, with a message that says why and what to send instead;
// one at the bound decodes (a 1000-scan file pinned a worker ~6 s).
TEST(JpegScans, ManyScansAreRefusedQuickly) {
  const Bytes at_bound = ManyScanJpeg(64, 64, 100);
  Result<Image> ok = Decode(at_bound);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->width, 64);
  const Bytes over = ManyScanJpeg(64, 64, 101);
  for (const auto& r : {Decode(over), DecodeAtLeast(over, 16, 16)}) {
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(r.status().message(), HasSubstr("more than 100 scans"));
    EXPECT_THAT(r.status().message(), HasSubstr("baseline"));
  }
  // Bigger photos allow fewer: 3000x3000 (9 Mpx) allows 44.
  EXPECT_EQ(MaxJpegScans(3000, 3000), 44);
  Result<Image> big = Decode(ManyScanJpeg(3000, 3000, 45));
  ASSERT_FALSE(big.ok());
  EXPECT_THAT(big.status().message(), HasSubstr("more than 44 scans"));
}

// JPEG: the smallest M/8 scale that covers what is asked, decoded straight
// to it (DCT scaling), the colours where they were.
TEST(DecodeAtLeast, JpegIsDecodedAtTheSmallestScaleThatCovers) {
  const Bytes jpeg = EncodeJpegOrDie(Quadrants(800, 600));
  struct Want {
    int min_w, min_h, w, h;
  };
  for (const Want& c : {Want{100, 0, 100, 75}, Want{101, 0, 200, 150}, Want{0, 150, 200, 150},
                        Want{300, 100, 300, 225}, Want{700, 10, 700, 525}, Want{801, 0, 800, 600},
                        Want{0, 0, 800, 600}, Want{1, 1, 100, 75}}) {
    SCOPED_TRACE(std::to_string(c.min_w) + "x" + std::to_string(c.min_h));
    Result<Image> img = DecodeAtLeast(jpeg, c.min_w, c.min_h);
    ASSERT_TRUE(img.ok()) << img.status().ToString();
    EXPECT_EQ(img->width, c.w);
    EXPECT_EQ(img->height, c.h);
    EXPECT_EQ(img->rgb.size(), size_t(c.w) * size_t(c.h) * 3);
    ExpectColour(*img, 3, 3, "red");
    ExpectColour(*img, img->width - 4, 3, "green");
    ExpectColour(*img, 3, img->height - 4, "blue");
    ExpectColour(*img, img->width - 4, img->height - 4, "white");
  }
}

// PNG: decoded whole, then one area resize to the smallest size of its
// aspect that covers what is asked.
TEST(DecodeAtLeast, PngIsResizedOnceToCover) {
  Result<std::string> png = EncodePng(Quadrants(800, 600), 1);
  ASSERT_TRUE(png.ok());
  const Bytes bytes = ToBytes(*png);
  Result<Image> img = DecodeAtLeast(bytes, 200, 100);
  ASSERT_TRUE(img.ok()) << img.status().ToString();
  EXPECT_EQ(img->width, 200);
  EXPECT_EQ(img->height, 150);
  ExpectColour(*img, 3, 3, "red");
  ExpectColour(*img, 196, 146, "white");
  Result<Image> tall = DecodeAtLeast(bytes, 10, 300);
  ASSERT_TRUE(tall.ok());
  EXPECT_EQ(tall->width, 400);
  EXPECT_EQ(tall->height, 300);
  Result<Image> whole = DecodeAtLeast(bytes, 900, 10);
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ(whole->width, 800);
}

// The limits are the photo's, not the scaled size's: a bomb is refused from
// its header however small the decode asked; bad input keeps its error.
TEST(DecodeAtLeast, LimitsAndErrorsAreDecodes) {
  const Bytes jpeg = EncodeJpegOrDie(Quadrants(800, 600));
  Limits small;
  small.max_pixels = 800 * 600 - 1;
  Result<Image> r = DecodeAtLeast(jpeg, 100, 75, small);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  Bytes truncated(jpeg.begin(), jpeg.begin() + long(jpeg.size() / 2));
  Result<Image> t = DecodeAtLeast(truncated, 100, 75);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(t.status().message(), HasSubstr("JPEG"));
  Limits bytes_limit;
  bytes_limit.max_bytes = jpeg.size() - 1;
  EXPECT_EQ(DecodeAtLeast(jpeg, 100, 75, bytes_limit).status().code(),
            StatusCode::kResourceExhausted);
  EXPECT_EQ(DecodeAtLeast(ToBytes("not an image"), 100, 75).status().code(),
            StatusCode::kInvalidArgument);
}

// EXIF orientation: the size asked is upright; a photo stored sideways is
// scaled on its stored sides and turned after.
TEST_P(Orientation, ScaledDecodeUpright) {
  const auto& [c, big_endian] = GetParam();
  // 256x128 stored (8x the 32x16 of DecodedUpright); a quarter of the
  // upright size asked: scale 2/8.
  Bytes jpeg = WithApp1(EncodeJpegOrDie(Quadrants(256, 128)), ExifApp1(c.orientation, big_endian));
  Result<Image> img = DecodeAtLeast(jpeg, c.w * 2, c.h * 2);
  ASSERT_TRUE(img.ok()) << img.status().ToString();
  ASSERT_EQ(img->width, c.w * 2);
  ASSERT_EQ(img->height, c.h * 2);
  ExpectColour(*img, 2, 2, c.tl);
  ExpectColour(*img, img->width - 3, 2, c.tr);
  ExpectColour(*img, 2, img->height - 3, c.bl);
  ExpectColour(*img, img->width - 3, img->height - 3, c.br);
}

}  // namespace
}  // namespace danqing::image
