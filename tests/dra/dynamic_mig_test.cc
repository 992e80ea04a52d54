// Dynamic MIG (issue 26): placements and counters, the partitionable-device
// slices, and the per-claim instance lifecycle over an in-memory MigControl
// and over the fake NVML (testing/fake-nvml).
#include "dra/dynamic_mig.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "dra/claim_cdi.h"
#include "dra/dynamic_mig_cdi.h"
#include "dra/mig_placements.h"
#include "dra/nvml_mig_control.h"

namespace danqing::dra {
namespace {

using Json = nlohmann::json;

std::vector<MigGpuSpec> EightA100() {
  std::vector<MigGpuSpec> gpus;
  for (int i = 0; i < 8; ++i) {
    gpus.push_back(
        A100_80GB(i, "GPU-0000000" + std::to_string(i) + "-0000-0000-0000-000000000000"));
  }
  return gpus;
}

DynamicSliceOptions Options() {
  DynamicSliceOptions o;
  o.node_name = "node-a";
  return o;
}

// --- Configuration and names. --------------------------------------------------

TEST(DynamicMigConfig, ParsesAndRejectsWithTheField) {
  auto ok = ParseDynamicMigConfig(
      Json::parse(R"({"gpus": ["0", 3, "GPU-abc", "0"], "destroyOrphans": true})"));
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  EXPECT_EQ(ok->gpus, (std::vector<std::string>{"0", "3", "GPU-abc"}));
  EXPECT_TRUE(ok->destroy_orphans);
  EXPECT_TRUE(ok->Selects(3, "GPU-x"));
  EXPECT_TRUE(ok->Selects(7, "GPU-abc"));
  EXPECT_FALSE(ok->Selects(1, "GPU-x"));
  EXPECT_TRUE(ParseDynamicMigConfig(Json::parse(R"({"gpus": ["all"]})"))->Selects(5, "GPU-y"));

  const auto message = [](const char* text) {
    auto r = ParseDynamicMigConfig(Json::parse(text));
    EXPECT_FALSE(r.ok()) << text;
    return r.ok() ? std::string() : r.status().message();
  };
  EXPECT_NE(message(R"({"gpu": ["0"]})").find("dynamicMig.gpu: unknown field"), std::string::npos);
  EXPECT_NE(message(R"({"gpus": ["0", "mig-1"]})").find("dynamicMig.gpus[1]"), std::string::npos);
  EXPECT_NE(message(R"({"gpus": [true]})").find("dynamicMig.gpus[0]"), std::string::npos);
  EXPECT_NE(message(R"({"gpus": "0"})").find("dynamicMig.gpus"), std::string::npos);
  EXPECT_NE(message(R"({"destroyOrphans": "yes"})").find("dynamicMig.destroyOrphans"),
            std::string::npos);
  EXPECT_NE(message(R"([])").find("dynamicMig"), std::string::npos);
}

TEST(DynamicMigNames, PlacementNamesRoundTrip) {
  EXPECT_EQ(DynamicMigDeviceName(0, "1g.10gb+me", 3), "gpu-0-mig-1g10gb-me-at-3");
  EXPECT_EQ(DynamicMigDeviceName(12, "3g.40gb", 4), "gpu-12-mig-3g40gb-at-4");
  const auto p = ParsePlacementName("gpu-12-mig-3g40gb-at-4");
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->gpu_index, 12);
  EXPECT_EQ(p->profile_label, "3g40gb");
  EXPECT_EQ(p->start, 4U);
  EXPECT_FALSE(ParsePlacementName("gpu-0-mig-1g10gb-9-0").has_value());  // a static device
  EXPECT_FALSE(ParsePlacementName("gpu-0").has_value());
  EXPECT_FALSE(ParsePlacementName("gpu-x-mig-1g10gb-at-1").has_value());
  EXPECT_FALSE(ParsePlacementName("gpu-0-mig-1g10gb-at-").has_value());
}

// --- The offer. -------------------------------------------------------------------

TEST(DynamicMigSlices, EightA100sRespectTheSliceLimits) {
  const auto slices = BuildDynamicMigSlices(EightA100(), {}, 4, Options());
  // 25 placements per A100-80GB (7+7+4+3+2+1+1) → 200 devices: 64+64+64+8,
  // after one slice with the 8 counter sets.
  ASSERT_EQ(slices.size(), 5U);
  const std::regex dns_label("[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?");
  std::set<std::string> names;
  std::size_t devices = 0;
  for (std::size_t i = 0; i < slices.size(); ++i) {
    const Json& s = slices[i];
    EXPECT_EQ(s["apiVersion"], "resource.k8s.io/v1");
    EXPECT_EQ(s["kind"], "ResourceSlice");
    EXPECT_EQ(s["metadata"]["name"], "node-a-gpu.danqing.io-mig-" + std::to_string(i));
    const Json& spec = s["spec"];
    EXPECT_EQ(spec["driver"], "gpu.danqing.io");
    EXPECT_EQ(spec["nodeName"], "node-a");
    EXPECT_EQ(spec["pool"],
              (Json{{"name", "node-a-mig"}, {"generation", 4}, {"resourceSliceCount", 5}}));
    EXPECT_FALSE(spec.contains("devices") && spec.contains("sharedCounters"))
        << "a slice carries one or the other";
    if (spec.contains("sharedCounters")) {
      EXPECT_EQ(i, 0U);
      EXPECT_LE(spec["sharedCounters"].size(), kMaxCounterSetsPerSlice);
      for (const auto& set : spec["sharedCounters"]) {
        EXPECT_TRUE(std::regex_match(set["name"].get<std::string>(), dns_label));
        EXPECT_LE(set["counters"].size(), kMaxCountersPerSet);
        for (const auto& [name, v] : set["counters"].items())
          EXPECT_TRUE(std::regex_match(name, dns_label)) << name;
      }
      EXPECT_EQ(spec["sharedCounters"][0]["counters"],
                Json::parse(R"({"compute-slices":{"value":"7"},"copy-engines":{"value":"7"},
                  "decoders":{"value":"5"},"jpegs":{"value":"1"},"ofas":{"value":"1"},
                  "memory-slice-0":{"value":"1"},"memory-slice-1":{"value":"1"},"memory-slice-2":{"value":"1"},
                  "memory-slice-3":{"value":"1"},"memory-slice-4":{"value":"1"},"memory-slice-5":{"value":"1"},
                  "memory-slice-6":{"value":"1"},"memory-slice-7":{"value":"1"}})"));
      continue;
    }
    EXPECT_LE(spec["devices"].size(), kMaxDevicesPerSliceWithCounters);
    for (const auto& d : spec["devices"]) {
      const std::string name = d["name"];
      EXPECT_TRUE(std::regex_match(name, dns_label)) << name;
      EXPECT_TRUE(names.insert(name).second) << "duplicate " << name;
      EXPECT_EQ(d["consumesCounters"].size(), 1U);
      EXPECT_LE(d["attributes"].size() + d["capacity"].size(), 32U);
      ++devices;
    }
  }
  EXPECT_EQ(devices, 200U);
  // One device, in full.
  const Json* three_at_four = nullptr;
  for (const auto& s : slices) {
    if (!s["spec"].contains("devices")) continue;
    for (const auto& d : s["spec"]["devices"]) {
      if (d["name"] == "gpu-5-mig-3g40gb-at-4") three_at_four = &d;
    }
  }
  ASSERT_NE(three_at_four, nullptr);
  EXPECT_EQ((*three_at_four)["consumesCounters"],
            Json::parse(R"([{"counterSet":"gpu-5-mig","counters":{"compute-slices":{"value":"3"},
              "copy-engines":{"value":"3"},"decoders":{"value":"2"},"memory-slice-4":{"value":"1"},
              "memory-slice-5":{"value":"1"},"memory-slice-6":{"value":"1"},"memory-slice-7":{"value":"1"}}}])"));
  EXPECT_EQ((*three_at_four)["attributes"]["migProfile"], (Json{{"string", "3g.40gb"}}));
  EXPECT_EQ((*three_at_four)["attributes"]["placementStart"], (Json{{"int", 4}}));
  EXPECT_EQ((*three_at_four)["capacity"]["memory"], (Json{{"value", "40192Mi"}}));
}

