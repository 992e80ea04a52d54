#include "testing/apiserver/apiserver_emulator.h"

#include <httplib.h>
#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <cctype>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <regex>
#include <sstream>

namespace danqing::testing {
namespace {

constexpr char kGroup[] = "resource.k8s.io";
constexpr char kApiVersion[] = "resource.k8s.io/v1";
constexpr char kPrefix[] = "/apis/resource.k8s.io/v1";
constexpr char kSelfSubjectAccessReviews[] =
    "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews";

// ---- PKI

struct KeyDeleter {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
struct CertDeleter {
  void operator()(X509* x) const { X509_free(x); }
};
using Key = std::unique_ptr<EVP_PKEY, KeyDeleter>;
using Cert = std::unique_ptr<X509, CertDeleter>;

bool AddExt(X509* cert, X509* issuer, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
  if (ext == nullptr) return false;
  const bool ok = X509_add_ext(cert, ext, -1) == 1;
  X509_EXTENSION_free(ext);
  return ok;
}

Cert MakeCert(EVP_PKEY* key, EVP_PKEY* signer, X509* issuer, const char* cn, int kind,
              long serial) {
  Cert x(X509_new());
  X509_set_version(x.get(), 2);
  ASN1_INTEGER_set(X509_get_serialNumber(x.get()), serial);
  X509_gmtime_adj(X509_getm_notBefore(x.get()), -3600);
  X509_gmtime_adj(X509_getm_notAfter(x.get()), 3600L * 24 * 365);
  X509_set_pubkey(x.get(), key);
  X509_NAME* name = X509_get_subject_name(x.get());
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>(cn),
                             -1, -1, 0);
  X509_set_issuer_name(x.get(), issuer != nullptr ? X509_get_subject_name(issuer) : name);
  X509* iss = issuer != nullptr ? issuer : x.get();
  bool ok = true;
  if (kind == 0) {  // CA
    ok = ok && AddExt(x.get(), iss, NID_basic_constraints, "critical,CA:TRUE");
    ok = ok && AddExt(x.get(), iss, NID_key_usage, "critical,keyCertSign,cRLSign");
    ok = ok && AddExt(x.get(), iss, NID_subject_key_identifier, "hash");
  } else {
    ok = ok && AddExt(x.get(), iss, NID_basic_constraints, "critical,CA:FALSE");
    ok = ok && AddExt(x.get(), iss, NID_key_usage, "critical,digitalSignature,keyEncipherment");
    ok = ok && AddExt(x.get(), iss, NID_ext_key_usage, kind == 1 ? "serverAuth" : "clientAuth");
    if (kind == 1)
      ok = ok && AddExt(x.get(), iss, NID_subject_alt_name, "IP:127.0.0.1,DNS:localhost");
  }
  if (!ok || X509_sign(x.get(), signer, EVP_sha256()) == 0) return nullptr;
  return x;
}

std::string CertPem(X509* x) {
  BIO* b = BIO_new(BIO_s_mem());
  PEM_write_bio_X509(b, x);
  char* data = nullptr;
  const long n = BIO_get_mem_data(b, &data);
  std::string s(data, static_cast<size_t>(n));
  BIO_free(b);
  return s;
}

std::string KeyPem(EVP_PKEY* k) {
  BIO* b = BIO_new(BIO_s_mem());
  PEM_write_bio_PrivateKey(b, k, nullptr, nullptr, 0, nullptr, nullptr);
  char* data = nullptr;
  const long n = BIO_get_mem_data(b, &data);
  std::string s(data, static_cast<size_t>(n));
  BIO_free(b);
  return s;
}

bool WriteFile(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << text;
  return static_cast<bool>(f);
}

// ---- JSON helpers

std::string Now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string DefaultReason(int code) {
  switch (code) {
    case 400: return "BadRequest";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "NotFound";
    case 405: return "MethodNotAllowed";
    case 409: return "Conflict";
    case 410: return "Expired";
    case 422: return "Invalid";
    case 429: return "TooManyRequests";
    case 503: return "ServiceUnavailable";
    case 504: return "Timeout";
    default: return code >= 500 ? "InternalError" : "Unknown";
  }
}

Json StatusObject(int code, const std::string& reason, const std::string& message,
                  Json details = nullptr) {
  Json s = {{"kind", "Status"},    {"apiVersion", "v1"}, {"metadata", Json::object()},
            {"status", "Failure"}, {"message", message}, {"reason", reason},
            {"code", code}};
  if (!details.is_null()) s["details"] = std::move(details);
  return s;
}

void Reply(httplib::Response& res, int code, const Json& body) {
  res.status = code;
  res.set_content(body.dump(), "application/json");
}

void ReplyStatus(httplib::Response& res, int code, const std::string& message,
                 const std::string& reason = "", Json details = nullptr) {
  Reply(res, code,
        StatusObject(code, reason.empty() ? DefaultReason(code) : reason, message,
                     std::move(details)));
}

bool IsDnsLabel(const std::string& s) {
  if (s.empty() || s.size() > 63) return false;
  for (const char c : s) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) return false;
  }
  return s.front() != '-' && s.back() != '-';
}

bool IsDnsSubdomain(const std::string& s) {
  if (s.empty() || s.size() > 253) return false;
  std::size_t start = 0;
  while (true) {
    const auto dot = s.find('.', start);
    if (!IsDnsLabel(s.substr(start, dot == std::string::npos ? std::string::npos : dot - start))) {
      return false;
    }
    if (dot == std::string::npos) return true;
    start = dot + 1;
  }
}

bool IsLabelValue(const std::string& v) {
  if (v.empty()) return true;
  auto alnum = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; };
  for (const char c : v) {
    if (!alnum(c) && c != '-' && c != '_' && c != '.') return false;
  }
  return alnum(v.front()) && alnum(v.back());
}

