// Faults injected from a second process (fake-nvml-ctl over the fake's
// control socket) are seen by the backend: XID and ECC events, a GPU lost and
// recovered at run time, sensor changes, failing calls, MIG re-layout.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "gpu/nvml_backend.h"
#include "testing/support/fake_node.h"

namespace danqing::gpu {
namespace {

using ::testing::HasSubstr;
using ::testing::SizeIs;
using danqing::testing::FakeNode;
using namespace std::chrono_literals;

class FaultsTest : public ::testing::Test {
 protected:
  void Start(const std::string& profile) {
    node_ = std::make_unique<FakeNode>(profile);
    auto b = NvmlBackend::Create(danqing::testing::FakeNvmlLibrary());
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    backend_ = std::move(b).value();
    auto inv = backend_->Discover();
    ASSERT_TRUE(inv.ok()) << inv.status().ToString();
    inv_ = std::move(inv).value();
  }
  // Waits for the next event, skipping none; fails the test on timeout.
  GpuEvent NextEvent(EventStream& s) {
    auto ev = s.Wait(5s);
    EXPECT_TRUE(ev.ok()) << ev.status().ToString();
    EXPECT_TRUE(ev.ok() && ev->has_value()) << "no event within 5 s";
    return ev.ok() && ev->has_value() ? **ev : GpuEvent{};
  }

  std::unique_ptr<FakeNode> node_;
  std::unique_ptr<NvmlBackend> backend_;
  NodeInventory inv_;
};

TEST_F(FaultsTest, XidFromAnotherProcessArrivesAsEvent) {
  Start("a100-8x-nvswitch");
  auto stream = backend_->WatchEvents({});
  ASSERT_TRUE(stream.ok()) << stream.status().ToString();
  EXPECT_TRUE((*stream)->errors().empty());
  auto none = (*stream)->Wait(20ms);
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value()) << "no event before injection";

  node_->Control(R"({"cmd":"xid","gpu":2,"xid":79})");
  GpuEvent ev = NextEvent(**stream);
  EXPECT_EQ(ev.kind, EventKind::kXid);
  EXPECT_EQ(ev.xid, 79u);
  EXPECT_EQ(ev.uuid, inv_.gpus[2].uuid);
  EXPECT_FALSE(ev.gpu_instance_id.has_value());
}

TEST_F(FaultsTest, DoubleBitEccRaisesEventAndCounters) {
  Start("a100-8x-nvswitch");
  auto stream = backend_->WatchEvents({inv_.gpus[5].uuid});
  ASSERT_TRUE(stream.ok());
  node_->Control(R"({"cmd":"ecc","gpu":5,"type":"double","count":2})");
  GpuEvent ev = NextEvent(**stream);
  EXPECT_EQ(ev.kind, EventKind::kDoubleBitEcc);
  EXPECT_EQ(ev.uuid, inv_.gpus[5].uuid);
  auto s = backend_->ReadSensors(inv_.gpus[5].uuid);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->ecc_volatile_uncorrected, 2u);
  EXPECT_EQ(s->ecc_aggregate_uncorrected, 2u);
}

TEST_F(FaultsTest, GpuLostAtRunTimeThenRecovered) {
  Start("a100-8x-nvswitch");
  const std::string lost_uuid = inv_.gpus[3].uuid;
  node_->Control(R"({"cmd":"lost","gpu":3,"lost":true})");

  auto s = backend_->ReadSensors(lost_uuid);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kDeviceLost);
  EXPECT_THAT(s.status().message(), HasSubstr(lost_uuid));
  auto other = backend_->ReadSensors(inv_.gpus[4].uuid);
  EXPECT_TRUE(other.ok()) << "a lost GPU must not break the others";

  auto inv = backend_->Discover();
  ASSERT_TRUE(inv.ok());
  EXPECT_THAT(inv->gpus, SizeIs(7));
  ASSERT_THAT(inv->errors, SizeIs(1));
  EXPECT_EQ(inv->errors[0].index, 3);
  EXPECT_EQ(inv->errors[0].status.code(), StatusCode::kDeviceLost);

  node_->Control(R"({"cmd":"lost","gpu":3,"lost":false})");
  auto healed = backend_->Discover();
  ASSERT_TRUE(healed.ok());
  EXPECT_THAT(healed->gpus, SizeIs(8));
  EXPECT_TRUE(backend_->ReadSensors(lost_uuid).ok());
}

