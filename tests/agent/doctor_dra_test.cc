// danqing-device-plugin doctor, DRA side: the API server (the emulator in
// testing/apiserver, with its RBAC table and SelfSubjectAccessReviews), the
// DeviceClasses, the registration directory and the checkpoint.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "agent/doctor.h"
#include "testing/apiserver/apiserver_emulator.h"
#include "testing/support/temp_dir.h"

namespace danqing::agent {
namespace {

using L = Finding::Level;

class DoctorDraTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = tmp_.path();
    auto pki = testing::MakeTestPki(dir_);
    ASSERT_TRUE(pki.ok()) << pki.status().ToString();
    pki_ = *pki;
    testing::ApiServerOptions o;
    o.cert_file = pki_.server_cert;
    o.key_file = pki_.server_key;
    o.tokens = {"test-token", "narrow-token"};
    server_ = std::make_unique<testing::ApiServerEmulator>(o);
    ASSERT_TRUE(server_->Start().ok());
    std::filesystem::create_directories(dir_ + "/registry");
    std::filesystem::create_directories(dir_ + "/state");
    options_.kubeconfig = Kubeconfig("test-token");
  }

  std::string Kubeconfig(const std::string& token) {
    const std::string path = dir_ + "/kubeconfig-" + token;
    std::ofstream(path) << "apiVersion: v1\nkind: Config\ncurrent-context: t\n"
                        << "clusters: [{name: t, cluster: {server: \"" << server_->url()
                        << "\", certificate-authority: ca.crt}}]\n"
                        << "contexts: [{name: t, context: {cluster: t, user: u}}]\n"
                        << "users: [{name: u, user: {token: " << token << "}}]\n";
    return path;
  }

  config::Config Config() {
    config::Config cfg;
    cfg.danqing.mode = "dra";
    cfg.danqing.node_name = "node-a";
    cfg.danqing.device_plugin_path = dir_ + "/dp";
    cfg.danqing.cdi_root = dir_ + "/cdi";
    cfg.danqing.metrics_addr = "";
    cfg.danqing.nvml_lib = "/nonexistent/libnvidia-ml.so.1";
    cfg.danqing.dra_plugins_registry = dir_ + "/registry";
    cfg.danqing.dra_checkpoint_dir = dir_ + "/state";
    return cfg;
  }

  static void PutClasses(testing::ApiServerEmulator& s) {
    s.PutDeviceClass(
        {{"apiVersion", "resource.k8s.io/v1"},
         {"kind", "DeviceClass"},
         {"metadata", {{"name", "gpu.danqing.io"}}},
         {"spec",
          {{"selectors", {{{"cel", {{"expression", "device.driver == \"gpu.danqing.io\""}}}}}}}}});
    s.PutDeviceClass(
        {{"apiVersion", "resource.k8s.io/v1"},
         {"kind", "DeviceClass"},
         {"metadata", {{"name", "nvidia-gpu.gpu.danqing.io"}}},
         {"spec",
          {{"extendedResourceName", "nvidia.com/gpu"},
           {"selectors", {{{"cel", {{"expression", "device.driver == \"gpu.danqing.io\""}}}}}}}}});
    s.PutDeviceClass(
        {{"apiVersion", "resource.k8s.io/v1"},
         {"kind", "DeviceClass"},
         {"metadata", {{"name", "other"}}},
         {"spec",
          {{"selectors", {{{"cel", {{"expression", "device.driver == \"gpu.example.com\""}}}}}}}}});
  }

  std::vector<Finding> Run() {
    return RunDoctor(
        Config(),
        [](const config::Config&) -> Result<std::unique_ptr<gpu::GpuBackend>> {
          return Status(StatusCode::kUnavailable, "no NVML in this test");
        },
        options_);
  }

  static const Finding* Find(const std::vector<Finding>& fs, std::string_view check) {
    for (const auto& f : fs) {
      if (f.check == check) return &f;
    }
    return nullptr;
  }

