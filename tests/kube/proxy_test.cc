// The Kubernetes API client through a real HTTP forward proxy (tinyproxy on
// loopback, CONNECT tunnels) in front of the API server emulator (HTTPS):
// HTTPS_PROXY / NO_PROXY as client-go reads them, proxy authentication, the
// proxy's refusals, the server certificate verified through the tunnel, the
// pooled-connection retry; and the NO_PROXY rules on their own.
#include "kube/proxy.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <map>
#include <thread>
#include <vector>

#include "kube/client.h"
#include "testing/apiserver/apiserver_emulator.h"
#include "testing/proxy/forward_proxy.h"
#include "testing/support/temp_dir.h"
#include "tests/dra/slice_fixtures.h"

namespace danqing::kube {
namespace {

using testing::ApiFixture;
using testing::ForwardProxy;
using testing::ForwardProxyOptions;

constexpr char kSlices[] = "/apis/resource.k8s.io/v1/resourceslices";
constexpr const char* kProxyVars[] = {"HTTPS_PROXY", "https_proxy", "HTTP_PROXY",
                                      "http_proxy",  "NO_PROXY",    "no_proxy"};

// Sets proxy variables for one test; restores the process's on exit.
class ProxyEnv {
 public:
  ProxyEnv() {
    for (const char* v : kProxyVars) {
      if (const char* old = ::getenv(v)) saved_[v] = old;
      ::unsetenv(v);
    }
  }
  ~ProxyEnv() {
    for (const char* v : kProxyVars) ::unsetenv(v);
    for (const auto& [k, v] : saved_) ::setenv(k.c_str(), v.c_str(), 1);
  }
  void Set(const char* name, const std::string& value) { ::setenv(name, value.c_str(), 1); }
  void Unset(const char* name) { ::unsetenv(name); }

 private:
  std::map<std::string, std::string> saved_;
};

class KubeProxyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(dir_.path().empty());
    fx_ = std::make_unique<ApiFixture>(dir_.path());
    ASSERT_TRUE(fx_->error.empty()) << fx_->error;
    target_ = "127.0.0.1:" + std::to_string(fx_->server->port());
  }
  // The fixture client's config, loopback proxied when the rules say so.
  kube::Config Cfg() const {
    kube::Config c = fx_->client->config();
    c.proxy_loopback_too = true;
    return c;
  }
  ProxyEnv env_;
  testing::TempDir dir_;
  std::unique_ptr<ApiFixture> fx_;
  std::string target_;  // the emulator's host:port
};

TEST_F(KubeProxyTest, RequestsAndWatchesGoThroughTheProxy) {
  ForwardProxy proxy;
  ASSERT_TRUE(proxy.Start());
  env_.Set("HTTPS_PROXY", proxy.url());
  auto c = Client::Create(Cfg());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_TRUE((*c)->proxy().has_value());
  EXPECT_EQ((*c)->proxy()->variable, "HTTPS_PROXY");
  auto r = (*c)->Get(kSlices);
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  // Two CONNECTs for a new connection: the client's check that the proxy
  // grants the tunnel, then the tunnel itself.
  EXPECT_EQ(proxy.ConnectCount(target_), 2) << proxy.Log();
  EXPECT_EQ(fx_->server->Counts().count("LIST resourceslices"), 1U);
  // The pooled connection (the same tunnel) serves the next request.
  ASSERT_TRUE((*c)->Get(kSlices).ok());
  EXPECT_EQ(proxy.ConnectCount(target_), 2);

  // A watch: its own connection, so its own tunnel; events stream through it.
  const std::string rv = (*r)["metadata"]["resourceVersion"];
  std::thread writer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    EXPECT_TRUE(
        fx_->client
            ->Create(
                kSlices,
                Json{{"apiVersion", "resource.k8s.io/v1"},
                     {"kind", "ResourceSlice"},
                     {"metadata", {{"name", "n1-w"}}},
                     {"spec",
                      {{"driver", "gpu.danqing.io"},
                       {"nodeName", "n1"},
                       {"pool", {{"name", "n1"}, {"generation", 1}, {"resourceSliceCount", 1}}},
                       {"devices", Json::array()}}}})
            .ok());
  });
  std::vector<std::string> seen;
  auto w = (*c)->Watch(kSlices, {{"resourceVersion", rv}}, [&](const WatchEvent& ev) {
    seen.push_back(ev.type);
    return false;
  });
  writer.join();
  ASSERT_TRUE(w.ok()) << w.error().ToString();
  EXPECT_EQ(seen, std::vector<std::string>{"ADDED"});
  EXPECT_EQ(proxy.ConnectCount(target_), 4) << proxy.Log();
}

