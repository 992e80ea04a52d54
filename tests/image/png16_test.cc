// The 16-bit greyscale PNG of the write-time plane (issue 28): lossless round
// trip, readable by libpng (through image::Decode), bad input named.
#include "image/png16.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "image/image.h"

namespace danqing::image {
namespace {

std::span<const uint8_t> Bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

Grey16 Sample(int w, int h) {
  Grey16 g{w, h, std::vector<uint16_t>(static_cast<size_t>(w) * static_cast<size_t>(h))};
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      const bool stroke = (x / 7 + y / 5) % 3 == 0;
      g.v[static_cast<size_t>(y) * static_cast<size_t>(w) + static_cast<size_t>(x)] =
          stroke ? static_cast<uint16_t>(x * 37 + y * 11) : uint16_t{0xFFFF};
    }
  }
  return g;
}

TEST(Png16Test, RoundTripIsLosslessAndLibpngReadsIt) {
  for (auto [w, h] : {std::pair{1, 1}, std::pair{97, 65}, std::pair{640, 360}}) {
    const Grey16 g = Sample(w, h);
    auto png = EncodePngGrey16(g);
    ASSERT_TRUE(png.ok()) << png.status().ToString();
    auto back = DecodePngGrey16(Bytes(*png));
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_EQ(back->width, w);
    EXPECT_EQ(back->height, h);
    EXPECT_TRUE(back->v == g.v);
    // libpng reads it as 16-bit grey (and reduces it to 8 bits: the high byte).
    auto rgb = Decode(Bytes(*png));
    ASSERT_TRUE(rgb.ok()) << rgb.status().ToString();
    ASSERT_EQ(rgb->width, w);
    for (size_t i = 0; i < g.v.size(); ++i) {
      const int hi = g.v[i] >> 8;
      ASSERT_NEAR(rgb->rgb[i * 3], hi, 1) << i;
    }
  }
  // A sparse plane compresses well.
  auto png = EncodePngGrey16(Sample(640, 360));
  ASSERT_TRUE(png.ok());
  EXPECT_LT(png->size(), 640u * 360u * 2u / 4u);
}

TEST(Png16Test, BadInputIsNamed) {
  EXPECT_NE(EncodePngGrey16(Grey16{2, 2, {1, 2, 3}}).status().message().find("width*height"),
            std::string::npos);
  EXPECT_NE(EncodePngGrey16(Grey16{}).status().message().find("empty"), std::string::npos);
  const std::string png = *EncodePngGrey16(Sample(30, 20));
  EXPECT_NE(DecodePngGrey16(Bytes("hello")).status().message().find("not a PNG"),
            std::string::npos);
  std::string cut = png.substr(0, png.size() - 20);
  EXPECT_NE(DecodePngGrey16(Bytes(cut)).status().message().find("truncated"), std::string::npos);
  std::string flipped = png;
  flipped[45] = static_cast<char>(flipped[45] ^ 0x40);
  EXPECT_NE(DecodePngGrey16(Bytes(flipped)).status().message().find("CRC"), std::string::npos);
  EXPECT_EQ(DecodePngGrey16(Bytes(png), 100).status().code(), StatusCode::kResourceExhausted);
  const std::string rgb = *EncodePng(Image::Filled(4, 4));
  EXPECT_NE(DecodePngGrey16(Bytes(rgb)).status().message().find("not 16-bit greyscale"),
            std::string::npos);
}

}  // namespace
}  // namespace danqing::image