TEST(DynamicMigSlices, MoreThanEightGpusSplitTheCounterSets) {
  std::vector<MigGpuSpec> gpus = EightA100();
  gpus.push_back(A100_80GB(8, "GPU-00000008-0000-0000-0000-000000000000"));
  auto o = Options();
  o.max_devices_per_slice = 100;  // a lower limit than 64 is honoured; higher is the test's own
  const auto slices = BuildDynamicMigSlices(gpus, {}, 1, o);
  ASSERT_GE(slices.size(), 2U);
  EXPECT_EQ(slices[0]["spec"]["sharedCounters"].size(), 8U);
  EXPECT_EQ(slices[1]["spec"]["sharedCounters"].size(), 1U);
  // Counters of a set in another slice of the pool still govern its devices.
  EXPECT_FALSE(CountersAllow(slices, {"gpu-8-mig-7g80gb-at-0", "gpu-8-mig-1g10gb-at-0"}));
  EXPECT_TRUE(CountersAllow(slices, {"gpu-8-mig-7g80gb-at-0", "gpu-7-mig-7g80gb-at-0"}));
}

TEST(DynamicMigSlices, OverlappingPlacementsNeverFitTogether) {
  const MigGpuSpec gpu = A100_80GB(0, "GPU-00000000-0000-0000-0000-000000000000");
  const auto slices = BuildDynamicMigSlices({gpu}, {}, 1, Options());
  const auto devices = DynamicMigDevices(gpu, {});
  ASSERT_EQ(devices.size(), 25U);
  int pairs = 0;
  int allowed = 0;
  for (std::size_t i = 0; i < devices.size(); ++i) {
    for (std::size_t j = i + 1; j < devices.size(); ++j) {
      const auto& a = devices[i];
      const auto& b = devices[j];
      const uint32_t as = gpu.FindProfile(a.profile_id)->memory_slices;
      const uint32_t bs = gpu.FindProfile(b.profile_id)->memory_slices;
      const bool both_me = a.profile == "1g.10gb+me" && b.profile == "1g.10gb+me";  // one OFA
      const bool expected = !PlacementsOverlap(a.start, as, b.start, bs) && !both_me;
      EXPECT_EQ(CountersAllow(slices, {a.name, b.name}), expected) << a.name << " + " << b.name;
      ++pairs;
      allowed += expected ? 1 : 0;
    }
  }
  EXPECT_EQ(pairs, 300);
  EXPECT_GT(allowed, 0);
  // Every full layout an operator could choose fits; one more instance never does.
  const auto layouts = MaximalLayouts(gpu, {19, 15, 14, 9, 5, 0});
  ASSERT_FALSE(layouts.empty());
  for (const auto& layout : layouts) {
    std::vector<std::string> names;
    for (const auto& [id, start] : layout)
      names.push_back(DynamicMigDeviceName(0, gpu.FindProfile(id)->name, start));
    EXPECT_TRUE(CountersAllow(slices, names));
    for (const auto& extra : devices) {
      if (extra.profile == "1g.10gb+me") continue;  // another engine budget; covered above
      if (std::find(names.begin(), names.end(), extra.name) != names.end()) continue;
      auto more = names;
      more.push_back(extra.name);
      EXPECT_FALSE(CountersAllow(slices, more)) << "layout + " << extra.name;
    }
  }
  EXPECT_TRUE(CountersAllow(
      slices, {"gpu-0-mig-1g10gb-at-0", "gpu-0-mig-1g10gb-at-1", "gpu-0-mig-1g10gb-at-2",
               "gpu-0-mig-1g10gb-at-3", "gpu-0-mig-1g10gb-at-4", "gpu-0-mig-1g10gb-at-5",
               "gpu-0-mig-1g10gb-at-6"}));
  EXPECT_FALSE(CountersAllow(slices, {"gpu-0-mig-unknown"}));
}

