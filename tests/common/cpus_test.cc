// AvailableCpus: the cgroup quota and the affinity mask bound the CPU count.
#include "common/cpus.h"

#include <gtest/gtest.h>
#include <sched.h>

#include <filesystem>
#include <fstream>

#include "testing/support/temp_dir.h"

namespace danqing {
namespace {

TEST(CpuQuotaTest, CgroupV2CpuMax) {
  EXPECT_EQ(CpuQuotaFromCpuMax("200000 100000\n"), 2u);
  EXPECT_EQ(CpuQuotaFromCpuMax("150000 100000"), 2u);  // 1.5 CPUs: two threads can run
  EXPECT_EQ(CpuQuotaFromCpuMax("50000 100000"), 1u);
  EXPECT_EQ(CpuQuotaFromCpuMax("max 100000\n"), std::nullopt);
  EXPECT_EQ(CpuQuotaFromCpuMax(""), std::nullopt);
  EXPECT_EQ(CpuQuotaFromCpuMax("200000"), std::nullopt);
  EXPECT_EQ(CpuQuotaFromCpuMax("abc 100000"), std::nullopt);
  EXPECT_EQ(CpuQuotaFromCpuMax("100000 0"), std::nullopt);
}

TEST(CpuQuotaTest, CgroupV1Cfs) {
  EXPECT_EQ(CpuQuotaFromCfs("400000\n", "100000\n"), 4u);
  EXPECT_EQ(CpuQuotaFromCfs("-1\n", "100000\n"), std::nullopt);
  EXPECT_EQ(CpuQuotaFromCfs("x", "100000"), std::nullopt);
}

class AvailableCpusTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_FALSE(dir_.empty()); }
  static unsigned Affinity() {
    cpu_set_t set;
    CPU_ZERO(&set);
    EXPECT_EQ(::sched_getaffinity(0, sizeof set, &set), 0);
    return static_cast<unsigned>(CPU_COUNT(&set));
  }
  danqing::testing::TempDir tmp_;
  const std::string dir_ = tmp_.path();
};

TEST_F(AvailableCpusTest, AOneCpuQuotaGivesOneWhateverTheNodeHas) {
  std::ofstream(dir_ + "/cpu.max") << "100000 100000\n";
  EXPECT_EQ(AvailableCpus(dir_), 1u);
}

TEST_F(AvailableCpusTest, CgroupV1QuotaIsReadWhenThereIsNoCpuMax) {
  std::filesystem::create_directories(dir_ + "/cpu");
  std::ofstream(dir_ + "/cpu/cpu.cfs_quota_us") << "50000\n";
  std::ofstream(dir_ + "/cpu/cpu.cfs_period_us") << "100000\n";
  EXPECT_EQ(AvailableCpus(dir_), 1u);
}

TEST_F(AvailableCpusTest, WithoutAQuotaTheAffinityMaskDecides) {
  std::ofstream(dir_ + "/cpu.max") << "max 100000\n";
  EXPECT_EQ(AvailableCpus(dir_), Affinity());
  EXPECT_EQ(AvailableCpus(dir_ + "/nothing-here"), Affinity());
}

}  // namespace
}  // namespace danqing
