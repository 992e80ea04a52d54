#include "kube/curl_api.h"

#include <dlfcn.h>

#include <mutex>
#include <string>

namespace danqing::kube::internal {
namespace {

constexpr char kLibrary[] = "libcurl.so.4";

template <typename F>
bool Resolve(void* lib, const char* name, F& out, std::string& missing) {
  void* sym = ::dlsym(lib, name);
  if (sym == nullptr) {
    missing += missing.empty() ? name : std::string(", ") + name;
    return false;
  }
  out = reinterpret_cast<F>(sym);
  return true;
}

}  // namespace

Result<const CurlApi*> LoadCurl() {
  static std::once_flag once;
  static CurlApi api;
  static Status status;
  std::call_once(once, [] {
    void* lib = ::dlopen(kLibrary, RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      const char* why = ::dlerror();
      status = Unavailable(std::string("kube client: cannot load ") + kLibrary + ": " +
                           (why != nullptr ? why : "unknown error") +
                           " (the Kubernetes API client needs libcurl 7.85 or later: Debian's "
                           "libcurl4)");
      return;
    }
    std::string missing;
    Resolve(lib, "curl_global_init", api.global_init, missing);
    Resolve(lib, "curl_easy_init", api.easy_init, missing);
    Resolve(lib, "curl_easy_cleanup", api.easy_cleanup, missing);
    Resolve(lib, "curl_easy_reset", api.easy_reset, missing);
    Resolve(lib, "curl_easy_setopt", api.easy_setopt, missing);
    Resolve(lib, "curl_easy_getinfo", api.easy_getinfo, missing);
    Resolve(lib, "curl_easy_perform", api.easy_perform, missing);
    Resolve(lib, "curl_easy_strerror", api.easy_strerror, missing);
    Resolve(lib, "curl_slist_append", api.slist_append, missing);
    Resolve(lib, "curl_slist_free_all", api.slist_free_all, missing);
    Resolve(lib, "curl_multi_init", api.multi_init, missing);
    Resolve(lib, "curl_multi_cleanup", api.multi_cleanup, missing);
    Resolve(lib, "curl_multi_add_handle", api.multi_add_handle, missing);
    Resolve(lib, "curl_multi_remove_handle", api.multi_remove_handle, missing);
    Resolve(lib, "curl_multi_perform", api.multi_perform, missing);
    Resolve(lib, "curl_multi_poll", api.multi_poll, missing);
    Resolve(lib, "curl_multi_info_read", api.multi_info_read, missing);
    if (!missing.empty()) {
      status = Unavailable(std::string("kube client: ") + kLibrary + " lacks " + missing +
                           " (libcurl 7.85 or later is needed)");
      return;
    }
    if (api.global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
      status = Unavailable("kube client: curl_global_init failed");
      return;
    }
    // The library stays loaded for the life of the process.
  });
  if (!status.ok()) return status;
  return &api;
}

}  // namespace danqing::kube::internal
