// The driver files of the CDI spec, found in a driver root laid out as real
// drivers install themselves (a Debian-style and a RHEL-style library
// directory, SONAME links, libraries of an older driver left behind).
#include "deviceplugin/cdi_driver.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "deviceplugin/allocate.h"
#include "testing/support/temp_dir.h"
#include "testing/support/unix_socket.h"

namespace danqing::deviceplugin {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::UnorderedElementsAre;

constexpr char kVersion[] = "550.54.15";
constexpr char kLib[] = "/usr/lib/x86_64-linux-gnu";

class DriverRootTest : public ::testing::Test {
 protected:
  void File(const std::string& path, const std::string& text = "ELF") {
    fs::create_directories(fs::path(Root() + path).parent_path());
    std::ofstream(Root() + path) << text;
  }
  void Link(const std::string& path, const std::string& target) {
    fs::create_directories(fs::path(Root() + path).parent_path());
    fs::create_symlink(target, Root() + path);
  }
  void Socket(const std::string& path) {
    fs::create_directories(fs::path(Root() + path).parent_path());
    const int fd = testing::BindUnixSocket(Root() + path);
    ASSERT_GE(fd, 0) << Root() + path;
    ::close(fd);
  }
  // A driver 550.54.15 as the .run installer leaves it on Ubuntu, with an
  // older driver's library still there.
  void InstallDriver() {
    const std::string v = kVersion;
    for (const char* lib : {"libcuda", "libnvidia-ml", "libnvidia-ptxjitcompiler", "libnvidia-cfg"}) {
      File(std::string(kLib) + "/" + lib + ".so." + v);
    }
    Link(std::string(kLib) + "/libcuda.so.1", "libcuda.so." + v);
    Link(std::string(kLib) + "/libnvidia-ml.so.1", "libnvidia-ml.so." + v);
    File(std::string(kLib) + "/libnvidia-ml.so.535.104.05");
    File(std::string(kLib) + "/libz.so.1");
    File("/usr/bin/nvidia-smi");
    File("/usr/bin/nvidia-cuda-mps-control");
    File("/lib/firmware/nvidia/" + v + "/gsp_ga10x.bin");
    File("/lib/firmware/nvidia/" + v + "/gsp_tu10x.bin");
    File("/lib/firmware/nvidia/" + v + "/README");
  }
  std::string Root() const { return dir_.path() + "/root"; }
  // The GPU Operator's layout by default: the hook on the host cannot be
  // seen from here, so it is taken as configured.
  DriverRoot At(std::string host = "/run/nvidia/driver", std::string hook = "/usr/bin/nvidia-ctk") const {
    return {.local = Root(), .host = std::move(host), .version = kVersion, .hook_path = std::move(hook)};
  }
  static nlohmann::json Edits(const DriverFiles& f) {
    nlohmann::json edits = {{"deviceNodes", nlohmann::json::array()}};
    AddDriverEdits(f, edits);
    return edits;
  }

  static std::vector<std::string> ContainerPaths(const DriverFiles& f) {
    std::vector<std::string> out;
    for (const auto& m : f.mounts) out.push_back(m.container_path);
    return out;
  }
  static const DriverFiles::Mount* Find(const DriverFiles& f, const std::string& container_path) {
    for (const auto& m : f.mounts) {
      if (m.container_path == container_path) return &m;
    }
    return nullptr;
  }

