#include "kube/client.h"

#include <httplib.h>
#include <netdb.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "common/read_file.h"

namespace danqing::kube {
namespace {

constexpr std::size_t kMaxTokenBytes = 64 << 10;
constexpr std::size_t kMaxErrorBodyInMessage = 512;

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

ApiError Transport(httplib::Error err, bool timed_out, const std::string& verb,
                   const std::string& path) {
  ApiError e;
  e.verb = verb;
  e.path = path;
  switch (err) {
    case httplib::Error::ConnectionTimeout: e.reason = "Timeout"; break;
    case httplib::Error::Connection:
    case httplib::Error::BindIPAddress: e.reason = "ConnectionFailed"; break;
    case httplib::Error::SSLConnection:
    case httplib::Error::SSLLoadingCerts:
    case httplib::Error::SSLServerVerification: e.reason = "TLSError"; break;
    default: e.reason = timed_out ? "Timeout" : "TransportError"; break;
  }
  e.message = httplib::to_string(err);
  if (e.reason == "Timeout" && err != httplib::Error::ConnectionTimeout)
    e.message += " (no complete answer within the request timeout)";
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

// A PEM file's text, or `pem` when given (the file is read for each new
// connection pool entry, so a rotated file is picked up).
Result<std::string> PemText(const std::string& pem, const std::string& file, const char* what) {
  if (!pem.empty() || file.empty()) return pem;
  auto t = ReadRegularFile(file, 1 << 20);
  if (!t.ok())
    return Status(StatusCode::kUnavailable,
                  std::string(what) + " " + file + ": " + t.status().message());
  return std::move(t).value();
}

// Every certificate in `pem` in a new store (owned by the caller until handed
// to an SSL_CTX); nullptr when it holds none.
X509_STORE* StoreFromPem(const std::string& pem) {
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  if (bio == nullptr) return nullptr;
  X509_STORE* store = X509_STORE_new();
  int n = 0;
  while (X509* x = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr)) {
    if (X509_STORE_add_cert(store, x) == 1) ++n;
    X509_free(x);
  }
  BIO_free(bio);
  if (n == 0) {
    X509_STORE_free(store);
    return nullptr;
  }
  return store;
}

// "host:port", IPv6 in brackets (a CONNECT target).
std::string Authority(const std::string& host, int port) {
  return (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" +
         std::to_string(port);
}

// Asks `proxy` for a CONNECT tunnel to `host`:`port` on a connection of its
// own and reads its status line: nullopt when it agrees (2xx), else the
// error naming the proxy and its answer. Debian's cpp-httplib 0.11.4 opens
// its tunnel the same way but deadlocks on its own socket mutex when the
// proxy refuses and closes (a 403 or 407 with Connection: close), so a
// refusal is learnt here first and the library only opens tunnels the proxy
// has just granted.
std::optional<ApiError> ProbeProxy(const ProxyUrl& proxy, const std::string& host, int port,
                                   std::chrono::milliseconds timeout, const std::string& verb,
                                   const std::string& path) {
  ApiError e;
  e.verb = verb;
  e.path = path;
  const std::string who = "proxy " + proxy.Display() + " (" + proxy.variable + ")";
  auto fail = [&](std::string reason, std::string message) {
    e.reason = std::move(reason);
    e.message = who + ": " + message;
    return std::optional<ApiError>(e);
  };
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto left_ms = [&] {
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                        deadline - std::chrono::steady_clock::now())
                        .count();
    return static_cast<int>(std::max<long long>(ms, 0));
  };
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(proxy.host.c_str(), std::to_string(proxy.port).c_str(), &hints, &res) != 0 ||
      res == nullptr) {
    return fail("ConnectionFailed", "cannot resolve " + proxy.host);
  }
  int fd = -1;
  for (addrinfo* a = res; a != nullptr && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (fd < 0) continue;
    if (::connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      pollfd p{fd, POLLOUT, 0};
      int err = errno;
      if (err == EINPROGRESS && ::poll(&p, 1, left_ms()) == 1) {
        socklen_t len = sizeof err;
        ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
      } else if (err == EINPROGRESS) {
        err = ETIMEDOUT;
      }
      if (err != 0) {
        ::close(fd);
        fd = -1;
      }
    }
  }
  freeaddrinfo(res);
  if (fd < 0) return fail("ConnectionFailed", "cannot connect");
  std::string req =
      "CONNECT " + Authority(host, port) + " HTTP/1.1\r\nHost: " + Authority(host, port) + "\r\n";
  if (!proxy.username.empty()) {
    const std::string cred = proxy.username + ":" + proxy.password;
    std::string b64(4 * ((cred.size() + 2) / 3) + 1, '\0');
    const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(b64.data()),
                                  reinterpret_cast<const unsigned char*>(cred.data()),
                                  static_cast<int>(cred.size()));
    b64.resize(static_cast<std::size_t>(std::max(n, 0)));
    req += "Proxy-Authorization: Basic " + b64 + "\r\n";
  }
  req += "\r\n";
  std::size_t sent = 0;
  while (sent < req.size()) {
    pollfd p{fd, POLLOUT, 0};
    if (::poll(&p, 1, left_ms()) != 1) break;
    const ssize_t n = ::send(fd, req.data() + sent, req.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;
    sent += static_cast<std::size_t>(n);
  }
  std::string head;
  while (sent == req.size() && head.find("\r\n") == std::string::npos && head.size() < 4096) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, left_ms()) != 1) break;
    char buf[512];
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    head.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  const auto eol = head.find("\r\n");
  if (eol == std::string::npos) {
    return fail(left_ms() == 0 ? "Timeout" : "ConnectionFailed",
                "no answer to CONNECT " + Authority(host, port));
  }
  const std::string line = head.substr(0, eol);  // "HTTP/1.1 407 Proxy Authentication Required"
  const auto sp = line.find(' ');
  const int status = sp == std::string::npos ? 0 : std::atoi(line.c_str() + sp + 1);
  if (line.rfind("HTTP/", 0) != 0 || status < 100)
    return fail("BadResponse", "not an HTTP answer to CONNECT: " + line.substr(0, 200));
  if (status >= 200 && status <= 299) return std::nullopt;
  e.http_status = status;
  return fail("ProxyRefused", "CONNECT " + Authority(host, port) + " answered " +
                                  line.substr(sp + 1) +
                                  (status == 407 ? " (the proxy wants credentials: "
                                                   "http://user:password@host:port)"
                                                 : ""));
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
  std::unique_ptr<httplib::ClientImpl> http;
  std::string error;  // why `http` could not be made
};