// A qualified name: [<dns subdomain>/]<C identifier, ≤ 64>, as attribute and
// capacity names must be.
bool IsQualifiedAttributeName(const std::string& s) {
  std::string id = s;
  if (const auto slash = s.find('/'); slash != std::string::npos) {
    if (!IsDnsSubdomain(s.substr(0, slash))) return false;
    id = s.substr(slash + 1);
  }
  if (id.empty() || id.size() > 64) return false;
  if (std::isalpha(static_cast<unsigned char>(id[0])) == 0 && id[0] != '_') return false;
  for (const char c : id) {
    if (std::isalnum(static_cast<unsigned char>(c)) == 0 && c != '_') return false;
  }
  return true;
}

// semver.org 2.0.0: MAJOR.MINOR.PATCH (no leading zeros), then optional
// -prerelease and +build of dot-separated [0-9A-Za-z-] identifiers.
bool IsSemver(const std::string& v) {
  std::size_t i = 0;
  for (int part = 0; part < 3; ++part) {
    const std::size_t start = i;
    while (i < v.size() && std::isdigit(static_cast<unsigned char>(v[i])) != 0) ++i;
    if (i == start || (v[start] == '0' && i - start > 1)) return false;
    if (part < 2) {
      if (i >= v.size() || v[i] != '.') return false;
      ++i;
    }
  }
  auto idents = [&](char stop) {
    std::size_t start = i;
    while (i < v.size() && v[i] != stop) {
      const char c = v[i];
      if (c == '.') {
        if (i == start) return false;
        start = i + 1;
      } else if (std::isalnum(static_cast<unsigned char>(c)) == 0 && c != '-') {
        return false;
      }
      ++i;
    }
    return i > start;
  };
  if (i < v.size() && v[i] == '-') {
    ++i;
    if (!idents('+')) return false;
  }
  if (i < v.size() && v[i] == '+') {
    ++i;
    if (!idents('\0')) return false;
  }
  return i == v.size();
}

struct Cause {
  std::string field;
  std::string message;
  std::string reason = "FieldValueInvalid";
};

// The API server's validation of a ResourceSlice, for what a driver can get
// wrong. `old` (may be null) is the stored object on update.
std::vector<Cause> ValidateSlice(const Json& obj, const Json* old) {
  std::vector<Cause> c;
  auto bad = [&](std::string field, std::string msg, std::string reason = "FieldValueInvalid") {
    c.push_back({std::move(field), std::move(msg), std::move(reason)});
  };
  const Json& spec = obj.contains("spec") ? obj["spec"] : Json();
  if (!spec.is_object()) {
    bad("spec", "Required value", "FieldValueRequired");
    return c;
  }
  const std::string driver = spec.value("driver", "");
  if (driver.empty()) {
    bad("spec.driver", "Required value", "FieldValueRequired");
  } else if (!IsDnsSubdomain(driver)) {
    bad("spec.driver", "Invalid value: \"" + driver +
                           "\": a lowercase RFC 1123 subdomain must consist of lower case "
                           "alphanumeric characters, '-' or '.'");
  }
  const Json pool = spec.value("pool", Json());
  if (!pool.is_object() || pool.value("name", "").empty()) {
    bad("spec.pool.name", "Required value", "FieldValueRequired");
  }
  if (pool.is_object()) {
    if (!pool.contains("generation") || !pool["generation"].is_number_integer() ||
        pool["generation"].get<int64_t>() < 0) {
      bad("spec.pool.generation", "Invalid value: must be greater than or equal to 0");
    }
    if (!pool.contains("resourceSliceCount") || !pool["resourceSliceCount"].is_number_integer() ||
        pool["resourceSliceCount"].get<int64_t>() < 1) {
      bad("spec.pool.resourceSliceCount", "Invalid value: must be greater than zero");
    }
  }
  int selections = 0;
  if (spec.contains("nodeName") && spec["nodeName"].is_string() &&
      !spec["nodeName"].get<std::string>().empty())
    ++selections;
  if (spec.contains("nodeSelector") && !spec["nodeSelector"].is_null()) ++selections;
  if (spec.value("allNodes", false)) ++selections;
  if (spec.value("perDeviceNodeSelection", false)) ++selections;
  if (selections != 1) {
    bad("spec",
        "Invalid value: exactly one of `nodeName`, `nodeSelector`, `allNodes`, "
        "`perDeviceNodeSelection` is required");
  }
  const Json devices = spec.value("devices", Json::array());
  if (!devices.is_array()) {
    bad("spec.devices", "Invalid value: must be a list");
    return c;
  }
  bool any_taints = false;
  for (const auto& d : devices) {
    if (d.is_object() && d.contains("taints") && d["taints"].is_array() && !d["taints"].empty())
      any_taints = true;
  }
  const std::size_t limit = any_taints ? 64 : 128;
  if (devices.size() > limit) {
    bad("spec.devices",
        "Too many: " + std::to_string(devices.size()) + ": must have at most " +
            std::to_string(limit) + " items",
        "FieldValueTooMany");
  }
  std::set<std::string> names;
  for (std::size_t i = 0; i < devices.size(); ++i) {
    const std::string at = "spec.devices[" + std::to_string(i) + "]";
    const Json& d = devices[i];
    if (!d.is_object()) {
      bad(at, "Invalid value: must be an object");
      continue;
    }
    if (d.contains("basic"))
      bad(at + ".basic", "Forbidden: not a field of resource.k8s.io/v1 (v1beta1 only)",
          "FieldValueForbidden");
    const std::string name = d.value("name", "");
    if (!IsDnsLabel(name)) {
      bad(at + ".name", "Invalid value: \"" + name +
                            "\": a lowercase RFC 1123 label must consist of lower case "
                            "alphanumeric characters or '-'");
    } else if (!names.insert(name).second) {
      bad(at + ".name", "Duplicate value: \"" + name + "\"", "FieldValueDuplicate");
    }
    std::size_t n = 0;
    const Json attrs = d.value("attributes", Json::object());
    for (auto it = attrs.begin(); it != attrs.end(); ++it) {
      ++n;
      const std::string f = at + ".attributes[" + it.key() + "]";
      if (!IsQualifiedAttributeName(it.key())) bad(f, "Invalid value: not a qualified name");
      int kinds = 0;
      for (const char* k : {"int", "bool", "string", "version"}) kinds += it->contains(k) ? 1 : 0;
      if (!it->is_object() || kinds != 1) {
        bad(f, "Invalid value: exactly one value must be specified");
        continue;
      }
      if (it->contains("int") && !(*it)["int"].is_number_integer())
        bad(f + ".int", "Invalid value: not an integer");
      if (it->contains("bool") && !(*it)["bool"].is_boolean())
        bad(f + ".bool", "Invalid value: not a boolean");
      if (it->contains("string")) {
        if (!(*it)["string"].is_string() || (*it)["string"].get<std::string>().size() > 64) {
          bad(f + ".string", "Too long: may not be more than 64 bytes", "FieldValueTooLong");
        }
      }
      if (it->contains("version")) {
        if (!(*it)["version"].is_string() || !IsSemver((*it)["version"].get<std::string>())) {
          bad(f + ".version",
              "Invalid value: must be a string compatible with semver.org spec 2.0.0");
        }
      }
    }
    const Json caps = d.value("capacity", Json::object());
    for (auto it = caps.begin(); it != caps.end(); ++it) {
      ++n;
      const std::string f = at + ".capacity[" + it.key() + "]";
      if (!IsQualifiedAttributeName(it.key())) bad(f, "Invalid value: not a qualified name");
      if (!it->is_object() || !it->contains("value") || !(*it)["value"].is_string()) {
        bad(f + ".value", "Required value: a quantity string", "FieldValueRequired");
      }
    }
    if (n > 32)
      bad(at,
          "Too many: " + std::to_string(n) +
              ": must have at most 32 attributes and capacities combined",
          "FieldValueTooMany");
    const Json taints = d.value("taints", Json::array());
    for (std::size_t t = 0; t < taints.size(); ++t) {
      const std::string f = at + ".taints[" + std::to_string(t) + "]";
      const std::string key = taints[t].value("key", "");
      if (!IsQualifiedAttributeName(key) && !IsDnsSubdomain(key))
        bad(f + ".key", "Invalid value: \"" + key + "\": not a qualified name");
      const std::string effect = taints[t].value("effect", "");
      if (effect != "NoSchedule" && effect != "NoExecute" && effect != "None") {
        bad(f + ".effect",
            "Unsupported value: \"" + effect +
                "\": supported values: \"NoExecute\", \"NoSchedule\", \"None\"",
            "FieldValueNotSupported");
      }
      const std::string tv = taints[t].value("value", "");
      if (tv.size() > 63) {
        bad(f + ".value", "Too long: may not be more than 63 bytes", "FieldValueTooLong");
      } else if (!IsLabelValue(tv)) {
        bad(f + ".value",
            "Invalid value: \"" + tv +
                "\": a valid label must be an empty string or consist of alphanumeric "
                "characters, '-', '_' or '.', and must start and end with an "
                "alphanumeric character");
      }
    }
  }
  if (old != nullptr) {
    const Json& os = (*old)["spec"];
    if (os.value("driver", "") != driver) bad("spec.driver", "Invalid value: field is immutable");
    if (os.value("nodeName", "") != spec.value("nodeName", ""))
      bad("spec.nodeName", "Invalid value: field is immutable");
  }
  return c;
}

