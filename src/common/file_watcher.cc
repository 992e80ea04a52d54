#include "common/file_watcher.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string_view>

namespace danqing {
namespace {

namespace fs = std::filesystem;

// Writes, renames into/out of, creations and deletions in the directory:
// everything that can change what the path resolves to.
constexpr uint32_t kEvents = IN_CLOSE_WRITE | IN_MOVED_TO | IN_MOVED_FROM | IN_CREATE | IN_DELETE;
// While the directory cannot be watched (it was removed), how often to try.
constexpr std::chrono::milliseconds kRewatchEvery{500};

}  // namespace

FileWatcher::~FileWatcher() { Stop(); }

Status FileWatcher::Start(const std::string& path, std::function<void()> on_change,
                          std::chrono::milliseconds quiet) {
  if (thread_.joinable()) return FailedPrecondition("file watcher already running");
  fs::path p(path);
  dir_ = p.has_parent_path() ? p.parent_path().string() : ".";
  inotify_fd_ = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  stop_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (inotify_fd_ < 0 || stop_fd_ < 0) {
    Stop();
    return Unavailable(std::string("inotify/eventfd: ") + std::strerror(errno));
  }
  if (::inotify_add_watch(inotify_fd_, dir_.c_str(), kEvents) < 0) {
    const std::string why = std::strerror(errno);
    Stop();
    return Unavailable("cannot watch " + dir_ + ": " + why);
  }
  path_ = path;
  thread_ = std::thread([this, cb = std::move(on_change), quiet] { Run(cb, quiet); });
  return Status::Ok();
}

// The names in the directory that the path goes through: its own, and, when
// it is a link, those of the entries its links lead through there (a
// ConfigMap's `..data`, a `config.yaml -> current.yaml -> v2.yaml` chain).
std::vector<std::string> FileWatcher::NamesOfThePath() const {
  const fs::path p(path_);
  std::vector<std::string> names{p.filename().string()};
  std::error_code ec;
  const fs::path dir = fs::absolute(dir_, ec).lexically_normal();
  if (ec) return names;
  fs::path at = fs::absolute(p, ec);
  for (int hop = 0; hop < 40 && !ec; ++hop) {  // 40: the kernel's limit on links
    const fs::path target = fs::read_symlink(at, ec);
    if (ec) break;
    at = (target.is_absolute() ? target : at.parent_path() / target).lexically_normal();
    // The first component below the directory, if the target is under it.
    const fs::path rel = at.lexically_relative(dir);
    if (rel.empty() || *rel.begin() == "..") continue;
    const std::string first = rel.begin()->string();
    if (first != "." && std::find(names.begin(), names.end(), first) == names.end()) {
      names.push_back(first);
    }
  }
  return names;
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
  using Clock = std::chrono::steady_clock;
  // A change is reported once `quiet` has passed since the last event that
  // concerns the file; other events in the directory do not delay it.
  constexpr Clock::time_point kNever = Clock::time_point::max();
  Clock::time_point report_at = kNever;
  bool watched = true;
  for (;;) {
    int timeout = -1;
    if (report_at != kNever) {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(report_at - Clock::now());
      timeout = static_cast<int>(std::max<int64_t>(0, left.count()));
    }
    if (!watched) timeout = timeout < 0 ? static_cast<int>(kRewatchEvery.count()) : timeout;
    struct pollfd fds[2] = {{inotify_fd_, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
    const int rc = ::poll(fds, 2, timeout);
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0 || (fds[1].revents & POLLIN)) return;
    if (!watched && ::inotify_add_watch(inotify_fd_, dir_.c_str(), kEvents) >= 0) {
      // The directory came back (a ConfigMap's `..data/sub` after an update):
      // the file in it may be another.
      watched = true;
      report_at = Clock::now() + quiet;
    }
    if (fds[0].revents & POLLIN) {
      alignas(struct inotify_event) char buf[4096];
      ssize_t n = 0;
      std::vector<std::string> names;  // read once per batch, when needed
      bool concerns = false;
      while ((n = ::read(inotify_fd_, buf, sizeof buf)) > 0) {
        for (ssize_t off = 0; off < n;) {
          const auto* ev = reinterpret_cast<const struct inotify_event*>(buf + off);
          off += static_cast<ssize_t>(sizeof(struct inotify_event) + ev->len);
          if (ev->mask & IN_IGNORED) {
            // The kernel dropped the watch: the directory was removed or
            // unmounted. Watch it again as soon as it is there.
            watched = false;
            concerns = true;
            continue;
          }
          if (concerns) continue;  // the rest of the batch changes nothing
          // An overflow lost events, and an event without a name is on the
          // directory itself: either may hide a change.
          if ((ev->mask & IN_Q_OVERFLOW) || ev->len == 0) {
            concerns = true;
            continue;
          }
          if (names.empty()) names = NamesOfThePath();
          concerns =
              std::find(names.begin(), names.end(), std::string_view(ev->name)) != names.end();
        }
      }
      if (concerns) report_at = Clock::now() + quiet;
    }
    if (report_at != kNever && Clock::now() >= report_at) {
      report_at = kNever;
      on_change();
    }
  }
}

}  // namespace danqing
