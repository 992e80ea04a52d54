// The Kubernetes API client against the API server emulator (HTTPS on
// loopback): authentication, CA verification, token rotation, typed errors,
// watches, faults, bounds; and the kubeconfig / in-cluster config parsers.
#include "kube/client.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>

#include "common/read_file.h"
#include "kube/config.h"
#include "testing/apiserver/apiserver_emulator.h"
#include "testing/support/temp_dir.h"
#include "tests/dra/slice_fixtures.h"

namespace danqing::kube {
namespace {

using testing::ApiFixture;

constexpr char kSlices[] = "/apis/resource.k8s.io/v1/resourceslices";

Json Slice(const std::string& name, const std::string& node, const std::string& device = "gpu-0") {
  return {
      {"apiVersion", "resource.k8s.io/v1"},
      {"kind", "ResourceSlice"},
      {"metadata", {{"name", name}}},
      {"spec",
       {{"driver", "gpu.danqing.io"},
        {"nodeName", node},
        {"pool", {{"name", node}, {"generation", 1}, {"resourceSliceCount", 1}}},
        {"devices",
         Json::array({{{"name", device}, {"attributes", {{"uuid", {{"string", "GPU-1"}}}}}}})}}}};
}

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::trunc);
  f << text;
}

class ClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(dir_.path().empty());
    fx_ = std::make_unique<ApiFixture>(dir_.path());
    ASSERT_TRUE(fx_->error.empty()) << fx_->error;
  }
  testing::TempDir dir_;
  std::unique_ptr<ApiFixture> fx_;
};

TEST_F(ClientTest, CreateGetListUpdateDeleteWithTypedErrors) {
  Client& c = *fx_->client;
  auto created = c.Create(kSlices, Slice("n1-a", "n1"));
  ASSERT_TRUE(created.ok()) << created.error().ToString();
  const std::string rv = (*created)["metadata"]["resourceVersion"];
  EXPECT_FALSE(rv.empty());
  ASSERT_TRUE(c.Create(kSlices, Slice("n2-a", "n2")).ok());

  auto again = c.Create(kSlices, Slice("n1-a", "n1"));
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.error().http_status, 409);
  EXPECT_TRUE(again.error().IsAlreadyExists());
  EXPECT_FALSE(again.error().IsConflict());

  auto list = c.Get(kSlices, {{"fieldSelector", "spec.nodeName=n1"}});
  ASSERT_TRUE(list.ok()) << list.error().ToString();
  EXPECT_EQ((*list)["kind"], "ResourceSliceList");
  ASSERT_EQ((*list)["items"].size(), 1U);
  EXPECT_EQ((*list)["items"][0]["metadata"]["name"], "n1-a");

  auto bad_selector = c.Get(kSlices, {{"fieldSelector", "spec.color=red"}});
  ASSERT_FALSE(bad_selector.ok());
  EXPECT_EQ(bad_selector.error().http_status, 400);
  EXPECT_NE(bad_selector.error().message.find("field label not supported: spec.color"),
            std::string::npos);

  Json upd = *created;
  upd["spec"]["pool"]["generation"] = 2;
  auto updated = c.Update(std::string(kSlices) + "/n1-a", upd);
  ASSERT_TRUE(updated.ok()) << updated.error().ToString();
  EXPECT_NE((*updated)["metadata"]["resourceVersion"], rv);

  // The same write again carries the old resourceVersion: 409 Conflict.
  upd["spec"]["pool"]["generation"] = 3;
  auto stale = c.Update(std::string(kSlices) + "/n1-a", upd);
  ASSERT_FALSE(stale.ok());
  EXPECT_EQ(stale.error().http_status, 409);
  EXPECT_EQ(stale.error().reason, "Conflict");
  EXPECT_TRUE(stale.error().IsConflict());
  EXPECT_EQ(stale.status().code(), StatusCode::kFailedPrecondition);

  // Without a resourceVersion: 422 Invalid naming the field.
  upd["metadata"].erase("resourceVersion");
  auto no_rv = c.Update(std::string(kSlices) + "/n1-a", upd);
  ASSERT_FALSE(no_rv.ok());
  EXPECT_EQ(no_rv.error().http_status, 422);
  EXPECT_NE(no_rv.error().message.find("metadata.resourceVersion"), std::string::npos);

  // Immutable nodeName.
  Json moved = *updated;
  moved["spec"]["nodeName"] = "n9";
  auto immut = c.Update(std::string(kSlices) + "/n1-a", moved);
  ASSERT_FALSE(immut.ok());
  EXPECT_EQ(immut.error().http_status, 422);
  EXPECT_NE(immut.error().message.find("spec.nodeName"), std::string::npos);

  auto del_stale = c.Delete(std::string(kSlices) + "/n1-a", rv);
  ASSERT_FALSE(del_stale.ok());
  EXPECT_TRUE(del_stale.error().IsConflict());
  ASSERT_TRUE(c.Delete(std::string(kSlices) + "/n1-a").ok());
  auto gone = c.Get(std::string(kSlices) + "/n1-a");
  ASSERT_FALSE(gone.ok());
  EXPECT_TRUE(gone.error().IsNotFound());
  EXPECT_EQ(gone.error().reason, "NotFound");
  EXPECT_EQ(gone.status().code(), StatusCode::kNotFound);
}

