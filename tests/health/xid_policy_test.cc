#include "health/xid_policy.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace danqing::health {
namespace {

using ::testing::HasSubstr;

XidPolicy Make(std::string_view disable, std::string_view enable, std::vector<int> reset = {}) {
  auto p = XidPolicy::Make(disable, enable, reset);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return p.ok() ? *p : XidPolicy();
}

TEST(XidPolicyTest, DefaultsIgnoreApplicationErrorsAndKnowResetClass) {
  XidPolicy p;
  for (uint64_t x : {13, 31, 43, 45, 68, 109}) EXPECT_EQ(p.Classify(x), XidAction::kIgnore) << x;
  for (uint64_t x : {48, 64, 74, 79, 95, 119, 120, 140, 154}) EXPECT_EQ(p.Classify(x), XidAction::kReset) << x;
  for (uint64_t x : {32, 62, 63, 92, 94, 1000}) EXPECT_EQ(p.Classify(x), XidAction::kUnhealthy) << x;
  EXPECT_TRUE(p.polled_checks());
  EXPECT_TRUE(p.any_xid_counts());
  EXPECT_THAT(p.Describe(), HasSubstr("XIDs ignored: 13,31,43,45,68,109"));
}

TEST(XidPolicyTest, DisableListAddsToApplicationErrors) {
  XidPolicy p = Make("62, 79", "");
  EXPECT_EQ(p.Classify(62), XidAction::kIgnore);
  EXPECT_EQ(p.Classify(79), XidAction::kIgnore);
  EXPECT_EQ(p.Classify(13), XidAction::kIgnore);
  EXPECT_EQ(p.Classify(63), XidAction::kUnhealthy);
  EXPECT_TRUE(p.polled_checks());
}

TEST(XidPolicyTest, XidsOrAllDisableEveryXidAllAlsoThePolledChecks) {
  XidPolicy xids = Make("xids", "");
  EXPECT_EQ(xids.Classify(79), XidAction::kIgnore);
  EXPECT_EQ(xids.Classify(62), XidAction::kIgnore);
  EXPECT_TRUE(xids.polled_checks());
  EXPECT_FALSE(xids.any_xid_counts());
  XidPolicy all = Make("ALL", "");
  EXPECT_EQ(all.Classify(79), XidAction::kIgnore);
  EXPECT_FALSE(all.polled_checks());
}

TEST(XidPolicyTest, EnableWinsOverDisableAndDefaults) {
  XidPolicy p = Make("all", "79,13");
  EXPECT_EQ(p.Classify(79), XidAction::kReset);
  EXPECT_EQ(p.Classify(13), XidAction::kUnhealthy);
  EXPECT_EQ(p.Classify(62), XidAction::kIgnore);
  EXPECT_TRUE(p.any_xid_counts());
  XidPolicy every = Make("", "all");
  EXPECT_EQ(every.Classify(31), XidAction::kUnhealthy);
}

TEST(XidPolicyTest, ResetXidsExtendTheResetClass) {
  XidPolicy p = Make("", "", {62, 94});
  EXPECT_EQ(p.Classify(62), XidAction::kReset);
  EXPECT_EQ(p.Classify(94), XidAction::kReset);
  EXPECT_EQ(p.Classify(63), XidAction::kUnhealthy);
}

TEST(XidPolicyTest, MalformedSelectionsAreClearErrors) {
  auto bad = XidPolicy::Make("13,abc", "", {});
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("DP_DISABLE_HEALTHCHECKS"));
  EXPECT_THAT(bad.status().message(), HasSubstr("\"abc\""));
  auto neg = XidPolicy::Make("", "-5", {});
  ASSERT_FALSE(neg.ok());
  EXPECT_THAT(neg.status().message(), HasSubstr("DP_ENABLE_HEALTHCHECKS"));
  auto reset = XidPolicy::Make("", "", {-1});
  ASSERT_FALSE(reset.ok());
  EXPECT_THAT(reset.status().message(), HasSubstr("resetXids"));
}

TEST(XidPolicyTest, DescriptionsOfKnownXids) {
  EXPECT_THAT(std::string(XidDescription(79)), HasSubstr("fallen off the bus"));
  EXPECT_EQ(XidDescription(99999), "");
}

}  // namespace
}  // namespace danqing::health
