// `danqing render` end to end: writes a decodable image, exit codes for bad input.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "image/image.h"

namespace {

int RunCli(const std::string& args) {
  std::string cmd = std::string(DANQING_BIN) + " " + args + " >/dev/null 2>&1";
  int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

TEST(RenderCliTest, WritesPngAndJpeg) {
  std::string dir = testing::TempDir();
  std::string png = dir + "/cli_render.png", jpg = dir + "/cli_render.jpg";
  ASSERT_EQ(RunCli("render --text '白日依山尽，黄河入海流。' --title 登鹳雀楼 --signature 王之涣 --size 320x200 "
                "--style cao --seed 5 -o " + png), 0);
  auto img = danqing::image::ReadFile(png);
  ASSERT_TRUE(img.ok()) << img.status().ToString();
  EXPECT_EQ(img->width, 320);
  EXPECT_EQ(img->height, 200);
  ASSERT_EQ(RunCli("render --text 山水 --size 200x120 --background paper --horizontal -o " + jpg), 0);
  auto j = danqing::image::ReadFile(jpg);
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  EXPECT_EQ(j->width, 200);
  std::filesystem::remove(png);
  std::filesystem::remove(jpg);
}

TEST(RenderCliTest, BadInputExitCodes) {
  std::string out = testing::TempDir() + "/cli_bad.png";
  EXPECT_EQ(RunCli("render --text 山 --size 16x16 -o " + out), 2);
  EXPECT_EQ(RunCli("render --text 山 --size big -o " + out), 2);
  EXPECT_EQ(RunCli("render --text 山 --style comic -o " + out), 2);
  EXPECT_EQ(RunCli("render --text 山 --background photo -o " + out), 2);
  EXPECT_EQ(RunCli("render --text 山 --photo /nonexistent.jpg -o " + out), 1);
  EXPECT_EQ(RunCli("render --text 山 -o /nonexistent-dir/x.png"), 1);
  EXPECT_NE(RunCli("render -o " + out), 0);  // --text is required
  EXPECT_FALSE(std::filesystem::exists(out));
}

}  // namespace