TEST(DynamicMigSlices, StaticInstancesConsumeTheirCountersAndBlockOverlaps) {
  MigGpuSpec gpu = A100_80GB(1, "GPU-00000001-0000-0000-0000-000000000000");
  gpu.instances.push_back(
      {9, 4, 2, 0, "MIG-11111111-2222-3333-4444-555555555555"});  // 3g.40gb at 4
  const auto devices = DynamicMigDevices(gpu, {});
  std::set<std::string> names;
  for (const auto& d : devices) names.insert(d.name);
  EXPECT_TRUE(names.contains("gpu-1-mig-3g40gb-2-0"));
  EXPECT_TRUE(names.contains("gpu-1-mig-3g40gb-at-0"));
  EXPECT_FALSE(names.contains("gpu-1-mig-3g40gb-at-4"));
  EXPECT_FALSE(names.contains("gpu-1-mig-1g10gb-at-5"));
  EXPECT_FALSE(names.contains("gpu-1-mig-7g80gb-at-0"));
  EXPECT_TRUE(names.contains("gpu-1-mig-1g10gb-at-3"));
  const auto slices = BuildDynamicMigSlices({gpu}, {}, 1, Options());
  EXPECT_TRUE(CountersAllow(slices, {"gpu-1-mig-3g40gb-2-0", "gpu-1-mig-4g40gb-at-0"}));
  // An instance a claim created is the dynamic device itself, not a static one.
  const auto owned = DynamicMigDevices(gpu, {2});
  std::set<std::string> owned_names;
  for (const auto& d : owned) owned_names.insert(d.name);
  EXPECT_TRUE(owned_names.contains("gpu-1-mig-3g40gb-at-4"));
  EXPECT_FALSE(owned_names.contains("gpu-1-mig-3g40gb-2-0"));
}

// --- The lifecycle over an in-memory MigControl. -----------------------------------

// A GPU model with the A100 geometry; failures injectable per call; records
// the greatest number of calls in flight on one GPU.
class MemoryControl : public MigControl {
 public:
  explicit MemoryControl(int gpus) {
    for (int i = 0; i < gpus; ++i) {
      gpus_.push_back(
          A100_80GB(i, "GPU-0000000" + std::to_string(i) + "-0000-0000-0000-000000000000"));
    }
    mig_mode_.assign(static_cast<std::size_t>(gpus), true);
  }

  Result<MigGpuSpec> Describe(int gpu) override {
    Enter e(this, gpu);
    std::lock_guard<std::mutex> lock(mutex_);
    if (!mig_mode_[static_cast<std::size_t>(gpu)]) return FailedPrecondition("not in MIG mode");
    return gpus_[static_cast<std::size_t>(gpu)];
  }
  Result<uint32_t> CreateGpuInstance(int gpu, uint32_t profile_id, uint32_t start) override {
    Enter e(this, gpu);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    std::lock_guard<std::mutex> lock(mutex_);
    if (fail_gi)
      return ResourceExhausted("nvmlDeviceCreateGpuInstanceWithPlacement: Insufficient Resources");
    auto& g = gpus_[static_cast<std::size_t>(gpu)];
    const auto* p = g.FindProfile(profile_id);
    for (const auto& inst : g.instances) {
      if (PlacementsOverlap(start, p->memory_slices, inst.start,
                            g.FindProfile(inst.profile_id)->memory_slices)) {
        return ResourceExhausted(
            "nvmlDeviceCreateGpuInstanceWithPlacement: Insufficient Resources");
      }
    }
    const uint32_t id = next_gi_++;
    g.instances.push_back({profile_id, start, id, 0, ""});
    return id;
  }
  Result<uint32_t> CreateComputeInstance(int gpu, uint32_t gi) override {
    Enter e(this, gpu);
    std::lock_guard<std::mutex> lock(mutex_);
    if (fail_ci)
      return ResourceExhausted("nvmlGpuInstanceCreateComputeInstance: Insufficient Resources");
    for (auto& inst : gpus_[static_cast<std::size_t>(gpu)].instances) {
      if (inst.gpu_instance_id == gi)
        inst.uuid = "MIG-" + std::to_string(gpu) + "-" + std::to_string(gi);
    }
    return 0U;
  }
  Status DestroyComputeInstance(int gpu, uint32_t gi, uint32_t) override {
    Enter e(this, gpu);
    std::lock_guard<std::mutex> lock(mutex_);
    if (fail_destroy) return FailedPrecondition("nvmlComputeInstanceDestroy: In use");
    for (auto& inst : gpus_[static_cast<std::size_t>(gpu)].instances) {
      if (inst.gpu_instance_id == gi) inst.uuid.clear();
    }
    return Status::Ok();
  }
  Status DestroyGpuInstance(int gpu, uint32_t gi) override {
    Enter e(this, gpu);
    std::lock_guard<std::mutex> lock(mutex_);
    std::erase_if(gpus_[static_cast<std::size_t>(gpu)].instances,
                  [gi](const MigInstanceSpec& s) { return s.gpu_instance_id == gi; });
    return Status::Ok();
  }
  Result<std::string> MigUuid(int gpu, uint32_t gi, uint32_t) override {
    std::lock_guard<std::mutex> lock(mutex_);
    return "MIG-" + std::to_string(gpu) + "-" + std::to_string(gi);
  }

