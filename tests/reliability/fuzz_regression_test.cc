// Inputs the fuzzers under fuzz/ found, kept as regression tests in the
// normal suite (each names its fuzzer). A regression of a hang shows up as
// this test timing out under ctest.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "config/config.h"

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

}  // namespace
}  // namespace danqing