Json InvalidDetails(const std::string& name, const std::vector<Cause>& causes) {
  Json cs = Json::array();
  for (const auto& c : causes)
    cs.push_back({{"reason", c.reason}, {"message", c.message}, {"field", c.field}});
  return {{"name", name}, {"group", kGroup}, {"kind", "ResourceSlice"}, {"causes", cs}};
}

std::string InvalidMessage(const std::string& name, const std::vector<Cause>& causes) {
  std::string m = "ResourceSlice.resource.k8s.io \"" + name + "\" is invalid: ";
  if (causes.size() > 1) m += "[";
  for (std::size_t i = 0; i < causes.size(); ++i) {
    if (i > 0) m += ", ";
    m += causes[i].field + ": " + causes[i].message;
  }
  if (causes.size() > 1) m += "]";
  return m;
}

// A field selector: "a=b,c==d,e!=f". nullopt (with `error`) when a field is
// not supported for the resource.
struct Requirement {
  std::string field;
  std::string value;
  bool negate = false;
};
std::optional<std::vector<Requirement>> ParseFieldSelector(const std::string& sel,
                                                           const std::set<std::string>& supported,
                                                           std::string& error) {
  std::vector<Requirement> out;
  std::stringstream ss(sel);
  std::string part;
  while (std::getline(ss, part, ',')) {
    if (part.empty()) continue;
    Requirement r;
    std::size_t op = part.find("!=");
    std::size_t len = 2;
    if (op != std::string::npos) {
      r.negate = true;
    } else if ((op = part.find("==")) == std::string::npos) {
      op = part.find('=');
      len = 1;
    }
    if (op == std::string::npos) {
      error = "invalid selector: '" + sel + "'; can't understand '" + part + "'";
      return std::nullopt;
    }
    r.field = part.substr(0, op);
    r.value = part.substr(op + len);
    if (!supported.contains(r.field)) {
      error = "field label not supported: " + r.field;
      return std::nullopt;
    }
    out.push_back(std::move(r));
  }
  return out;
}

std::string FieldOf(const Json& obj, const std::string& field) {
  const Json* cur = &obj;
  std::stringstream ss(field);
  std::string part;
  while (std::getline(ss, part, '.')) {
    if (!cur->is_object() || !cur->contains(part)) return "";
    cur = &(*cur)[part];
  }
  return cur->is_string() ? cur->get<std::string>() : "";
}

bool Matches(const Json& obj, const std::vector<Requirement>& reqs) {
  for (const auto& r : reqs) {
    if ((FieldOf(obj, r.field) == r.value) == r.negate) return false;
  }
  return true;
}

std::string Rv(const Json& obj) {
  if (!obj.contains("metadata") || !obj["metadata"].is_object()) return "";
  const Json& m = obj["metadata"];
  return m.contains("resourceVersion") && m["resourceVersion"].is_string()
             ? m["resourceVersion"].get<std::string>()
             : "";
}

}  // namespace

