// The NVML loader: dlopen, required vs optional symbols, error mapping.
#include "gpu/nvml_library.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>

#include "testing/support/fake_node.h"
#include "testing/support/fifo.h"
#include "testing/support/temp_dir.h"

namespace danqing::gpu {
namespace {

using ::testing::AllOf;
using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

TEST(NvmlLibraryTest, MissingLibraryIsUnavailableWithClearMessage) {
  auto lib = NvmlLibrary::Open("/nonexistent/dir/libnvidia-ml.so.1");
  ASSERT_FALSE(lib.ok());
  EXPECT_EQ(lib.status().code(), StatusCode::kUnavailable);
  EXPECT_THAT(lib.status().message(),
              AllOf(HasSubstr("/nonexistent/dir/libnvidia-ml.so.1"), HasSubstr("--nvml-lib")));
}

// --nvml-lib naming a FIFO blocked dlopen's open(), at start or on a
// reload, and SIGTERM with it (issue 31).
TEST(NvmlLibraryTest, AFifoIsRefusedWithoutBlocking) {
  const danqing::testing::TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  danqing::testing::FifoGuard fifo(dir.path() + "/libnvidia-ml.so.1");
  ASSERT_TRUE(fifo.made());
  auto lib = NvmlLibrary::Open(fifo.path());
  ASSERT_TRUE(fifo.Done()) << "blocked on the FIFO";
  ASSERT_FALSE(lib.ok());
  EXPECT_EQ(lib.status().code(), StatusCode::kUnavailable);
  EXPECT_THAT(lib.status().message(), HasSubstr("not a regular file: a FIFO"));
}

TEST(NvmlLibraryTest, LibraryWithoutNvmlSymbolsIsRejectedNamingThem) {
  auto lib = NvmlLibrary::Open("libm.so.6");
  ASSERT_FALSE(lib.ok());
  EXPECT_EQ(lib.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(lib.status().message(),
              AllOf(HasSubstr("lacks required symbols"), HasSubstr("nvmlInit_v2"),
                    HasSubstr("nvmlDeviceGetCount_v2")));
}

TEST(NvmlLibraryTest, FakeLibraryResolvesEverySymbol) {
  auto lib = NvmlLibrary::Open(danqing::testing::FakeNvmlLibrary());
  ASSERT_TRUE(lib.ok()) << lib.status().ToString();
  EXPECT_THAT((*lib)->missing(), IsEmpty());
  EXPECT_THAT((*lib)->path(), HasSubstr("libnvidia-ml.so.1"));
  const auto& api = (*lib)->api();
  EXPECT_NE(api.DeviceGetComputeRunningProcesses, nullptr);
  EXPECT_NE(api.EventSetWait, nullptr);
}

TEST(NvmlLibraryTest, OldDriverDisablesOnlyTheMissingFeatures) {
  auto lib = NvmlLibrary::Open(danqing::testing::FakeNvmlLegacyLibrary());
  ASSERT_TRUE(lib.ok()) << lib.status().ToString();
  const auto& missing = (*lib)->missing();
  // The NUMA node comes from sysfs, whatever the library has.
  EXPECT_THAT(missing, Not(Contains(HasSubstr("NUMA"))));
  EXPECT_THAT(missing, Contains("remapped rows (nvmlDeviceGetRemappedRows)"));
  EXPECT_THAT(missing, Contains("processes (nvmlDeviceGetComputeRunningProcesses_v3)"));
  EXPECT_THAT(missing, Contains("MIG profile names (nvmlDeviceGetGpuInstanceProfileInfoV)"));
  // Older symbols with the same ABI stand in for the missing versions.
  const auto& api = (*lib)->api();
  EXPECT_NE(api.SystemGetCudaDriverVersion, nullptr);
  EXPECT_NE(api.EventSetWait, nullptr);
  EXPECT_NE(api.DeviceGetClockEventReasons, nullptr);
  EXPECT_NE(api.DeviceGetNvLinkRemotePciInfo, nullptr);
  EXPECT_NE(api.DeviceGetAttributes, nullptr);
}

TEST(NvmlLibraryTest, PathResolutionFlagThenEnvThenSoname) {
  unsetenv("DANQING_NVML_LIB");
  EXPECT_EQ(ResolveNvmlLibraryPath(""), "libnvidia-ml.so.1");
  setenv("DANQING_NVML_LIB", "/env/libnvidia-ml.so.1", 1);
  EXPECT_EQ(ResolveNvmlLibraryPath(""), "/env/libnvidia-ml.so.1");
  EXPECT_EQ(ResolveNvmlLibraryPath("/flag/libnvidia-ml.so.1"), "/flag/libnvidia-ml.so.1");
  unsetenv("DANQING_NVML_LIB");
}

TEST(NvmlLibraryTest, ErrorCodesMapToStatusWithNvmlText) {
  auto lib = NvmlLibrary::Open(danqing::testing::FakeNvmlLibrary());
  ASSERT_TRUE(lib.ok());
  Status lost = NvmlStatus(**lib, NVML_ERROR_GPU_IS_LOST, "nvmlDeviceGetTemperature on GPU-x");
  EXPECT_EQ(lost.code(), StatusCode::kDeviceLost);
  EXPECT_THAT(lost.message(), AllOf(HasSubstr("nvmlDeviceGetTemperature on GPU-x"),
                                    HasSubstr("(NVML return 15)")));
  EXPECT_EQ(NvmlStatus(**lib, NVML_ERROR_NOT_SUPPORTED, "x").code(), StatusCode::kNotSupported);
  EXPECT_EQ(NvmlStatus(**lib, NVML_ERROR_DRIVER_NOT_LOADED, "x").code(), StatusCode::kUnavailable);
  EXPECT_EQ(NvmlStatus(**lib, NVML_ERROR_NOT_FOUND, "x").code(), StatusCode::kNotFound);
  EXPECT_EQ(NvmlStatus(**lib, NVML_ERROR_UNKNOWN, "x").code(), StatusCode::kInternal);
  EXPECT_TRUE(NvmlStatus(**lib, NVML_SUCCESS, "x").ok());
}

}  // namespace
}  // namespace danqing::gpu