  std::size_t Instances(int gpu) {
    std::lock_guard<std::mutex> lock(mutex_);
    return gpus_[static_cast<std::size_t>(gpu)].instances.size();
  }
  void AddInstance(int gpu, MigInstanceSpec s) {
    std::lock_guard<std::mutex> lock(mutex_);
    gpus_[static_cast<std::size_t>(gpu)].instances.push_back(std::move(s));
  }
  void SetMigMode(int gpu, bool on) {
    std::lock_guard<std::mutex> lock(mutex_);
    mig_mode_[static_cast<std::size_t>(gpu)] = on;
    if (!on) gpus_[static_cast<std::size_t>(gpu)].instances.clear();
  }

  std::atomic<bool> fail_gi{false};
  std::atomic<bool> fail_ci{false};
  std::atomic<bool> fail_destroy{false};
  std::atomic<int> max_in_flight_per_gpu{0};

 private:
  struct Enter {
    Enter(MemoryControl* c, int gpu) : c_(c), gpu_(gpu) {
      const int now = ++c_->in_flight_[gpu];
      int seen = c_->max_in_flight_per_gpu.load();
      while (now > seen && !c_->max_in_flight_per_gpu.compare_exchange_weak(seen, now)) {
      }
    }
    ~Enter() { --c_->in_flight_[gpu_]; }
    MemoryControl* c_;
    int gpu_;
  };

  std::mutex mutex_;
  std::vector<MigGpuSpec> gpus_;
  std::vector<bool> mig_mode_;
  std::atomic<int> in_flight_[4] = {0, 0, 0, 0};
  uint32_t next_gi_ = 1;
};

DynamicMigConfig AllGpus(bool destroy_orphans = false) {
  DynamicMigConfig c;
  c.gpus = {"all"};
  c.destroy_orphans = destroy_orphans;
  return c;
}

TEST(DynamicMigLifecycle, PrepareCreatesAndUnprepareDestroys) {
  auto control = std::make_shared<MemoryControl>(2);
  DynamicMig mig(control, AllGpus());
  auto m = mig.Prepare("uid-1", "gpu-1-mig-3g40gb-at-4");
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m->gpu_index, 1);
  EXPECT_EQ(m->profile_id, 9U);
  EXPECT_EQ(m->start, 4U);
  EXPECT_EQ(m->mig_uuid, "MIG-1-" + std::to_string(m->gpu_instance_id));
  EXPECT_EQ(control->Instances(1), 1U);
  // Idempotent.
  auto again = mig.Prepare("uid-1", "gpu-1-mig-3g40gb-at-4");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *m);
  EXPECT_EQ(control->Instances(1), 1U);
  // Round trip through the checkpoint form.
  auto back = MigInstanceFromJson(ToJson(*m));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, *m);
  EXPECT_FALSE(MigInstanceFromJson(Json::object()).ok());

  ASSERT_TRUE(mig.Unprepare("uid-1", "gpu-1-mig-3g40gb-at-4").ok());
  EXPECT_EQ(control->Instances(1), 0U);
  EXPECT_TRUE(mig.Held().empty());
  EXPECT_TRUE(mig.Unprepare("uid-1", "gpu-1-mig-3g40gb-at-4").ok()) << "unprepare is idempotent";
}

TEST(DynamicMigLifecycle, BadInputGetsAClearErrorPerClaim) {
  auto control = std::make_shared<MemoryControl>(2);
  DynamicMigConfig only_zero;
  only_zero.gpus = {"0"};
  DynamicMig mig(control, only_zero);
  const auto expect = [&](const std::string& device, StatusCode code, const std::string& part) {
    auto r = mig.Prepare("uid-9", device);
    ASSERT_FALSE(r.ok()) << device;
    EXPECT_EQ(r.status().code(), code) << device << ": " << r.status().message();
    EXPECT_NE(r.status().message().find("claim uid-9, device " + device), std::string::npos)
        << r.status().message();
    EXPECT_NE(r.status().message().find(part), std::string::npos) << r.status().message();
  };
  expect("gpu-0", StatusCode::kNotFound, "not a dynamic MIG placement");
  expect("gpu-0-mig-5g50gb-at-0", StatusCode::kInvalidArgument, "has no MIG profile \"5g50gb\"");
  expect("gpu-0-mig-3g40gb-at-2", StatusCode::kInvalidArgument,
         "cannot be placed at memory slice 2");
  expect("gpu-1-mig-3g40gb-at-0", StatusCode::kFailedPrecondition,
         "not configured for dynamic MIG");
  ASSERT_TRUE(mig.Prepare("uid-1", "gpu-0-mig-4g40gb-at-0").ok());
  expect("gpu-0-mig-2g20gb-at-2", StatusCode::kResourceExhausted, "taken by GPU instance");
  control->SetMigMode(0, false);
  expect("gpu-0-mig-3g40gb-at-4", StatusCode::kFailedPrecondition, "not in MIG mode");
  // The GPU left MIG mode under the agent: its instance is gone; unprepare succeeds.
  EXPECT_TRUE(mig.Unprepare("uid-1", "gpu-0-mig-4g40gb-at-0").ok());
  EXPECT_TRUE(mig.Held().empty());
}