Result<TestPki> MakeTestPki(const std::string& dir, const std::string& prefix) {
  Key ca_key(EVP_EC_gen("P-256"));
  Key server_key(EVP_EC_gen("P-256"));
  Key client_key(EVP_EC_gen("P-256"));
  if (!ca_key || !server_key || !client_key) return Internal("EC key generation failed");
  Cert ca = MakeCert(ca_key.get(), ca_key.get(), nullptr, "danqing-test-ca", 0, 1);
  if (!ca) return Internal("CA certificate failed");
  Cert server = MakeCert(server_key.get(), ca_key.get(), ca.get(), "kube-apiserver", 1, 2);
  Cert client = MakeCert(client_key.get(), ca_key.get(), ca.get(), "danqing-test-client", 2, 3);
  if (!server || !client) return Internal("leaf certificate failed");
  TestPki p;
  p.ca_cert = dir + "/" + prefix + "ca.crt";
  p.ca_pem = CertPem(ca.get());
  p.server_cert = dir + "/" + prefix + "server.crt";
  p.server_key = dir + "/" + prefix + "server.key";
  p.client_cert = dir + "/" + prefix + "client.crt";
  p.client_key = dir + "/" + prefix + "client.key";
  if (!WriteFile(p.ca_cert, p.ca_pem) || !WriteFile(p.server_cert, CertPem(server.get())) ||
      !WriteFile(p.server_key, KeyPem(server_key.get())) ||
      !WriteFile(p.client_cert, CertPem(client.get())) ||
      !WriteFile(p.client_key, KeyPem(client_key.get()))) {
    return Internal("cannot write the test PKI under " + dir);
  }
  return p;
}

// The REST handlers (a friend-like nested class with access to the state).
class ApiServerEmulator::Handlers {
 public:
  explicit Handlers(ApiServerEmulator& s) : s_(s) {}

