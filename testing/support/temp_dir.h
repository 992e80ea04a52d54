// TempDir: a fresh directory under /tmp for one test, removed with everything
// in it when the object goes. The default prefix is short: unix socket paths
// inside it must stay under 108 bytes.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <string>
#include <system_error>

namespace danqing::testing {

class TempDir {
 public:
  explicit TempDir(std::string prefix = "/tmp/dq") {
    std::string tmpl = std::move(prefix) + "XXXXXX";
    if (::mkdtemp(tmpl.data()) != nullptr) path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  // Empty when the directory could not be made.
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace danqing::testing