TEST(DynamicMigLifecycle, ComputeInstanceFailureLeavesNoHalfMadeInstance) {
  auto control = std::make_shared<MemoryControl>(1);
  DynamicMig mig(control, AllGpus());
  control->fail_ci = true;
  auto r = mig.Prepare("uid-2", "gpu-0-mig-2g20gb-at-2");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(r.status().message().find("creating the compute instance"), std::string::npos);
  EXPECT_EQ(control->Instances(0), 0U);
  EXPECT_TRUE(mig.Held().empty());
  control->fail_ci = false;
  control->fail_gi = true;
  r = mig.Prepare("uid-2", "gpu-0-mig-2g20gb-at-2");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("creating the GPU instance"), std::string::npos);
  control->fail_gi = false;
  ASSERT_TRUE(mig.Prepare("uid-2", "gpu-0-mig-2g20gb-at-2").ok());
  // A destroy error is reported and the claim is kept, to retry.
  control->fail_destroy = true;
  Status s = mig.Unprepare("uid-2", "gpu-0-mig-2g20gb-at-2");
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("destroying the compute instance"), std::string::npos);
  EXPECT_EQ(mig.Held().size(), 1U);
  control->fail_destroy = false;
  EXPECT_TRUE(mig.Unprepare("uid-2", "gpu-0-mig-2g20gb-at-2").ok());
  EXPECT_EQ(control->Instances(0), 0U);
}