Client::Client(Config config) : config_(std::move(config)) {}

Client::~Client() = default;

Result<std::unique_ptr<Client>> Client::Create(Config config) {
  if (config.server.empty()) return InvalidArgument("kube client: no API server URL");
  while (!config.server.empty() && config.server.back() == '/') config.server.pop_back();
  auto c = std::unique_ptr<Client>(new Client(std::move(config)));
  // "https://host[:port][/prefix]"; IPv6 literals in brackets.
  std::string_view url = c->config_.server;
  if (url.rfind("https://", 0) == 0) {
    c->tls_ = true;
    url.remove_prefix(8);
  } else if (url.rfind("http://", 0) == 0) {
    url.remove_prefix(7);
  } else {
    return InvalidArgument("kube client: server " + c->config_.server +
                           ": not an http:// or https:// URL");
  }
  const auto slash = url.find('/');
  if (slash != std::string_view::npos) {
    c->prefix_ = std::string(url.substr(slash));
    url = url.substr(0, slash);
  }
  c->port_ = c->tls_ ? 443 : 80;
  std::string_view host = url;
  std::string_view port;
  if (!url.empty() && url.front() == '[') {
    const auto close = url.find(']');
    if (close == std::string_view::npos)
      return InvalidArgument("kube client: server " + c->config_.server + ": unclosed [");
    host = url.substr(1, close - 1);
    if (close + 1 < url.size() && url[close + 1] == ':') port = url.substr(close + 2);
  } else if (const auto colon = url.rfind(':'); colon != std::string_view::npos) {
    host = url.substr(0, colon);
    port = url.substr(colon + 1);
  }
  if (!port.empty()) {
    int p = 0;
    for (const char ch : port) {
      if (std::isdigit(static_cast<unsigned char>(ch)) == 0 || p > 65535) {
        p = -1;
        break;
      }
      p = p * 10 + (ch - '0');
    }
    if (p <= 0 || p > 65535)
      return InvalidArgument("kube client: server " + c->config_.server + ": bad port");
    c->port_ = p;
  }
  if (host.empty())
    return InvalidArgument("kube client: server " + c->config_.server + ": no host");
  c->host_ = std::string(host);
  auto proxy = ProxyFromEnvironment(c->tls_ ? "https" : "http", c->host_, c->port_, ::getenv,
                                    c->config_.proxy_loopback_too);
  if (!proxy.ok()) return proxy.status();
  c->proxy_ = std::move(proxy).value();
  // Files are checked here once to fail early with their name; they are read
  // again for each new pooled connection (a rotated CA is picked up).
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

std::unique_ptr<Client::Handle> Client::NewHandle(std::chrono::milliseconds read_timeout) const {
  auto h = std::make_unique<Handle>();
  const Config& cfg = config_;
  if (!tls_) {
    h->http = std::make_unique<httplib::ClientImpl>(host_, port_);
  } else {
    auto cert = PemText(cfg.client_cert_pem, cfg.client_cert_file, "client certificate");
    auto key = PemText(cfg.client_key_pem, cfg.client_key_file, "client key");
    for (const auto* r : {&cert, &key}) {
      if (!r->ok()) {
        h->error = r->status().message();
        return h;
      }
    }
    std::unique_ptr<httplib::SSLClient> ssl;
    if (!cert->empty() || !key->empty()) {
      X509* x = nullptr;
      EVP_PKEY* k = nullptr;
      if (BIO* b = BIO_new_mem_buf(cert->data(), static_cast<int>(cert->size()))) {
        x = PEM_read_bio_X509(b, nullptr, nullptr, nullptr);
        BIO_free(b);
      }
      if (BIO* b = BIO_new_mem_buf(key->data(), static_cast<int>(key->size()))) {
        k = PEM_read_bio_PrivateKey(b, nullptr, nullptr, nullptr);
        BIO_free(b);
      }
      if (x == nullptr || k == nullptr) {
        h->error = x == nullptr ? "client certificate is not PEM" : "client key is not PEM";
      } else {
        ssl = std::make_unique<httplib::SSLClient>(host_, port_, x,
                                                   k);  // the SSL_CTX takes references
      }
      X509_free(x);
      EVP_PKEY_free(k);
      if (ssl == nullptr) return h;
    } else {
      ssl = std::make_unique<httplib::SSLClient>(host_, port_);
    }
    if (!ssl->is_valid()) {
      h->error = "TLS context could not be made (client certificate and key do not match?)";
      return h;
    }
    // Only the configured CA is trusted: httplib falls back to OpenSSL's
    // default paths (the system bundle, ~140 certificates loaded into each
    // TLS context, ~1 MiB of heap apiece) only when it is given no file or
    // directory.
    if (!cfg.ca_pem.empty()) {
      X509_STORE* store = StoreFromPem(cfg.ca_pem);
      if (store == nullptr) {
        h->error = "CA data (certificate-authority-data) holds no PEM certificate";
        return h;
      }
      ssl->set_ca_cert_store(store);  // owned by the SSL_CTX now
      // A directory that does not exist: a lookup there finds nothing, and it
      // keeps httplib from adding the default paths to the store above.
      ssl->set_ca_cert_path("", "/nonexistent/danqing-kube-ca-data-only");
    } else if (!cfg.ca_file.empty()) {
      ssl->set_ca_cert_path(cfg.ca_file);  // read at this connection's first handshake
    }
    ssl->enable_server_certificate_verification(!cfg.insecure_skip_tls_verify);
    h->http = std::move(ssl);
  }
  if (proxy_) {
    h->http->set_proxy(proxy_->host, proxy_->port);
    if (!proxy_->username.empty())
      h->http->set_proxy_basic_auth(proxy_->username, proxy_->password);
  }
  h->http->set_connection_timeout(cfg.connect_timeout);
  h->http->set_read_timeout(read_timeout);
  h->http->set_write_timeout(cfg.request_timeout);
  h->http->set_keep_alive(true);
  h->http->set_decompress(false);
  return h;
}

std::unique_ptr<Client::Handle> Client::TakeHandle(bool* reused) {
  {
    std::lock_guard lock(pool_mu_);
    if (!pool_.empty()) {
      auto h = std::move(pool_.back());
      pool_.pop_back();
      if (reused != nullptr) *reused = true;
      return h;
    }
  }
  if (reused != nullptr) *reused = false;
  return NewHandle(config_.request_timeout);
}

void Client::ReturnHandle(std::unique_ptr<Handle> h) {
  std::lock_guard lock(pool_mu_);
  if (pool_.size() < 8) pool_.push_back(std::move(h));
}

namespace {

httplib::Headers BaseHeaders(const Config& cfg, const std::string& token) {
  httplib::Headers headers{{"Accept", "application/json"}, {"User-Agent", cfg.user_agent}};
  if (!token.empty()) headers.emplace("Authorization", "Bearer " + token);
  return headers;
}

}  // namespace

Expected<Json> Client::Request(const char* verb, const std::string& path, const Query& query,
                               const Json* body) {
  auto fail = [&](std::string reason, std::string message) {
    ApiError e;
    e.reason = std::move(reason);
    e.message = std::move(message);
    e.verb = verb;
    e.path = path;
    return e;
  };
  auto token = CurrentToken();
  if (!token.ok()) return fail("TokenUnreadable", token.status().message());
  bool reused = false;
  auto h = TakeHandle(&reused);
  if (h->http == nullptr) return fail("TLSError", h->error);
  if (!reused && proxy_ && tls_) {  // http:// servers: requests go to the proxy as they are
    if (auto refused = ProbeProxy(*proxy_, host_, port_, config_.connect_timeout, verb, path))
      return *refused;
  }

  httplib::Request req;
  req.method = verb;
  req.path = prefix_ + path + EncodeQuery(query);
  req.headers = BaseHeaders(config_, *token);
  if (body != nullptr) {
    req.body = body->dump();
    req.headers.emplace("Content-Type", "application/json");
  }
  const auto deadline = std::chrono::steady_clock::now() + config_.request_timeout;
  std::string out;
  bool too_large = false;
  bool late = false;
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    if (out.size() + n > config_.max_response_bytes) {
      too_large = true;
      return false;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      late = true;
      return false;
    }
    out.append(data, n);
    return true;
  };
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  bool sent = h->http->send(req, res, err);
  if ((!sent || err != httplib::Error::Success) && reused && out.empty() && !too_large && !late &&
      std::chrono::steady_clock::now() < deadline &&
      (err == httplib::Error::Read || err == httplib::Error::Write ||
       err == httplib::Error::Connection)) {
    // A kept-alive connection the server (or a stopped request) had closed
    // fails before any answer: the request is sent once more on a new
    // connection, as an HTTP client does with a stale pooled one.
    h = NewHandle(config_.request_timeout);
    if (h->http == nullptr) return fail("TLSError", h->error);
    if (proxy_ && tls_) {
      if (auto refused = ProbeProxy(*proxy_, host_, port_, config_.connect_timeout, verb, path))
        return *refused;
    }
    res = httplib::Response();
    err = httplib::Error::Success;
    sent = h->http->send(req, res, err);
  }
  if (!sent || err != httplib::Error::Success) {
    if (too_large) {
      return fail("TooLarge", "response body larger than " +
                                  std::to_string(config_.max_response_bytes) + " bytes");
    }
    const bool timed_out = late || std::chrono::steady_clock::now() >= deadline;
    return Transport(err, timed_out, verb, path);  // the handle is dropped with its connection
  }
  ReturnHandle(std::move(h));
  if (res.status < 200 || res.status > 299) return FromStatusBody(res.status, out, verb, path);
  Json j = Json::parse(out, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    return fail("BadResponse", "HTTP " + std::to_string(res.status) + " body is not JSON");
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
  const std::function<bool(const WatchEvent&)>* on_event = nullptr;
  std::size_t limit = 0;
  std::string line;
  bool stopped = false;  // the callback ended the watch
  bool too_large = false;
  std::string bad;  // a line that is not a JSON event
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

// Splits the 2xx stream into lines; false ends the transfer.
bool FeedWatch(WatchState& w, std::string_view data) {
  while (!data.empty()) {
    const auto nl = data.find('\n');
    if (nl == std::string_view::npos) {
      if (w.line.size() + data.size() > w.limit) {
        w.too_large = true;
        return false;
      }
      w.line.append(data);
      break;
    }
    if (w.line.size() + nl > w.limit) {
      w.too_large = true;
      return false;
    }
    w.line.append(data.substr(0, nl));
    data.remove_prefix(nl + 1);
    std::string line = std::move(w.line);
    w.line.clear();
    if (!HandleLine(w, line)) return false;
  }
  return true;
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
  // Its own connection: no read timeout of its own (the monitor below ends
  // an idle or cancelled watch by shutting the socket down).
  auto h = NewHandle(std::chrono::hours(24));
  if (h->http == nullptr) return fail("TLSError", h->error);
  if (proxy_ && tls_) {
    if (auto refused = ProbeProxy(*proxy_, host_, port_, config_.connect_timeout, "WATCH", path))
      return *refused;
  }

  httplib::Request req;
  req.method = "GET";
  req.path = prefix_ + path + EncodeQuery(query);
  req.headers = BaseHeaders(config_, *token);
  WatchState w;
  w.on_event = &on_event;
  w.limit = config_.max_response_bytes;
  std::string err_body;
  int status = 0;
  std::mutex mu;
  auto last_byte = std::chrono::steady_clock::now();
  req.response_handler = [&](const httplib::Response& r) {
    status = r.status;
    return true;
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    {
      std::lock_guard lock(mu);
      last_byte = std::chrono::steady_clock::now();
    }
    if (status < 200 || status > 299) {
      if (err_body.size() + n > w.limit) {
        w.too_large = true;
        return false;
      }
      err_body.append(data, n);
      return true;
    }
    return FeedWatch(w, std::string_view(data, n));
  };

  std::atomic<bool> done{false};
  std::atomic<bool> cancelled{false};
  std::atomic<bool> idle{false};
  std::thread monitor([&] {
    while (!done.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
      if (done.load()) break;
      if (options.cancel != nullptr && options.cancel->load()) {
        cancelled = true;
      } else if (options.idle_timeout.count() > 0) {
        std::lock_guard lock(mu);
        if (std::chrono::steady_clock::now() - last_byte > options.idle_timeout) idle = true;
      }
      if (cancelled.load() || idle.load()) {
        h->http->stop();  // shuts the socket down: the blocked read returns
        break;
      }
    }
  });
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  const bool sent = h->http->send(req, res, err);
  done = true;
  monitor.join();

  if (cancelled.load() || w.stopped) return true;
  if (idle.load())
    return fail("Timeout",
                "no data on the watch for " + std::to_string(options.idle_timeout.count()) + " ms");
  if (w.too_large) {
    return fail("TooLarge",
                "watch line or error body larger than " + std::to_string(w.limit) + " bytes");
  }
  if (!w.bad.empty()) return fail("BadResponse", "watch line is not a JSON event: " + w.bad);
  if (!sent || err != httplib::Error::Success) return Transport(err, false, "WATCH", path);
  if (res.status < 200 || res.status > 299)
    return FromStatusBody(res.status, err_body, "WATCH", path);
  if (!w.line.empty()) {  // a last event without its newline
    if (!HandleLine(w, w.line) && !w.bad.empty()) {
      return fail("BadResponse", "watch line is not a JSON event: " + w.bad);
    }
  }
  return true;
}

}  // namespace danqing::kube
