#include "render/stroke_data.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace danqing::render {
namespace {

constexpr char kMagic[8] = {'D', 'Q', 'S', 'T', 'R', 'K', '0', '1'};
constexpr size_t kHeader = 16;

uint32_t U32(const uint8_t* p) {
  return uint32_t{p[0]} | (uint32_t{p[1]} << 8) | (uint32_t{p[2]} << 16) | (uint32_t{p[3]} << 24);
}
int16_t I16(const uint8_t* p) {
  return static_cast<int16_t>(static_cast<uint16_t>(p[0] | (p[1] << 8)));
}

}  // namespace

Result<std::unique_ptr<StrokeData>> StrokeData::Open(const std::string& path) {
  // O_NONBLOCK: open() of a FIFO would otherwise wait for a writer, and
  // `danqing serve` loads this with SIGTERM blocked.
  int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    return Status(errno == ENOENT ? StatusCode::kNotFound : StatusCode::kUnavailable,
                  "stroke data " + path + ": " + std::strerror(errno));
  }
  struct stat st {};
  if (::fstat(fd, &st) == 0 && !S_ISREG(st.st_mode)) {
    ::close(fd);
    return FailedPrecondition("stroke data " + path + ": not a regular file");
  }
  if (::fstat(fd, &st) != 0 || st.st_size < static_cast<off_t>(kHeader)) {
    ::close(fd);
    return InvalidArgument("stroke data " + path + ": too short to be a strokes file");
  }
  size_t bytes = static_cast<size_t>(st.st_size);
  void* m = ::mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (m == MAP_FAILED) return Unavailable("stroke data " + path + ": mmap: " + std::strerror(errno));
  std::unique_ptr<StrokeData> d(new StrokeData());
  d->base_ = static_cast<const uint8_t*>(m);
  d->bytes_ = bytes;
  if (std::memcmp(d->base_, kMagic, sizeof kMagic) != 0) {
    return InvalidArgument("stroke data " + path + ": bad magic (not a DQSTRK01 file)");
  }
  size_t count = U32(d->base_ + 8);
  if (count > (bytes - kHeader) / 8) {
    return InvalidArgument("stroke data " + path + ": index larger than the file");
  }
  d->count_ = count;
  uint32_t prev = 0;
  for (size_t i = 0; i < count; ++i) {
    const uint8_t* e = d->base_ + kHeader + i * 8;
    uint32_t cp = U32(e), off = U32(e + 4);
    if ((i > 0 && cp <= prev) || off < kHeader + count * 8 || off >= bytes) {
      return InvalidArgument("stroke data " + path + ": corrupt index entry " + std::to_string(i));
    }
    prev = cp;
  }
  return d;
}

StrokeData::~StrokeData() {
  if (base_ != nullptr) ::munmap(const_cast<uint8_t*>(base_), bytes_);
}

const uint8_t* StrokeData::Find(char32_t c) const {
  size_t lo = 0, hi = count_;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    uint32_t cp = U32(base_ + kHeader + mid * 8);
    if (cp == static_cast<uint32_t>(c)) return base_ + U32(base_ + kHeader + mid * 8 + 4);
    if (cp < static_cast<uint32_t>(c)) lo = mid + 1; else hi = mid;
  }
  return nullptr;
}

bool StrokeData::Has(char32_t c) const { return Find(c) != nullptr; }

bool StrokeData::Lookup(char32_t c, CharStrokes* out) const {
  const uint8_t* p = Find(c);
  if (p == nullptr) return false;
  const uint8_t* end = base_ + bytes_;
  out->strokes.clear();
  int n = *p++;
  out->strokes.resize(static_cast<size_t>(n));
  for (int s = 0; s < n; ++s) {
    if (p >= end) return false;
    int np = *p++;
    if (p + static_cast<ptrdiff_t>(np) * 5 > end) return false;
    auto& pts = out->strokes[static_cast<size_t>(s)].points;
    pts.resize(static_cast<size_t>(np));
    for (int k = 0; k < np; ++k) {
      pts[static_cast<size_t>(k)] = {static_cast<float>(I16(p)), 900.0f - static_cast<float>(I16(p + 2)),
                                     static_cast<float>(p[4])};
      p += 5;
    }
  }
  return true;
}

}  // namespace danqing::render