TEST(DynamicMigLifecycle, ClaimsOnOneGpuAreSerialised) {
  auto control = std::make_shared<MemoryControl>(2);
  DynamicMig mig(control, AllGpus());
  // Seven 1g claims and one 7g at once on GPU 0 (the 7g conflicts with all),
  // and two on GPU 1.
  std::vector<std::string> devices;
  for (int s = 0; s < 7; ++s) devices.push_back("gpu-0-mig-1g10gb-at-" + std::to_string(s));
  devices.push_back("gpu-0-mig-7g80gb-at-0");
  devices.push_back("gpu-1-mig-3g40gb-at-0");
  devices.push_back("gpu-1-mig-3g40gb-at-4");
  std::vector<Status> results(devices.size());
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < devices.size(); ++i) {
    threads.emplace_back([&, i] {
      auto r = mig.Prepare("uid-" + std::to_string(i), devices[i]);
      results[i] = r.status();
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(control->max_in_flight_per_gpu.load(), 1) << "calls on one GPU overlapped";
  int ok = 0;
  for (std::size_t i = 0; i < devices.size(); ++i) {
    if (results[i].ok()) {
      ++ok;
    } else {
      EXPECT_EQ(results[i].code(), StatusCode::kResourceExhausted)
          << devices[i] << ": " << results[i].message();
      EXPECT_NE(results[i].message().find("claim uid-" + std::to_string(i)), std::string::npos);
    }
  }
  // Either the seven 1g or the 7g got GPU 0 (whichever came first, and all
  // the 1g that came before a 7g); GPU 1 is unaffected.
  EXPECT_TRUE(results[8].ok());
  EXPECT_TRUE(results[9].ok());
  const std::size_t on_gpu0 = control->Instances(0);
  EXPECT_TRUE(on_gpu0 == 7 || (results[7].ok() && on_gpu0 == 1)) << on_gpu0;
  EXPECT_EQ(static_cast<std::size_t>(ok), on_gpu0 + 2);
}

TEST(DynamicMigLifecycle, ARepeatWhileTheFirstPrepareRunsGetsTheSameInstance) {
  auto control = std::make_shared<MemoryControl>(1);
  DynamicMig mig(control, AllGpus());
  std::vector<Result<MigInstance>> results(4, Result<MigInstance>(Internal("not run")));
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < results.size(); ++i) {
    threads.emplace_back([&, i] { results[i] = mig.Prepare("uid-r", "gpu-0-mig-3g40gb-at-0"); });
  }
  for (auto& t : threads) t.join();
  for (const auto& r : results) {
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_EQ(*r, *results[0]);
  }
  EXPECT_EQ(control->Instances(0), 1U);
}

TEST(DynamicMigLifecycle, RestartKeepsPreparedAndReportsOrphans) {
  auto control = std::make_shared<MemoryControl>(2);
  std::map<std::string, std::vector<MigInstance>> checkpoint;
  {
    DynamicMig before(control, AllGpus());
    ASSERT_TRUE(before.Prepare("uid-a", "gpu-0-mig-3g40gb-at-0").ok());
    ASSERT_TRUE(before.Prepare("uid-b", "gpu-0-mig-3g40gb-at-4").ok());
    checkpoint = before.Held();
  }
  checkpoint.erase("uid-b");  // its checkpoint entry was lost: its instance is an orphan
  control->AddInstance(1, {14, 2, 40, 0, ""});  // a half-made GPU instance (no compute instance)
  {
    DynamicMig after(control, AllGpus(/*destroy_orphans=*/false));
    const auto orphans = after.Reconcile(checkpoint, {0, 1});
    ASSERT_EQ(orphans.size(), 2U);
    EXPECT_EQ(orphans[0].gpu_index, 0);
    EXPECT_EQ(orphans[0].profile, "3g.40gb");
    EXPECT_EQ(orphans[0].start, 4U);
    EXPECT_TRUE(orphans[0].compute_instance_id.has_value());
    EXPECT_FALSE(orphans[0].destroyed);
    EXPECT_EQ(orphans[1].gpu_index, 1);
    EXPECT_FALSE(orphans[1].compute_instance_id.has_value());
    EXPECT_EQ(after.Held(), checkpoint);
    EXPECT_EQ(control->Instances(0), 2U) << "not destroyed unless configured";
    EXPECT_EQ(after.Orphans({0, 1}).size(), 2U);
  }
  {
    DynamicMig after(control, AllGpus(/*destroy_orphans=*/true));
    const auto orphans = after.Reconcile(checkpoint, {0, 1});
    ASSERT_EQ(orphans.size(), 2U);
    EXPECT_TRUE(orphans[0].destroyed);
    EXPECT_TRUE(orphans[1].destroyed);
    EXPECT_EQ(control->Instances(0), 1U);
    EXPECT_EQ(control->Instances(1), 0U);
    // The kept instance is still unprepared normally.
    EXPECT_TRUE(after.Unprepare("uid-a", "gpu-0-mig-3g40gb-at-0").ok());
    EXPECT_EQ(control->Instances(0), 0U);
  }
  // Doctor's view: reported, nothing destroyed.
  {
    DynamicMig more(control, AllGpus());
    ASSERT_TRUE(more.Prepare("uid-x", "gpu-1-mig-1g10gb-at-0").ok());
  }
  const auto report =
      FindOrphanInstances(control, AllGpus(/*destroy_orphans=*/true), checkpoint, {0, 1});
  ASSERT_EQ(report.size(), 1U);
  EXPECT_FALSE(report[0].destroyed);
  EXPECT_EQ(
      DescribeOrphan(report[0]).rfind("GPU 1: MIG 1g.10gb at memory slice 0 (GPU instance ", 0), 0U)
      << DescribeOrphan(report[0]);
  EXPECT_NE(DescribeOrphan(report[0]).find("compute instance 0) is held by no prepared claim"),
            std::string::npos);
  EXPECT_EQ(control->Instances(1), 1U);
  // A checkpointed instance that vanished is dropped.
  DynamicMig again(control, AllGpus());
  EXPECT_TRUE(again.Reconcile(checkpoint, {0}).empty());
  EXPECT_TRUE(again.Held().empty());
}

TEST(DynamicMigLifecycle, StateFileCarriesHeldInstancesAcrossARestart) {
  const std::string dir = "/tmp/dmig-state-" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string file = dir + "/dynamic-mig.json";
  auto control = std::make_shared<MemoryControl>(1);
  {
    DynamicMig before(control, AllGpus(), file);
    ASSERT_TRUE(before.Prepare("uid-a", "gpu-0-mig-2g20gb-at-0").ok());
    ASSERT_TRUE(before.Prepare("uid-b", "gpu-0-mig-2g20gb-at-2").ok());
    ASSERT_TRUE(before.Unprepare("uid-b", "gpu-0-mig-2g20gb-at-2").ok());
  }
  auto loaded = DynamicMig::LoadState(file);
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  ASSERT_EQ(loaded->size(), 1U);
  ASSERT_TRUE(loaded->contains("uid-a"));
  DynamicMig after(control, AllGpus(), file);
  EXPECT_TRUE(after.Reconcile(*loaded, {0}).empty()) << "the held instance is no orphan";
  EXPECT_EQ(after.Held(), *loaded);
  // Missing: empty. Corrupt: an error naming the file.
  auto missing = DynamicMig::LoadState(dir + "/none.json");
  ASSERT_TRUE(missing.ok());
  EXPECT_TRUE(missing->empty());
  std::ofstream(dir + "/bad.json") << "{\"claims\": {\"u\": [{\"gpuIndex\": 0}]}}";
  auto bad = DynamicMig::LoadState(dir + "/bad.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find(dir + "/bad.json"), std::string::npos)
      << bad.status().message();
  std::ofstream(dir + "/junk.json") << "not json";
  EXPECT_FALSE(DynamicMig::LoadState(dir + "/junk.json").ok());
  // A state file that cannot be written fails the prepare and leaves no instance.
  DynamicMig unwritable(control, AllGpus(), dir + "/no-such-dir/state.json");
  auto r = unwritable.Prepare("uid-c", "gpu-0-mig-3g40gb-at-4");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("recording the instance"), std::string::npos)
      << r.status().message();
  EXPECT_EQ(control->Instances(0), 1U);
  std::filesystem::remove_all(dir);
}

// --- Over the fake NVML. ------------------------------------------------------------

class FakeNvmlControl {
 public:
  explicit FakeNvmlControl(const std::string& path) {
    fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strncpy(a.sun_path, path.c_str(), sizeof(a.sun_path) - 1);
    EXPECT_EQ(::connect(fd_, reinterpret_cast<const sockaddr*>(&a), sizeof(a)), 0) << path;
  }
  ~FakeNvmlControl() { ::close(fd_); }
  Json Send(const Json& command) {
    const std::string line = command.dump() + "\n";
    EXPECT_EQ(::send(fd_, line.data(), line.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(line.size()));
    std::string reply;
    char c = 0;
    while (::recv(fd_, &c, 1, 0) == 1 && c != '\n') reply.push_back(c);
    Json j = Json::parse(reply);
    EXPECT_TRUE(j.contains("ok") && j.at("ok") == Json(true)) << command.dump() << " -> " << reply;
    return j;
  }

 private:
  int fd_ = -1;
};

class DynamicMigNvml : public ::testing::Test {
 protected:
  void SetUp() override {
    socket_ =
        "/tmp/dmig-" + std::to_string(::getpid()) + "-" + std::to_string(counter_++) + ".sock";
    ::setenv("FAKE_NVML_PROFILE",
             (std::string(DANQING_FAKE_NVML_PROFILE_DIR) + "/a100-mig-mixed.json").c_str(), 1);
    ::setenv("FAKE_NVML_CONTROL", socket_.c_str(), 1);
    auto opened = NvmlMigControl::Open(DANQING_FAKE_NVML_LIB);
    ASSERT_TRUE(opened.ok()) << opened.status().message();
    control_ = std::move(*opened);
    fake_ = std::make_unique<FakeNvmlControl>(socket_);
    // GPU 2 in MIG mode with nothing on it.
    fake_->Send({{"cmd", "mig"}, {"gpu", 2}, {"mig", {{"mode", 1}, {"devices", Json::array()}}}});
  }
  void TearDown() override {
    fake_.reset();
    control_.reset();
    ::unsetenv("FAKE_NVML_PROFILE");
    ::unsetenv("FAKE_NVML_CONTROL");
  }
  std::size_t FakeDevices(int gpu) {
    return fake_->Send({{"cmd", "get"}, {"gpu", gpu}})["gpu"]["mig"]["devices"].size();
  }

  static inline int counter_ = 0;
  std::string socket_;
  std::shared_ptr<NvmlMigControl> control_;
  std::unique_ptr<FakeNvmlControl> fake_;
};

TEST_F(DynamicMigNvml, DescribeReadsProfilesPlacementsAndInstances) {
  auto gpu = control_->Describe(2);
  ASSERT_TRUE(gpu.ok()) << gpu.status().message();
  EXPECT_EQ(gpu->profiles.size(), 7U);
  const MigGpuSpec reference = A100_80GB(2, gpu->uuid);
  for (const auto& want : reference.profiles) {
    const MigProfileSpec* got = gpu->FindProfile(want.profile_id);
    ASSERT_NE(got, nullptr) << want.name;
    EXPECT_EQ(got->name, want.name);
    EXPECT_EQ(got->placement_starts, want.placement_starts) << want.name;
    EXPECT_EQ(got->memory_slices, want.memory_slices) << want.name;
    EXPECT_EQ(GpuCounters(*gpu), GpuCounters(reference));
  }
  EXPECT_TRUE(gpu->instances.empty());
  auto mixed = control_->Describe(0);  // 3g.40gb + 2g.20gb + 2 x 1g.10gb
  ASSERT_TRUE(mixed.ok());
  EXPECT_EQ(mixed->instances.size(), 4U);
  for (const auto& inst : mixed->instances) EXPECT_EQ(inst.uuid.rfind("MIG-", 0), 0U);
  auto off = control_->Describe(3);
  ASSERT_FALSE(off.ok());
  EXPECT_EQ(off.status().code(), StatusCode::kFailedPrecondition);
}

TEST_F(DynamicMigNvml, PrepareAndUnprepareThroughNvml) {
  DynamicMig mig(control_, AllGpus());
  auto m = mig.Prepare("uid-1", "gpu-2-mig-3g40gb-at-4");
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m->mig_uuid.rfind("MIG-", 0), 0U);
  EXPECT_EQ(m->parent_minor, std::optional<uint32_t>(2U));  // the profile's GPU 2 has minor 2
  const Json state = fake_->Send({{"cmd", "get"}, {"gpu", 2}});
  ASSERT_EQ(state["gpu"]["mig"]["devices"].size(), 1U);
  EXPECT_EQ(state["gpu"]["mig"]["devices"][0]["uuid"], m->mig_uuid);
  EXPECT_EQ(state["gpu"]["mig"]["devices"][0]["placement_start"], 4);
  // The overlapping placement is refused; a free one works; a static GPU's slices too.
  auto overlap = mig.Prepare("uid-2", "gpu-2-mig-1g10gb-at-5");
  ASSERT_FALSE(overlap.ok());
  EXPECT_EQ(overlap.status().code(), StatusCode::kResourceExhausted);
  ASSERT_TRUE(mig.Prepare("uid-2", "gpu-2-mig-4g40gb-at-0").ok());
  EXPECT_EQ(FakeDevices(2), 2U);
  ASSERT_TRUE(mig.Unprepare("uid-1", "gpu-2-mig-3g40gb-at-4").ok());
  ASSERT_TRUE(mig.Unprepare("uid-2", "gpu-2-mig-4g40gb-at-0").ok());
  EXPECT_EQ(FakeDevices(2), 0U);
  // A GPU not in MIG mode.
  auto off = mig.Prepare("uid-3", "gpu-3-mig-1g10gb-at-0");
  ASSERT_FALSE(off.ok());
  EXPECT_EQ(off.status().code(), StatusCode::kFailedPrecondition);
}

TEST_F(DynamicMigNvml, ComputeInstanceFaultLeavesNothing) {
  DynamicMig mig(control_, AllGpus());
  fake_->Send({{"cmd", "fail"},
               {"gpu", 2},
               {"function", "nvmlGpuInstanceCreateComputeInstance"},
               {"error", "UNKNOWN"}});
  auto r = mig.Prepare("uid-1", "gpu-2-mig-2g20gb-at-2");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("nvmlGpuInstanceCreateComputeInstance"), std::string::npos)
      << r.status().message();
  EXPECT_EQ(FakeDevices(2), 0U) << "the GPU instance was destroyed again";
  fake_->Send({{"cmd", "fail"},
               {"gpu", 2},
               {"function", "nvmlGpuInstanceCreateComputeInstance"},
               {"error", nullptr}});
  // A destroy error from NVML: reported, claim kept.
  ASSERT_TRUE(mig.Prepare("uid-1", "gpu-2-mig-2g20gb-at-2").ok());
  fake_->Send({{"cmd", "fail"},
               {"gpu", 2},
               {"function", "nvmlComputeInstanceDestroy"},
               {"error", "IN_USE"}});
  Status s = mig.Unprepare("uid-1", "gpu-2-mig-2g20gb-at-2");
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.message();
  EXPECT_EQ(mig.Held().size(), 1U);
  fake_->Send({{"cmd", "fail"},
               {"gpu", 2},
               {"function", "nvmlComputeInstanceDestroy"},
               {"error", nullptr}});
  EXPECT_TRUE(mig.Unprepare("uid-1", "gpu-2-mig-2g20gb-at-2").ok());
  EXPECT_EQ(FakeDevices(2), 0U);
}

