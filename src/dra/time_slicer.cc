#include "dra/time_slicer.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "common/printable.h"

extern char** environ;

namespace danqing::dra {

NvidiaSmiTimeSlicer::NvidiaSmiTimeSlicer(std::string nvidia_smi, std::string library_dir,
                                         std::chrono::milliseconds deadline)
    : nvidia_smi_(std::move(nvidia_smi)),
      library_dir_(std::move(library_dir)),
      deadline_(deadline) {}

Status NvidiaSmiTimeSlicer::Set(const std::string& gpu_uuid, TimeSlice slice) {
  if (::access(nvidia_smi_.c_str(), X_OK) != 0) {
    return {StatusCode::kNotSupported,
            "no nvidia-smi at " + nvidia_smi_ + " to set the time-slice with"};
  }
  const std::string level = std::to_string(static_cast<int>(slice));
  std::vector<std::string> args = {nvidia_smi_, "compute-policy",  "-i",
                                   gpu_uuid,    "--set-timeslice", level};
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    if (!library_dir_.empty() && std::strncmp(*e, "LD_LIBRARY_PATH=", 16) == 0) continue;
    env.emplace_back(*e);
  }
  if (!library_dir_.empty()) env.push_back("LD_LIBRARY_PATH=" + library_dir_);
  std::vector<char*> argv, envp;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);

  int pipefd[2];
  if (::pipe2(pipefd, O_CLOEXEC) != 0)
    return Unavailable(std::string("pipe: ") + std::strerror(errno));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipefd[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, pipefd[1], STDERR_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  pid_t pid = -1;
  const int rc =
      ::posix_spawn(&pid, nvidia_smi_.c_str(), &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  ::close(pipefd[1]);
  if (rc != 0) {
    ::close(pipefd[0]);
    return Unavailable("cannot run " + nvidia_smi_ + ": " + std::strerror(rc));
  }
  std::string output;
  const auto until = std::chrono::steady_clock::now() + deadline_;
  bool timed_out = false;
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        until - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    pollfd p{pipefd[0], POLLIN, 0};
    const int r = ::poll(&p, 1, static_cast<int>(left.count()));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      timed_out = r == 0;
      break;
    }
    char buf[1024];
    const ssize_t n = ::read(pipefd[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    if (output.size() < 4096) output.append(buf, static_cast<size_t>(n));
  }
  ::close(pipefd[0]);
  if (timed_out) ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  while (!output.empty() && (output.back() == '\n' || output.back() == ' ')) output.pop_back();
  const std::string what = "nvidia-smi compute-policy -i " + gpu_uuid + " --set-timeslice " + level;
  if (timed_out) {
    return {StatusCode::kDeadlineExceeded,
            what + ": no answer in " + std::to_string(deadline_.count()) + " ms (killed)"};
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return Status::Ok();
  if (output.find("Not Supported") != std::string::npos ||
      output.find("not supported") != std::string::npos) {
    return {StatusCode::kNotSupported, what + ": " + Printable(output)};
  }
  return Unavailable(what + " failed (" +
                     (WIFEXITED(status) ? "exit " + std::to_string(WEXITSTATUS(status))
                                        : "signal " + std::to_string(WTERMSIG(status))) +
                     "): " + Printable(output));
}

}  // namespace danqing::dra