TEST_F(KubeProxyTest, NoProxyBypassesByHostSuffixAndCidr) {
  ForwardProxy proxy;
  ASSERT_TRUE(proxy.Start());
  env_.Set("https_proxy", proxy.url());  // the lower-case name works too
  for (const std::string& no :
       std::vector<std::string>{"127.0.0.1", "example.com, 127.0.0.0/8", "*",
                                "127.0.0.1:" + std::to_string(fx_->server->port())}) {
    env_.Set("NO_PROXY", no);
    auto c = Client::Create(Cfg());
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_FALSE((*c)->proxy().has_value()) << no;
    auto r = (*c)->Get(kSlices);
    EXPECT_TRUE(r.ok()) << no << ": " << r.error().ToString();
  }
  EXPECT_EQ(proxy.ConnectCount(target_), 0) << proxy.Log();
  // Entries that do not match: proxied.
  for (const std::string no : {"10.0.0.0/8", "127.0.0.2", "127.0.0.1:1", "example.com"}) {
    env_.Set("no_proxy", no);
    env_.Unset("NO_PROXY");
    auto c = Client::Create(Cfg());
    ASSERT_TRUE(c.ok());
    EXPECT_TRUE((*c)->proxy().has_value()) << no;
    EXPECT_TRUE((*c)->Get(kSlices).ok()) << no;
  }
  EXPECT_EQ(proxy.ConnectCount(target_), 8) << proxy.Log();  // 2 per client
  // Loopback is never proxied by default (as Go does).
  env_.Unset("no_proxy");
  auto d = Client::Create(fx_->client->config());
  ASSERT_TRUE(d.ok());
  EXPECT_FALSE((*d)->proxy().has_value());
}

TEST_F(KubeProxyTest, ProxyAuthenticationAndRefusalsAreNamed) {
  ForwardProxy proxy(ForwardProxyOptions{"agent", "s3cret", 0});
  ASSERT_TRUE(proxy.Start());
  env_.Set("HTTPS_PROXY", proxy.url());
  auto c = Client::Create(Cfg());
  ASSERT_TRUE(c.ok());
  auto r = (*c)->Get(kSlices);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().http_status, 407) << r.error().ToString();
  EXPECT_EQ(r.error().reason, "ProxyRefused");
  EXPECT_NE(r.error().message.find("proxy " + proxy.url() + " (HTTPS_PROXY)"), std::string::npos)
      << r.error().message;
  auto w = (*c)->Watch(kSlices, {}, [](const WatchEvent&) { return true; });
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.error().http_status, 407);
  EXPECT_EQ(fx_->server->Counts().count("LIST resourceslices"), 0U);
  // Wrong password: 407 too, and the password is not in the message.
  env_.Set("HTTPS_PROXY", proxy.url("agent:wrong"));
  auto wrong = Client::Create(Cfg());
  ASSERT_TRUE(wrong.ok());
  auto rw = (*wrong)->Get(kSlices);
  ASSERT_FALSE(rw.ok());
  EXPECT_EQ(rw.error().reason, "ProxyRefused");  // tinyproxy answers 401 to wrong credentials
  EXPECT_NE(rw.error().http_status, 0);
  EXPECT_EQ(rw.error().message.find("wrong"), std::string::npos) << rw.error().message;
  // The right credentials (percent-escapes decoded): through.
  env_.Set("HTTPS_PROXY", proxy.url("agent:s3cr%65t"));
  auto ok = Client::Create(Cfg());
  ASSERT_TRUE(ok.ok());
  auto ro = (*ok)->Get(kSlices);
  EXPECT_TRUE(ro.ok()) << ro.error().ToString();
  EXPECT_GE(proxy.ConnectCount(target_), 1);

  // A proxy that does not allow CONNECT to the server's port: 403, named.
  ForwardProxy deny(ForwardProxyOptions{"", "", 1});
  ASSERT_TRUE(deny.Start());
  env_.Set("HTTPS_PROXY", deny.url());
  auto d = Client::Create(Cfg());
  ASSERT_TRUE(d.ok());
  auto rd = (*d)->Get(kSlices);
  ASSERT_FALSE(rd.ok());
  EXPECT_EQ(rd.error().http_status, 403) << rd.error().ToString();
  EXPECT_EQ(rd.error().reason, "ProxyRefused");
  EXPECT_NE(rd.error().message.find(deny.url()), std::string::npos);
  EXPECT_FALSE(rd.error().IsForbidden());     // not the API server's RBAC
  EXPECT_FALSE(rw.error().IsUnauthorized());  // not the API server's token check
}

