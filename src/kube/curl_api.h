// CurlApi: the libcurl entry points the API client uses, resolved with
// dlopen("libcurl.so.4") when the first Client is made, not linked. The
// agent then maps libcurl, and the ~25 libraries Debian's libcurl depends on
// (LDAP, Kerberos, GnuTLS, SSH, RTMP; ~4 MiB resident), only in the DRA
// modes that make an API client: the device-plugin mode does not pay for
// them (docs/benchmarks.md, "DRA through the wired agent").
//
// Thread-safety: LoadCurl may be called from any thread (it loads once); the
// table it returns is immutable.
#pragma once

#include <curl/curl.h>

#include "common/status.h"

namespace danqing::kube::internal {

struct CurlApi {
  decltype(&::curl_global_init) global_init;
  decltype(&::curl_easy_init) easy_init;
  decltype(&::curl_easy_cleanup) easy_cleanup;
  decltype(&::curl_easy_reset) easy_reset;
  decltype(&::curl_easy_setopt) easy_setopt;
  decltype(&::curl_easy_getinfo) easy_getinfo;
  decltype(&::curl_easy_perform) easy_perform;
  decltype(&::curl_easy_strerror) easy_strerror;
  decltype(&::curl_slist_append) slist_append;
  decltype(&::curl_slist_free_all) slist_free_all;
  decltype(&::curl_multi_init) multi_init;
  decltype(&::curl_multi_cleanup) multi_cleanup;
  decltype(&::curl_multi_add_handle) multi_add_handle;
  decltype(&::curl_multi_remove_handle) multi_remove_handle;
  decltype(&::curl_multi_perform) multi_perform;
  decltype(&::curl_multi_poll) multi_poll;
  decltype(&::curl_multi_info_read) multi_info_read;
};

// The loaded table, curl_global_init done. UNAVAILABLE naming the library
// and the reason when libcurl.so.4 (or one of its functions) cannot be
// loaded; the same answer on every later call.
Result<const CurlApi*> LoadCurl();

}  // namespace danqing::kube::internal
