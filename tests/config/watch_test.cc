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
#include <utility>
#include <vector>

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

// --- FileWatcher: which events in the directory count -------------------------

class FileWatcherTest : public WatchConfigTest {
 protected:
  void Start() {
    ASSERT_TRUE(watcher_.Start(path_, [this] { ++changes_; }).ok());
  }
  FileWatcher watcher_;
  std::atomic<int> changes_{0};
};

TEST_F(FileWatcherTest, OtherFilesComingAndGoingBesideItAreNotReported) {
  Write(Replicas(2));
  Start();
  // The device-plugin directory, or /etc: sockets and other files.
  std::ofstream(dir_ + "/kubelet.sock") << "x";
  std::ofstream(dir_ + "/config.yaml.bak") << "x";
  std::filesystem::rename(dir_ + "/config.yaml.bak", dir_ + "/other.yaml");
  std::filesystem::remove(dir_ + "/kubelet.sock");
  std::this_thread::sleep_for(300ms);  // ample for the 20 ms quiet period
  EXPECT_EQ(changes_.load(), 0);
  Write(Replicas(4));  // and the watcher still runs
  EXPECT_TRUE(WaitFor(changes_, 1));
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(changes_.load(), 1);
}

// A ConfigMap volume: config.yaml -> ..data/config.yaml, ..data -> a
// timestamped directory; an update writes a new directory and renames a new
// ..data link over the old one (Kubernetes' atomic writer).
TEST_F(FileWatcherTest, AConfigMapVolumeUpdateIsReported) {
  std::filesystem::create_directory(dir_ + "/..2026_12_04_01");
  std::ofstream(dir_ + "/..2026_12_04_01/config.yaml") << Replicas(2);
  std::filesystem::create_directory_symlink("..2026_12_04_01", dir_ + "/..data");
  std::filesystem::create_symlink("..data/config.yaml", path_);
  ASSERT_EQ(Load().sharing.time_slicing->resources.at(0).replicas, 2);
  Start();
  std::filesystem::create_directory(dir_ + "/..2026_12_04_02");
  std::ofstream(dir_ + "/..2026_12_04_02/config.yaml") << Replicas(4);
  std::filesystem::create_directory_symlink("..2026_12_04_02", dir_ + "/..data_tmp");
  std::filesystem::rename(dir_ + "/..data_tmp", dir_ + "/..data");
  std::filesystem::remove_all(dir_ + "/..2026_12_04_01");
  EXPECT_TRUE(WaitFor(changes_, 1));
  EXPECT_EQ(Load().sharing.time_slicing->resources.at(0).replicas, 4);
}

// config.yaml linked to a file beside it, however the link is written: an
// edit of that file counts.
TEST_F(FileWatcherTest, AnEditOfAFileTheLinksLeadToBesideItIsReported) {
  struct Layout {
    const char* name;
    std::vector<std::pair<std::string, std::string>> links;  // link -> target ("@" = the directory)
    const char* edited;
  };
  const Layout layouts[] = {
      {"relative", {{"config.yaml", "real.yaml"}}, "real.yaml"},
      {"dot", {{"config.yaml", "./real.yaml"}}, "real.yaml"},
      {"absolute", {{"config.yaml", "@/real.yaml"}}, "real.yaml"},
      {"chain", {{"config.yaml", "current.yaml"}, {"current.yaml", "v1.yaml"}}, "v1.yaml"},
  };
  for (const Layout& l : layouts) {
    SCOPED_TRACE(l.name);
    const std::string dir = dir_ + "/" + l.name;
    std::filesystem::create_directory(dir);
    std::ofstream(dir + "/" + l.edited) << Replicas(2);
    for (const auto& [link, target] : l.links) {
      std::filesystem::create_symlink(target[0] == '@' ? dir + target.substr(1) : target, dir + "/" + link);
    }
    FileWatcher watcher;
    std::atomic<int> changes{0};
    ASSERT_TRUE(watcher.Start(dir + "/config.yaml", [&] { ++changes; }).ok());
    std::ofstream(dir + "/edit.tmp") << Replicas(4);
    std::filesystem::rename(dir + "/edit.tmp", dir + "/" + l.edited);
    EXPECT_TRUE(WaitFor(changes, 1));
  }
}

// A ConfigMap `items` path into a subdirectory: the file's directory is
// `..data/sub`, which each update removes. Every update is seen.
TEST_F(FileWatcherTest, AConfigMapSubdirectoryIsWatchedAgainAfterEachUpdate) {
  auto version = [this](int n) {
    const std::string v = dir_ + "/..ts" + std::to_string(n);
    std::filesystem::create_directories(v + "/sub");
    std::ofstream(v + "/sub/config.yaml") << Replicas(n + 1);
    return "..ts" + std::to_string(n);
  };
  std::filesystem::create_directory_symlink(version(1), dir_ + "/..data");
  std::filesystem::create_directory_symlink("..data/sub", dir_ + "/sub");
  ASSERT_TRUE(watcher_.Start(dir_ + "/sub/config.yaml", [this] { ++changes_; }).ok());
  for (int n = 2; n <= 3; ++n) {
    std::filesystem::create_directory_symlink(version(n), dir_ + "/..data_tmp");
    std::filesystem::rename(dir_ + "/..data_tmp", dir_ + "/..data");
    std::filesystem::remove_all(dir_ + "/..ts" + std::to_string(n - 1));
    EXPECT_TRUE(WaitFor(changes_, n - 1)) << "update " << n - 1;
  }
}

// Other files changing all the time beside it do not hold a change back.
TEST_F(FileWatcherTest, ChurnBesideItDoesNotDelayTheReport) {
  Write(Replicas(2));
  Start();
  std::atomic<bool> stop{false};
  std::thread churn([&] {
    for (int i = 0; !stop; ++i) {
      std::ofstream(dir_ + "/churn-" + std::to_string(i % 4)) << i;
      std::this_thread::sleep_for(5ms);
    }
  });
  Write(Replicas(4));
  std::this_thread::sleep_for(1s);  // 50 quiet periods, with churn every 5 ms
  EXPECT_EQ(changes_.load(), 1);
  stop = true;
  churn.join();
}

}  // namespace
}  // namespace danqing::config
