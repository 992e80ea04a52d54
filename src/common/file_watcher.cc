#include "common/file_watcher.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace danqing {

FileWatcher::~FileWatcher() { Stop(); }

Status FileWatcher::Start(const std::string& path, std::function<void()> on_change,
                          std::chrono::milliseconds quiet) {
  if (thread_.joinable()) return FailedPrecondition("file watcher already running");
  std::filesystem::path p(path);
  const std::string dir = p.has_parent_path() ? p.parent_path().string() : ".";
  inotify_fd_ = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  stop_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (inotify_fd_ < 0 || stop_fd_ < 0) {
    Stop();
    return Unavailable(std::string("inotify/eventfd: ") + std::strerror(errno));
  }
  // Writes, renames into/out of, creations and deletions in the directory:
  // everything that can change what `path` resolves to.
  if (::inotify_add_watch(inotify_fd_, dir.c_str(),
                          IN_CLOSE_WRITE | IN_MOVED_TO | IN_MOVED_FROM | IN_CREATE | IN_DELETE) < 0) {
    const std::string why = std::strerror(errno);
    Stop();
    return Unavailable("cannot watch " + dir + ": " + why);
  }
  thread_ = std::thread([this, cb = std::move(on_change), quiet] { Run(cb, quiet); });
  return Status::Ok();
}

void FileWatcher::Stop() {
  if (stop_fd_ >= 0) {
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(stop_fd_, &one, sizeof one);
  }
  if (thread_.joinable()) thread_.join();
  if (inotify_fd_ >= 0) ::close(inotify_fd_);
  if (stop_fd_ >= 0) ::close(stop_fd_);
  inotify_fd_ = stop_fd_ = -1;
}

void FileWatcher::Run(std::function<void()> on_change, std::chrono::milliseconds quiet) {
  bool pending = false;
  for (;;) {
    struct pollfd fds[2] = {{inotify_fd_, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
    // While a change is pending, wait only for the quiet period to pass.
    const int rc = ::poll(fds, 2, pending ? static_cast<int>(quiet.count()) : -1);
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0 || (fds[1].revents & POLLIN)) return;
    if (rc == 0) {
      pending = false;
      on_change();
      continue;
    }
    if (fds[0].revents & POLLIN) {
      alignas(struct inotify_event) char buf[4096];
      while (::read(inotify_fd_, buf, sizeof buf) > 0) {
      }
      pending = true;
    }
  }
}

}  // namespace danqing
