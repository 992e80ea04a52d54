#include "kube/client.h"

#include <curl/curl.h>

#include <cctype>
#include <cstring>

#include "common/read_file.h"
#include "kube/curl_api.h"

namespace danqing::kube {
namespace {

constexpr std::size_t kMaxTokenBytes = 64 << 10;
constexpr std::size_t kMaxErrorBodyInMessage = 512;

// libcurl, loaded by the first Client::Create (curl_api.h); every later use
// is by a Client, made after it.
const internal::CurlApi* g_curl = nullptr;
std::once_flag g_curl_init;

Status InitCurl() {
  auto api = internal::LoadCurl();
  if (!api.ok()) return api.status();
  std::call_once(g_curl_init, [&] { g_curl = *api; });
  return Status::Ok();
}

const internal::CurlApi& Curl() {
  return *g_curl;
}

std::string PercentEncode(std::string_view s) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (const unsigned char c : s) {
    if (std::isalnum(c) != 0 || c == '-' || c == '_' || c == '.' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

std::string TrimToken(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back())) != 0) s.pop_back();
  std::size_t b = 0;
  while (b < s.size() && std::isspace(static_cast<unsigned char>(s[b])) != 0) ++b;
  return s.substr(b);
}

ApiError Transport(CURLcode code, const char* errbuf, const std::string& verb,
                   const std::string& path) {
  ApiError e;
  e.verb = verb;
  e.path = path;
  switch (code) {
    case CURLE_OPERATION_TIMEDOUT: e.reason = "Timeout"; break;
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST: e.reason = "ConnectionFailed"; break;
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_CIPHER: e.reason = "TLSError"; break;
    default: e.reason = "TransportError"; break;
  }
  e.message = (errbuf != nullptr && errbuf[0] != '\0') ? errbuf : Curl().easy_strerror(code);
  return e;
}

// The error of a non-2xx answer: the Status object's reason and message when
// the body is one, else the body's start.
ApiError FromStatusBody(long http, const std::string& body, const std::string& verb,
                        const std::string& path) {
  ApiError e;
  e.http_status = static_cast<int>(http);
  e.verb = verb;
  e.path = path;
  Json j = Json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_object() && j.value("kind", "") == "Status") {
    if (j.contains("reason") && j["reason"].is_string()) e.reason = j["reason"].get<std::string>();
    if (j.contains("message") && j["message"].is_string())
      e.message = j["message"].get<std::string>();
  } else {
    e.message = body.substr(0, kMaxErrorBodyInMessage);
  }
  if (e.reason.empty()) {
    switch (http) {
      case 400: e.reason = "BadRequest"; break;
      case 401: e.reason = "Unauthorized"; break;
      case 403: e.reason = "Forbidden"; break;
      case 404: e.reason = "NotFound"; break;
      case 405: e.reason = "MethodNotAllowed"; break;
      case 409: e.reason = "Conflict"; break;
      case 410: e.reason = "Gone"; break;
      case 422: e.reason = "Invalid"; break;
      case 429: e.reason = "TooManyRequests"; break;
      case 504: e.reason = "Timeout"; break;
      default: e.reason = http >= 500 ? "InternalError" : "Unknown"; break;
    }
  }
  return e;
}

struct Body {
  std::string data;
  std::size_t limit = 0;
  bool too_large = false;
};

size_t WriteBody(char* ptr, size_t size, size_t n, void* user) {
  auto* b = static_cast<Body*>(user);
  const size_t len = size * n;
  if (b->data.size() + len > b->limit) {
    b->too_large = true;
    return 0;  // aborts the transfer
  }
  b->data.append(ptr, len);
  return len;
}

}  // namespace

bool ApiError::IsRetryable() const {
  return http_status == 0 ? reason != "TooLarge" && reason != "BadResponse"
                          : http_status == 401 || http_status == 429 || http_status >= 500;
}

std::string ApiError::ToString() const {
  std::string s = verb + " " + path + ": ";
  if (http_status != 0) s += std::to_string(http_status) + " ";
  s += reason;
  if (!message.empty()) s += ": " + message;
  return s;
}

