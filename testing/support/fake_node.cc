#include "testing/support/fake_node.h"

#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>
#include <signal.h>

#include <nlohmann/json.hpp>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <cstdio>
#include <cstdlib>

extern char** environ;

namespace danqing::testing {

std::string FakeNvmlLibrary() { return DANQING_FAKE_NVML_LIB_DIR "/libnvidia-ml.so.1"; }
std::string FakeNvmlLegacyLibrary() { return DANQING_FAKE_NVML_LEGACY_LIB_DIR "/libnvidia-ml.so.1"; }

std::string ProfilePath(const std::string& name) {
  if (name.find('/') != std::string::npos) return name;
  return std::string(DANQING_FAKE_NVML_PROFILE_DIR) + "/" + name + ".json";
}

CommandResult RunCommand(const std::vector<std::string>& argv) {
  CommandResult res;
  int fds[2];
  if (pipe(fds) != 0) return res;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDERR_FILENO);
  posix_spawn_file_actions_addclose(&actions, fds[0]);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    res.out = "posix_spawn failed";
    return res;
  }
  char buf[4096];
  ssize_t n = 0;
  while ((n = read(fds[0], buf, sizeof buf)) > 0) res.out.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  res.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return res;
}

ChildProcess::ChildProcess(const std::vector<std::string>& argv) {
  static std::atomic<int> counter{0};
  log_path_ = ::testing::TempDir() + "/child-" + std::to_string(getpid()) + "-" +
              std::to_string(counter++) + ".log";
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log_path_.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  if (posix_spawn(&pid_, args[0], &actions, nullptr, args.data(), environ) != 0) pid_ = -1;
  posix_spawn_file_actions_destroy(&actions);
}

ChildProcess::~ChildProcess() {
  if (pid_ > 0 && exit_code_ < 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  unlink(log_path_.c_str());
}

bool ChildProcess::Signal(int sig) const { return pid_ > 0 && kill(pid_, sig) == 0; }

int ChildProcess::Wait(int timeout_ms) {
  if (exit_code_ >= 0) return exit_code_;
  for (int waited = 0; waited <= timeout_ms; waited += 5) {
    int status = 0;
    pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      return exit_code_;
    }
    usleep(5000);
  }
  return -1;
}

std::string ChildProcess::Output() const {
  std::ifstream in(log_path_);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

FakeNode::FakeNode(const std::string& profile) {
  static std::atomic<int> counter{0};
  socket_ = "/tmp/dq-fnvml-" + std::to_string(getpid()) + "-" + std::to_string(counter++) + ".sock";
  setenv("FAKE_NVML_PROFILE", ProfilePath(profile).c_str(), 1);
  setenv("FAKE_NVML_CONTROL", socket_.c_str(), 1);
  sysfs_ = socket_ + ".sys";
  std::ifstream in(ProfilePath(profile));
  const auto j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false, /*ignore_comments=*/true);
  for (const auto& g : j.is_object() ? j.value("gpus", nlohmann::json::array()) : nlohmann::json::array()) {
    unsigned domain = 0, bus = 0, device = 0, function = 0;
    const std::string id = g.contains("pci") ? g["pci"].value("bus_id", "") : "";
    if (std::sscanf(id.c_str(), "%x:%x:%x.%x", &domain, &bus, &device, &function) != 4) continue;
    char address[32];
    std::snprintf(address, sizeof address, "%04x:%02x:%02x.%x", domain, bus, device, function);
    const std::string dir = sysfs_ + "/bus/pci/devices/" + address;
    std::filesystem::create_directories(dir);
    std::ofstream(dir + "/numa_node") << g.value("numa_node", -1) << "\n";
  }
  setenv("DANQING_SYSFS_ROOT", sysfs_.c_str(), 1);
}

FakeNode::~FakeNode() {
  unsetenv("FAKE_NVML_PROFILE");
  unsetenv("FAKE_NVML_CONTROL");
  unsetenv("DANQING_SYSFS_ROOT");
  unlink(socket_.c_str());
  std::error_code ec;
  std::filesystem::remove_all(sysfs_, ec);
}

CommandResult FakeNode::TryControl(const std::string& json) const {
  return RunCommand({DANQING_FAKE_NVML_CTL, "--socket", socket_, json});
}

std::string FakeNode::Control(const std::string& json) const {
  CommandResult r = TryControl(json);
  EXPECT_EQ(r.exit_code, 0) << "fake-nvml-ctl " << json << ": " << r.out;
  return r.out;
}

}  // namespace danqing::testing