TEST_F(ClientTest, InvalidSliceIsRefusedWithFieldNamed) {
  Json s = Slice("n1-bad", "n1", "GPU_0");
  auto r = fx_->client->Create(kSlices, s);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().http_status, 422);
  EXPECT_EQ(r.error().reason, "Invalid");
  EXPECT_NE(r.error().message.find("spec.devices[0].name"), std::string::npos) << r.error().message;

  Json many = Slice("n1-many", "n1");
  many["spec"]["devices"] = Json::array();
  for (int i = 0; i < 65; ++i) {
    many["spec"]["devices"].push_back(
        {{"name", "d" + std::to_string(i)},
         {"taints",
          {{{"key", "gpu.danqing.io/unhealthy"}, {"value", "x"}, {"effect", "NoSchedule"}}}}});
  }
  Json comma = Slice("n1-comma", "n1");
  comma["spec"]["devices"][0]["taints"] = {{{"key", "gpu.danqing.io/unhealthy"},
                                            {"value", "xid-79,gpu-lost"},
                                            {"effect", "NoSchedule"}}};
  auto r3 = fx_->client->Create(kSlices, comma);
  ASSERT_FALSE(r3.ok());
  EXPECT_NE(r3.error().message.find("spec.devices[0].taints[0].value"), std::string::npos)
      << r3.error().message;

  auto r2 = fx_->client->Create(kSlices, many);
  ASSERT_FALSE(r2.ok());
  EXPECT_NE(r2.error().message.find("must have at most 64 items"), std::string::npos)
      << r2.error().message;
}

TEST_F(ClientTest, WrongTokenIs401AndRbacDenialIs403) {
  kube::Config cfg = fx_->client->config();
  cfg.token = "wrong";
  auto bad = Client::Create(cfg);
  ASSERT_TRUE(bad.ok());
  auto r = (*bad)->Get(kSlices);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(r.error().IsUnauthorized());
  EXPECT_EQ(r.status().code(), StatusCode::kPermissionDenied);

  fx_->server->SetRbac("test-token", {"list resourceslices", "get resourceclaims"});
  EXPECT_TRUE(fx_->client->Get(kSlices).ok());
  auto denied = fx_->client->Create(kSlices, Slice("n1-a", "n1"));
  ASSERT_FALSE(denied.ok());
  EXPECT_TRUE(denied.error().IsForbidden());
  EXPECT_NE(denied.error().message.find("cannot create resource \"resourceslices\""),
            std::string::npos);
}