Status ApiError::ToStatus() const {
  StatusCode code = StatusCode::kUnavailable;
  switch (http_status) {
    case 0:
      code = reason == "Timeout"    ? StatusCode::kDeadlineExceeded
             : reason == "TooLarge" ? StatusCode::kResourceExhausted
                                    : StatusCode::kUnavailable;
      break;
    case 400:
    case 422: code = StatusCode::kInvalidArgument; break;
    case 401:
    case 403: code = StatusCode::kPermissionDenied; break;
    case 404: code = StatusCode::kNotFound; break;
    case 409:
      code = IsAlreadyExists() ? StatusCode::kAlreadyExists : StatusCode::kFailedPrecondition;
      break;
    case 410: code = StatusCode::kFailedPrecondition; break;
    case 504: code = StatusCode::kDeadlineExceeded; break;
    default: code = StatusCode::kUnavailable; break;
  }
  return {code, ToString()};
}

std::string EncodeQuery(const Query& query) {
  std::string out;
  for (const auto& [k, v] : query) {
    out += out.empty() ? '?' : '&';
    out += PercentEncode(k);
    out += '=';
    out += PercentEncode(v);
  }
  return out;
}

struct Client::Handle {
  CURL* curl = nullptr;
  ~Handle() {
    if (curl != nullptr) Curl().easy_cleanup(curl);
  }
};

Client::Client(Config config) : config_(std::move(config)) {}

Client::~Client() = default;

Result<std::unique_ptr<Client>> Client::Create(Config config) {
  if (Status st = InitCurl(); !st.ok()) return st;
  if (config.server.empty()) return InvalidArgument("kube client: no API server URL");
  while (!config.server.empty() && config.server.back() == '/') config.server.pop_back();
  auto c = std::unique_ptr<Client>(new Client(std::move(config)));
  c->ca_pem_ = c->config_.ca_pem;
  c->cert_pem_ = c->config_.client_cert_pem;
  c->key_pem_ = c->config_.client_key_pem;
  // Files are read here once to fail early with their name; curl reads the
  // CA file again for each new connection (a rotated CA is picked up).
  for (const auto& [path, what] :
       {std::pair<const std::string&, const char*>{c->config_.ca_file, "CA file"},
        {c->config_.client_cert_file, "client certificate"},
        {c->config_.client_key_file, "client key"}}) {
    if (path.empty()) continue;
    if (Status st = CheckRegularFile(path); !st.ok()) {
      return InvalidArgument(std::string("kube client: ") + what + " " + path + ": " +
                             st.message());
    }
  }
  return c;
}

Result<std::string> Client::CurrentToken() const {
  if (config_.token_file.empty()) return config_.token;
  auto t = ReadRegularFile(config_.token_file, kMaxTokenBytes);
  if (!t.ok()) {
    return Status(StatusCode::kUnavailable,
                  "token file " + config_.token_file + ": " + t.status().message());
  }
  std::string token = TrimToken(std::move(t).value());
  if (token.empty()) {
    return Status(StatusCode::kUnavailable, "token file " + config_.token_file + " is empty");
  }
  return token;
}

std::unique_ptr<Client::Handle> Client::TakeHandle() {
  {
    std::lock_guard lock(pool_mu_);
    if (!pool_.empty()) {
      auto h = std::move(pool_.back());
      pool_.pop_back();
      Curl().easy_reset(h->curl);  // options cleared; the connection is kept
      return h;
    }
  }
  auto h = std::make_unique<Handle>();
  h->curl = Curl().easy_init();
  return h;
}

void Client::ReturnHandle(std::unique_ptr<Handle> h) {
  std::lock_guard lock(pool_mu_);
  if (pool_.size() < 8) pool_.push_back(std::move(h));
}