TEST_F(FaultsTest, SensorChangesAreRead) {
  Start("h100-2x-pcie-2numa");
  node_->Control(
      R"({"cmd":"set","gpu":1,"sensors":{"temperature_c":93,"throttle_reasons":64,"utilization":{"gpu":87}}})");
  auto s = backend_->ReadSensors(inv_.gpus[1].uuid);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->temperature_c, 93u);
  EXPECT_EQ(s->throttle_reasons, throttle::kHwThermalSlowdown);
  EXPECT_EQ(throttle::Describe(*s->throttle_reasons), "hw_thermal");
  EXPECT_EQ(s->utilization_gpu, 87u);
  auto untouched = backend_->ReadSensors(inv_.gpus[0].uuid);
  ASSERT_TRUE(untouched.ok());
  EXPECT_NE(untouched->temperature_c, 93u);
}

TEST_F(FaultsTest, ProcessesWithPerProcessUtilisation) {
  Start("t4-1x");
  node_->Control(R"({"cmd":"processes","gpu":0,"processes":[
      {"pid":4242,"used_memory_mib":2048,"sm_util":61,"mem_util":20},
      {"pid":4243,"used_memory_mib":512,"sm_util":5,"mem_util":1}]})");
  auto s = backend_->ReadSensors(inv_.gpus[0].uuid);
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE(s->processes.has_value());
  ASSERT_THAT(*s->processes, SizeIs(2));
  EXPECT_EQ((*s->processes)[0].pid, 4242u);
  EXPECT_EQ((*s->processes)[0].used_memory_bytes, 2048ULL * 1024 * 1024);
  EXPECT_EQ((*s->processes)[0].sm_util, 61u);
  EXPECT_EQ((*s->processes)[1].mem_util, 1u);
}

TEST_F(FaultsTest, FailingCallIsReportedNotFatal) {
  Start("a100-8x-nvswitch");
  node_->Control(R"({"cmd":"fail","gpu":0,"function":"nvmlDeviceGetTemperature","error":"UNKNOWN"})");
  auto s = backend_->ReadSensors(inv_.gpus[0].uuid);
  ASSERT_TRUE(s.ok());
  EXPECT_FALSE(s->temperature_c.has_value());
  ASSERT_THAT(s->failures, SizeIs(1));
  EXPECT_THAT(s->failures[0].message(), HasSubstr("nvmlDeviceGetTemperature"));
  EXPECT_THAT(s->failures[0].message(), HasSubstr(inv_.gpus[0].uuid));
  EXPECT_TRUE(s->power_mw.has_value());

  node_->Control(R"({"cmd":"fail","gpu":0,"function":"nvmlDeviceGetTemperature","error":null})");
  auto healed = backend_->ReadSensors(inv_.gpus[0].uuid);
  ASSERT_TRUE(healed.ok());
  EXPECT_TRUE(healed->temperature_c.has_value());
  EXPECT_TRUE(healed->failures.empty());
}

TEST_F(FaultsTest, MigRelayoutRaisesEventAndChangesInventory) {
  Start("a100-mig-mixed");
  ASSERT_THAT(inv_.gpus[2].mig_devices, SizeIs(2));
  auto stream = backend_->WatchEvents({inv_.gpus[2].uuid});
  ASSERT_TRUE(stream.ok());
  node_->Control(R"({"cmd":"mig","gpu":2,"mig":{"mode":1,"pending":1,"devices":[
      {"profile":"7g.80gb","gpu_instance_id":0,"uuid":"MIG-5d2b8f6e-0a7c-5e11-9d3f-7b1c2a9e4f01"}]}})");
  GpuEvent ev = NextEvent(**stream);
  EXPECT_EQ(ev.kind, EventKind::kMigConfigChange);
  auto inv = backend_->Discover();
  ASSERT_TRUE(inv.ok());
  ASSERT_THAT(inv->gpus[2].mig_devices, SizeIs(1));
  EXPECT_EQ(inv->gpus[2].mig_devices[0].profile, "7g.80gb");
  EXPECT_EQ(inv->gpus[2].mig_devices[0].uuid, "MIG-5d2b8f6e-0a7c-5e11-9d3f-7b1c2a9e4f01");
}

TEST_F(FaultsTest, BadControlCommandsAreRefusedAndTheFakeKeepsServing) {
  Start("t4-1x");
  auto bad = node_->TryControl(R"({"cmd":"explode","gpu":0})");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_THAT(bad.out, HasSubstr("explode"));
  auto unknown_gpu = node_->TryControl(R"({"cmd":"xid","gpu":9,"xid":79})");
  EXPECT_NE(unknown_gpu.exit_code, 0);
  auto not_json = node_->TryControl("{not json");
  EXPECT_NE(not_json.exit_code, 0);
  node_->Control(R"({"cmd":"set","gpu":0,"sensors":{"temperature_c":50}})");
  auto s = backend_->ReadSensors(inv_.gpus[0].uuid);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->temperature_c, 50u);
}

}  // namespace
}  // namespace danqing::gpu