  // Authentication, RBAC, faults, delay: before routing.
  httplib::Server::HandlerResponse PreRoute(const httplib::Request& req, httplib::Response& res) {
    std::chrono::milliseconds delay;
    {
      std::lock_guard lock(s_.mu_);
      delay = s_.delay_;
    }
    if (delay.count() > 0) std::this_thread::sleep_for(delay);
    std::unique_lock lock(s_.mu_);
    const std::string auth = req.get_header_value("Authorization");
    const std::string token = auth.rfind("Bearer ", 0) == 0 ? auth.substr(7) : "";
    if (token.empty() || !s_.tokens_.contains(token)) {
      Bump("status 401");
      ReplyStatus(res, 401, "Unauthorized");
      return httplib::Server::HandlerResponse::Handled;
    }
    const auto [verb, resource, name] = Classify(req);
    Bump(verb + " " + resource);
    // Every authenticated user may ask what it may do (system:basic-user).
    const bool review = req.method == "POST" && req.path == kSelfSubjectAccessReviews;
    if (auto it = s_.rbac_.find(token); it != s_.rbac_.end() && !review) {
      const std::string rbac_verb = verb == "WATCH"    ? "watch"
                                    : verb == "LIST"   ? "list"
                                    : verb == "POST"   ? "create"
                                    : verb == "PUT"    ? "update"
                                    : verb == "DELETE" ? "delete"
                                                       : "get";
      if (!it->second.contains(rbac_verb + " " + resource)) {
        Bump("status 403");
        std::string what = resource + "." + kGroup;
        if (!name.empty()) what += " \"" + name + "\"";
        ReplyStatus(
            res, 403,
            what +
                " is forbidden: User \"system:serviceaccount:danqing:danqing-device-plugin\" "
                "cannot " +
                rbac_verb + " resource \"" + resource + "\" in API group \"" + kGroup +
                "\" at the cluster scope",
            "Forbidden", {{"name", name}, {"group", kGroup}, {"kind", resource}});
        return httplib::Server::HandlerResponse::Handled;
      }
    }
    if (s_.fault_.remaining > 0) {
      --s_.fault_.remaining;
      const int code = s_.fault_.status;
      Bump("status " + std::to_string(code));
      if (code == 429 || code == 503)
        res.set_header("Retry-After", std::to_string(s_.fault_.retry_after_s));
      ReplyStatus(res, code,
                  code == 429 ? "Too many requests, please try again later."
                              : "injected failure " + std::to_string(code),
                  s_.fault_.reason);
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  }

  void ListOrWatchSlices(const httplib::Request& req, httplib::Response& res) {
    std::string err;
    auto reqs = ParseFieldSelector(req.get_param_value("fieldSelector"),
                                   {"spec.nodeName", "spec.driver", "metadata.name"}, err);
    if (!reqs) {
      Count(400);
      ReplyStatus(res, 400, "unable to parse requirement: " + err);
      return;
    }
    const std::string w = req.get_param_value("watch");
    if (w == "1" || w == "true") {
      Watch(req, res, *reqs);
      return;
    }
    std::lock_guard lock(s_.mu_);
    Json items = Json::array();
    for (const auto& [n, o] : s_.slices_) {
      if (Matches(o, *reqs)) items.push_back(o);
    }
    Reply(res, 200,
          {{"kind", "ResourceSliceList"},
           {"apiVersion", kApiVersion},
           {"metadata", {{"resourceVersion", std::to_string(s_.rv_)}}},
           {"items", items}});
  }

  void CreateSlice(const httplib::Request& req, httplib::Response& res) {
    Json obj = Json::parse(req.body, nullptr, false);
    if (!CheckBody(obj, res)) return;
    std::lock_guard lock(s_.mu_);
    Json& meta = obj["metadata"];
    std::string name = meta.value("name", "");
    if (name.empty() && meta.contains("generateName") && meta["generateName"].is_string()) {
      name = meta["generateName"].get<std::string>() + std::to_string(10000 + s_.uid_seq_);
      meta["name"] = name;
    }
    if (name.empty() || !IsDnsSubdomain(name)) {
      Count(422);
      std::vector<Cause> c{{"metadata.name",
                            name.empty() ? "Required value: name or generateName is required"
                                         : "Invalid value: \"" + name + "\": not a DNS subdomain",
                            name.empty() ? "FieldValueRequired" : "FieldValueInvalid"}};
      ReplyStatus(res, 422, InvalidMessage(name, c), "Invalid", InvalidDetails(name, c));
      return;
    }
    if (s_.slices_.contains(name)) {
      Count(409);
      ReplyStatus(res, 409, "resourceslices.resource.k8s.io \"" + name + "\" already exists",
                  "AlreadyExists", {{"name", name}, {"group", kGroup}, {"kind", "resourceslices"}});
      return;
    }
    if (auto causes = ValidateSlice(obj, nullptr); !causes.empty()) {
      Count(422);
      ReplyStatus(res, 422, InvalidMessage(name, causes), "Invalid", InvalidDetails(name, causes));
      return;
    }
    meta.erase("resourceVersion");
    meta["generation"] = 1;
    meta["creationTimestamp"] = Now();
    meta["uid"] = "uid-" + std::to_string(++s_.uid_seq_);
    Json stored = s_.Stamp(std::move(obj), "ResourceSlice");
    s_.slices_[name] = stored;
    s_.Record("ADDED", stored);
    Reply(res, 201, stored);
  }

  void GetSlice(const httplib::Request& req, httplib::Response& res) {
    const std::string name = req.matches[1];
    std::lock_guard lock(s_.mu_);
    auto it = s_.slices_.find(name);
    if (it == s_.slices_.end()) {
      NotFound(res, name);
      return;
    }
    Reply(res, 200, it->second);
  }

  void UpdateSlice(const httplib::Request& req, httplib::Response& res) {
    const std::string name = req.matches[1];
    Json obj = Json::parse(req.body, nullptr, false);
    if (!CheckBody(obj, res)) return;
    std::lock_guard lock(s_.mu_);
    if (obj["metadata"].value("name", "") != name) {
      Count(400);
      ReplyStatus(res, 400,
                  "the name of the object (" + obj["metadata"].value("name", "") +
                      ") does not match the name on the URL (" + name + ")");
      return;
    }
    auto it = s_.slices_.find(name);
    if (it == s_.slices_.end()) {
      NotFound(res, name);
      return;
    }
    const std::string rv = Rv(obj);
    if (rv.empty()) {
      Count(422);
      std::vector<Cause> c{
          {"metadata.resourceVersion", "Invalid value: 0x0: must be specified for an update"}};
      ReplyStatus(res, 422, InvalidMessage(name, c), "Invalid", InvalidDetails(name, c));
      return;
    }
    if (rv != Rv(it->second)) {
      Count(409);
      ReplyStatus(res, 409,
                  "Operation cannot be fulfilled on resourceslices.resource.k8s.io \"" + name +
                      "\": the object has been modified; please apply your changes to the latest "
                      "version and try again",
                  "Conflict", {{"name", name}, {"group", kGroup}, {"kind", "resourceslices"}});
      return;
    }
    if (auto causes = ValidateSlice(obj, &it->second); !causes.empty()) {
      Count(422);
      ReplyStatus(res, 422, InvalidMessage(name, causes), "Invalid", InvalidDetails(name, causes));
      return;
    }
    Json& meta = obj["metadata"];
    const Json& old_meta = it->second["metadata"];
    meta["uid"] = old_meta["uid"];
    meta["creationTimestamp"] = old_meta["creationTimestamp"];
    const int64_t gen = old_meta.value("generation", int64_t{1});
    meta["generation"] = obj["spec"] == it->second["spec"] ? gen : gen + 1;
    if (obj == it->second) {  // a no-op update keeps the resourceVersion and sends no event
      Reply(res, 200, it->second);
      return;
    }
    Json stored = s_.Stamp(std::move(obj), "ResourceSlice");
    it->second = stored;
    s_.Record("MODIFIED", stored);
    Reply(res, 200, stored);
  }

  void DeleteSlice(const httplib::Request& req, httplib::Response& res) {
    const std::string name = req.matches[1];
    std::string precondition;
    if (!req.body.empty()) {
      Json opts = Json::parse(req.body, nullptr, false);
      if (opts.is_discarded() || !opts.is_object()) {
        Count(400);
        ReplyStatus(res, 400,
                    "the body of the request was in an unknown format - accepted media types "
                    "include: application/json");
        return;
      }
      if (opts.contains("preconditions") && opts["preconditions"].is_object()) {
        precondition = opts["preconditions"].value("resourceVersion", "");
      }
    }
    std::lock_guard lock(s_.mu_);
    auto it = s_.slices_.find(name);
    if (it == s_.slices_.end()) {
      NotFound(res, name);
      return;
    }
    if (!precondition.empty() && precondition != Rv(it->second)) {
      Count(409);
      ReplyStatus(res, 409,
                  "Operation cannot be fulfilled on resourceslices.resource.k8s.io \"" + name +
                      "\": Precondition failed: ResourceVersion: Expected: " + precondition +
                      ", Actual: " + Rv(it->second),
                  "Conflict", {{"name", name}, {"group", kGroup}, {"kind", "resourceslices"}});
      return;
    }
    Json gone = it->second;
    s_.slices_.erase(it);
    gone["metadata"]["resourceVersion"] = std::to_string(++s_.rv_);
    s_.Record("DELETED", gone);
    Reply(res, 200, gone);
  }

  void GetClaim(const httplib::Request& req, httplib::Response& res) {
    const std::string key = std::string(req.matches[1]) + "/" + std::string(req.matches[2]);
    std::lock_guard lock(s_.mu_);
    auto it = s_.claims_.find(key);
    if (it == s_.claims_.end()) {
      Count(404);
      ReplyStatus(
          res, 404,
          "resourceclaims.resource.k8s.io \"" + std::string(req.matches[2]) + "\" not found",
          "NotFound",
          {{"name", std::string(req.matches[2])}, {"group", kGroup}, {"kind", "resourceclaims"}});
      return;
    }
    Reply(res, 200, it->second);
  }

  void ListClaims(const httplib::Request& req, httplib::Response& res) {
    const std::string ns = req.matches[1];
    std::lock_guard lock(s_.mu_);
    Json items = Json::array();
    for (const auto& [k, o] : s_.claims_) {
      if (k.rfind(ns + "/", 0) == 0) items.push_back(o);
    }
    Reply(res, 200,
          {{"kind", "ResourceClaimList"},
           {"apiVersion", kApiVersion},
           {"metadata", {{"resourceVersion", std::to_string(s_.rv_)}}},
           {"items", items}});
  }

  // POST selfsubjectaccessreviews: spec.resourceAttributes (group,
  // resource, verb) answered from the token's RBAC table (no table: all
  // allowed), 201 with the review and its status, as upstream.
  void ReviewAccess(const httplib::Request& req, httplib::Response& res) {
    const auto body = Json::parse(req.body, nullptr, /*allow_exceptions=*/false);
    const Json* attrs = nullptr;
    if (body.is_object() && body.contains("spec") && body["spec"].is_object() &&
        body["spec"].contains("resourceAttributes")) {
      attrs = &body["spec"]["resourceAttributes"];
    }
    if (attrs == nullptr || !attrs->is_object()) {
      Count(422);
      ReplyStatus(res, 422,
                  "SelfSubjectAccessReview.authorization.k8s.io \"\" is invalid: "
                  "spec.resourceAttributes: Invalid value: null: exactly one of "
                  "nonResourceAttributes or resourceAttributes must be specified",
                  "Invalid");
      return;
    }
    const std::string group = attrs->value("group", "");
    const std::string resource = attrs->value("resource", "");
    const std::string verb = attrs->value("verb", "");
    const std::string auth = req.get_header_value("Authorization");
    const std::string token = auth.rfind("Bearer ", 0) == 0 ? auth.substr(7) : "";
    std::lock_guard lock(s_.mu_);
    bool allowed = true;
    if (auto it = s_.rbac_.find(token); it != s_.rbac_.end()) {
      allowed = group == kGroup && it->second.contains(verb + " " + resource);
    }
    Json out = body;
    out["apiVersion"] = "authorization.k8s.io/v1";
    out["kind"] = "SelfSubjectAccessReview";
    out["metadata"] = {{"creationTimestamp", nullptr}};
    out["status"] = {{"allowed", allowed}};
    if (allowed) out["status"]["reason"] = "RBAC: allowed by the emulator's table";
    Reply(res, 201, out);
  }

  void ListClasses(const httplib::Request&, httplib::Response& res) {
    std::lock_guard lock(s_.mu_);
    Json items = Json::array();
    for (const auto& [k, o] : s_.classes_) items.push_back(o);
    Reply(res, 200,
          {{"kind", "DeviceClassList"},
           {"apiVersion", kApiVersion},
           {"metadata", {{"resourceVersion", std::to_string(s_.rv_)}}},
           {"items", items}});
  }

  void GetClass(const httplib::Request& req, httplib::Response& res) {
    const std::string name = req.matches[1];
    std::lock_guard lock(s_.mu_);
    auto it = s_.classes_.find(name);
    if (it == s_.classes_.end()) {
      Count(404);
      ReplyStatus(res, 404, "deviceclasses.resource.k8s.io \"" + name + "\" not found", "NotFound",
                  {{"name", name}, {"group", kGroup}, {"kind", "deviceclasses"}});
      return;
    }
    Reply(res, 200, it->second);
  }

 private:
  struct Route {
    std::string verb;  // GET LIST WATCH POST PUT DELETE
    std::string resource;
    std::string name;
  };

  static Route Classify(const httplib::Request& req) {
    static const std::regex re(
        R"(^/apis/resource\.k8s\.io/v1/(?:namespaces/[^/]+/)?([a-z]+)(?:/([^/]+))?(?:/[a-z]+)?$)");
    std::smatch m;
    Route r;
    r.verb = req.method;
    if (std::regex_match(req.path, m, re)) {
      r.resource = m[1];
      r.name = m[2];
    } else {
      r.resource = "other";
    }
    if (req.method == "GET" && r.name.empty()) {
      const std::string w = req.get_param_value("watch");
      r.verb = (w == "1" || w == "true") ? "WATCH" : "LIST";
    }
    return r;
  }

  // Counters have their own lock (taken inside mu_ or alone).
  void Bump(const std::string& key) {
    std::lock_guard lock(s_.counts_mu_);
    ++s_.counts_[key];
  }
  void Count(int code) { Bump("status " + std::to_string(code)); }

  void NotFound(httplib::Response& res, const std::string& name) {
    Count(404);
    ReplyStatus(res, 404, "resourceslices.resource.k8s.io \"" + name + "\" not found", "NotFound",
                {{"name", name}, {"group", kGroup}, {"kind", "resourceslices"}});
  }

  bool CheckBody(Json& obj, httplib::Response& res) {
    if (obj.is_discarded() || !obj.is_object()) {
      Count(400);
      ReplyStatus(
          res, 400,
          "the body of the request was in an unknown format - accepted media types include: "
          "application/json, application/yaml, application/vnd.kubernetes.protobuf");
      return false;
    }
    if (obj.value("apiVersion", "") != kApiVersion || obj.value("kind", "") != "ResourceSlice") {
      Count(400);
      ReplyStatus(res, 400,
                  "the API version in the data (" + obj.value("apiVersion", "") +
                      ") does not match the expected API version (" + kApiVersion +
                      ") or the kind (" + obj.value("kind", "") + ") is not ResourceSlice");
      return false;
    }
    if (!obj.contains("metadata") || !obj["metadata"].is_object()) obj["metadata"] = Json::object();
    return true;
  }

  void Watch(const httplib::Request& req, httplib::Response& res, std::vector<Requirement> reqs) {
    uint64_t from = 0;
    const std::string rv = req.get_param_value("resourceVersion");
    if (!rv.empty()) {
      try {
        from = std::stoull(rv);
      } catch (...) {
        Count(400);
        ReplyStatus(res, 400, "invalid resource version \"" + rv + "\"");
        return;
      }
    }
    std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
    if (const std::string t = req.get_param_value("timeoutSeconds"); !t.empty()) {
      deadline = std::chrono::steady_clock::now() + std::chrono::seconds(std::atoll(t.c_str()));
    }
    struct State {
      uint64_t cursor = 0;
      uint64_t epoch = 0;
      bool initial_sent = false;
      bool from_zero = false;
      bool expired_sent = false;
    };
    auto st = std::make_shared<State>();
    {
      std::lock_guard lock(s_.mu_);
      st->cursor = from;
      st->from_zero = from == 0;
      st->epoch = s_.expire_epoch_;
      ++s_.open_watches_;
    }
    ApiServerEmulator* s = &s_;
    res.status = 200;
    res.set_chunked_content_provider(
        "application/json",
        [s, st, reqs, deadline](size_t, httplib::DataSink& sink) {
          std::string out;
          bool done = false;
          {
            std::unique_lock lock(s->mu_);
            auto expired = [&](const std::string& msg) {
              out +=
                  Json({{"type", "ERROR"}, {"object", StatusObject(410, "Expired", msg)}}).dump() +
                  "\n";
              done = true;
            };
            if (!st->initial_sent) {
              st->initial_sent = true;
              if (st->from_zero) {
                // No resourceVersion: the current state as ADDED events first.
                for (const auto& [n, o] : s->slices_) {
                  if (Matches(o, reqs))
                    out += Json({{"type", "ADDED"}, {"object", o}}).dump() + "\n";
                }
                st->cursor = s->rv_;
              } else if (st->cursor < s->compacted_rv_) {
                expired("too old resource version: " + std::to_string(st->cursor) + " (" +
                        std::to_string(s->compacted_rv_ + 1) + ")");
              }
            }
            if (!done && out.empty()) {
              s->cv_.wait_for(lock, std::chrono::milliseconds(100), [&] {
                return s->stopping_ || s->expire_epoch_ != st->epoch ||
                       (!s->events_.empty() && s->events_.back().rv > st->cursor);
              });
            }
            if (!done && s->expire_epoch_ != st->epoch) {
              expired("The resourceVersion for the provided watch is too old.");
            }
            if (!done) {
              for (const auto& e : s->events_) {
                if (e.rv <= st->cursor) continue;
                st->cursor = e.rv;
                if (Matches(e.object, reqs))
                  out += Json({{"type", e.type}, {"object", e.object}}).dump() + "\n";
              }
            }
            if (s->stopping_) return false;
          }
          if (!out.empty() && !sink.write(out.data(), out.size())) return false;
          if (done || std::chrono::steady_clock::now() >= deadline) {
            sink.done();
            return true;
          }
          return sink.is_writable();
        },
        [s](bool) {
          std::lock_guard lock(s->mu_);
          --s->open_watches_;
        });
  }

  ApiServerEmulator& s_;
};

ApiServerEmulator::ApiServerEmulator(ApiServerOptions options) : options_(std::move(options)) {
  tokens_.insert(options_.tokens.begin(), options_.tokens.end());
}

ApiServerEmulator::~ApiServerEmulator() {
  Stop();
}

Status ApiServerEmulator::Start(int port) {
  Stop();
  auto server =
      std::make_unique<httplib::SSLServer>(options_.cert_file.c_str(), options_.key_file.c_str());
  if (!server->is_valid())
    return Internal("api server emulator: cannot load " + options_.cert_file);
  const int threads = options_.threads;
  server->new_task_queue = [threads] {
    return new httplib::ThreadPool(static_cast<size_t>(threads));
  };
  server->set_keep_alive_timeout(1);
  // Go's net/http (the API server) sets TCP_NODELAY on every connection;
  // without it a response written in two parts waits for a delayed ACK (40 ms).
  server->set_tcp_nodelay(true);
  auto h = std::make_shared<Handlers>(*this);
  server->set_pre_routing_handler(
      [h](const httplib::Request& q, httplib::Response& r) { return h->PreRoute(q, r); });
  const std::string slices = std::string(kPrefix) + "/resourceslices";
  server->Get(slices,
              [h](const httplib::Request& q, httplib::Response& r) { h->ListOrWatchSlices(q, r); });
  server->Post(slices,
               [h](const httplib::Request& q, httplib::Response& r) { h->CreateSlice(q, r); });
  const std::string one = slices + "/([^/]+)";
  server->Get(one, [h](const httplib::Request& q, httplib::Response& r) { h->GetSlice(q, r); });
  server->Put(one, [h](const httplib::Request& q, httplib::Response& r) { h->UpdateSlice(q, r); });
  server->Delete(one,
                 [h](const httplib::Request& q, httplib::Response& r) { h->DeleteSlice(q, r); });
  server->Get(std::string(kPrefix) + "/namespaces/([^/]+)/resourceclaims/([^/]+)",
              [h](const httplib::Request& q, httplib::Response& r) { h->GetClaim(q, r); });
  server->Get(std::string(kPrefix) + "/namespaces/([^/]+)/resourceclaims",
              [h](const httplib::Request& q, httplib::Response& r) { h->ListClaims(q, r); });
  server->Post(kSelfSubjectAccessReviews,
               [h](const httplib::Request& q, httplib::Response& r) { h->ReviewAccess(q, r); });
  server->Get(std::string(kPrefix) + "/deviceclasses",
              [h](const httplib::Request& q, httplib::Response& r) { h->ListClasses(q, r); });
  server->Get(std::string(kPrefix) + "/deviceclasses/([^/]+)",
              [h](const httplib::Request& q, httplib::Response& r) { h->GetClass(q, r); });
  server->set_error_handler([](const httplib::Request&, httplib::Response& r) {
    if (r.status == 404 && r.body.empty())
      ReplyStatus(r, 404, "the server could not find the requested resource");
  });
  int bound = 0;
  if (port == 0) {
    bound = server->bind_to_any_port("127.0.0.1");
  } else {
    bound = server->bind_to_port("127.0.0.1", port) ? port : -1;
  }
  if (bound <= 0)
    return Unavailable("api server emulator: cannot bind 127.0.0.1:" + std::to_string(port));
  {
    std::lock_guard lock(mu_);
    stopping_ = false;
    port_ = bound;
  }
  server_ = std::move(server);
  httplib::SSLServer* raw = server_.get();
  thread_ = std::thread([raw] { raw->listen_after_bind(); });
  while (!raw->is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return Status::Ok();
}

void ApiServerEmulator::Stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
  server_.reset();
}

Status ApiServerEmulator::Restart() {
  int port;
  {
    std::lock_guard lock(mu_);
    port = port_;
  }
  Stop();
  return Start(port);
}

int ApiServerEmulator::port() const {
  std::lock_guard lock(mu_);
  return port_;
}

std::string ApiServerEmulator::url() const {
  return "https://127.0.0.1:" + std::to_string(port());
}

void ApiServerEmulator::SetTokens(std::vector<std::string> tokens) {
  std::lock_guard lock(mu_);
  tokens_ = std::set<std::string>(tokens.begin(), tokens.end());
}

void ApiServerEmulator::SetRbac(const std::string& token, std::set<std::string> allowed) {
  std::lock_guard lock(mu_);
  rbac_[token] = std::move(allowed);
}

void ApiServerEmulator::FailNext(int count, int http_status, std::string reason,
                                 int retry_after_s) {
  std::lock_guard lock(mu_);
  fault_ = {count, http_status, std::move(reason), retry_after_s};
}

void ApiServerEmulator::SetDelay(std::chrono::milliseconds delay) {
  std::lock_guard lock(mu_);
  delay_ = delay;
}

void ApiServerEmulator::ExpireWatches() {
  {
    std::lock_guard lock(mu_);
    ++expire_epoch_;
  }
  cv_.notify_all();
}

void ApiServerEmulator::Compact() {
  std::lock_guard lock(mu_);
  events_.clear();
  compacted_rv_ = rv_;
}

Json ApiServerEmulator::Stamp(Json object, const std::string& kind) {
  object["apiVersion"] = kApiVersion;
  object["kind"] = kind;
  object["metadata"]["resourceVersion"] = std::to_string(++rv_);
  // Taints without timeAdded get the current time, as the API server sets it.
  if (object.contains("spec") && object["spec"].contains("devices") &&
      object["spec"]["devices"].is_array()) {
    for (auto& d : object["spec"]["devices"]) {
      if (!d.is_object() || !d.contains("taints") || !d["taints"].is_array()) continue;
      for (auto& t : d["taints"]) {
        if (t.is_object() && !t.contains("timeAdded")) t["timeAdded"] = Now();
      }
    }
  }
  return object;
}

void ApiServerEmulator::Record(const std::string& type, const Json& object) {
  Event e;
  e.rv = std::stoull(object["metadata"]["resourceVersion"].get<std::string>());
  e.type = type;
  e.object = object;
  events_.push_back(std::move(e));
  while (events_.size() > options_.event_window) {
    compacted_rv_ = events_.front().rv;
    events_.pop_front();
  }
  cv_.notify_all();
}

std::vector<Json> ApiServerEmulator::Slices() const {
  std::lock_guard lock(mu_);
  std::vector<Json> out;
  for (const auto& [n, o] : slices_) out.push_back(o);
  return out;
}

std::optional<Json> ApiServerEmulator::Slice(const std::string& name) const {
  std::lock_guard lock(mu_);
  auto it = slices_.find(name);
  if (it == slices_.end()) return std::nullopt;
  return it->second;
}

Json ApiServerEmulator::PutSlice(Json slice) {
  std::lock_guard lock(mu_);
  const std::string name = slice["metadata"]["name"].get<std::string>();
  auto it = slices_.find(name);
  const bool exists = it != slices_.end();
  if (exists) {
    slice["metadata"]["uid"] = it->second["metadata"]["uid"];
  } else {
    slice["metadata"]["uid"] = "uid-" + std::to_string(++uid_seq_);
  }
  Json stored = Stamp(std::move(slice), "ResourceSlice");
  slices_[name] = stored;
  Record(exists ? "MODIFIED" : "ADDED", stored);
  return stored;
}

bool ApiServerEmulator::DeleteSlice(const std::string& name) {
  std::lock_guard lock(mu_);
  auto it = slices_.find(name);
  if (it == slices_.end()) return false;
  Json gone = it->second;
  slices_.erase(it);
  gone["metadata"]["resourceVersion"] = std::to_string(++rv_);
  Record("DELETED", gone);
  return true;
}

Json ApiServerEmulator::PutClaim(Json claim) {
  std::lock_guard lock(mu_);
  const std::string key =
      claim["metadata"].value("namespace", "default") + "/" + claim["metadata"].value("name", "");
  if (!claim["metadata"].contains("uid"))
    claim["metadata"]["uid"] = "uid-" + std::to_string(++uid_seq_);
  Json stored = Stamp(std::move(claim), "ResourceClaim");
  claims_[key] = stored;
  cv_.notify_all();
  return stored;
}

void ApiServerEmulator::PutDeviceClass(Json device_class) {
  std::lock_guard lock(mu_);
  const std::string name = device_class["metadata"].value("name", "");
  classes_[name] = Stamp(std::move(device_class), "DeviceClass");
}

bool ApiServerEmulator::WaitForSlices(const std::function<bool(const std::vector<Json>&)>& pred,
                                      std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mu_);
  return cv_.wait_for(lock, timeout, [&] {
    std::vector<Json> all;
    for (const auto& [n, o] : slices_) all.push_back(o);
    return pred(all);
  });
}

uint64_t ApiServerEmulator::resource_version() const {
  std::lock_guard lock(mu_);
  return rv_;
}

std::map<std::string, uint64_t> ApiServerEmulator::Counts() const {
  std::lock_guard lock(counts_mu_);
  return counts_;
}

int ApiServerEmulator::open_watches() const {
  std::lock_guard lock(mu_);
  return open_watches_;
}

}  // namespace danqing::testing