namespace {

struct CommonSetup {
  curl_slist* headers = nullptr;
  std::string auth;
  ~CommonSetup() {
    if (headers != nullptr) Curl().slist_free_all(headers);
  }
};

void SetTls(CURL* c, const Config& cfg, const std::string& ca_pem, const std::string& cert_pem,
            const std::string& key_pem) {
  Curl().easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  Curl().easy_setopt(c, CURLOPT_PROTOCOLS_STR, "https,http");
  Curl().easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(cfg.connect_timeout.count()));
  Curl().easy_setopt(c, CURLOPT_USERAGENT, cfg.user_agent.c_str());
  Curl().easy_setopt(c, CURLOPT_TCP_KEEPALIVE, 1L);
  if (cfg.insecure_skip_tls_verify) {
    Curl().easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 0L);
    Curl().easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 0L);
  } else {
    Curl().easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 1L);
    Curl().easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 2L);
  }
  if (!ca_pem.empty()) {
    curl_blob blob{const_cast<char*>(ca_pem.data()), ca_pem.size(), CURL_BLOB_COPY};
    Curl().easy_setopt(c, CURLOPT_CAINFO_BLOB, &blob);
  } else if (!cfg.ca_file.empty()) {
    Curl().easy_setopt(c, CURLOPT_CAINFO, cfg.ca_file.c_str());
  }
  if (!cert_pem.empty()) {
    curl_blob blob{const_cast<char*>(cert_pem.data()), cert_pem.size(), CURL_BLOB_COPY};
    Curl().easy_setopt(c, CURLOPT_SSLCERT_BLOB, &blob);
  } else if (!cfg.client_cert_file.empty()) {
    Curl().easy_setopt(c, CURLOPT_SSLCERT, cfg.client_cert_file.c_str());
  }
  if (!key_pem.empty()) {
    curl_blob blob{const_cast<char*>(key_pem.data()), key_pem.size(), CURL_BLOB_COPY};
    Curl().easy_setopt(c, CURLOPT_SSLKEY_BLOB, &blob);
  } else if (!cfg.client_key_file.empty()) {
    Curl().easy_setopt(c, CURLOPT_SSLKEY, cfg.client_key_file.c_str());
  }
}

}  // namespace

Expected<Json> Client::Request(const char* verb, const std::string& path, const Query& query,
                               const Json* body) {
  auto token = CurrentToken();
  if (!token.ok()) {
    ApiError e;
    e.reason = "TokenUnreadable";
    e.message = token.status().message();
    e.verb = verb;
    e.path = path;
    return e;
  }
  auto h = TakeHandle();
  if (h->curl == nullptr) {
    ApiError e;
    e.reason = "TransportError";
    e.message = "curl_easy_init failed";
    e.verb = verb;
    e.path = path;
    return e;
  }
  CURL* c = h->curl;
  const std::string url = config_.server + path + EncodeQuery(query);
  SetTls(c, config_, ca_pem_, cert_pem_, key_pem_);
  Curl().easy_setopt(c, CURLOPT_URL, url.c_str());
  Curl().easy_setopt(c, CURLOPT_TIMEOUT_MS, static_cast<long>(config_.request_timeout.count()));
  CommonSetup s;
  s.headers = Curl().slist_append(s.headers, "Accept: application/json");
  if (!token->empty()) {
    s.auth = "Authorization: Bearer " + *token;
    s.headers = Curl().slist_append(s.headers, s.auth.c_str());
  }
  std::string payload;
  if (body != nullptr) {
    payload = body->dump();
    s.headers = Curl().slist_append(s.headers, "Content-Type: application/json");
    // No "Expect: 100-continue" (curl adds it to bodies over 1 KiB): one
    // round trip less per write; the body is small and always wanted.
    s.headers = Curl().slist_append(s.headers, "Expect:");
    Curl().easy_setopt(c, CURLOPT_POSTFIELDS, payload.data());
    Curl().easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(payload.size()));
  }
  if (std::strcmp(verb, "GET") == 0) {
    Curl().easy_setopt(c, CURLOPT_HTTPGET, 1L);
  } else {
    Curl().easy_setopt(c, CURLOPT_CUSTOMREQUEST, verb);
  }
  Curl().easy_setopt(c, CURLOPT_HTTPHEADER, s.headers);
  Body out;
  out.limit = config_.max_response_bytes;
  Curl().easy_setopt(c, CURLOPT_WRITEFUNCTION, &WriteBody);
  Curl().easy_setopt(c, CURLOPT_WRITEDATA, &out);
  char errbuf[CURL_ERROR_SIZE] = {0};
  Curl().easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);

  const CURLcode rc = Curl().easy_perform(c);
  Curl().easy_setopt(c, CURLOPT_ERRORBUFFER, nullptr);
  long http = 0;
  Curl().easy_getinfo(c, CURLINFO_RESPONSE_CODE, &http);
  if (rc != CURLE_OK) {
    ApiError e = Transport(rc, errbuf, verb, path);
    if (out.too_large) {
      e.reason = "TooLarge";
      e.message = "response body larger than " + std::to_string(out.limit) + " bytes";
    }
    return e;  // the handle is dropped with its (broken) connection
  }
  ReturnHandle(std::move(h));
  if (http < 200 || http > 299) return FromStatusBody(http, out.data, verb, path);
  Json j = Json::parse(out.data, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    ApiError e;
    e.http_status = 0;
    e.reason = "BadResponse";
    e.message = "HTTP " + std::to_string(http) + " body is not JSON";
    e.verb = verb;
    e.path = path;
    return e;
  }
  return j;
}