TEST_F(ClientTest, ServerCertificateIsVerifiedAgainstTheCa) {
  auto other = testing::MakeTestPki(dir_.path(), "other-");
  ASSERT_TRUE(other.ok());
  kube::Config cfg = fx_->client->config();
  cfg.ca_file = other->ca_cert;
  auto c = Client::Create(cfg);
  ASSERT_TRUE(c.ok());
  auto r = (*c)->Get(kSlices);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().http_status, 0);
  EXPECT_EQ(r.error().reason, "TLSError") << r.error().ToString();
  EXPECT_EQ(fx_->server->Counts().count("LIST resourceslices"), 0U);  // no request got through

  // The same CA given as PEM text (certificate-authority-data) works.
  cfg.ca_file.clear();
  cfg.ca_pem = fx_->pki.ca_pem;
  auto ok = Client::Create(cfg);
  ASSERT_TRUE(ok.ok());
  EXPECT_TRUE((*ok)->Get(kSlices).ok());
}

// A client certificate is loaded into the TLS context, from files or PEM
// text; one that cannot be loaded is a TLSError naming it, nothing sent.
// (The emulator does not ask for a client certificate, so the handshake with
// it is not checked here: docs/dra.md, "Not done here".)
TEST_F(ClientTest, ClientCertificateIsLoadedOrRefusedByName) {
  kube::Config cfg = fx_->client->config();
  cfg.client_cert_file = fx_->pki.client_cert;
  cfg.client_key_file = fx_->pki.client_key;
  auto files = Client::Create(cfg);
  ASSERT_TRUE(files.ok());
  auto r = (*files)->Get(kSlices);
  EXPECT_TRUE(r.ok()) << r.error().ToString();

  auto cert_pem_r = ReadRegularFile(fx_->pki.client_cert, 1 << 20);
  auto key_pem_r = ReadRegularFile(fx_->pki.client_key, 1 << 20);
  ASSERT_TRUE(cert_pem_r.ok() && key_pem_r.ok());
  const std::string cert_pem = *cert_pem_r;
  const std::string key_pem = *key_pem_r;
  cfg.client_cert_file.clear();
  cfg.client_key_file.clear();
  cfg.client_cert_pem = cert_pem;
  cfg.client_key_pem = key_pem;
  auto pem = Client::Create(cfg);
  ASSERT_TRUE(pem.ok());
  r = (*pem)->Get(kSlices);
  EXPECT_TRUE(r.ok()) << r.error().ToString();

  const auto before = fx_->server->Counts()["LIST resourceslices"];
  cfg.client_cert_pem = "not a certificate";
  auto bad = Client::Create(cfg);
  ASSERT_TRUE(bad.ok());
  r = (*bad)->Get(kSlices);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().reason, "TLSError");
  EXPECT_NE(r.error().message.find("client certificate"), std::string::npos) << r.error().message;

  // A key that is not the certificate's.
  auto other = testing::MakeTestPki(dir_.path(), "other-");
  ASSERT_TRUE(other.ok());
  auto other_key = ReadRegularFile(other->client_key, 1 << 20);
  ASSERT_TRUE(other_key.ok());
  cfg.client_cert_pem = cert_pem;
  cfg.client_key_pem = *other_key;
  auto mismatched = Client::Create(cfg);
  ASSERT_TRUE(mismatched.ok());
  r = (*mismatched)->Get(kSlices);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().reason, "TLSError");
  EXPECT_EQ(fx_->server->Counts()["LIST resourceslices"], before);
}

TEST_F(ClientTest, TokenFileIsReadBeforeEveryRequest) {
  const std::string token = dir_.path() + "/token";
  WriteText(token, "first\n");
  kube::Config cfg = fx_->client->config();
  cfg.token.clear();
  cfg.token_file = token;
  auto c = Client::Create(cfg);
  ASSERT_TRUE(c.ok());
  fx_->server->SetTokens({"first"});
  EXPECT_TRUE((*c)->Get(kSlices).ok());
  // The kubelet rotates the projected token; the server stops accepting the old one.
  WriteText(token, "second");
  fx_->server->SetTokens({"second"});
  auto r = (*c)->Get(kSlices);
  EXPECT_TRUE(r.ok()) << r.error().ToString();

  // Unreadable: a clear error, nothing sent.
  std::filesystem::remove(token);
  const auto before = fx_->server->Counts()["LIST resourceslices"];
  auto gone = (*c)->Get(kSlices);
  ASSERT_FALSE(gone.ok());
  EXPECT_EQ(gone.error().reason, "TokenUnreadable");
  EXPECT_NE(gone.error().message.find(token), std::string::npos);
  EXPECT_TRUE(gone.error().IsRetryable());
  EXPECT_EQ(fx_->server->Counts()["LIST resourceslices"], before);
}

