// Tests of WatchConfig: edits made before the watch began, edits after it, and
// an unchanged file.
#include "config/watch.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "testing/support/temp_dir.h"

namespace danqing::config {
namespace {

using namespace std::chrono_literals;

class WatchConfigTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_FALSE(dir_.empty()); }

  // Write-then-rename, as editors and ConfigMap volumes replace files.
  void Write(const std::string& text) {
    std::ofstream(path_ + ".tmp") << text;
    std::filesystem::rename(path_ + ".tmp", path_);
  }
  static std::string Replicas(int n) {
    return "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n"
           "      replicas: " +
           std::to_string(n) + "\n";
  }
  Config Load() {
    auto c = LoadConfigFile(path_);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? std::move(c).value() : Config{};
  }
  std::function<Result<Config>()> Resolver() {
    return [this] { return LoadConfigFile(path_); };
  }
  bool WaitFor(const std::atomic<int>& n, int at_least) {
    for (int i = 0; i < 500 && n.load() < at_least; ++i) std::this_thread::sleep_for(10ms);
    return n.load() >= at_least;
  }

  danqing::testing::TempDir tmp_;
  const std::string dir_ = tmp_.path();
  const std::string path_ = dir_ + "/config.yaml";
};

TEST_F(WatchConfigTest, AnEditMadeBeforeTheWatchBeganIsReportedAtOnce) {
  Write(Replicas(2));
  const Config loaded = Load();
  Write(Replicas(4));  // after the read, before the watch: no inotify event
  FileWatcher watcher;
  std::atomic<int> changes{0};
  ASSERT_TRUE(WatchConfig(watcher, loaded, Resolver(), [&] { ++changes; }).ok());
  EXPECT_EQ(changes.load(), 1);  // before WatchConfig returned
}

TEST_F(WatchConfigTest, AFileThatNoLongerParsesIsReportedSoTheReloadCanSayWhy) {
  Write(Replicas(2));
  const Config loaded = Load();
  Write("version: v1\nsharing: [\n");
  FileWatcher watcher;
  std::atomic<int> changes{0};
  ASSERT_TRUE(WatchConfig(watcher, loaded, Resolver(), [&] { ++changes; }).ok());
  EXPECT_EQ(changes.load(), 1);
}

TEST_F(WatchConfigTest, AnUnchangedFileIsNotReportedALaterEditIs) {
  Write(Replicas(2));
  const Config loaded = Load();
  FileWatcher watcher;
  std::atomic<int> changes{0};
  ASSERT_TRUE(WatchConfig(watcher, loaded, Resolver(), [&] { ++changes; }).ok());
  EXPECT_EQ(changes.load(), 0);
  Write(Replicas(4));
  EXPECT_TRUE(WaitFor(changes, 1));
  watcher.Stop();
}

TEST_F(WatchConfigTest, WithoutAFileNothingIsWatched) {
  FileWatcher watcher;
  std::atomic<int> changes{0};
  Config none;
  ASSERT_TRUE(WatchConfig(watcher, none, Resolver(), [&] { ++changes; }).ok());
  EXPECT_EQ(changes.load(), 0);
}

TEST_F(WatchConfigTest, AnUnwatchableDirectoryIsAnError) {
  Write(Replicas(2));
  Config loaded = Load();
  loaded.source = dir_ + "/missing/config.yaml";
  FileWatcher watcher;
  const Status st = WatchConfig(watcher, loaded, Resolver(), [] {});
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.ToString().find("missing"), std::string::npos) << st.ToString();
}

}  // namespace
}  // namespace danqing::config
