#include "common/read_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace danqing {
namespace {

Status OpenError(int err) {
  const std::string why = std::strerror(err);
  switch (err) {
    case ENOENT:
    case ENOTDIR: return NotFound(why);
    case EACCES:
    case EPERM: return Status(StatusCode::kPermissionDenied, why);
    // open() of a socket.
    case ENXIO: return FailedPrecondition("not a regular file: a socket or a device (" + why + ")");
    default: return InvalidArgument(why);
  }
}

std::string_view TypeName(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return "not a file";
}

Status CheckMode(mode_t mode) {
  if (S_ISREG(mode)) return Status::Ok();
  return FailedPrecondition("not a regular file: " + std::string(TypeName(mode)));
}

}  // namespace

Result<std::string> ReadRegularFile(const std::string& path, std::size_t max_bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return OpenError(errno);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return InvalidArgument(std::strerror(err));
  }
  if (Status st_mode = CheckMode(st.st_mode); !st_mode.ok()) {
    ::close(fd);
    return st_mode;
  }
  // /proc and /sys files report a size of 0 or 4096: read to the end.
  std::string text;
  char buf[8192];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      return InvalidArgument(std::strerror(err));
    }
    if (n == 0) break;
    if (text.size() + static_cast<std::size_t>(n) > max_bytes) {
      ::close(fd);
      return ResourceExhausted("larger than " + std::to_string(max_bytes) + " bytes");
    }
    text.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return text;
}

Status CheckRegularFile(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return OpenError(errno);
  return CheckMode(st.st_mode);
}

std::optional<std::string> ReadTextFile(const std::string& path) {
  auto text = ReadRegularFile(path, kMaxTextFileBytes);
  if (!text.ok()) return std::nullopt;
  return std::move(text).value();
}

}  // namespace danqing
