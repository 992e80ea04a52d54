// FakeNode: a test's handle on a node described by a fake NVML profile.
//
// It points the fake libnvidia-ml.so.1 (testing/fake-nvml) at a profile and a
// private control socket through the environment, before the code under test
// loads the library through the real dlopen path. Control() injects a fault
// from a second process (fake-nvml-ctl), exactly as an operator's script would.
//
// Thread-safety: construct and destroy on the test's main thread; only one
// FakeNode per process at a time (the environment is process-wide).
#pragma once

#include <string>
#include <vector>

namespace danqing::testing {

// Build-tree locations, compiled in by CMake.
std::string FakeNvmlLibrary();        // .../fake-nvml/lib/libnvidia-ml.so.1
std::string FakeNvmlLegacyLibrary();  // .../fake-nvml/legacy/libnvidia-ml.so.1 (old driver)
std::string ProfilePath(const std::string& name);  // "a100-8x-nvswitch" → .../profiles/a100-8x-nvswitch.json

struct CommandResult {
  int exit_code = -1;
  std::string out;  // stdout and stderr together
};

// Runs argv[0] with the arguments, waits, and returns its output.
CommandResult RunCommand(const std::vector<std::string>& argv);

// A child process run in the background with its output captured in a file.
class ChildProcess {
 public:
  // Starts argv[0] with the arguments and the current environment.
  explicit ChildProcess(const std::vector<std::string>& argv);
  ~ChildProcess();  // SIGKILL + wait if still running
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  int pid() const { return pid_; }
  bool Signal(int sig) const;
  // Waits up to `timeout_ms` for exit; the exit code, or -1 on timeout.
  int Wait(int timeout_ms);
  std::string Output() const;  // everything written to stdout and stderr so far

 private:
  int pid_ = -1;
  int exit_code_ = -1;
  std::string log_path_;
};

class FakeNode {
 public:
  // `profile`: a profile name under testing/fake-nvml/profiles or a path.
  explicit FakeNode(const std::string& profile);
  ~FakeNode();
  FakeNode(const FakeNode&) = delete;
  FakeNode& operator=(const FakeNode&) = delete;

  const std::string& control_socket() const { return socket_; }
  // A sysfs tree with the profile GPUs' PCI devices and their numa_node (-1
  // where the profile has none), as the agent reads NUMA nodes; also exported
  // as DANQING_SYSFS_ROOT for the processes and configurations tests start.
  const std::string& sysfs_root() const { return sysfs_; }

  // Sends one control command through fake-nvml-ctl (a separate process).
  // Returns the reply line; fails the current test when the command fails.
  std::string Control(const std::string& json) const;
  // Same, but returns the result without failing the test.
  CommandResult TryControl(const std::string& json) const;

 private:
  std::string socket_;
  std::string sysfs_;
};

}  // namespace danqing::testing
