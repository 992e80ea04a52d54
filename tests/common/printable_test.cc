#include "common/printable.h"

#include <gtest/gtest.h>

#include <string>

namespace danqing {
namespace {

TEST(PrintableTest, PlainTextPassesUnchanged) {
  EXPECT_EQ(Printable("GPU-8ca1b6c0-6b0e-4e6b-9d8b-2a5c1f3e7d10::3"),
            "GPU-8ca1b6c0-6b0e-4e6b-9d8b-2a5c1f3e7d10::3");
  EXPECT_EQ(Printable(""), "");
  EXPECT_EQ(Printable("名前 ünïcode"), "名前 ünïcode");
}

TEST(PrintableTest, ANewlineCannotForgeALogLine) {
  const std::string forged = "GPU-1\n[2026-12-05 10:00:00.000] [info] agent: all good";
  const std::string out = Printable(forged);
  EXPECT_EQ(out.find('\n'), std::string::npos);
  EXPECT_EQ(out, "GPU-1\\n[2026-12-05 10:00:00.000] [info] agent: all good");
  EXPECT_EQ(Printable("a\rb\tc\\d"), "a\\rb\\tc\\\\d");
  EXPECT_EQ(Printable(std::string("a\0b\x1b[31m\x7f", 9)), "a\\x00b\\x1b[31m\\x7f");
}

TEST(PrintableTest, BytesThatAreNotUtf8AreEscaped) {
  EXPECT_EQ(Printable("\xff\xfe"), "\\xff\\xfe");
  EXPECT_EQ(Printable("ok\xc3"), "ok\\xc3");                         // cut sequence
  EXPECT_EQ(Printable("\xc0\xaf"), "\\xc0\\xaf");                    // overlong '/'
  EXPECT_EQ(Printable("\xed\xa0\x80"), "\\xed\\xa0\\x80");           // a surrogate
  EXPECT_EQ(Printable("\xf4\x90\x80\x80"), "\\xf4\\x90\\x80\\x80");  // past U+10FFFF
}

TEST(PrintableTest, CharactersThatMoveOrHideTextAreEscaped) {
  EXPECT_EQ(Printable("a\u2028b"), "a\\u{2028}b");  // line separator
  EXPECT_EQ(Printable("x\u202Ey"), "x\\u{202E}y");  // right-to-left override
  EXPECT_EQ(Printable("\xc2\x85"), "\\u{0085}");    // NEL
  EXPECT_EQ(Printable("\uFEFFid"), "\\u{FEFF}id");
}

TEST(PrintableTest, LongTextIsCutWithItsLength) {
  const std::string huge(5 << 20, 'A');
  const std::string out = Printable(huge, 64);
  EXPECT_EQ(out, std::string(64, 'A') + "...[5242880 bytes in all]");
  EXPECT_EQ(Printable(std::string(64, 'B'), 64), std::string(64, 'B'));  // exactly the bound
  // Never cut inside an escape or a character.
  EXPECT_EQ(Printable("abc\n", 4), "abc...[4 bytes in all]");
  EXPECT_EQ(Printable("ab名", 4), "ab...[5 bytes in all]");
  // The default bound.
  EXPECT_LE(Printable(std::string(100000, '\n')).size(), kPrintableDefaultMax + 32);
}

}  // namespace
}  // namespace danqing