Expected<Json> Client::Get(const std::string& path, const Query& query) {
  return Request("GET", path, query, nullptr);
}

Expected<Json> Client::Create(const std::string& path, const Json& object) {
  return Request("POST", path, {}, &object);
}

Expected<Json> Client::Update(const std::string& path, const Json& object) {
  return Request("PUT", path, {}, &object);
}

Expected<Json> Client::Delete(const std::string& path, const std::string& resource_version) {
  if (resource_version.empty()) return Request("DELETE", path, {}, nullptr);
  const Json opts = {{"apiVersion", "v1"},
                     {"kind", "DeleteOptions"},
                     {"preconditions", {{"resourceVersion", resource_version}}}};
  return Request("DELETE", path, {}, &opts);
}

namespace {

struct WatchState {
  CURL* curl = nullptr;
  const std::function<bool(const WatchEvent&)>* on_event = nullptr;
  std::size_t limit = 0;
  std::string line;
  long http = 0;         // known once the first body byte came
  std::string err_body;  // a non-2xx answer's body
  bool stopped = false;  // the callback ended the watch
  bool too_large = false;
  std::string bad;  // a line that is not a JSON event
  std::chrono::steady_clock::time_point last_byte;
};

bool HandleLine(WatchState& w, const std::string& line) {
  if (line.empty() || line == "\r") return true;
  Json j = Json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string() || !j.contains("object")) {
    w.bad = line.substr(0, 200);
    return false;
  }
  WatchEvent ev;
  ev.type = j["type"].get<std::string>();
  ev.object = std::move(j["object"]);
  if (!(*w.on_event)(ev)) {
    w.stopped = true;
    return false;
  }
  return true;
}

size_t WriteWatch(char* ptr, size_t size, size_t n, void* user) {
  auto* w = static_cast<WatchState*>(user);
  const size_t len = size * n;
  w->last_byte = std::chrono::steady_clock::now();
  if (w->http == 0) Curl().easy_getinfo(w->curl, CURLINFO_RESPONSE_CODE, &w->http);
  if (w->http < 200 || w->http > 299) {
    if (w->err_body.size() + len > w->limit) {
      w->too_large = true;
      return 0;
    }
    w->err_body.append(ptr, len);
    return len;
  }
  std::string_view data(ptr, len);
  while (!data.empty()) {
    const auto nl = data.find('\n');
    if (nl == std::string_view::npos) {
      if (w->line.size() + data.size() > w->limit) {
        w->too_large = true;
        return 0;
      }
      w->line.append(data);
      break;
    }
    if (w->line.size() + nl > w->limit) {
      w->too_large = true;
      return 0;
    }
    w->line.append(data.substr(0, nl));
    data.remove_prefix(nl + 1);
    std::string line = std::move(w->line);
    w->line.clear();
    if (!HandleLine(*w, line)) return 0;
  }
  return len;
}

}  // namespace

