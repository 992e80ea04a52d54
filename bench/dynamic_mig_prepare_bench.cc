// Dynamic MIG prepare/unprepare figures for issue 26, over the fake NVML
// (testing/fake-nvml) through NvmlMigControl and DynamicMig, as the DRA
// driver runs them: a prepare reads the GPU (profiles, placements,
// instances), creates the GPU instance at the placement and its compute
// instance, reads the new MIG device's UUID, then writes the claim's CDI spec
// (fsync'd and renamed); an unprepare destroys both instances and removes the
// spec. The claims cycle over the 7 1g.10gb placements and the 3g.40gb ones
// of one GPU of a100-mig-mixed.json (GPU 2, reset to an empty MIG layout).
// NVML's own time on a real GPU (the driver carving the instance: hundreds
// of ms) is NOT in these figures.
// Usage: dynamic_mig_prepare_bench [iterations] [state-dir]
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "dra/claim_cdi.h"
#include "dra/dynamic_mig.h"
#include "dra/dynamic_mig_cdi.h"
#include "dra/nvml_mig_control.h"

namespace {

using Clock = std::chrono::steady_clock;
namespace dra = danqing::dra;

double Us(Clock::duration d) {
  return std::chrono::duration<double, std::micro>(d).count();
}

void Print(const char* what, std::vector<double> v) {
  std::sort(v.begin(), v.end());
  auto at = [&](double q) {
    return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))];
  };
  std::printf("%-26s n=%zu  p50 %8.0f us  p99 %8.0f us  max %8.0f us\n", what, v.size(), at(0.50),
              at(0.99), v.back());
}

bool Control(const std::string& socket, const std::string& line) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::strncpy(a.sun_path, socket.c_str(), sizeof(a.sun_path) - 1);
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&a), sizeof(a)) != 0) {
    ::close(fd);
    return false;
  }
  const std::string data = line + "\n";
  bool ok = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(data.size());
  std::string reply;
  char c = 0;
  while (ok && ::recv(fd, &c, 1, 0) == 1 && c != '\n') reply.push_back(c);
  ::close(fd);
  return ok && reply.find("\"ok\":true") != std::string::npos;
}

}  // namespace

int main(int argc, char** argv) {
  const int iterations = argc > 1 ? std::atoi(argv[1]) : 2000;
  const std::string base =
      argc > 2 ? std::string(argv[2]) : "/tmp/dqbench-dmig-" + std::to_string(getpid());
  const std::string socket = "/tmp/dqbench-dmig-" + std::to_string(getpid()) + ".sock";
  std::filesystem::remove_all(base);
  ::setenv("FAKE_NVML_PROFILE", DANQING_FAKE_NVML_PROFILE_DIR "/a100-mig-mixed.json", 1);
  ::setenv("FAKE_NVML_CONTROL", socket.c_str(), 1);
  auto opened = dra::NvmlMigControl::Open(DANQING_FAKE_NVML_LIB);
  if (!opened.ok()) {
    std::fprintf(stderr, "%s\n", opened.status().message().c_str());
    return 1;
  }
  std::shared_ptr<dra::NvmlMigControl> control = std::move(*opened);
  if (!Control(socket, R"({"cmd":"mig","gpu":2,"mig":{"mode":1,"devices":[]}})")) {
    std::fprintf(stderr, "fake NVML control failed\n");
    return 1;
  }
  dra::DynamicMigConfig config;
  config.gpus = {"2"};
  dra::DynamicMig mig(control, config);
  dra::ClaimCdiOptions cdi;
  cdi.cdi_root = base + "/cdi";
  cdi.kind = "gpu.danqing.io/claim";
  cdi.dev_root = base + "/dev";
  const auto writer = dra::AtomicFileWriter();

  std::vector<std::string> devices;
  for (int s = 0; s < 7; ++s) devices.push_back("gpu-2-mig-1g10gb-at-" + std::to_string(s));
  devices.push_back("gpu-2-mig-3g40gb-at-0");
  devices.push_back("gpu-2-mig-3g40gb-at-4");

  std::vector<double> prepare;
  std::vector<double> unprepare;
  for (int i = 0; i < iterations; ++i) {
    const std::string uid = "uid-" + std::to_string(i);
    const std::string& device = devices[static_cast<std::size_t>(i) % devices.size()];
    auto t0 = Clock::now();
    auto m = mig.Prepare(uid, device);
    if (!m.ok()) {
      std::fprintf(stderr, "prepare %s: %s\n", device.c_str(), m.status().message().c_str());
      return 1;
    }
    dra::PreparedClaim claim;
    claim.uid = uid;
    dra::PreparedDevice pd;
    pd.pool = "node-mig";
    pd.device = device;
    pd.gpu_uuid = m->gpu_uuid;
    pd.cdi_ids = {dra::CdiId(cdi.kind, uid, device)};
    claim.devices.push_back(pd);
    const dra::NodeDevice node = dra::DynamicMigNodeDevice(*m, 2);
    if (auto s = dra::WriteClaimSpec(cdi, claim, {&node}, writer); !s.ok()) {
      std::fprintf(stderr, "%s\n", s.message().c_str());
      return 1;
    }
    prepare.push_back(Us(Clock::now() - t0));
    t0 = Clock::now();
    if (auto s = mig.Unprepare(uid, device); !s.ok()) {
      std::fprintf(stderr, "unprepare: %s\n", s.message().c_str());
      return 1;
    }
    if (auto s = dra::RemoveClaimSpec(cdi, uid); !s.ok()) return 1;
    unprepare.push_back(Us(Clock::now() - t0));
  }
  Print("prepare (GI+CI+CDI spec)", prepare);
  Print("unprepare (CI+GI+spec)", unprepare);
  control.reset();
  std::filesystem::remove_all(base);
  return 0;
}
