// ResourceClaim allocations: parsing (this driver's results and opaque
// configs, each malformed field named) and the GET through the emulator.
#include "dra/claim_reader.h"

#include <gtest/gtest.h>

#include "testing/support/temp_dir.h"
#include "tests/dra/slice_fixtures.h"

namespace danqing::dra {
namespace {

using nlohmann::json;

json Claim() {
  return json::parse(R"({
  "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
  "metadata": {"name": "c1", "namespace": "ml", "uid": "u-1", "resourceVersion": "7"},
  "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.danqing.io", "count": 2}}]}},
  "status": {
    "allocation": {
      "devices": {
        "results": [
          {"request": "gpu", "driver": "gpu.danqing.io", "pool": "node-1", "device": "gpu-0"},
          {"request": "nic", "driver": "nic.example.com", "pool": "node-1", "device": "eth1"},
          {"request": "gpu", "driver": "gpu.danqing.io", "pool": "node-1", "device": "gpu-1", "shareID": "a1b2", "adminAccess": false}
        ],
        "config": [
          {"source": "FromClass", "opaque": {"driver": "gpu.danqing.io", "parameters": {"sharing": {"strategy": "TimeSlicing"}}}},
          {"source": "FromClaim", "requests": ["gpu"], "opaque": {"driver": "gpu.danqing.io", "parameters": {"sharing": {"interval": "Short"}}}},
          {"source": "FromClaim", "opaque": {"driver": "nic.example.com", "parameters": {"mtu": 9000}}}
        ]
      }
    },
    "reservedFor": [{"resource": "pods", "name": "p1", "uid": "pu1"}, {"resource": "pods", "name": "p2", "uid": "pu2"}]
  }})");
}

TEST(ClaimReaderTest, ParsesThisDriversResultsAndConfig) {
  auto a = ParseClaim(Claim(), "gpu.danqing.io", "u-1");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->ns, "ml");
  EXPECT_EQ(a->name, "c1");
  EXPECT_EQ(a->resource_version, "7");
  ASSERT_EQ(a->devices.size(), 2U);
  EXPECT_EQ(a->devices[0],
            (AllocatedDevice{"gpu", "gpu.danqing.io", "node-1", "gpu-0", std::nullopt, false}));
  EXPECT_EQ(a->devices[1].device, "gpu-1");
  EXPECT_EQ(a->devices[1].share_id, "a1b2");
  ASSERT_EQ(a->config.size(), 2U);
  EXPECT_EQ(a->config[0].source, "FromClass");
  EXPECT_EQ(a->config[0].driver, "gpu.danqing.io");
  EXPECT_TRUE(a->config[0].requests.empty());
  EXPECT_EQ(a->config[0].parameters["sharing"]["strategy"], "TimeSlicing");
  EXPECT_EQ(a->config[1].requests, std::vector<std::string>{"gpu"});
  ASSERT_EQ(a->reserved_for.size(), 2U);
  EXPECT_EQ(a->reserved_for[1].name, "p2");
}

TEST(ClaimReaderTest, ErrorsNameTheClaimAndTheField) {
  auto expect = [](json c, StatusCode code, const std::string& needle) {
    auto r = ParseClaim(c, "gpu.danqing.io");
    ASSERT_FALSE(r.ok()) << needle;
    EXPECT_EQ(r.status().code(), code) << r.status().ToString();
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find("ml/c1"), std::string::npos) << r.status().message();
  };
  json c = Claim();
  c["status"].erase("allocation");
  expect(c, StatusCode::kFailedPrecondition, "status.allocation is missing");

  c = Claim();
  c["status"]["allocation"]["devices"]["results"][2].erase("pool");
  expect(c, StatusCode::kInvalidArgument, "status.allocation.devices.results[2].pool: missing");

  c = Claim();
  c["status"]["allocation"]["devices"]["results"][0]["device"] = 5;
  expect(c, StatusCode::kInvalidArgument, "results[0].device: missing or not a string");

  c = Claim();
  c["status"]["allocation"]["devices"]["results"][2]["shareID"] = 3;
  expect(c, StatusCode::kInvalidArgument, "results[2].shareID: not a string");

  c = Claim();
  c["status"]["allocation"]["devices"]["config"][1]["source"] = "FromPod";
  expect(c, StatusCode::kInvalidArgument, "config[1].source");

  c = Claim();
  c["status"]["allocation"]["devices"]["config"][0]["opaque"].erase("parameters");
  expect(c, StatusCode::kInvalidArgument, "config[0].opaque.parameters: missing");

  c = Claim();
  c["status"]["allocation"]["devices"]["results"] = "x";
  expect(c, StatusCode::kInvalidArgument, "status.allocation.devices.results: not a list");

  c = Claim();
  c["kind"] = "Pod";
  expect(c, StatusCode::kInvalidArgument, "kind");

  auto uid = ParseClaim(Claim(), "gpu.danqing.io", "u-2");
  ASSERT_FALSE(uid.ok());
  EXPECT_EQ(uid.status().code(), StatusCode::kNotFound);
  EXPECT_NE(uid.status().message().find("u-2"), std::string::npos);

  EXPECT_EQ(ParseClaimText("{not json", "gpu.danqing.io").status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseClaimText("[]", "gpu.danqing.io").status().code(), StatusCode::kInvalidArgument);
  auto no_name = ParseClaimText(R"({"metadata": {"namespace": "x"}})", "gpu.danqing.io");
  ASSERT_FALSE(no_name.ok());
  EXPECT_NE(no_name.status().message().find("metadata.name"), std::string::npos);
}

TEST(ClaimReaderTest, GetsFromTheApiServer) {
  testing::TempDir dir;
  testing::ApiFixture fx(dir.path());
  ASSERT_TRUE(fx.error.empty()) << fx.error;
  fx.server->PutClaim(Claim());
  ClaimReader reader(*fx.client, "gpu.danqing.io");
  auto a = reader.Get("ml", "c1", "u-1");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->devices.size(), 2U);
  EXPECT_EQ(fx.server->Counts()["GET resourceclaims"], 1U);

  auto missing = reader.Get("ml", "nope", "");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("ResourceClaim ml/nope"), std::string::npos);

  fx.server->SetRbac("test-token", {"list resourceslices"});
  auto denied = reader.Get("ml", "c1", "u-1");
  ASSERT_FALSE(denied.ok());
  EXPECT_EQ(denied.status().code(), StatusCode::kPermissionDenied);

  // A name that would change the REST path is refused before any request.
  const uint64_t gets = fx.server->Counts()["GET resourceclaims"];
  for (const auto& [ns, name] : std::vector<std::pair<std::string, std::string>>{
           {"ml", "../../resourceslices/x"}, {"ml", ""}, {"", "c1"}, {"ml", "c1?watch=1"}}) {
    auto bad = reader.Get(ns, name, "u-1");
    ASSERT_FALSE(bad.ok()) << ns << "/" << name;
    EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument) << ns << "/" << name;
  }
  EXPECT_EQ(fx.server->Counts()["GET resourceclaims"], gets);
}

TEST(ClaimReaderTest, AnyDriverWhenNoneIsNamed) {
  auto a = ParseClaim(Claim(), "", "u-1");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_EQ(a->devices.size(), 3U);
  EXPECT_EQ(a->devices[1].driver, "nic.example.com");
  ASSERT_EQ(a->config.size(), 3U);
  EXPECT_EQ(a->config[2].driver, "nic.example.com");
}

}  // namespace
}  // namespace danqing::dra
