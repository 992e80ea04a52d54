// The health state machine, driven with an injected clock.
#include "health/monitor.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>

namespace danqing::health {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;
using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::Pair;

constexpr char kGpu0[] = "GPU-00000000-0000-0000-0000-000000000000";
constexpr char kGpu1[] = "GPU-11111111-1111-1111-1111-111111111111";
constexpr char kMigA[] = "MIG-aaaaaaaa-aaaa-aaaa-aaaa-aaaaaaaaaaaa";
constexpr char kMigB[] = "MIG-bbbbbbbb-bbbb-bbbb-bbbb-bbbbbbbbbbbb";

gpu::NodeInventory Inventory() {
  gpu::NodeInventory inv;
  gpu::Gpu g0;
  g0.index = 0;
  g0.uuid = kGpu0;
  gpu::Gpu g1;
  g1.index = 1;
  g1.uuid = kGpu1;
  gpu::MigDevice a;
  a.uuid = kMigA;
  a.parent_uuid = kGpu1;
  a.gpu_instance_id = 1;
  a.compute_instance_id = 0;
  gpu::MigDevice b = a;
  b.uuid = kMigB;
  b.gpu_instance_id = 2;
  g1.mig_devices = {a, b};
  inv.gpus = {g0, g1};
  return inv;
}

gpu::GpuEvent Xid(const std::string& uuid, uint64_t xid, std::optional<uint32_t> gi = std::nullopt) {
  gpu::GpuEvent e;
  e.kind = gpu::EventKind::kXid;
  e.uuid = uuid;
  e.xid = xid;
  e.gpu_instance_id = gi;
  return e;
}

gpu::Sensors Normal() {
  gpu::Sensors s;
  s.temperature_c = 60;
  s.throttle_reasons = 0;
  s.ecc_volatile_uncorrected = 0;
  s.retired_pages_pending = false;
  s.remapped_rows_pending = false;
  s.remapped_rows_failure = false;
  return s;
}

class MonitorTest : public ::testing::Test {
 protected:
  MonitorTest() : monitor_(Options()) { monitor_.SetInventory(Inventory()); }
  static MonitorOptions Options() {
    MonitorOptions o;
    o.quiet_period = 5min;
    return o;
  }
  Clock::time_point t0_ = Clock::time_point{} + 1h;
  Monitor monitor_;
};

TEST_F(MonitorTest, RecoverableXidClearsAfterTheQuietPeriod) {
  EXPECT_TRUE(monitor_.OnEvent(Xid(kGpu0, 62), t0_));
  EXPECT_THAT(monitor_.Unhealthy(), ElementsAre(Pair(kGpu0, "xid-62")));
  EXPECT_FALSE(monitor_.Tick(t0_ + 4min));
  // A new XID restarts the quiet period.
  EXPECT_FALSE(monitor_.OnEvent(Xid(kGpu0, 62), t0_ + 4min));
  EXPECT_FALSE(monitor_.Tick(t0_ + 8min));
  EXPECT_TRUE(monitor_.Tick(t0_ + 9min));
  EXPECT_THAT(monitor_.Unhealthy(), IsEmpty());
  EXPECT_EQ(monitor_.transitions().at("unhealthy:xid"), 1u);
  EXPECT_EQ(monitor_.transitions().at("healthy:xid"), 1u);
  auto snap = monitor_.Snapshot();
  for (const auto& d : snap) {
    if (d.uuid == kGpu0) {
      EXPECT_THAT(d.xid_counts, ElementsAre(Pair(62u, 2u)));
    }
  }
}

TEST_F(MonitorTest, DeferredLogLinesWaitForTheCaller) {
  // Written at once by default: nothing is kept.
  EXPECT_TRUE(monitor_.OnEvent(Xid(kGpu0, 62), t0_));
  EXPECT_THAT(monitor_.TakeLog(), IsEmpty());
  // Deferred: each transition and ignored XID is kept, in order, until taken.
  monitor_.DeferLog(true);
  EXPECT_TRUE(monitor_.Tick(t0_ + 6min));
  EXPECT_FALSE(monitor_.OnEvent(Xid(kGpu0, 13), t0_ + 6min));
  EXPECT_TRUE(monitor_.OnEvent(Xid(kGpu0, 79), t0_ + 7min));
  const auto lines = monitor_.TakeLog();
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_FALSE(lines[0].warning);
  EXPECT_THAT(lines[0].text, HasSubstr(std::string(kGpu0) + " is healthy again (xid-62 cleared"));
  EXPECT_FALSE(lines[1].warning);
  EXPECT_THAT(lines[1].text, HasSubstr("XID 13"));
  EXPECT_THAT(lines[1].text, HasSubstr("ignored"));
  EXPECT_TRUE(lines[2].warning);
  EXPECT_THAT(lines[2].text, HasSubstr(std::string(kGpu0) + " marked unhealthy: xid-79"));
  EXPECT_THAT(monitor_.TakeLog(), IsEmpty());
}

TEST_F(MonitorTest, ResetClassXidNeverClears) {
  EXPECT_TRUE(monitor_.OnEvent(Xid(kGpu0, 79), t0_));
  EXPECT_FALSE(monitor_.Tick(t0_ + 24h));
  EXPECT_THAT(monitor_.Unhealthy(), ElementsAre(Pair(kGpu0, "xid-79")));
  for (const auto& d : monitor_.Snapshot()) {
    if (d.uuid == kGpu0) {
      EXPECT_TRUE(d.needs_reset);
    }
  }
  // Polls of a GPU that answers do not clear it either.
  EXPECT_FALSE(monitor_.OnPoll(kGpu0, Normal(), t0_ + 25h));
  EXPECT_EQ(monitor_.Unhealthy().size(), 1u);
}

TEST_F(MonitorTest, AMonitorThatReplacesAnotherCarriesItsConditions) {
  EXPECT_TRUE(monitor_.OnEvent(Xid(kGpu0, 79), t0_));  // needs a reset
  EXPECT_TRUE(monitor_.OnEvent(Xid(kGpu1, 62), t0_));  // clears after the quiet period
  MonitorOptions longer = Options();
  longer.quiet_period = 20min;
  Monitor next(longer);
  gpu::NodeInventory only_gpu0 = Inventory();
  only_gpu0.gpus.resize(1);
  next.SetInventory(only_gpu0);
  next.CarryFrom(monitor_);
  // GPU 1 is not tracked any more: its condition stays behind.
  EXPECT_THAT(next.Unhealthy(), ElementsAre(Pair(kGpu0, "xid-79")));
  EXPECT_FALSE(next.Tick(t0_ + 24h));
  EXPECT_EQ(next.transitions().at("unhealthy:xid"), 2u);  // counters go on from the old ones
  // The carried GPU keeps its XID counts.
  for (const auto& h : next.Snapshot()) {
    if (h.uuid == kGpu0) {
      EXPECT_EQ(h.xid_counts.at(79), 1u);
    }
  }
}

TEST_F(MonitorTest, ConditionsTheNewPolicyWouldNotRaiseAreNotCarried) {
  EXPECT_TRUE(monitor_.OnEvent(Xid(kGpu0, 79), t0_));
  EXPECT_TRUE(monitor_.OnPoll(kGpu1, Status(StatusCode::kDeviceLost, "GPU is lost"), t0_));
  // The operator switches the checks off ("all"): both GPUs come back.
  MonitorOptions off = Options();
  off.policy = *XidPolicy::Make("all", "", {});
  Monitor next(off);
  next.SetInventory(Inventory());
  next.CarryFrom(monitor_);
  EXPECT_TRUE(next.Unhealthy().empty());
  // XID 79 ignored by name, the lost GPU still checked: only that one stays.
  MonitorOptions some = Options();
  some.policy = *XidPolicy::Make("79", "", {});
  Monitor third(some);
  third.SetInventory(Inventory());
  third.CarryFrom(monitor_);
  EXPECT_THAT(third.Unhealthy(), ElementsAre(Pair(kGpu1, "gpu-lost")));
}

TEST_F(MonitorTest, ApplicationXidIsCountedButIgnored) {
  EXPECT_FALSE(monitor_.OnEvent(Xid(kGpu0, 13), t0_));
  EXPECT_THAT(monitor_.Unhealthy(), IsEmpty());
  for (const auto& d : monitor_.Snapshot()) {
    if (d.uuid == kGpu0) {
      EXPECT_THAT(d.xid_counts, ElementsAre(Pair(13u, 1u)));
    }
  }
}

TEST_F(MonitorTest, MigEventHitsOnlyThatMigDevice) {
  EXPECT_TRUE(monitor_.OnEvent(Xid(kGpu1, 62, 2), t0_));
  EXPECT_THAT(monitor_.Unhealthy(), ElementsAre(Pair(kMigB, "xid-62")));
  // Without instance ids the GPU itself (and through it every MIG device).
  EXPECT_TRUE(monitor_.OnEvent(Xid(kGpu1, 62), t0_));
  EXPECT_THAT(monitor_.Unhealthy(), ElementsAre(Pair(kGpu1, "xid-62"), Pair(kMigB, "xid-62")));
}

// NVML reports every XID on the GPU's handle: the GPU's counts (its
// DCGM_FI_DEV_XID_ERRORS and xid_errors_total) include those of its MIG
// instances, and an instance keeps its own.
TEST_F(MonitorTest, XidsOfAMigInstanceAreCountedOnItsGpu) {
  monitor_.OnEvent(Xid(kGpu1, 31, 1), t0_);
  monitor_.OnEvent(Xid(kGpu1, 62, 2), t0_ + 1s);
  monitor_.OnEvent(Xid(kGpu1, 62), t0_ + 2s);
  std::map<std::string, DeviceHealth> by_uuid;
  for (auto& d : monitor_.Snapshot()) by_uuid[d.uuid] = d;
  EXPECT_THAT(by_uuid[kGpu1].xid_counts, ElementsAre(Pair(31u, 1u), Pair(62u, 2u)));
  EXPECT_EQ(by_uuid[kGpu1].last_xid, 62u);
  EXPECT_THAT(by_uuid[kMigA].xid_counts, ElementsAre(Pair(31u, 1u)));
  EXPECT_EQ(by_uuid[kMigA].last_xid, 31u);
  EXPECT_THAT(by_uuid[kMigB].xid_counts, ElementsAre(Pair(62u, 1u)));
  EXPECT_THAT(by_uuid[kGpu0].xid_counts, IsEmpty());
  // XID 31 is an application error: counted, nobody unhealthy for it.
  EXPECT_THAT(monitor_.Unhealthy(), ElementsAre(Pair(kGpu1, "xid-62"), Pair(kMigB, "xid-62")));
}

TEST_F(MonitorTest, UnattributedXidHitsEveryGpuUnknownDeviceNone) {
  EXPECT_TRUE(monitor_.OnEvent(Xid("", 62), t0_));
  EXPECT_EQ(monitor_.Unhealthy().size(), 2u);
  EXPECT_FALSE(monitor_.OnEvent(Xid("GPU-not-here", 62), t0_));
}

TEST_F(MonitorTest, LostGpuComesBackWhenNvmlAnswers) {
  EXPECT_TRUE(monitor_.OnPoll(kGpu0, Status(StatusCode::kDeviceLost, "GPU is lost"), t0_));
  EXPECT_THAT(monitor_.Unhealthy(), ElementsAre(Pair(kGpu0, "gpu-lost")));
  EXPECT_TRUE(monitor_.OnPoll(kGpu0, Normal(), t0_ + 1s));
  EXPECT_THAT(monitor_.Unhealthy(), IsEmpty());
  EXPECT_TRUE(monitor_.OnPoll(kGpu0, Status(StatusCode::kInternal, "boom"), t0_ + 2s));
  EXPECT_THAT(monitor_.Unhealthy(), ElementsAre(Pair(kGpu0, "nvml-error")));
}

TEST_F(MonitorTest, EssentialCallFailuresMarkOthersDoNot) {
  gpu::Sensors s = Normal();
  s.failures.push_back(Status(StatusCode::kInternal, "nvmlDeviceGetPowerUsage on GPU-0: Unknown Error"));
  EXPECT_FALSE(monitor_.OnPoll(kGpu0, s, t0_));
  s.failures.push_back(Status(StatusCode::kInternal, "nvmlDeviceGetTemperature on GPU-0: Unknown Error"));
  EXPECT_TRUE(monitor_.OnPoll(kGpu0, s, t0_ + 1s));
  EXPECT_THAT(monitor_.Unhealthy(), ElementsAre(Pair(kGpu0, "nvml-error")));
  EXPECT_TRUE(monitor_.OnPoll(kGpu0, Normal(), t0_ + 2s));
}

TEST_F(MonitorTest, ThermalSlowdownRecoversWithHysteresis) {
  gpu::Sensors hot = Normal();
  hot.temperature_c = 93;
  hot.throttle_reasons = gpu::throttle::kHwThermalSlowdown;
  EXPECT_TRUE(monitor_.OnPoll(kGpu0, hot, t0_));
  gpu::Sensors warm = Normal();
  warm.temperature_c = 90;  // slowdown gone, but not 5 C below 93
  EXPECT_FALSE(monitor_.OnPoll(kGpu0, warm, t0_ + 1s));
  EXPECT_EQ(monitor_.Unhealthy().size(), 1u);
  warm.temperature_c = 88;
  EXPECT_TRUE(monitor_.OnPoll(kGpu0, warm, t0_ + 2s));
  // Power capping is not a health problem.
  gpu::Sensors capped = Normal();
  capped.throttle_reasons = gpu::throttle::kSwPowerCap;
  EXPECT_FALSE(monitor_.OnPoll(kGpu0, capped, t0_ + 3s));
}

// HW slowdown and power brake are not heat: no temperature to wait for. A
// brake engaged at 33 C clears when the poll no longer shows it, and one
// poll's worth (a clock change) marks nothing.
TEST_F(MonitorTest, HwSlowdownAndPowerBrakeClearWithTheirReason) {
  for (uint64_t reason : {gpu::throttle::kHwPowerBrakeSlowdown, gpu::throttle::kHwSlowdown}) {
    SCOPED_TRACE(reason);
    gpu::Sensors braked = Normal();
    braked.temperature_c = 33;
    braked.throttle_reasons = reason;
    gpu::Sensors idle = Normal();
    idle.temperature_c = 33;
    EXPECT_FALSE(monitor_.OnPoll(kGpu0, braked, t0_));
    EXPECT_FALSE(monitor_.OnPoll(kGpu0, idle, t0_ + 1s));
    EXPECT_THAT(monitor_.Unhealthy(), IsEmpty()) << "one poll's slowdown";
    EXPECT_FALSE(monitor_.OnPoll(kGpu0, braked, t0_ + 2s));
    EXPECT_TRUE(monitor_.OnPoll(kGpu0, braked, t0_ + 3s));
    EXPECT_THAT(monitor_.Unhealthy(), ElementsAre(Pair(kGpu0, "hw-slowdown")));
    EXPECT_TRUE(monitor_.OnPoll(kGpu0, idle, t0_ + 4s));
    EXPECT_THAT(monitor_.Unhealthy(), IsEmpty());
  }
  // With HW thermal slowdown as well, the heat's hysteresis still holds.
  gpu::Sensors hot = Normal();
  hot.temperature_c = 93;
  hot.throttle_reasons = gpu::throttle::kHwThermalSlowdown | gpu::throttle::kHwSlowdown;
  EXPECT_TRUE(monitor_.OnPoll(kGpu0, hot, t0_ + 5s));
  EXPECT_TRUE(monitor_.OnPoll(kGpu0, hot, t0_ + 6s));
  EXPECT_THAT(monitor_.Unhealthy(), ElementsAre(Pair(kGpu0, "hw-slowdown,thermal-slowdown")));
  gpu::Sensors warm = Normal();
  warm.temperature_c = 90;
  EXPECT_TRUE(monitor_.OnPoll(kGpu0, warm, t0_ + 7s));
  EXPECT_THAT(monitor_.Unhealthy(), ElementsAre(Pair(kGpu0, "thermal-slowdown")));
}

TEST_F(MonitorTest, RetiredPagesAndRowRemappingNeedTheGpuToReportThemGone) {
  gpu::Sensors s = Normal();
  s.retired_pages_pending = true;
  EXPECT_TRUE(monitor_.OnPoll(kGpu0, s, t0_));
  EXPECT_FALSE(monitor_.Tick(t0_ + 1h));
  s.retired_pages_pending = false;
  s.remapped_rows_failure = true;
  EXPECT_TRUE(monitor_.OnPoll(kGpu0, s, t0_ + 2h));  // one condition swapped for another
  EXPECT_THAT(monitor_.Unhealthy(), ElementsAre(Pair(kGpu0, "row-remap-failure")));
  for (const auto& d : monitor_.Snapshot()) {
    if (d.uuid == kGpu0) {
      EXPECT_TRUE(d.needs_reset);
    }
  }
  EXPECT_TRUE(monitor_.OnPoll(kGpu0, Normal(), t0_ + 3h));
}

TEST_F(MonitorTest, AReadingThatIsAbsentClearsNothing) {
  // NVML does not report remapped rows while MIG instances exist: a GPU whose
  // row remapping failed stays out of service when it is partitioned.
  gpu::Sensors s = Normal();
  s.remapped_rows_failure = true;
  EXPECT_TRUE(monitor_.OnPoll(kGpu0, s, t0_));
  s.remapped_rows_failure.reset();
  s.remapped_rows_pending.reset();
  s.retired_pages_pending.reset();
  EXPECT_FALSE(monitor_.OnPoll(kGpu0, s, t0_ + 1h));
  EXPECT_THAT(monitor_.Unhealthy(), ElementsAre(Pair(kGpu0, "row-remap-failure")));
  // Reported again, and fine: back in service.
  EXPECT_TRUE(monitor_.OnPoll(kGpu0, Normal(), t0_ + 2h));
  EXPECT_TRUE(monitor_.Unhealthy().empty());
}

TEST_F(MonitorTest, GrowingUncorrectableEccIsLatchedForTheQuietPeriod) {
  gpu::Sensors s = Normal();
  s.ecc_volatile_uncorrected = 3;  // first reading is the baseline
  EXPECT_FALSE(monitor_.OnPoll(kGpu0, s, t0_));
  s.ecc_volatile_uncorrected = 4;
  EXPECT_TRUE(monitor_.OnPoll(kGpu0, s, t0_ + 1s));
  EXPECT_FALSE(monitor_.OnPoll(kGpu0, s, t0_ + 2s));  // unchanged: still latched
  EXPECT_TRUE(monitor_.Tick(t0_ + 1s + 5min));
}

TEST_F(MonitorTest, DoubleBitEccEventNeedsAReset) {
  gpu::GpuEvent e;
  e.kind = gpu::EventKind::kDoubleBitEcc;
  e.uuid = kGpu0;
  EXPECT_TRUE(monitor_.OnEvent(e, t0_));
  EXPECT_FALSE(monitor_.Tick(t0_ + 24h));
  EXPECT_THAT(monitor_.Unhealthy(), ElementsAre(Pair(kGpu0, "double-bit-ecc")));
}

// NVML keeps no event for a set registered later: a double-bit ECC error
// while a GPU's events were not watched (issue 31) is known only from the
// grown counter, which then raises what the event would have.
TEST_F(MonitorTest, GrownEccWhileEventsAreNotWatchedNeedsAResetAsTheEventWould) {
  gpu::Sensors s = Normal();
  s.ecc_volatile_uncorrected = 3;
  EXPECT_FALSE(monitor_.OnPoll(kGpu0, s, t0_));
  EXPECT_FALSE(monitor_.OnPoll(kGpu1, s, t0_));
  EXPECT_TRUE(monitor_.events_watched(kGpu0));
  monitor_.SetEventsWatched(kGpu0, false);
  EXPECT_FALSE(monitor_.events_watched(kGpu0));
  s.ecc_volatile_uncorrected = 4;
  EXPECT_TRUE(monitor_.OnPoll(kGpu0, s, t0_ + 1s));
  EXPECT_TRUE(monitor_.OnPoll(kGpu1, s, t0_ + 1s));  // watched: its event raises double-bit-ecc
  EXPECT_THAT(monitor_.Unhealthy(), ElementsAre(Pair(kGpu0, "double-bit-ecc,ecc-uncorrectable"),
                                                Pair(kGpu1, "ecc-uncorrectable")));
  monitor_.SetEventsWatched(kGpu0, true);
  EXPECT_TRUE(monitor_.Tick(t0_ + 1s + 5min));
  EXPECT_THAT(monitor_.Unhealthy(), ElementsAre(Pair(kGpu0, "double-bit-ecc")));
  // Watched again, a later growth is the poll's own condition only.
  s.ecc_volatile_uncorrected = 5;
  EXPECT_TRUE(monitor_.OnPoll(kGpu0, s, t0_ + 6min));
  EXPECT_THAT(monitor_.Unhealthy(), ElementsAre(Pair(kGpu0, "double-bit-ecc,ecc-uncorrectable")));
  // A rediscovery keeps the flag.
  monitor_.SetEventsWatched(kGpu1, false);
  monitor_.SetInventory(Inventory());
  EXPECT_FALSE(monitor_.events_watched(kGpu1));
  EXPECT_TRUE(monitor_.events_watched(kGpu0));
}

TEST_F(MonitorTest, DisabledChecksChangeNothing) {
  MonitorOptions o;
  o.policy = *XidPolicy::Make("all", "", {});
  Monitor m(o);
  m.SetInventory(Inventory());
  EXPECT_FALSE(m.OnEvent(Xid(kGpu0, 79), t0_));
  EXPECT_FALSE(m.OnPoll(kGpu0, Status(StatusCode::kDeviceLost, "lost"), t0_));
  EXPECT_THAT(m.Unhealthy(), IsEmpty());
}

TEST_F(MonitorTest, ReinventoryKeepsConditionsOfDevicesStillPresent) {
  ASSERT_TRUE(monitor_.OnEvent(Xid(kGpu0, 79), t0_));
  ASSERT_TRUE(monitor_.OnEvent(Xid(kMigA, 62), t0_));
  gpu::NodeInventory inv = Inventory();
  inv.gpus[1].mig_devices.clear();  // MIG re-partitioned away
  monitor_.SetInventory(inv);
  EXPECT_THAT(monitor_.Unhealthy(), ElementsAre(Pair(kGpu0, "xid-79")));
}

}  // namespace
}  // namespace danqing::health