TEST_F(ClientTest, FaultsTimeoutsAndDownServer) {
  Client& c = *fx_->client;
  fx_->server->FailNext(1, 500);
  auto r500 = c.Get(kSlices);
  ASSERT_FALSE(r500.ok());
  EXPECT_EQ(r500.error().http_status, 500);
  EXPECT_EQ(r500.error().reason, "InternalError");
  EXPECT_TRUE(r500.error().IsRetryable());
  fx_->server->FailNext(1, 429);
  auto r429 = c.Get(kSlices);
  ASSERT_FALSE(r429.ok());
  EXPECT_EQ(r429.error().reason, "TooManyRequests");
  EXPECT_TRUE(c.Get(kSlices).ok());

  kube::Config cfg = c.config();
  cfg.request_timeout = std::chrono::milliseconds(150);
  auto slow = Client::Create(cfg);
  ASSERT_TRUE(slow.ok());
  fx_->server->SetDelay(std::chrono::milliseconds(600));
  auto t = (*slow)->Get(kSlices);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.error().reason, "Timeout");
  EXPECT_EQ(t.status().code(), StatusCode::kDeadlineExceeded);
  fx_->server->SetDelay(std::chrono::milliseconds(0));

  fx_->server->Stop();
  auto down = c.Get(kSlices);
  ASSERT_FALSE(down.ok());
  EXPECT_EQ(down.error().http_status, 0);
  EXPECT_TRUE(down.error().IsRetryable());
  ASSERT_TRUE(fx_->server->Restart().ok());
  auto back = c.Get(kSlices);
  EXPECT_TRUE(back.ok()) << back.error().ToString();
}

// A kept-alive connection the API server closed (here: it restarted) is
// replaced for the next request, not reported as a transport error.
TEST_F(ClientTest, PooledConnectionTheServerClosedIsReplaced) {
  Client& c = *fx_->client;
  ASSERT_TRUE(c.Get(kSlices).ok());  // leaves a kept-alive connection in the pool
  fx_->server->Stop();
  ASSERT_TRUE(fx_->server->Restart().ok());
  for (int i = 0; i < 3; ++i) {
    auto again = c.Get(kSlices);
    EXPECT_TRUE(again.ok()) << again.error().ToString();
  }
}

TEST_F(ClientTest, ResponsesAreBounded) {
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(fx_->client->Create(kSlices, Slice("n1-" + std::to_string(i), "n1")).ok());
  }
  kube::Config cfg = fx_->client->config();
  cfg.max_response_bytes = 2048;
  auto small = Client::Create(cfg);
  ASSERT_TRUE(small.ok());
  auto r = (*small)->Get(kSlices);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().reason, "TooLarge");
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  EXPECT_FALSE(r.error().IsRetryable());
}