  testing::TempDir dir_;
};

TEST_F(DriverRootTest, TheRunningDriversFilesAreMountedFromTheHostDriverRoot) {
  InstallDriver();
  const DriverFiles f = FindDriverFiles(At());
  EXPECT_THAT(f.warnings, IsEmpty());
  EXPECT_EQ(f.library_dir, kLib);
  const std::string lib = kLib;
  EXPECT_THAT(ContainerPaths(f),
              UnorderedElementsAre(lib + "/libcuda.so.550.54.15", lib + "/libnvidia-cfg.so.550.54.15",
                                   lib + "/libnvidia-ml.so.550.54.15", lib + "/libnvidia-ptxjitcompiler.so.550.54.15",
                                   "/usr/bin/nvidia-smi", "/usr/bin/nvidia-cuda-mps-control",
                                   "/lib/firmware/nvidia/550.54.15/gsp_ga10x.bin",
                                   "/lib/firmware/nvidia/550.54.15/gsp_tu10x.bin"));
  const auto* cuda = Find(f, lib + "/libcuda.so.550.54.15");
  ASSERT_NE(cuda, nullptr);
  EXPECT_EQ(cuda->host_path, "/run/nvidia/driver" + lib + "/libcuda.so.550.54.15");
  EXPECT_FALSE(cuda->socket);

  // A driver on the host itself: host paths are the container paths.
  const DriverFiles on_host = FindDriverFiles(At("/"));
  const auto* smi = Find(on_host, "/usr/bin/nvidia-smi");
  ASSERT_NE(smi, nullptr);
  EXPECT_EQ(smi->host_path, "/usr/bin/nvidia-smi");
}

TEST_F(DriverRootTest, SymlinksAreFollowedInsideTheRootOnly) {
  InstallDriver();
  // RHEL-style packaging: the versioned name is a link into a subdirectory;
  // an absolute target is relative to the driver root, not to this process.
  File(std::string(kLib) + "/nvidia/libnvidia-nvvm.so.550.54.15");
  Link(std::string(kLib) + "/libnvidia-nvvm.so.550.54.15", std::string(kLib) + "/nvidia/libnvidia-nvvm.so.550.54.15");
  // A link that climbs out of the root ends at the root's /etc/passwd,
  // which is not there: skipped, never the host file.
  Link(std::string(kLib) + "/libnvidia-escape.so.550.54.15", "../../../../../../../../../../etc/passwd");
  Link(std::string(kLib) + "/libnvidia-loop.so.550.54.15", "libnvidia-loop.so.550.54.15");

  const DriverFiles f = FindDriverFiles(At());
  const auto* nvvm = Find(f, std::string(kLib) + "/libnvidia-nvvm.so.550.54.15");
  ASSERT_NE(nvvm, nullptr);
  EXPECT_EQ(nvvm->host_path, "/run/nvidia/driver" + std::string(kLib) + "/nvidia/libnvidia-nvvm.so.550.54.15");
  EXPECT_EQ(Find(f, std::string(kLib) + "/libnvidia-escape.so.550.54.15"), nullptr);
  EXPECT_EQ(Find(f, std::string(kLib) + "/libnvidia-loop.so.550.54.15"), nullptr);
}

// As the kernel: "file/" and "file/." name nothing (ENOTDIR), also as a
// link's target; a host root written "//x/" is /x.
TEST_F(DriverRootTest, ATrailingSlashNamesADirectoryOnlyAndTheHostRootIsNormalised) {
  InstallDriver();
  Link(std::string(kLib) + "/libnvidia-slash.so.550.54.15", "libnvidia-ml.so.550.54.15/");
  Link(std::string(kLib) + "/libnvidia-dot.so.550.54.15", "libnvidia-ml.so.550.54.15/.");
  const DriverFiles f = FindDriverFiles(At("//run/nvidia/driver/"));
  EXPECT_EQ(Find(f, std::string(kLib) + "/libnvidia-slash.so.550.54.15"), nullptr);
  EXPECT_EQ(Find(f, std::string(kLib) + "/libnvidia-dot.so.550.54.15"), nullptr);
  const auto* ml = Find(f, std::string(kLib) + "/libnvidia-ml.so.550.54.15");
  ASSERT_NE(ml, nullptr);
  EXPECT_EQ(ml->host_path, "/run/nvidia/driver" + std::string(kLib) + "/libnvidia-ml.so.550.54.15");
  EXPECT_TRUE(IsHostRoot("//"));
  EXPECT_TRUE(IsHostRoot(""));
  EXPECT_FALSE(IsHostRoot("/run/nvidia/driver"));
}

// Directories on the way are links too (merged /usr, /var/run -> /run,
// vendor trees): each is followed inside the root, never in this process's
// own file system, and the host path names where the file really is.
TEST_F(DriverRootTest, DirectoryLinksAreFollowedInsideTheRootToo) {
  // Outside the root, at the absolute path a link names: must never be used.
  const std::string outside = dir_.path() + "/outside";
  fs::create_directories(outside);
  std::ofstream(outside + "/libcuda.so.550.54.15") << "ELF";
  std::ofstream(outside + "/libnvidia-ml.so.550.54.15") << "ELF";
  Link("/usr/lib64", outside);  // absolute: re-rooted, not there
  EXPECT_TRUE(FindDriverFiles(At()).library_dir.empty()) << "followed a directory link out of the root";
  fs::remove(Root() + "/usr/lib64");
  Link("/usr/lib64", "../../../../../../../../../../../.." + outside);  // relative, climbing: clamped at the root
  EXPECT_TRUE(FindDriverFiles(At()).library_dir.empty()) << "climbed out of the root";
  fs::remove(Root() + "/usr/lib64");

  // A vendor tree behind an absolute link, inside the root.
  File("/opt/nvidia/lib/libcuda.so.550.54.15");
  File("/opt/nvidia/lib/libnvidia-ml.so.550.54.15");
  Link("/usr/lib64", "/opt/nvidia/lib");
  // /var/run -> /run (absolute on Debian), the socket only in the root's /run.
  Socket("/run/nvidia-fabricmanager/socket");
  Link("/var/run", "/run");
  // Merged /usr: /bin -> usr/bin; the tool only there.
  File("/usr/bin/nvidia-debugdump");
  Link("/bin", "usr/bin");

  const DriverFiles f = FindDriverFiles(At());
  EXPECT_EQ(f.library_dir, "/usr/lib64");
  const auto* cuda = Find(f, "/usr/lib64/libcuda.so.550.54.15");
  ASSERT_NE(cuda, nullptr);
  EXPECT_EQ(cuda->host_path, "/run/nvidia/driver/opt/nvidia/lib/libcuda.so.550.54.15");
  const auto* fm = Find(f, "/run/nvidia-fabricmanager/socket");
  ASSERT_NE(fm, nullptr);
  EXPECT_EQ(fm->host_path, "/run/nvidia/driver/run/nvidia-fabricmanager/socket");
  const auto* dump = Find(f, "/usr/bin/nvidia-debugdump");
  ASSERT_NE(dump, nullptr) << "the first of usr/bin, usr/sbin, bin, sbin";
  EXPECT_EQ(dump->host_path, "/run/nvidia/driver/usr/bin/nvidia-debugdump");
  for (const auto& m : f.mounts) EXPECT_EQ(m.host_path.find(outside), std::string::npos) << m.host_path;
}

TEST_F(DriverRootTest, TheFirstLibraryDirectoryWithLibcudaIsTheDriversAndSocketsAreNoexec) {
  InstallDriver();
  File("/usr/lib64/libcuda.so.550.54.15");
  File("/usr/lib64/libnvidia-ml.so.550.54.15");
  Socket("/run/nvidia-persistenced/socket");
  Socket("/var/run/nvidia-fabricmanager/socket");
  const DriverFiles f = FindDriverFiles(At());
  EXPECT_EQ(f.library_dir, "/usr/lib64");
  EXPECT_EQ(Find(f, std::string(kLib) + "/libnvidia-cfg.so.550.54.15"), nullptr);
  ASSERT_NE(Find(f, "/usr/lib64/libnvidia-ml.so.550.54.15"), nullptr);
  const auto* persistenced = Find(f, "/run/nvidia-persistenced/socket");
  ASSERT_NE(persistenced, nullptr);
  EXPECT_TRUE(persistenced->socket);
  ASSERT_NE(Find(f, "/var/run/nvidia-fabricmanager/socket"), nullptr);

  const nlohmann::json edits = Edits(f);
  bool saw_socket = false;
  for (const auto& m : edits["mounts"]) {
    const bool is_socket = m["containerPath"].get<std::string>().ends_with("/socket");
    saw_socket |= is_socket;
    EXPECT_EQ(m["options"], is_socket ? nlohmann::json({"ro", "nosuid", "nodev", "bind", "noexec"})
                                      : nlohmann::json({"ro", "nosuid", "nodev", "bind"}));
  }
  EXPECT_TRUE(saw_socket);
}

TEST_F(DriverRootTest, HooksFollowTheHookBinarysConvention) {
  InstallDriver();
  const nlohmann::json ctk = Edits(FindDriverFiles(At()));
  ASSERT_EQ(ctk["hooks"].size(), 2u);
  EXPECT_EQ(ctk["hooks"][0]["hookName"], "createContainer");
  EXPECT_EQ(ctk["hooks"][0]["path"], "/usr/bin/nvidia-ctk");
  EXPECT_EQ(ctk["hooks"][0]["args"], nlohmann::json({"nvidia-ctk", "hook", "create-symlinks", "--link",
                                                     "libcuda.so.1::/usr/lib/x86_64-linux-gnu/libcuda.so"}));
  EXPECT_EQ(ctk["hooks"][1]["args"],
            nlohmann::json({"nvidia-ctk", "hook", "update-ldcache", "--folder", "/usr/lib/x86_64-linux-gnu"}));
  EXPECT_EQ(ctk["env"], nlohmann::json({"NVIDIA_VISIBLE_DEVICES=void"}));
  // With the hook, its ldconfig makes the SONAME links: none is mounted
  // (a file where ldconfig puts a link would make the hook fail).
  for (const auto& m : ctk["mounts"]) {
    EXPECT_FALSE(m["containerPath"].get<std::string>().ends_with(".so.1")) << m.dump();
  }

  const nlohmann::json hook = Edits(FindDriverFiles(At("/run/nvidia/driver", "/usr/local/nvidia/toolkit/nvidia-cdi-hook")));
  EXPECT_EQ(hook["hooks"][1]["path"], "/usr/local/nvidia/toolkit/nvidia-cdi-hook");
  EXPECT_EQ(hook["hooks"][1]["args"],
            nlohmann::json({"nvidia-cdi-hook", "update-ldcache", "--folder", "/usr/lib/x86_64-linux-gnu"}));
}

// Without a hook nobody runs ldconfig in the container: libcuda.so.1 (what
// CUDA's runtime dlopens) must then be there as a file of its own.
TEST_F(DriverRootTest, WithoutAHookTheSonameLinksAreMounted) {
  InstallDriver();
  const std::string lib = kLib;
  for (const DriverRoot& root : {At("/run/nvidia/driver", ""), At("/", "/usr/bin/nvidia-ctk")}) {
    SCOPED_TRACE(root.host + " " + root.hook_path);
    const DriverFiles f = FindDriverFiles(root);
    EXPECT_TRUE(f.hook.empty());
    const nlohmann::json edits = Edits(f);
    EXPECT_FALSE(edits.contains("hooks"));
    EXPECT_EQ(edits["env"], nlohmann::json({"NVIDIA_VISIBLE_DEVICES=void"}));
    std::map<std::string, std::string> mounts;
    for (const auto& m : edits["mounts"]) mounts[m["containerPath"]] = m["hostPath"];
    const std::string host = root.host == "/" ? "" : root.host;
    EXPECT_EQ(mounts[lib + "/libcuda.so.1"], host + lib + "/libcuda.so.550.54.15");
    EXPECT_EQ(mounts[lib + "/libnvidia-ml.so.1"], host + lib + "/libnvidia-ml.so.550.54.15");
    EXPECT_EQ(mounts.count(lib + "/libz.so.1"), 0u) << "not a link to the driver";
    // No ld.so.cache entry is made: also where CUDA's images point LD_LIBRARY_PATH.
    EXPECT_EQ(mounts["/usr/local/nvidia/lib64/libcuda.so.1"], host + lib + "/libcuda.so.550.54.15");
    EXPECT_EQ(mounts.count("/usr/local/nvidia/lib64/libcuda.so.550.54.15"), 0u);
  }
  // The host's / mounted here: a hook that is not on it is seen missing and
  // dropped, with a warning (a runtime would refuse every container naming it).
  const DriverFiles missing = FindDriverFiles(At("/", "/usr/bin/nvidia-ctk"));
  EXPECT_THAT(missing.warnings, ElementsAre(HasSubstr("the CDI hook /usr/bin/nvidia-ctk (nvidiaCTKPath) is not on this node")));
  File("/usr/bin/nvidia-ctk");
  const DriverFiles present = FindDriverFiles(At("/", "/usr/bin/nvidia-ctk"));
  EXPECT_EQ(present.hook, "/usr/bin/nvidia-ctk");
  EXPECT_THAT(present.warnings, IsEmpty());
}

TEST_F(DriverRootTest, WhatIsMissingIsSaidAndNothingIsMounted) {
  // No root at all (the DaemonSet does not mount one).
  DriverFiles f = FindDriverFiles(At());
  EXPECT_THAT(f.mounts, IsEmpty());
  ASSERT_EQ(f.warnings.size(), 1u);
  EXPECT_THAT(f.warnings[0], HasSubstr("is not a directory"));

  // A root with another driver version only.
  File(std::string(kLib) + "/libcuda.so.535.104.05");
  f = FindDriverFiles(At());
  EXPECT_TRUE(f.library_dir.empty());
  ASSERT_EQ(f.warnings.size(), 1u);
  EXPECT_THAT(f.warnings[0], HasSubstr("no libcuda.so.550.54.15"));

  // NVML gave no version.
  InstallDriver();
  f = FindDriverFiles({.local = Root(), .host = "/", .version = "", .hook_path = "/usr/bin/nvidia-ctk"});
  EXPECT_THAT(f.mounts, IsEmpty());
  EXPECT_THAT(f.warnings, ElementsAre(HasSubstr("version is unknown")));

  const nlohmann::json edits = Edits(f);
  EXPECT_FALSE(edits.contains("mounts"));
  EXPECT_FALSE(edits.contains("hooks"));
  EXPECT_FALSE(edits.contains("env")) << "without the libraries the NVIDIA runtime must still complete the container";

  // Tools there but no libcuda: nothing at all is mounted (a half driver
  // would only hide the NVIDIA runtime's whole one).
  std::filesystem::remove(Root() + std::string(kLib) + "/libcuda.so.550.54.15");
  f = FindDriverFiles(At());
  EXPECT_TRUE(f.library_dir.empty());
  EXPECT_THAT(f.mounts, IsEmpty());
  EXPECT_THAT(f.warnings, ElementsAre(HasSubstr("no libcuda.so.550.54.15")));
}

gpu::Gpu OneGpu() {
  gpu::Gpu g;
  g.index = 0;
  g.minor_number = 0;
  g.uuid = "GPU-00000000-0000-0000-0000-000000000000";
  g.name = "NVIDIA H100 80GB HBM3";
  return g;
}

TEST_F(DriverRootTest, TheSpecCarriesTheDriverInItsCommonEdits) {
  InstallDriver();
  gpu::NodeInventory inv;
  inv.driver_version = kVersion;
  inv.gpus = {OneGpu()};
  inv.topology = gpu::Topology(inv.gpus.size());
  auto set = BuildResources(inv, {});
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  AllocateOptions o;
  o.device_list_strategies = {DeviceListStrategy::kCdiCri};
  o.driver_root_local = Root();
  o.driver_root_host = "/run/nvidia/driver";
  std::vector<std::string> warnings;
  const std::string cdi = dir_.path() + "/cdi";
  ASSERT_TRUE(WriteCdiSpec(**set, cdi, o, &warnings).ok());
  EXPECT_THAT(warnings, IsEmpty());
  std::ifstream in(cdi + "/k8s.device-plugin.danqing.io-gpu.json");
  const auto spec = nlohmann::json::parse(in);
  ASSERT_TRUE(spec["containerEdits"].contains("mounts"));
  EXPECT_EQ(spec["containerEdits"]["mounts"].size(), 8u);
  EXPECT_EQ(spec["containerEdits"]["hooks"].size(), 2u);
  EXPECT_EQ(spec["containerEdits"]["env"], nlohmann::json({"NVIDIA_VISIBLE_DEVICES=void"}));
  ASSERT_EQ(spec["devices"].size(), 1u);
  EXPECT_FALSE(spec["devices"][0]["containerEdits"].contains("mounts")) << "driver files belong to every device";

  // Without a driver root the spec is still written, device nodes only, and
  // the caller hears why.
  o.driver_root_local = dir_.path() + "/absent";
  warnings.clear();
  ASSERT_TRUE(WriteCdiSpec(**set, cdi, o, &warnings).ok());
  EXPECT_THAT(warnings, ElementsAre(HasSubstr("absent")));
  std::ifstream again(cdi + "/k8s.device-plugin.danqing.io-gpu.json");
  const auto bare = nlohmann::json::parse(again);
  EXPECT_FALSE(bare["containerEdits"].contains("mounts"));
  EXPECT_FALSE(bare["containerEdits"].contains("env"));
  EXPECT_EQ(bare["devices"].size(), 1u);
}

}  // namespace
}  // namespace danqing::deviceplugin