TEST_F(KubeProxyTest, BadProxyValuesAreRefusedNamingTheVariable) {
  for (const std::string bad :
       {"socks5://127.0.0.1:1080", "https://proxy:3128", "http://", "http://proxy:notaport",
        "http://proxy:70000", "http://proxy:", "http://u:%zz@proxy:3128"}) {
    env_.Set("HTTPS_PROXY", bad);
    auto c = Client::Create(Cfg());
    ASSERT_FALSE(c.ok()) << bad;
    EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(c.status().message().find("HTTPS_PROXY=" + bad), std::string::npos)
        << c.status().message();
  }
  // Checked even when NO_PROXY sends this server direct.
  env_.Set("https_proxy", "socks5://x:1");
  env_.Unset("HTTPS_PROXY");
  env_.Set("NO_PROXY", "*");
  auto c = Client::Create(Cfg());
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("https_proxy="), std::string::npos);
  // No scheme: http:// (as Go reads it).
  env_.Unset("NO_PROXY");
  env_.Set("HTTPS_PROXY", "proxy.corp:3128");
  auto plain = Client::Create(Cfg());
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_EQ((*plain)->proxy()->host, "proxy.corp");
  EXPECT_EQ((*plain)->proxy()->port, 3128);
}

TEST_F(KubeProxyTest, ServerCertificateIsVerifiedThroughTheTunnel) {
  ForwardProxy proxy;
  ASSERT_TRUE(proxy.Start());
  env_.Set("HTTPS_PROXY", proxy.url());
  auto other = testing::MakeTestPki(dir_.path(), "other-");
  ASSERT_TRUE(other.ok());
  kube::Config cfg = Cfg();
  cfg.ca_file = other->ca_cert;
  auto c = Client::Create(cfg);
  ASSERT_TRUE(c.ok());
  auto r = (*c)->Get(kSlices);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().reason, "TLSError") << r.error().ToString();
  EXPECT_EQ(proxy.ConnectCount(target_), 2) << proxy.Log();  // the probe and the tunnel
  EXPECT_EQ(fx_->server->Counts().count("LIST resourceslices"), 0U);
}

TEST_F(KubeProxyTest, PooledTunnelTheServerClosedIsReplaced) {
  ForwardProxy proxy;
  ASSERT_TRUE(proxy.Start());
  env_.Set("HTTPS_PROXY", proxy.url());
  auto c = Client::Create(Cfg());
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE((*c)->Get(kSlices).ok());
  fx_->server->Stop();
  ASSERT_TRUE(fx_->server->Restart().ok());
  for (int i = 0; i < 3; ++i) {
    auto again = (*c)->Get(kSlices);
    EXPECT_TRUE(again.ok()) << again.error().ToString();
  }
  // The failed reused tunnel is replaced once: 2 CONNECTs before, 2 after.
  EXPECT_EQ(proxy.ConnectCount(target_), 4) << proxy.Log();
}