TEST_F(DynamicMigNvml, GpuLeavingMigModeAndTwoClaimsAtOnce) {
  DynamicMig mig(control_, AllGpus());
  std::vector<Status> results(2);
  std::thread a([&] { results[0] = mig.Prepare("uid-a", "gpu-2-mig-3g40gb-at-0").status(); });
  std::thread b([&] { results[1] = mig.Prepare("uid-b", "gpu-2-mig-3g40gb-at-4").status(); });
  a.join();
  b.join();
  EXPECT_TRUE(results[0].ok()) << results[0].message();
  EXPECT_TRUE(results[1].ok()) << results[1].message();
  EXPECT_EQ(FakeDevices(2), 2U);
  // The GPU leaves MIG mode under the agent.
  fake_->Send({{"cmd", "mig"}, {"gpu", 2}, {"mig", {{"mode", 0}}}});
  EXPECT_TRUE(mig.Unprepare("uid-a", "gpu-2-mig-3g40gb-at-0").ok());
  auto r = mig.Prepare("uid-c", "gpu-2-mig-1g10gb-at-0");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  // The other GPUs are unaffected.
  EXPECT_TRUE(control_->Describe(0).ok());
}

TEST_F(DynamicMigNvml, PreparedInstanceGetsItsCdiDeviceNodes) {
  DynamicMig mig(control_, AllGpus());
  auto m = mig.Prepare("uid-cdi", "gpu-2-mig-1g10gb-at-6");
  ASSERT_TRUE(m.ok()) << m.status().message();
  const std::string root = "/tmp/dmig-cdi-" + std::to_string(::getpid());
  std::filesystem::remove_all(root);
  ClaimCdiOptions options;
  options.cdi_root = root;
  options.kind = "gpu.danqing.io/claim";
  options.dev_root =
      root + "/dev";  // no control nodes there: the spec lists the device's nodes alone
  const std::string gi = "gpu2/gi" + std::to_string(m->gpu_instance_id);
  options.mig_cap_minors = {
      {gi + "/access", 30}, {gi + "/ci0/access", 31}, {"gpu2/gi99/access", 99}};
  PreparedClaim claim;
  claim.uid = "uid-cdi";
  PreparedDevice pd;
  pd.pool = "node-a-mig";
  pd.device = m->device;
  pd.gpu_uuid = m->gpu_uuid;
  claim.devices.push_back(pd);
  const NodeDevice node = DynamicMigNodeDevice(*m, 2);
  ASSERT_TRUE(WriteClaimSpec(options, claim, {&node}, AtomicFileWriter()).ok());
  const Json spec = Json::parse(std::ifstream(ClaimSpecPath(options, "uid-cdi")));
  ASSERT_EQ(spec["devices"].size(), 1U);
  EXPECT_EQ(spec["devices"][0]["name"], "uid-cdi-gpu-2-mig-1g10gb-at-6");
  std::vector<std::string> paths;
  for (const auto& n : spec.at("devices").at(0).at("containerEdits").at("deviceNodes")) {
    paths.push_back(n.at("path").get<std::string>());
  }
  EXPECT_EQ(paths, (std::vector<std::string>{"/dev/nvidia2", "/dev/nvidia-caps/nvidia-cap30",
                                             "/dev/nvidia-caps/nvidia-cap31"}));
  std::filesystem::remove_all(root);
  EXPECT_TRUE(mig.Unprepare("uid-cdi", m->device).ok());
}

}  // namespace
}  // namespace danqing::dra
