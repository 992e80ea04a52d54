// NvidiaSmiTimeSlicer against stand-ins for nvidia-smi (shell scripts that
// answer as the real one does: exit 0 and a confirmation, "Not Supported",
// a permission failure, a hang).
#include "dra/time_slicer.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>

#include "common/read_file.h"
#include "tests/dra/dra_test_util.h"

namespace danqing::dra {
namespace {

class TimeSlicerTest : public ::testing::Test {
 protected:
  std::string Script(const std::string& name, const std::string& body) {
    const std::string path = tree_ / name;
    std::ofstream(path) << "#!/bin/sh\n" << body << "\n";
    ::chmod(path.c_str(), 0755);
    return path;
  }
  test::TempTree tree_;
};

TEST_F(TimeSlicerTest, RunsComputePolicyWithTheLevelAndTheDriversLibraries) {
  const std::string log = tree_ / "calls";
  NvidiaSmiTimeSlicer s(Script("nvidia-smi", "echo \"$@ LD=$LD_LIBRARY_PATH\" >> " + log +
                                                 "\necho 'Set timeslice to 1 for GPU'; exit 0"),
                        "/driver-root/usr/lib64");
  ASSERT_TRUE(s.Set("GPU-1", TimeSlice::kShort).ok());
  ASSERT_TRUE(s.Set("GPU-1", TimeSlice::kLong).ok());
  ASSERT_TRUE(s.Set("GPU-2", TimeSlice::kDefault).ok());
  EXPECT_EQ(*ReadTextFile(log),
            "compute-policy -i GPU-1 --set-timeslice 1 LD=/driver-root/usr/lib64\n"
            "compute-policy -i GPU-1 --set-timeslice 3 LD=/driver-root/usr/lib64\n"
            "compute-policy -i GPU-2 --set-timeslice 0 LD=/driver-root/usr/lib64\n");
}

TEST_F(TimeSlicerTest, FailuresAreSortedByKind) {
  NvidiaSmiTimeSlicer missing(tree_ / "no-such-nvidia-smi", "");
  EXPECT_EQ(missing.Set("GPU-1", TimeSlice::kShort).code(), StatusCode::kNotSupported);

  NvidiaSmiTimeSlicer old(
      Script("old", "echo 'Setting timeslice is Not Supported for GPU 00000000:07:00.0.'; exit 3"),
      "");
  EXPECT_EQ(old.Set("GPU-1", TimeSlice::kShort).code(), StatusCode::kNotSupported);

  NvidiaSmiTimeSlicer denied(Script("denied", "echo 'Insufficient Permissions' >&2; exit 4"), "");
  Status st = denied.Set("GPU-1", TimeSlice::kMedium);
  EXPECT_EQ(st.code(), StatusCode::kUnavailable);
  EXPECT_NE(st.message().find("--set-timeslice 2 failed (exit 4): Insufficient Permissions"),
            std::string::npos)
      << st.message();

  NvidiaSmiTimeSlicer hung(Script("hung", "exec sleep 30"), "", std::chrono::milliseconds(200));
  EXPECT_EQ(hung.Set("GPU-1", TimeSlice::kShort).code(), StatusCode::kDeadlineExceeded);
}

}  // namespace
}  // namespace danqing::dra