Expected<bool> Client::Watch(const std::string& path, Query query,
                             const std::function<bool(const WatchEvent&)>& on_event,
                             const WatchOptions& options) {
  auto fail = [&](std::string reason, std::string message, int http = 0) {
    ApiError e;
    e.http_status = http;
    e.reason = std::move(reason);
    e.message = std::move(message);
    e.verb = "WATCH";
    e.path = path;
    return e;
  };
  auto token = CurrentToken();
  if (!token.ok()) return fail("TokenUnreadable", token.status().message());
  query.insert(query.begin(), {"watch", "1"});
  const std::string url = config_.server + path + EncodeQuery(query);

  CURL* c = Curl().easy_init();
  CURLM* m = Curl().multi_init();
  if (c == nullptr || m == nullptr) {
    if (c != nullptr) Curl().easy_cleanup(c);
    if (m != nullptr) Curl().multi_cleanup(m);
    return fail("TransportError", "curl init failed");
  }
  SetTls(c, config_, ca_pem_, cert_pem_, key_pem_);
  Curl().easy_setopt(c, CURLOPT_URL, url.c_str());
  CommonSetup s;
  s.headers = Curl().slist_append(s.headers, "Accept: application/json");
  if (!token->empty()) {
    s.auth = "Authorization: Bearer " + *token;
    s.headers = Curl().slist_append(s.headers, s.auth.c_str());
  }
  Curl().easy_setopt(c, CURLOPT_HTTPHEADER, s.headers);
  WatchState w;
  w.curl = c;
  w.on_event = &on_event;
  w.limit = config_.max_response_bytes;
  w.last_byte = std::chrono::steady_clock::now();
  Curl().easy_setopt(c, CURLOPT_WRITEFUNCTION, &WriteWatch);
  Curl().easy_setopt(c, CURLOPT_WRITEDATA, &w);
  char errbuf[CURL_ERROR_SIZE] = {0};
  Curl().easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
  Curl().multi_add_handle(m, c);

  CURLcode result = CURLE_OK;
  bool cancelled = false;
  bool idle = false;
  int running = 1;
  while (running > 0) {
    Curl().multi_perform(m, &running);
    int msgs = 0;
    while (CURLMsg* msg = Curl().multi_info_read(m, &msgs)) {
      if (msg->msg == CURLMSG_DONE) result = msg->data.result;
    }
    if (running == 0) break;
    if (options.cancel != nullptr && options.cancel->load()) {
      cancelled = true;
      break;
    }
    if (options.idle_timeout.count() > 0 &&
        std::chrono::steady_clock::now() - w.last_byte > options.idle_timeout) {
      idle = true;
      break;
    }
    Curl().multi_poll(m, nullptr, 0, 50, nullptr);
  }
  long http = w.http;
  if (http == 0) Curl().easy_getinfo(c, CURLINFO_RESPONSE_CODE, &http);
  Curl().multi_remove_handle(m, c);
  Curl().easy_cleanup(c);
  Curl().multi_cleanup(m);

  if (cancelled || w.stopped) return true;
  if (idle)
    return fail("Timeout",
                "no data on the watch for " + std::to_string(options.idle_timeout.count()) + " ms");
  if (w.too_large) {
    return fail("TooLarge",
                "watch line or error body larger than " + std::to_string(w.limit) + " bytes");
  }
  if (!w.bad.empty()) return fail("BadResponse", "watch line is not a JSON event: " + w.bad);
  if (result != CURLE_OK) return Transport(result, errbuf, "WATCH", path);
  if (http < 200 || http > 299) {
    ApiError e = FromStatusBody(http, w.err_body, "WATCH", path);
    return e;
  }
  if (!w.line.empty()) {  // a last event without its newline
    if (!HandleLine(w, w.line) && !w.bad.empty()) {
      return fail("BadResponse", "watch line is not a JSON event: " + w.bad);
    }
  }
  return true;
}

}  // namespace danqing::kube