TEST_F(ClientTest, WatchStreamsEventsAndReportsExpiry) {
  Client& c = *fx_->client;
  auto list = c.Get(kSlices);
  ASSERT_TRUE(list.ok());
  const std::string rv = (*list)["metadata"]["resourceVersion"];
  std::vector<WatchEvent> seen;
  std::atomic<bool> cancel{false};
  std::thread writer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    ASSERT_TRUE(c.Create(kSlices, Slice("n1-w", "n1")).ok());
    ASSERT_TRUE(c.Create(kSlices, Slice("n2-w", "n2")).ok());  // filtered out
    ASSERT_TRUE(c.Delete(std::string(kSlices) + "/n1-w").ok());
  });
  auto w = c.Watch(kSlices, {{"fieldSelector", "spec.nodeName=n1"}, {"resourceVersion", rv}},
                   [&](const WatchEvent& ev) {
                     seen.push_back(ev);
                     return seen.size() < 2;
                   });
  writer.join();
  ASSERT_TRUE(w.ok()) << w.error().ToString();
  ASSERT_EQ(seen.size(), 2U);
  EXPECT_EQ(seen[0].type, "ADDED");
  EXPECT_EQ(seen[0].object["metadata"]["name"], "n1-w");
  EXPECT_EQ(seen[1].type, "DELETED");

  // A compacted resourceVersion: one ERROR event with a 410 Status.
  fx_->server->Compact();
  seen.clear();
  auto old = c.Watch(kSlices, {{"resourceVersion", rv}}, [&](const WatchEvent& ev) {
    seen.push_back(ev);
    return true;
  });
  ASSERT_TRUE(old.ok());
  ASSERT_EQ(seen.size(), 1U);
  EXPECT_EQ(seen[0].type, "ERROR");
  EXPECT_EQ(seen[0].object["code"], 410);
  EXPECT_EQ(seen[0].object["reason"], "Expired");

  // ExpireWatches ends an open watch the same way; cancel ends one at once.
  seen.clear();
  // (The first watch's stream may still count as open on the server until it
  // next writes: wait for one more than now.)
  const int open_before = fx_->server->open_watches();
  std::thread expirer([&] {
    for (int i = 0; i < 1000 && fx_->server->open_watches() <= open_before; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    fx_->server->ExpireWatches();
  });
  auto exp =
      c.Watch(kSlices, {{"resourceVersion", std::to_string(fx_->server->resource_version())}},
              [&](const WatchEvent& ev) {
                seen.push_back(ev);
                return true;
              });
  expirer.join();
  ASSERT_TRUE(exp.ok());
  ASSERT_EQ(seen.size(), 1U);
  EXPECT_EQ(seen[0].object["code"], 410);

  const int open_now = fx_->server->open_watches();
  std::thread canceller([&] {
    for (int i = 0; i < 1000 && fx_->server->open_watches() <= open_now; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    cancel = true;
  });
  WatchOptions wo;
  wo.cancel = &cancel;
  auto cancelled = c.Watch(
      kSlices, {{"resourceVersion", std::to_string(fx_->server->resource_version())}},
      [](const WatchEvent&) { return true; }, wo);
  canceller.join();
  EXPECT_TRUE(cancelled.ok());

  fx_->server->FailNext(1, 503);
  auto refused = c.Watch(kSlices, {}, [](const WatchEvent&) { return true; });
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().http_status, 503);
}

TEST(KubeconfigTest, ParsesClusterUserAndContext) {
  testing::TempDir dir;
  WriteText(dir.path() + "/ca.pem", "x");
  const std::string text = R"(
apiVersion: v1
kind: Config
current-context: prod
clusters:
- name: c1
  cluster:
    server: https://10.0.0.1:6443/
    certificate-authority: ca.pem
- name: c2
  cluster:
    server: https://example:443
    certificate-authority-data: aGVsbG8gY2E=
contexts:
- name: prod
  context: {cluster: c1, user: u1, namespace: gpu}
- name: other
  context: {cluster: c2, user: u2}
users:
- name: u1
  user: {token: abc}
- name: u2
  user:
    client-certificate-data: Y2VydA==
    client-key-data: a2V5
)";
  auto c = ParseKubeconfig(text, dir.path());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->server, "https://10.0.0.1:6443");
  EXPECT_EQ(c->ca_file, dir.path() + "/ca.pem");
  EXPECT_EQ(c->token, "abc");
  EXPECT_EQ(c->namespace_name, "gpu");
  auto o = ParseKubeconfig(text, dir.path(), "other");
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->ca_pem, "hello ca");
  EXPECT_EQ(o->client_cert_pem, "cert");
  EXPECT_EQ(o->client_key_pem, "key");
  EXPECT_EQ(o->namespace_name, "default");

  auto missing = ParseKubeconfig(text, dir.path(), "nope");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("no context named \"nope\""), std::string::npos);

  const std::string exec = R"(
