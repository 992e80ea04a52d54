#include "common/status.h"

#include <gtest/gtest.h>

namespace danqing {
namespace {

TEST(StatusTest, OkByDefault) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.ToString(), "OK");
}

TEST(StatusTest, CarriesCodeAndContext) {
  Status s = NotFound("unknown device GPU-1").WithContext("Allocate nvidia.com/gpu");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.ToString(), "NOT_FOUND: Allocate nvidia.com/gpu: unknown device GPU-1");
  EXPECT_TRUE(Status::Ok().WithContext("ignored").ok());
}

TEST(ResultTest, HoldsValueOrStatus) {
  Result<int> good = 42;
  ASSERT_TRUE(good.ok());
  EXPECT_EQ(*good, 42);
  EXPECT_TRUE(good.status().ok());

  Result<int> bad = Unavailable("no driver");
  EXPECT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(bad.status().message(), "no driver");
}

}  // namespace
}  // namespace danqing
