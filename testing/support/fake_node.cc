#include "testing/support/fake_node.h"

#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
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

FakeNode::FakeNode(const std::string& profile) {
  static std::atomic<int> counter{0};
  socket_ = "/tmp/dq-fnvml-" + std::to_string(getpid()) + "-" + std::to_string(counter++) + ".sock";
  setenv("FAKE_NVML_PROFILE", ProfilePath(profile).c_str(), 1);
  setenv("FAKE_NVML_CONTROL", socket_.c_str(), 1);
}

FakeNode::~FakeNode() {
  unsetenv("FAKE_NVML_PROFILE");
  unsetenv("FAKE_NVML_CONTROL");
  unlink(socket_.c_str());
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