TEST(NoProxyTest, FollowsGoRules) {
  EXPECT_TRUE(NoProxyMatches("foo.com", "foo.com", 443));
  EXPECT_TRUE(NoProxyMatches("foo.com", "api.foo.com", 443));
  EXPECT_FALSE(NoProxyMatches("foo.com", "barfoo.com", 443));
  EXPECT_FALSE(NoProxyMatches(".foo.com", "foo.com", 443));
  EXPECT_TRUE(NoProxyMatches(".foo.com", "api.foo.com", 443));
  EXPECT_TRUE(NoProxyMatches("*.foo.com", "api.foo.com", 443));
  EXPECT_TRUE(NoProxyMatches(" svc , .cluster.local", "kubernetes.default.svc", 443));
  EXPECT_TRUE(NoProxyMatches("SVC", "kubernetes.default.svc", 443));
  EXPECT_TRUE(NoProxyMatches(".cluster.local", "kubernetes.default.svc.cluster.local", 443));
  EXPECT_TRUE(NoProxyMatches("10.96.0.0/12", "10.96.0.1", 443));
  EXPECT_FALSE(NoProxyMatches("10.96.0.0/12", "10.112.0.1", 443));
  EXPECT_TRUE(NoProxyMatches("10.96.0.1", "10.96.0.1", 443));
  EXPECT_FALSE(NoProxyMatches("10.96.0.1", "10.96.0.10", 443));
  EXPECT_TRUE(NoProxyMatches("10.96.0.1:443", "10.96.0.1", 443));
  EXPECT_FALSE(NoProxyMatches("10.96.0.1:6443", "10.96.0.1", 443));
  EXPECT_TRUE(NoProxyMatches("fd00::/8", "fd00::1", 443));
  EXPECT_TRUE(NoProxyMatches("[fd00::1]:443", "fd00::1", 443));
  EXPECT_FALSE(NoProxyMatches("fd00::/8", "10.0.0.1", 443));
  EXPECT_TRUE(NoProxyMatches("a,*", "anything", 443));
  EXPECT_FALSE(NoProxyMatches("", "foo.com", 443));
  EXPECT_FALSE(NoProxyMatches("10.0.0.0/8", "ten.example", 443));
}

TEST(NoProxyTest, EnvironmentPrecedenceAndLoopback) {
  std::map<std::string, std::string> env;
  auto look = [&](const char* n) -> const char* {
    auto it = env.find(n);
    return it == env.end() ? nullptr : it->second.c_str();
  };
  auto p = ProxyFromEnvironment("https", "10.96.0.1", 443, look);
  ASSERT_TRUE(p.ok());
  EXPECT_FALSE(p->has_value());
  env["HTTPS_PROXY"] = "http://u:p@proxy:3128";
  env["https_proxy"] = "http://other:1";
  env["HTTP_PROXY"] = "http://plain:8080";
  p = ProxyFromEnvironment("https", "10.96.0.1", 443, look);
  ASSERT_TRUE(p.ok() && p->has_value());
  EXPECT_EQ((*p)->host, "proxy");
  EXPECT_EQ((*p)->username, "u");
  EXPECT_EQ((*p)->Display(), "http://u:***@proxy:3128");
  p = ProxyFromEnvironment("http", "10.96.0.1", 80, look);  // http:// server: HTTP_PROXY
  ASSERT_TRUE(p.ok() && p->has_value());
  EXPECT_EQ((*p)->host, "plain");
  EXPECT_EQ((*p)->variable, "HTTP_PROXY");
  for (const char* loop : {"localhost", "127.0.0.1", "127.1.2.3", "::1"}) {
    p = ProxyFromEnvironment("https", loop, 443, look);
    ASSERT_TRUE(p.ok());
    EXPECT_FALSE(p->has_value()) << loop;
  }
  env["no_proxy"] = "10.96.0.1";
  p = ProxyFromEnvironment("https", "10.96.0.1", 443, look);
  ASSERT_TRUE(p.ok());
  EXPECT_FALSE(p->has_value());
  env["NO_PROXY"] = "example.com";  // NO_PROXY wins over no_proxy
  p = ProxyFromEnvironment("https", "10.96.0.1", 443, look);
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(p->has_value());
}

}  // namespace
}  // namespace danqing::kube