  testing::TempDir tmp_;
  std::string dir_;
  testing::TestPki pki_;
  std::unique_ptr<testing::ApiServerEmulator> server_;
  DoctorOptions options_;
};

TEST_F(DoctorDraTest, ReachableWithEveryPermissionAndTheClasses) {
  PutClasses(*server_);
  const auto fs = Run();
  const Finding* api = Find(fs, "DRA API server");
  ASSERT_TRUE(api);
  EXPECT_EQ(api->level, L::kOk) << api->detail;
  EXPECT_NE(api->detail.find("0 ResourceSlice(s) of node node-a for gpu.danqing.io"),
            std::string::npos)
      << api->detail;
  ASSERT_TRUE(Find(fs, "DRA permissions"));
  EXPECT_EQ(Find(fs, "DRA permissions")->level, L::kOk) << Find(fs, "DRA permissions")->detail;
  const Finding* classes = Find(fs, "DRA DeviceClasses");
  ASSERT_TRUE(classes);
  EXPECT_EQ(classes->level, L::kOk);
  EXPECT_NE(classes->detail.find("gpu.danqing.io, nvidia-gpu.gpu.danqing.io"), std::string::npos)
      << classes->detail;
  EXPECT_NE(classes->detail.find("nvidia.com/gpu (nvidia-gpu.gpu.danqing.io)"), std::string::npos);
  EXPECT_EQ(classes->detail.find("other"), std::string::npos) << "another driver's class";
  EXPECT_EQ(Find(fs, "DRA registration directory")->level, L::kOk);
}

TEST_F(DoctorDraTest, NoClassForThisDriverIsAWarning) {
  const auto fs = Run();
  ASSERT_TRUE(Find(fs, "DRA DeviceClasses"));
  EXPECT_EQ(Find(fs, "DRA DeviceClasses")->level, L::kWarn);
  EXPECT_NE(Find(fs, "DRA DeviceClasses")->fix.find("deploy/overlays/dra"), std::string::npos);
}

// A token that may list slices and classes but not write slices or read
// claims: the API answers, the permissions check names what is missing.
TEST_F(DoctorDraTest, MissingPermissionsAreNamed) {
  PutClasses(*server_);
  server_->SetRbac("narrow-token", {"list resourceslices", "list deviceclasses"});
  options_.kubeconfig = Kubeconfig("narrow-token");
  const auto fs = Run();
  EXPECT_EQ(Find(fs, "DRA API server")->level, L::kOk);
  const Finding* perms = Find(fs, "DRA permissions");
  ASSERT_TRUE(perms);
  EXPECT_EQ(perms->level, L::kFail);
  EXPECT_NE(perms->detail.find("get resourceslices"), std::string::npos) << perms->detail;
  EXPECT_NE(perms->detail.find("create resourceslices"), std::string::npos) << perms->detail;
  EXPECT_NE(perms->detail.find("get resourceclaims"), std::string::npos) << perms->detail;
  EXPECT_EQ(perms->detail.find("list resourceslices"), std::string::npos) << perms->detail;
  EXPECT_NE(perms->fix.find("rbac.yaml"), std::string::npos);
  EXPECT_TRUE(AnyFailed(fs));
}

// 403 on the slices themselves: the Forbidden message and the RBAC fix.
TEST_F(DoctorDraTest, ForbiddenSlicesAreAFailureWithTheServersMessage) {
  server_->SetRbac("narrow-token", {"get resourceclaims"});
  options_.kubeconfig = Kubeconfig("narrow-token");
  const auto fs = Run();
  const Finding* api = Find(fs, "DRA API server");
  ASSERT_TRUE(api);
  EXPECT_EQ(api->level, L::kFail);
  EXPECT_NE(api->detail.find("403"), std::string::npos) << api->detail;
  EXPECT_NE(api->detail.find("cannot list resource \"resourceslices\""), std::string::npos)
      << api->detail;
  EXPECT_NE(api->fix.find("rbac.yaml"), std::string::npos);
  EXPECT_EQ(Find(fs, "DRA permissions")->level, L::kFail);
  EXPECT_EQ(Find(fs, "DRA DeviceClasses")->level, L::kWarn) << "cannot list them";
}

