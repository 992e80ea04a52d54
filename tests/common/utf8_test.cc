#include "common/utf8.h"

#include <gtest/gtest.h>

namespace danqing {
namespace {

TEST(Utf8Test, ValidTextDecodesToItsCodePoints) {
  auto cps = DecodeUtf8("a\xc3\xa9\xe5\xb1\xb1\xf0\x9f\x98\x80");  // a é 山 😀
  ASSERT_TRUE(cps.ok()) << cps.status().ToString();
  EXPECT_EQ(*cps, (std::u32string{U'a', U'é', U'山', U'😀'}));
  EXPECT_TRUE(DecodeUtf8("").ok());
  EXPECT_EQ(EncodeUtf8(*cps), "a\xc3\xa9\xe5\xb1\xb1\xf0\x9f\x98\x80");
}

TEST(Utf8Test, EachMalformedShapeIsRefusedAtItsByte) {
  for (const auto& [bytes, at] :
       {std::pair<std::string, size_t>{"ab\x80", 2},  // stray continuation
        {"\xc0\xaf", 0},                              // overlong '/'
        {"x\xe0\x80\xaf", 1},                         // overlong, 3 bytes
        {"\xed\xa0\x80", 0},                          // a surrogate
        {"\xf4\x90\x80\x80", 0},                      // past U+10FFFF
        {"\xf5\x80\x80\x80", 0},                      // lead past F4
        {"\xe5\xb1", 0},                              // cut short
        {"\xe5\x41\xb1", 0}}) {                       // ASCII inside
    auto cps = DecodeUtf8(bytes);
    ASSERT_FALSE(cps.ok());
    EXPECT_EQ(cps.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(cps.status().message(), "not valid UTF-8 (at byte " + std::to_string(at) + ")");
  }
}

TEST(Utf8Test, SequenceAtGivesLengthAndCodePoint) {
  char32_t cp = 0;
  EXPECT_EQ(Utf8SequenceAt("A", 0, &cp), 1u);
  EXPECT_EQ(cp, U'A');
  EXPECT_EQ(Utf8SequenceAt("x\xe5\xb1\xb1", 1, &cp), 3u);
  EXPECT_EQ(cp, U'山');
  EXPECT_EQ(Utf8SequenceAt("\xc1\xbf", 0, &cp), 0u);
}

}  // namespace
}  // namespace danqing
