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
  path_ = path;
  thread_ = std::thread([this, cb = std::move(on_change), quiet] { Run(cb, quiet); });
  return Status::Ok();
}

bool FileWatcher::Concerns(std::string_view name) const {
  const std::filesystem::path p(path_);
  if (name == p.filename().string()) return true;
  // The entry the path links to, when it is a link to a name beside it. A
  // ConfigMap volume's files are such links, through `..data`, which an
  // update renames over.
  std::error_code ec;
  const std::filesystem::path target = std::filesystem::read_symlink(p, ec);
  if (ec || target.is_absolute() || target.empty()) return false;
  return name == target.begin()->string();
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
      ssize_t n = 0;
      while ((n = ::read(inotify_fd_, buf, sizeof buf)) > 0) {
        for (ssize_t off = 0; off < n;) {
          const auto* ev = reinterpret_cast<const struct inotify_event*>(buf + off);
          off += static_cast<ssize_t>(sizeof(struct inotify_event) + ev->len);
          if (pending) continue;  // the rest of the batch changes nothing
          // An overflow lost events, and an event without a name is on the
          // directory itself: either may hide a change.
          if ((ev->mask & IN_Q_OVERFLOW) || ev->len == 0 || Concerns(ev->name)) pending = true;
        }
      }
    }
  }
}

}  // namespace danqing
