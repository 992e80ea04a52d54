// apiserver-emulator: the API server emulator as a process, for trying the
// agent (or kubectl) by hand.
//
//   apiserver-emulator DIR [PORT]
//
// Generates a CA and certificates in DIR, serves on 127.0.0.1:PORT (0 or
// absent: any free port), writes DIR/kubeconfig (token "test-token") and
// prints the URL; DeviceClass and ResourceClaim objects can be loaded from
// DIR/*.json files named deviceclass-*.json / resourceclaim-*.json at start.
// Stops on SIGINT or SIGTERM.
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "testing/apiserver/apiserver_emulator.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s DIR [PORT]\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  const int port = argc > 2 ? std::atoi(argv[2]) : 0;
  std::filesystem::create_directories(dir);
  auto pki = danqing::testing::MakeTestPki(dir);
  if (!pki.ok()) {
    std::fprintf(stderr, "%s\n", pki.status().ToString().c_str());
    return 1;
  }
  danqing::testing::ApiServerOptions o;
  o.cert_file = pki->server_cert;
  o.key_file = pki->server_key;
  danqing::testing::ApiServerEmulator server(o);
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (e.path().extension() != ".json") continue;
    std::ifstream in(e.path());
    auto j = nlohmann::json::parse(in, nullptr, false);
    if (j.is_discarded() || !j.is_object()) {
      std::fprintf(stderr, "%s: not a JSON object\n", e.path().c_str());
      return 1;
    }
    if (name.rfind("deviceclass-", 0) == 0) server.PutDeviceClass(j);
    if (name.rfind("resourceclaim-", 0) == 0) server.PutClaim(j);
  }
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);  // before the server's threads start
  if (auto st = server.Start(port); !st.ok()) {
    std::fprintf(stderr, "%s\n", st.ToString().c_str());
    return 1;
  }
  std::ofstream(dir + "/kubeconfig")
      << "apiVersion: v1\nkind: Config\ncurrent-context: emulator\n"
      << "clusters: [{name: emulator, cluster: {server: \"" << server.url()
      << "\", certificate-authority: ca.crt}}]\n"
      << "contexts: [{name: emulator, context: {cluster: emulator, user: agent}}]\n"
      << "users: [{name: agent, user: {token: test-token}}]\n";
  std::printf("%s\nkubeconfig: %s/kubeconfig\n", server.url().c_str(), dir.c_str());
  std::fflush(stdout);
  int sig = 0;
  sigwait(&set, &sig);
  server.Stop();
  return 0;
}