TEST_F(DoctorDraTest, RefusedTokenAndServerDown) {
  options_.kubeconfig = Kubeconfig("stale-token");
  auto fs = Run();
  ASSERT_TRUE(Find(fs, "DRA API server"));
  EXPECT_EQ(Find(fs, "DRA API server")->level, L::kFail);
  EXPECT_NE(Find(fs, "DRA API server")->detail.find("401"), std::string::npos);
  EXPECT_NE(Find(fs, "DRA API server")->fix.find("token"), std::string::npos);
  EXPECT_FALSE(Find(fs, "DRA permissions")) << "no answer: not asked";

  options_.kubeconfig = Kubeconfig("test-token");
  server_->Stop();
  fs = Run();
  EXPECT_EQ(Find(fs, "DRA API server")->level, L::kFail);
  EXPECT_NE(Find(fs, "DRA API server")->fix.find("reachable"), std::string::npos);
}

TEST_F(DoctorDraTest, NotInAPodAndNoKubeconfig) {
  options_.kubeconfig = "";
  options_.service_account_dir = dir_ + "/no-sa";
  const auto fs = Run();
  ASSERT_TRUE(Find(fs, "DRA API server"));
  EXPECT_EQ(Find(fs, "DRA API server")->level, L::kFail);
  EXPECT_NE(Find(fs, "DRA API server")->fix.find("--kubeconfig"), std::string::npos);
  options_.kubeconfig = dir_ + "/no-such-kubeconfig";
  const auto named = Run();
  EXPECT_EQ(Find(named, "DRA API server")->level, L::kFail);
  EXPECT_NE(Find(named, "DRA API server")->detail.find("no-such-kubeconfig"), std::string::npos);
  EXPECT_NE(Find(named, "DRA API server")->fix.find("fix the kubeconfig"), std::string::npos);
}

// A checkpoint that is garbage, or whose checksum does not match: reported
// with the reason, and doctor goes on.
TEST_F(DoctorDraTest, CorruptCheckpointIsReportedNotFatal) {
  std::ofstream(dir_ + "/state/checkpoint.json", std::ios::binary) << std::string("\0\xff{[", 4);
  auto fs = Run();
  ASSERT_TRUE(Find(fs, "DRA checkpoint"));
  EXPECT_EQ(Find(fs, "DRA checkpoint")->level, L::kWarn);
  EXPECT_NE(Find(fs, "DRA checkpoint")->fix.find("rebuilds"), std::string::npos);

  std::ofstream(dir_ + "/state/checkpoint.json", std::ios::trunc)
      << R"({"version": 1, "checksum": "fnv1a64:0000000000000000", "claims": []})";
  fs = Run();
  EXPECT_EQ(Find(fs, "DRA checkpoint")->level, L::kWarn);
  EXPECT_NE(Find(fs, "DRA checkpoint")->detail.find("checksum"), std::string::npos)
      << Find(fs, "DRA checkpoint")->detail;
  EXPECT_TRUE(Find(fs, "DRA claims")) << "the checks after it still ran";
}

TEST_F(DoctorDraTest, ARegistrationDirectoryThatIsNotWritableFails) {
  if (::geteuid() == 0) GTEST_SKIP() << "root writes through any mode bits";
  std::filesystem::permissions(
      dir_ + "/registry", std::filesystem::perms::owner_read | std::filesystem::perms::owner_exec);
  const auto fs = Run();
  std::filesystem::permissions(dir_ + "/registry", std::filesystem::perms::owner_all);
  EXPECT_EQ(Find(fs, "DRA registration directory")->level, L::kFail);
  EXPECT_NE(Find(fs, "DRA registration directory")->detail.find("not writable"), std::string::npos);
}

}  // namespace
}  // namespace danqing::agent
