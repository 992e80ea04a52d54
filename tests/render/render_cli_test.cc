// `danqing render` end to end: writes a decodable image, exit codes for bad input.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <string>
#include <tuple>
#include <utility>

#include "image/image.h"
#include "testing/support/malloc_perturb.h"

namespace {

int RunCli(const std::string& args) {
  std::string cmd = std::string(DANQING_BIN) + " " + args + " >/dev/null 2>&1";
  int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

// Exit status and everything the command printed (stdout and stderr).
std::pair<int, std::string> RunCliOutput(const std::string& env, const std::string& args) {
  std::string cmd = env + " " + std::string(DANQING_BIN) + " " + args + " 2>&1";
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return {-1, ""};
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  int rc = pclose(p);
  return {WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, out};
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

// What a user types reaches the renderer as given: malformed UTF-8 or an
// unbounded title is refused with exit 2, naming the field, and no file.
TEST(RenderCliTest, MalformedOrOversizedTextIsRefused) {
  const std::string out = testing::TempDir() + "/cli_bad_text.png";
  for (const auto& [args, says] :
       {std::pair<std::string, std::string>{"--text 山 --title \"$(printf '\\377')\"",
                                            "title is not valid UTF-8 (at byte 0)"},
        {"--text \"$(printf '\\345\\261')\"", "text is not valid UTF-8 (at byte 0)"},
        {"--text 山 --signature \"$(head -c 2000 /dev/zero | tr '\\0' a)\"",
         "signature is 2000 bytes, longer than 1024"}}) {
    auto [rc, text] = RunCliOutput("", "render " + args + " --size 200x120 -o " + out);
    EXPECT_EQ(rc, 2) << args << ": " << text;
    EXPECT_NE(text.find(says), std::string::npos) << args << ": " << text;
    EXPECT_FALSE(std::filesystem::exists(out)) << args;
  }
}

TEST(RenderCliTest, BackendFlag) {
  const std::string out = testing::TempDir() + "/cli_backend.png";
  auto [rc, text] = RunCliOutput("", "render --text 山水 --size 200x120 --backend cpu -o " + out);
  EXPECT_EQ(rc, 0) << text;
  EXPECT_NE(text.find("heavy passes"), std::string::npos) << text;
  EXPECT_NE(text.find("on cpu)"), std::string::npos) << text;
  std::filesystem::remove(out);
  // The flag wins over the variable.
  std::tie(rc, text) = RunCliOutput("DANQING_RENDER_BACKEND=tpu", "render --text 山 --size 200x120 --backend cpu -o " + out);
  EXPECT_EQ(rc, 0) << text;
  std::filesystem::remove(out);
  std::tie(rc, text) = RunCliOutput("", "render --text 山 --backend tpu -o " + out);
  EXPECT_EQ(rc, 2) << text;
  EXPECT_NE(text.find("--backend must be auto, cpu or gpu"), std::string::npos) << text;
  // A GPU that is asked for and hidden: a clear error, no image.
  // (CUDA_VISIBLE_DEVICES="" hides every GPU from CUDA, on a GPU machine too.)
  std::tie(rc, text) = RunCliOutput("CUDA_VISIBLE_DEVICES=", "render --text 山 --backend gpu -o " + out);
  EXPECT_EQ(rc, 1) << text;
  EXPECT_NE(text.find("render backend gpu requested but unavailable"), std::string::npos) << text;
  EXPECT_FALSE(std::filesystem::exists(out));
  // danqing serve takes the same names and refuses a bad one before starting.
  std::tie(rc, text) = RunCliOutput("", "serve --port 0 --backend tpu");
  EXPECT_EQ(rc, 2) << text;
  EXPECT_NE(text.find("--backend must be auto, cpu or gpu"), std::string::npos) << text;
  // Counts out of range: refused, not wrapped to huge unsigned numbers.
  for (const char* bad : {"--workers -1", "--workers 100000", "--queue -3"}) {
    std::tie(rc, text) = RunCliOutput("", std::string("serve --port 0 ") + bad);
    EXPECT_EQ(rc, 2) << bad << ": " << text;
    EXPECT_NE(text.find(std::string(bad).substr(0, std::string(bad).find(' '))), std::string::npos)
        << text;
  }
}

std::string ReadBytes(const std::string& path) {
  std::string bytes;
  if (FILE* f = std::fopen(path.c_str(), "rb")) {
    char buf[65536];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) bytes.append(buf, n);
    std::fclose(f);
  }
  return bytes;
}

// Image buffers are not zeroed when allocated (image::PixelBuffer): every
// writer must fill every byte. Two runs whose heap is filled with different
// bytes (testing/support/malloc_perturb.h: glibc's or ASan's fill) must write
// the same file, so a pixel that a decoder, the photo wash or the heavy
// passes left unwritten shows as a difference.
TEST(RenderCliTest, EveryPixelWritten) {
  if (danqing::testing_support::kThreadSanitizer) GTEST_SKIP() << "TSan's allocator does not fill new allocations";
  const std::string dir = testing::TempDir();
  // A PNG photo too, so both decoders are covered.
  auto jpeg = danqing::image::ReadFile(std::string(DANQING_SOURCE_DIR) + "/tests/data/photos/chelsea.jpg");
  ASSERT_TRUE(jpeg.ok()) << jpeg.status().ToString();
  const std::string png_photo = dir + "/cli_perturb_photo.png";
  ASSERT_TRUE(danqing::image::WriteFile(png_photo, *jpeg).ok());
  for (const std::string& photo : {std::string(DANQING_SOURCE_DIR) + "/tests/data/photos/chelsea.jpg", png_photo,
                                  std::string()}) {
    const std::string args = "render --text '白日依山尽，黄河入海流。' --size 333x211 --seed 9 --backend cpu" +
                             (photo.empty() ? std::string() : " --photo " + photo);
    std::string outputs[2];
    int k = 0;
    for (int perturb : {17, 238}) {
      const std::string out = dir + "/cli_perturb_" + std::to_string(perturb) + ".png";
      auto [rc, text] = RunCliOutput(danqing::testing_support::MallocFillEnv(perturb), args + " -o " + out);
      ASSERT_EQ(rc, 0) << text;
      outputs[k++] = ReadBytes(out);
      std::filesystem::remove(out);
    }
    ASSERT_FALSE(outputs[0].empty());
    EXPECT_TRUE(outputs[0] == outputs[1]) << "output depends on uninitialised memory: " << args;
  }
  std::filesystem::remove(png_photo);
}

TEST(RenderCliTest, BadInputExitCodes) {
  std::string out = testing::TempDir() + "/cli_bad.png";
  EXPECT_EQ(RunCli("render --text 山 --size 16x16 -o " + out), 2);
  EXPECT_EQ(RunCli("render --text 山 --size big -o " + out), 2);
  EXPECT_EQ(RunCli("render --text 山 --size 1024x768junk -o " + out), 2);
  EXPECT_EQ(RunCli("render --text 山 -o " + testing::TempDir() + "/cli_bad.gif"),
            2);  // before rendering
  EXPECT_EQ(RunCli("render --text 山 --style comic -o " + out), 2);
  EXPECT_EQ(RunCli("render --text 山 --background photo -o " + out), 2);
  EXPECT_EQ(RunCli("render --text 山 --photo /nonexistent.jpg -o " + out), 1);
  EXPECT_EQ(RunCli("render --text 山 -o /nonexistent-dir/x.png"), 1);
  EXPECT_NE(RunCli("render -o " + out), 0);  // --text is required
  EXPECT_FALSE(std::filesystem::exists(out));
}

// Issue 28: --video writes an MP4 of the writing, --writing its 16-bit
// plane, --frames a strip; bounds are exit code 2 naming the flag; nothing
// to write is a usage error.
TEST(RenderCliTest, VideoWritingAndFrames) {
  const std::string dir = testing::TempDir() + "/cli_writing";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string base =
      "render --text '白日依山尽，黄河入海流。' --title 登鹳雀楼 --size 320x200 --seed 5 ";
  auto [rc, out] = RunCliOutput("", base + "--video " + dir +
                                        "/w.mp4 --video-seconds 2 --video-fps 5 --writing " + dir +
                                        "/w.png --frames " + dir + " --frame-count 3");
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("10 frames at 5 fps"), std::string::npos) << out;
  EXPECT_NE(out.find("libx264"), std::string::npos) << out;
  ASSERT_TRUE(std::filesystem::exists(dir + "/w.mp4"));
  FILE* f = std::fopen((dir + "/w.mp4").c_str(), "rb");
  ASSERT_NE(f, nullptr);
  char head[8] = {};
  EXPECT_EQ(std::fread(head, 1, 8, f), 8u);
  std::fclose(f);
  EXPECT_EQ(std::string(head + 4, 4), "ftyp");
  auto plane = danqing::image::ReadFile(dir + "/w.png");  // libpng reads the 16-bit grey PNG
  ASSERT_TRUE(plane.ok()) << plane.status().ToString();
  EXPECT_EQ(plane->width, 160);
  EXPECT_EQ(plane->height, 100);
  int frames = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().filename().string().rfind("frame-", 0) == 0) ++frames;
  }
  EXPECT_EQ(frames, 3);
  auto bad = [&](const std::string& args, const std::string& word) {
    auto [code, text] = RunCliOutput("", base + args);
    EXPECT_EQ(code, 2) << args << ": " << text;
    EXPECT_NE(text.find(word), std::string::npos) << args << ": " << text;
  };
  bad("--video " + dir + "/x.mp4 --video-fps 0", "--video-fps");
  bad("--video " + dir + "/x.mp4 --video-seconds 45", "--video-seconds");
  bad("--video " + dir + "/x.mp4 --video-encoder vp9", "--video-encoder");
  bad("--video " + dir + "/x.mkv", "--video");
  bad("", "nothing to write");
  EXPECT_FALSE(std::filesystem::exists(dir + "/x.mp4"));
  std::filesystem::remove_all(dir);
}

}  // namespace