current-context: x
clusters: [{name: c, cluster: {server: "https://a"}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
users: [{name: u, user: {exec: {command: aws}}}]
)";
  auto e = ParseKubeconfig(exec, dir.path());
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("exec"), std::string::npos);

  auto b64 = ParseKubeconfig(R"(
current-context: x
clusters: [{name: c, cluster: {server: "https://a", certificate-authority-data: "!!"}}]
contexts: [{name: x, context: {cluster: c}}]
)",
                             dir.path());
  ASSERT_FALSE(b64.ok());
  EXPECT_NE(b64.status().message().find("certificate-authority-data"), std::string::npos);

  auto yaml = ParseKubeconfig("clusters: [", dir.path());
  EXPECT_FALSE(yaml.ok());
  EXPECT_FALSE(LoadKubeconfig(dir.path() + "/absent").ok());
}

TEST(KubeconfigTest, LoadedKubeconfigTalksToTheEmulator) {
  testing::TempDir dir;
  ApiFixture fx(dir.path());
  ASSERT_TRUE(fx.error.empty()) << fx.error;
  WriteText(dir.path() + "/token", "test-token");
  WriteText(dir.path() + "/kubeconfig",
            "current-context: t\nclusters: [{name: c, cluster: {server: \"" + fx.server->url() +
                "\", certificate-authority: ca.crt}}]\ncontexts: [{name: t, context: {cluster: c, "
                "user: u}}]\n"
                "users: [{name: u, user: {tokenFile: token}}]\n");
  auto cfg = LoadKubeconfig(dir.path() + "/kubeconfig");
  ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
  auto c = Client::Create(*cfg);
  ASSERT_TRUE(c.ok());
  auto r = (*c)->Get(kSlices);
  EXPECT_TRUE(r.ok()) << r.error().ToString();
}

TEST(InClusterConfigTest, ReadsEnvironmentAndServiceAccount) {
  testing::TempDir dir;
  ::unsetenv("KUBERNETES_SERVICE_HOST");
  auto none = InClusterConfig(dir.path());
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("KUBERNETES_SERVICE_HOST"), std::string::npos);
  ::setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1", 1);
  ::setenv("KUBERNETES_SERVICE_PORT", "443", 1);
  auto no_token = InClusterConfig(dir.path());
  ASSERT_FALSE(no_token.ok());
  EXPECT_NE(no_token.status().message().find("token"), std::string::npos);
  WriteText(dir.path() + "/token", "t");
  WriteText(dir.path() + "/ca.crt", "ca");
  WriteText(dir.path() + "/namespace", "danqing\n");
  auto c = InClusterConfig(dir.path());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->server, "https://10.96.0.1:443");
  EXPECT_EQ(c->token_file, dir.path() + "/token");
  EXPECT_EQ(c->namespace_name, "danqing");
  ::setenv("KUBERNETES_SERVICE_HOST", "fd00::1", 1);
  auto v6 = InClusterConfig(dir.path());
  ASSERT_TRUE(v6.ok());
  EXPECT_EQ(v6->server, "https://[fd00::1]:443");
  ::unsetenv("KUBERNETES_SERVICE_HOST");
  ::unsetenv("KUBERNETES_SERVICE_PORT");
}

TEST(Base64Test, DecodesAndRejects) {
  EXPECT_EQ(*DecodeBase64("aGVsbG8="), "hello");
  EXPECT_EQ(*DecodeBase64("aGVs\nbG8"), "hello");
  EXPECT_FALSE(DecodeBase64("a*b").ok());
  EXPECT_FALSE(DecodeBase64("aGVsbG8=x").ok());
}

TEST(EncodeQueryTest, PercentEncodes) {
  EXPECT_EQ(EncodeQuery({{"fieldSelector", "spec.nodeName=n1,spec.driver=gpu.danqing.io"}}),
            "?fieldSelector=spec.nodeName%3Dn1%2Cspec.driver%3Dgpu.danqing.io");
  EXPECT_EQ(EncodeQuery({}), "");
}

}  // namespace
}  // namespace danqing::kube
