// ReadRegularFile and the helpers on it (issue 31): a path an operator or
// the node controls may name a FIFO or a device; reading it must neither
// block nor run on.
#include "common/read_file.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "common/atomic_file.h"
#include "testing/support/fifo.h"
#include "testing/support/temp_dir.h"

namespace danqing {
namespace {

using testing::FifoGuard;
using ::testing::HasSubstr;

class ReadFileTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_FALSE(dir_.path().empty()); }
  std::string Path(const std::string& name) const { return dir_.path() + "/" + name; }
  testing::TempDir dir_;
};

TEST_F(ReadFileTest, ReadsARegularFileAndOneBehindALink) {
  std::ofstream(Path("f")) << "hello\n";
  ASSERT_EQ(::symlink(Path("f").c_str(), Path("link").c_str()), 0);
  for (const std::string name : {"f", "link"}) {
    auto text = ReadRegularFile(Path(name), 100);
    ASSERT_TRUE(text.ok()) << text.status().ToString();
    EXPECT_EQ(*text, "hello\n");
  }
  EXPECT_EQ(ReadTextFile(Path("f")), "hello\n");
  EXPECT_TRUE(CheckRegularFile(Path("link")).ok());
}

TEST_F(ReadFileTest, AFifoIsRefusedWithoutBlocking) {
  FifoGuard fifo(Path("fifo"));
  ASSERT_TRUE(fifo.made());
  ASSERT_EQ(::symlink(Path("fifo").c_str(), Path("link").c_str()), 0);
  const auto direct = ReadRegularFile(Path("fifo"), 100);
  const auto linked = ReadRegularFile(Path("link"), 100);
  const auto text = ReadTextFile(Path("fifo"));
  const Status checked = CheckRegularFile(Path("link"));
  EXPECT_TRUE(fifo.Done()) << "blocked on the FIFO";
  for (const Status& st : {direct.status(), linked.status(), checked}) {
    EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.ToString();
    EXPECT_EQ(st.message(), "not a regular file: a FIFO");
  }
  EXPECT_FALSE(text.has_value());
}

TEST_F(ReadFileTest, DevicesAndDirectoriesAreRefused) {
  // /dev/zero would never end; /dev/null is a device too.
  for (const char* dev : {"/dev/zero", "/dev/null"}) {
    const auto r = ReadRegularFile(dev, 100);
    EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition) << dev;
    EXPECT_EQ(r.status().message(), "not a regular file: a character device");
  }
  EXPECT_EQ(ReadRegularFile(dir_.path(), 100).status().message(),
            "not a regular file: a directory");
  EXPECT_EQ(ReadRegularFile(Path("missing"), 100).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(CheckRegularFile(Path("missing")).code(), StatusCode::kNotFound);
}

TEST_F(ReadFileTest, NoMoreThanTheLimitIsRead) {
  std::ofstream(Path("big")) << std::string(5000, 'x');
  EXPECT_TRUE(ReadRegularFile(Path("big"), 5000).ok());
  const auto r = ReadRegularFile(Path("big"), 4999);
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(r.status().message(), HasSubstr("larger than 4999 bytes"));
}

// /proc files report a size of 0: read to their end all the same.
TEST_F(ReadFileTest, ProcFilesAreRead) {
  const auto status = ReadTextFile("/proc/self/status");
  ASSERT_TRUE(status.has_value());
  EXPECT_THAT(*status, HasSubstr("Pid:"));
}

// The write side: a FIFO where WriteFileAtomically puts its temporary file
// (the node-features file's directory is the node's) must not block it.
TEST_F(ReadFileTest, AtomicWriteDoesNotBlockOnAFifoAtItsTemporaryPath) {
  FifoGuard fifo(Path("labels.tmp." + std::to_string(::getpid())));
  ASSERT_TRUE(fifo.made());
  const Status st = WriteFileAtomically(Path("labels"), "a=b\n");
  EXPECT_TRUE(fifo.Done()) << "blocked on the FIFO";
  EXPECT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(ReadTextFile(Path("labels")), "a=b\n");
}

}  // namespace
}  // namespace danqing
