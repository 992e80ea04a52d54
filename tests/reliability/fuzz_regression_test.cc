// Inputs the fuzzers under fuzz/ found, kept as regression tests in the
// normal suite (each names its fuzzer). A regression of a hang shows up as
// this test timing out under ctest.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <span>
#include <string>

#include "config/config.h"
#include "image/image.h"

namespace danqing {
namespace {

using ::testing::HasSubstr;

// config_fuzzer: yaml-cpp 0.7's LoadAll() looped forever (growing memory) on a
// document that starts with a token its parser does not consume, here the
// ',' after the first flow mapping. Now INVALID_ARGUMENT with the position.
TEST(ConfigFuzzRegression, StrayCommaAfterFlowMappingIsAnError) {
  const std::string text =
      "{\"version\": \"v0\",  \"mixed\"},\n \"sharing\": , \"replicas\": 3}]}}}\n";
  auto cfg = config::ParseConfig(text, "fuzz.yaml");
  ASSERT_FALSE(cfg.ok());
  EXPECT_EQ(cfg.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(cfg.status().message(), HasSubstr("fuzz.yaml:1:"));
  EXPECT_THAT(cfg.status().message(), HasSubstr("malformed YAML"));
}

TEST(ConfigFuzzRegression, LoneCommaIsAnError) {
  for (const char* text : {",", "\n,\n", "version: v1\n---\n,\n"}) {
    auto cfg = config::ParseConfig(text, "fuzz.yaml");
    ASSERT_FALSE(cfg.ok()) << text;
    EXPECT_EQ(cfg.status().code(), StatusCode::kInvalidArgument) << text;
  }
}

TEST(ConfigFuzzRegression, EmptyDocumentsStillSkipped) {
  auto cfg = config::ParseConfig("---\n---\nversion: v1\n", "ok.yaml");
  ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
  EXPECT_EQ(cfg->version, "v1");
}

// image_fuzzer: a 1x1 greyscale PNG whose tEXt chunk declares 0x7a00000d
// bytes (2 GB) in a 100-byte file. libpng only warns that the chunk is too
// large, then allocates a buffer of that size (2.2 GB resident under the
// fuzzer). Decode now has libpng skip the ancillary chunks it does not use:
// the upload is refused as truncated, and the process that decodes it (a
// child, so the peak is its own) stays far below that.
TEST(ImageFuzzRegression, HugeDeclaredTextChunkIsNotAllocated) {
  static const uint8_t kPng[] = {
      0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52, 0x00,
      0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x00, 0x00, 0x00, 0x00, 0x3a, 0x7e, 0x9b, 0x55, 0x7a,
      0x00, 0x00, 0x0d, 0x74, 0x45, 0x58, 0x74, 0x69, 0x54, 0x00, 0x74, 0x6c, 0x65, 0x64, 0x61, 0x6e, 0x71,
      0x69, 0x6e, 0x67, 0xf1, 0xc5, 0xd5, 0xbd, 0x00, 0x00, 0x00, 0x04, 0x67, 0x41, 0x4d, 0x41, 0x00, 0x10,
      0x0b, 0x0c, 0x0e, 0x0c, 0x0a, 0x10, 0x0e, 0x0d, 0x0e, 0x12, 0x11, 0x10, 0x13, 0x18, 0x82};
  const std::span<const uint8_t> bytes(kPng, sizeof kPng);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    auto decoded = image::Decode(bytes);
    ::_exit(decoded.ok() ? 1 : decoded.status().code() == StatusCode::kInvalidArgument ? 0 : 2);
  }
  int status = 0;
  rusage usage{};
  ASSERT_EQ(::wait4(pid, &status, 0, &usage), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "the decoding child died: status " << status;
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: decoded; 2: not INVALID_ARGUMENT";
  EXPECT_LT(usage.ru_maxrss, 512L * 1024) << "peak resident kB of the decoding child";
  auto decoded = image::Decode(bytes);
  ASSERT_FALSE(decoded.ok());
  EXPECT_THAT(decoded.status().message(), HasSubstr("truncated"));
}

}  // namespace
}  // namespace danqing
