// Smoke test for the fake NVML library. It dlopen()s the built
// libnvidia-ml.so.1 by absolute path - exactly as the project's loader opens
// the real one - loads every shipped profile, and drives the control socket.
//
// Thread-safety: tests run one at a time (gtest), but the library is shared
// by every test in the process, so each test shuts NVML down before it ends
// (Session does). Some tests start a waiter thread of their own.
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "gpu/nvml_abi.h"

namespace {

using json = nlohmann::json;
using std::chrono::milliseconds;
using std::chrono::steady_clock;

// nvml_abi.h builds the version tags with C-style casts.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wold-style-cast"
constexpr unsigned kMemoryV2 = nvmlMemory_v2;
constexpr unsigned kGpuInstanceProfileInfoV2 = nvmlGpuInstanceProfileInfo_v2;
#pragma GCC diagnostic pop

// ---------------------------------------------------------------------------
// The library under test, resolved with dlsym().

#define FAKE_NVML_TEST_FUNCTIONS(X)                                                                         \
  X(nvmlInit) X(nvmlInit_v2) X(nvmlInitWithFlags) X(nvmlShutdown) X(nvmlErrorString)                        \
  X(nvmlSystemGetDriverVersion) X(nvmlSystemGetNVMLVersion) X(nvmlSystemGetCudaDriverVersion)              \
  X(nvmlSystemGetCudaDriverVersion_v2) X(nvmlDeviceGetCount) X(nvmlDeviceGetCount_v2)                      \
  X(nvmlDeviceGetHandleByIndex) X(nvmlDeviceGetHandleByIndex_v2) X(nvmlDeviceGetHandleByUUID)               \
  X(nvmlDeviceGetHandleByPciBusId) X(nvmlDeviceGetHandleByPciBusId_v2) X(nvmlDeviceGetName)                 \
  X(nvmlDeviceGetUUID) X(nvmlDeviceGetIndex) X(nvmlDeviceGetMinorNumber) X(nvmlDeviceGetPciInfo)            \
  X(nvmlDeviceGetPciInfo_v2) X(nvmlDeviceGetPciInfo_v3) X(nvmlDeviceGetMemoryInfo)                          \
  X(nvmlDeviceGetMemoryInfo_v2) X(nvmlDeviceGetCudaComputeCapability) X(nvmlDeviceGetBrand)                 \
  X(nvmlDeviceGetArchitecture) X(nvmlDeviceGetAttributes) X(nvmlDeviceGetAttributes_v2)                     \
  X(nvmlDeviceGetNumaNodeId) X(nvmlDeviceGetMigMode) X(nvmlDeviceGetMaxMigDeviceCount)                      \
  X(nvmlDeviceGetMigDeviceHandleByIndex) X(nvmlDeviceIsMigDeviceHandle)                                     \
  X(nvmlDeviceGetDeviceHandleFromMigDeviceHandle) X(nvmlDeviceGetGpuInstanceId)                             \
  X(nvmlDeviceGetComputeInstanceId) X(nvmlDeviceGetGpuInstanceById) X(nvmlGpuInstanceGetInfo)               \
  X(nvmlGpuInstanceGetComputeInstanceById) X(nvmlComputeInstanceGetInfo) X(nvmlComputeInstanceGetInfo_v2)   \
  X(nvmlDeviceGetGpuInstanceProfileInfo) X(nvmlDeviceGetGpuInstanceProfileInfoV)                            \
  X(nvmlDeviceGetTopologyCommonAncestor) X(nvmlDeviceGetNvLinkState) X(nvmlDeviceGetNvLinkRemotePciInfo)    \
  X(nvmlDeviceGetNvLinkRemotePciInfo_v2) X(nvmlDeviceGetUtilizationRates) X(nvmlDeviceGetTemperature)       \
  X(nvmlDeviceGetPowerUsage) X(nvmlDeviceGetClockInfo) X(nvmlDeviceGetCurrentClocksThrottleReasons)         \
  X(nvmlDeviceGetCurrentClocksEventReasons) X(nvmlDeviceGetTotalEccErrors)                                  \
  X(nvmlDeviceGetRetiredPagesPendingStatus) X(nvmlDeviceGetRemappedRows)                                    \
  X(nvmlDeviceGetComputeRunningProcesses) X(nvmlDeviceGetComputeRunningProcesses_v3)                        \
  X(nvmlDeviceGetProcessUtilization) X(nvmlEventSetCreate) X(nvmlDeviceGetSupportedEventTypes)              \
  X(nvmlDeviceRegisterEvents) X(nvmlEventSetWait) X(nvmlEventSetWait_v2) X(nvmlEventSetFree)               \
  X(nvmlDeviceGetGpuInstancePossiblePlacements_v2) X(nvmlDeviceCreateGpuInstanceWithPlacement)             \
  X(nvmlDeviceGetGpuInstances) X(nvmlGpuInstanceDestroy) X(nvmlGpuInstanceGetComputeInstanceProfileInfo)   \
  X(nvmlGpuInstanceGetComputeInstanceProfileInfoV) X(nvmlGpuInstanceCreateComputeInstance)                 \
  X(nvmlComputeInstanceDestroy)

struct Library {
  void* handle = nullptr;
#define FAKE_NVML_DECLARE(name) decltype(&::name) name = nullptr;
  FAKE_NVML_TEST_FUNCTIONS(FAKE_NVML_DECLARE)
#undef FAKE_NVML_DECLARE

  // Opens `path` (never closed: the library's state lives for the process).
  // Missing symbols stay null; tests that need them check.
  explicit Library(const char* path) {
    handle = ::dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      ADD_FAILURE() << "dlopen(" << path << "): " << ::dlerror();
      return;
    }
#define FAKE_NVML_RESOLVE(name) name = reinterpret_cast<decltype(name)>(::dlsym(handle, #name));
    FAKE_NVML_TEST_FUNCTIONS(FAKE_NVML_RESOLVE)
#undef FAKE_NVML_RESOLVE
  }
};

Library& lib() {
  static Library library(FAKE_NVML_LIB_PATH);
  return library;
}

Library& legacy_lib() {
  static Library library(FAKE_NVML_LEGACY_LIB_PATH);
  return library;
}

std::string profile(const std::string& name) { return std::string(FAKE_NVML_PROFILE_DIR) + "/" + name; }

std::vector<std::string> all_profiles() {
  std::vector<std::string> paths;
  for (const auto& entry : std::filesystem::directory_iterator(FAKE_NVML_PROFILE_DIR)) {
    if (entry.path().extension() == ".json") paths.push_back(entry.path().string());
  }
  std::sort(paths.begin(), paths.end());
  return paths;
}

// A unique, short path under /tmp (unix socket paths are limited to 108 bytes).
std::string temp_path(const char* suffix) {
  static std::atomic<int> counter{0};
  return "/tmp/fnv-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) + suffix;
}

// Writes `doc` to a temporary profile file, removed on destruction.
class TempProfile {
 public:
  explicit TempProfile(const std::string& text) : path_(temp_path(".json")) { std::ofstream(path_) << text; }
  explicit TempProfile(const json& doc) : TempProfile(doc.dump(2)) {}
  ~TempProfile() { std::remove(path_.c_str()); }
  TempProfile(const TempProfile&) = delete;
  TempProfile& operator=(const TempProfile&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string read_text(const std::string& path) {
  std::string text;
  if (FILE* file = std::fopen(path.c_str(), "rb")) {
    char chunk[4096];
    std::size_t n = 0;
    while ((n = std::fread(chunk, 1, sizeof(chunk), file)) > 0) text.append(chunk, n);
    std::fclose(file);
  }
  return text;
}

json read_json(const std::string& path) {
  std::ifstream in(path);
  return json::parse(in);
}

// Redirects file descriptor 2 into a temporary file for its lifetime.
class StderrCapture {
 public:
  StderrCapture() : path_(temp_path(".err")) {
    std::fflush(stderr);
    saved_ = ::dup(2);
    const int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ::dup2(fd, 2);
    ::close(fd);
  }
  ~StderrCapture() {
    restore();
    std::remove(path_.c_str());
  }
  StderrCapture(const StderrCapture&) = delete;
  StderrCapture& operator=(const StderrCapture&) = delete;

  std::string text() {
    restore();
    return read_text(path_);
  }

 private:
  void restore() {
    if (saved_ < 0) return;
    std::fflush(stderr);
    ::dup2(saved_, 2);
    ::close(saved_);
    saved_ = -1;
  }
  std::string path_;
  int saved_ = -1;
};

// nvmlInit with a profile (and optionally a control socket); nvmlShutdown at
// scope exit. The environment is restored right after init, which is the
// only time the library reads it.
class Session {
 public:
  explicit Session(const std::string& profile_path, const std::string& control = "", Library& l = lib())
      : lib_(l) {
    ::setenv("FAKE_NVML_PROFILE", profile_path.c_str(), 1);
    if (control.empty()) {
      ::unsetenv("FAKE_NVML_CONTROL");
    } else {
      ::setenv("FAKE_NVML_CONTROL", control.c_str(), 1);
    }
    rc_ = lib_.nvmlInit_v2();
    ::unsetenv("FAKE_NVML_PROFILE");
    ::unsetenv("FAKE_NVML_CONTROL");
  }
  ~Session() {
    if (rc_ == NVML_SUCCESS) {
      EXPECT_EQ(lib_.nvmlShutdown(), NVML_SUCCESS);
    }
  }
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  nvmlReturn_t rc() const { return rc_; }

 private:
  Library& lib_;
  nvmlReturn_t rc_ = NVML_ERROR_UNKNOWN;
};

// Initialises NVML with `profile_path` and expects a failure; returns the
// return code and what the library printed.
std::pair<nvmlReturn_t, std::string> init_expecting_failure(const std::string& profile_path) {
  StderrCapture capture;
  Session session(profile_path);
  return {session.rc(), capture.text()};
}

nvmlDevice_t device(unsigned index) {
  nvmlDevice_t handle = nullptr;
  EXPECT_EQ(lib().nvmlDeviceGetHandleByIndex_v2(index, &handle), NVML_SUCCESS) << "GPU " << index;
  return handle;
}

std::string name_of(nvmlDevice_t handle) {
  char buffer[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = {};
  EXPECT_EQ(lib().nvmlDeviceGetName(handle, buffer, sizeof(buffer)), NVML_SUCCESS);
  return buffer;
}

std::string uuid_of(nvmlDevice_t handle) {
  char buffer[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {};
  EXPECT_EQ(lib().nvmlDeviceGetUUID(handle, buffer, sizeof(buffer)), NVML_SUCCESS);
  return buffer;
}

nvmlGpuTopologyLevel_t topology(nvmlDevice_t a, nvmlDevice_t b) {
  nvmlGpuTopologyLevel_t level{};
  EXPECT_EQ(lib().nvmlDeviceGetTopologyCommonAncestor(a, b, &level), NVML_SUCCESS);
  return level;
}

// ---------------------------------------------------------------------------
// A client for the control socket: one connection, one reply line per command.

class ControlClient {
 public:
  explicit ControlClient(const std::string& path) {
    fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::strncpy(address.sun_path, path.c_str(), sizeof(address.sun_path) - 1);
    const timeval timeout{10, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
    EXPECT_EQ(::connect(fd_, reinterpret_cast<const sockaddr*>(&address), sizeof(address)), 0)
        << path << ": " << std::strerror(errno);
  }
  ~ControlClient() { ::close(fd_); }
  ControlClient(const ControlClient&) = delete;
  ControlClient& operator=(const ControlClient&) = delete;

  std::string send_raw(const std::string& line) {
    const std::string data = line + "\n";
    EXPECT_EQ(::send(fd_, data.data(), data.size(), MSG_NOSIGNAL), static_cast<ssize_t>(data.size()));
    for (;;) {
      if (const auto newline = buffer_.find('\n'); newline != std::string::npos) {
        std::string reply = buffer_.substr(0, newline);
        buffer_.erase(0, newline + 1);
        return reply;
      }
      char chunk[4096];
      const ssize_t n = ::recv(fd_, chunk, sizeof(chunk), 0);
      if (n <= 0) {
        ADD_FAILURE() << "no reply to " << line;
        return "";
      }
      buffer_.append(chunk, static_cast<std::size_t>(n));
    }
  }

  json send(const json& command) { return json::parse(send_raw(command.dump())); }

  // Sends a command that must succeed.
  json ok(const json& command) {
    json reply = send(command);
    EXPECT_EQ(reply.value("ok", false), true) << command.dump() << " -> " << reply.dump();
    return reply;
  }

 private:
  int fd_ = -1;
  std::string buffer_;
};

// ===========================================================================
// Lifecycle.

TEST(FakeNvmlLifecycle, ErrorStringWorksWithoutInit) {
  EXPECT_STREQ(lib().nvmlErrorString(NVML_SUCCESS), "Success");
  EXPECT_STREQ(lib().nvmlErrorString(NVML_ERROR_UNINITIALIZED), "Uninitialized");
  EXPECT_STREQ(lib().nvmlErrorString(NVML_ERROR_INVALID_ARGUMENT), "Invalid Argument");
  EXPECT_STREQ(lib().nvmlErrorString(NVML_ERROR_NOT_SUPPORTED), "Not Supported");
  EXPECT_STREQ(lib().nvmlErrorString(NVML_ERROR_NO_PERMISSION), "Insufficient Permissions");
  EXPECT_STREQ(lib().nvmlErrorString(NVML_ERROR_ALREADY_INITIALIZED), "Already Initialized");
  EXPECT_STREQ(lib().nvmlErrorString(NVML_ERROR_NOT_FOUND), "Not Found");
  EXPECT_STREQ(lib().nvmlErrorString(NVML_ERROR_INSUFFICIENT_SIZE), "Insufficient Size");
  EXPECT_STREQ(lib().nvmlErrorString(NVML_ERROR_DRIVER_NOT_LOADED), "Driver Not Loaded");
  EXPECT_STREQ(lib().nvmlErrorString(NVML_ERROR_TIMEOUT), "Timeout");
  EXPECT_STREQ(lib().nvmlErrorString(NVML_ERROR_GPU_IS_LOST), "GPU is lost");
  EXPECT_STREQ(lib().nvmlErrorString(NVML_ERROR_UNKNOWN), "Unknown Error");
  EXPECT_STREQ(lib().nvmlErrorString(static_cast<nvmlReturn_t>(555)), "Unknown Error");
}

TEST(FakeNvmlLifecycle, CallsBeforeInitAreUninitialized) {
  unsigned count = 0;
  nvmlDevice_t handle = nullptr;
  char buffer[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE];
  nvmlEventSet_t set = nullptr;
  EXPECT_EQ(lib().nvmlShutdown(), NVML_ERROR_UNINITIALIZED);
  EXPECT_EQ(lib().nvmlDeviceGetCount_v2(&count), NVML_ERROR_UNINITIALIZED);
  EXPECT_EQ(lib().nvmlDeviceGetHandleByIndex_v2(0, &handle), NVML_ERROR_UNINITIALIZED);
  EXPECT_EQ(lib().nvmlSystemGetDriverVersion(buffer, sizeof(buffer)), NVML_ERROR_UNINITIALIZED);
  EXPECT_EQ(lib().nvmlEventSetCreate(&set), NVML_ERROR_UNINITIALIZED);
  // Even a garbage handle: the init check comes first and nothing is read.
  int not_a_device = 0;
  EXPECT_EQ(lib().nvmlDeviceGetName(reinterpret_cast<nvmlDevice_t>(&not_a_device), buffer, sizeof(buffer)),
            NVML_ERROR_UNINITIALIZED);
}

TEST(FakeNvmlLifecycle, InitIsReferenceCounted) {
  ::setenv("FAKE_NVML_PROFILE", profile("t4-1x.json").c_str(), 1);
  ::unsetenv("FAKE_NVML_CONTROL");
  ASSERT_EQ(lib().nvmlInit(), NVML_SUCCESS);
  ASSERT_EQ(lib().nvmlInit_v2(), NVML_SUCCESS);
  ASSERT_EQ(lib().nvmlInitWithFlags(0), NVML_SUCCESS);
  ::unsetenv("FAKE_NVML_PROFILE");
  unsigned count = 0;
  EXPECT_EQ(lib().nvmlShutdown(), NVML_SUCCESS);
  EXPECT_EQ(lib().nvmlShutdown(), NVML_SUCCESS);
  EXPECT_EQ(lib().nvmlDeviceGetCount_v2(&count), NVML_SUCCESS);
  EXPECT_EQ(count, 1U);
  EXPECT_EQ(lib().nvmlShutdown(), NVML_SUCCESS);
  EXPECT_EQ(lib().nvmlDeviceGetCount_v2(&count), NVML_ERROR_UNINITIALIZED);
  EXPECT_EQ(lib().nvmlShutdown(), NVML_ERROR_UNINITIALIZED);
}

TEST(FakeNvmlLifecycle, DefaultProfileIsDgxA100) {
  ::unsetenv("FAKE_NVML_PROFILE");
  ::unsetenv("FAKE_NVML_CONTROL");
  ASSERT_EQ(lib().nvmlInit_v2(), NVML_SUCCESS);
  unsigned count = 0;
  EXPECT_EQ(lib().nvmlDeviceGetCount_v2(&count), NVML_SUCCESS);
  EXPECT_EQ(count, 8U);
  EXPECT_EQ(name_of(device(0)), "NVIDIA A100-SXM4-80GB");
  char version[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE];
  EXPECT_EQ(lib().nvmlSystemGetDriverVersion(version, sizeof(version)), NVML_SUCCESS);
  EXPECT_STREQ(version, "550.54.15");
  EXPECT_EQ(lib().nvmlShutdown(), NVML_SUCCESS);
}

TEST(FakeNvmlLifecycle, MissingProfileFailsInitWithAMessage) {
  const std::string path = temp_path("-missing.json");
  const auto [rc, message] = init_expecting_failure(path);
  EXPECT_EQ(rc, NVML_ERROR_UNKNOWN);
  EXPECT_NE(message.find(path), std::string::npos) << message;
  unsigned count = 0;
  EXPECT_EQ(lib().nvmlDeviceGetCount_v2(&count), NVML_ERROR_UNINITIALIZED);
}

TEST(FakeNvmlLifecycle, MalformedProfileReportsWhere) {
  TempProfile bad(std::string("{\n  \"driver_version\": \"550.54.15\",,\n}\n"));
  const auto [rc, message] = init_expecting_failure(bad.path());
  EXPECT_EQ(rc, NVML_ERROR_UNKNOWN);
  EXPECT_NE(message.find(bad.path()), std::string::npos) << message;
  EXPECT_NE(message.find("byte 35"), std::string::npos) << message;
  EXPECT_NE(message.find("line 2"), std::string::npos) << message;
  EXPECT_EQ(std::count(message.begin(), message.end(), '\n'), 1) << "one line: " << message;
}

TEST(FakeNvmlLifecycle, InitErrorFromProfile) {
  json doc = read_json(profile("t4-1x.json"));
  doc["init_error"] = "DRIVER_NOT_LOADED";
  TempProfile failing(doc);
  Session session(failing.path());
  EXPECT_EQ(session.rc(), NVML_ERROR_DRIVER_NOT_LOADED);
  unsigned count = 0;
  EXPECT_EQ(lib().nvmlDeviceGetCount_v2(&count), NVML_ERROR_UNINITIALIZED);
}

// Each case breaks one rule of the schema; init must fail and say why.
TEST(FakeNvmlLifecycle, InvalidProfilesAreRejected) {
  struct Case {
    const char* what;
    std::function<void(json&)> mutate;
    const char* message;
  };
  const json base = read_json(profile("a100-mig-mixed.json"));
  const std::vector<Case> cases = {
      {"duplicate GPU UUID", [](json& d) { d["gpus"][1]["uuid"] = d["gpus"][0]["uuid"]; }, "duplicate UUID"},
      {"duplicate bus id", [](json& d) { d["gpus"][1]["pci"]["bus_id"] = "0000:07:00.0"; }, "duplicate PCI bus id"},
      {"too many compute slices",
       [](json& d) {
         d["gpus"][3]["mig"] = {{"mode", 1},
                                {"devices",
                                 {{{"profile", "4g.40gb"}, {"gpu_instance_id", 5}, {"uuid", "MIG-00000000-0000-0000-0000-000000000001"}},
                                  {{"profile", "3g.40gb"}, {"gpu_instance_id", 1}, {"uuid", "MIG-00000000-0000-0000-0000-000000000002"}},
                                  {{"profile", "1g.10gb"}, {"gpu_instance_id", 7}, {"uuid", "MIG-00000000-0000-0000-0000-000000000003"}}}}};
       },
       "compute slices"},
      {"too many memory slices",
       [](json& d) {
         d["gpus"][3]["mig"] = {{"mode", 1},
                                {"devices",
                                 {{{"profile", "3g.40gb"}, {"gpu_instance_id", 1}, {"uuid", "MIG-00000000-0000-0000-0000-000000000004"}},
                                  {{"profile", "3g.40gb"}, {"gpu_instance_id", 2}, {"uuid", "MIG-00000000-0000-0000-0000-000000000005"}},
                                  {{"profile", "1g.10gb"}, {"gpu_instance_id", 7}, {"uuid", "MIG-00000000-0000-0000-0000-000000000006"}}}}};
       },
       "memory slices"},
      {"duplicate GPU instance id",
       [](json& d) { d["gpus"][0]["mig"]["devices"][1]["gpu_instance_id"] = 2; }, "gpu_instance_id 2 is used twice"},
      {"overlapping placement",
       [](json& d) { d["gpus"][0]["mig"]["devices"][2]["placement_start"] = 0; }, "overlaps"},
      {"unknown MIG profile", [](json& d) { d["gpus"][0]["mig"]["devices"][0]["profile"] = "9g.90gb"; },
       "unknown MIG profile"},
      {"asymmetric NVLink", [](json& d) { d["gpus"][0]["nvlinks"][0] = d["gpus"][1]["pci"]["bus_id"]; }, "link(s) to"},
      {"NVLink to nowhere", [](json& d) { d["gpus"][0]["nvlinks"][0] = "00000000:FF:00.0"; }, "neither a GPU"},
      {"misspelt field", [](json& d) { d["gpus"][0]["numa_nod"] = 0; }, "unknown field \"numa_nod\""},
      {"bad bus id", [](json& d) { d["gpus"][0]["pci"]["bus_id"] = "07:00"; }, "malformed PCI bus id"},
      {"bad UUID", [](json& d) { d["gpus"][0]["uuid"] = "GPU-1234"; }, "gpus[0].uuid"},
      {"unknown function", [](json& d) { d["gpus"][0]["unsupported"] = {"nvmlDeviceGetWarpSpeed"}; },
       "nvmlDeviceGetWarpSpeed"},
      {"unknown init_error", [](json& d) { d["init_error"] = "ON_FIRE"; }, "ON_FIRE"},
      {"process in a missing GPU instance",
       [](json& d) { d["gpus"][0]["processes"][0]["gpu_instance_id"] = 12; }, "no MIG device with gpu_instance_id 12"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    json doc = base;
    c.mutate(doc);
    TempProfile bad(doc);
    const auto [rc, message] = init_expecting_failure(bad.path());
    EXPECT_EQ(rc, NVML_ERROR_UNKNOWN);
    EXPECT_NE(message.find(c.message), std::string::npos) << message;
    EXPECT_NE(message.find(bad.path()), std::string::npos) << message;
  }
}

// ===========================================================================
// Every shipped profile.

// Checks one MIG device handle against its parent and the instance APIs.
void check_mig_device(nvmlDevice_t parent, unsigned index, nvmlDevice_t mig, std::set<std::string>& uuids) {
  SCOPED_TRACE("MIG device " + std::to_string(index));
  Library& n = lib();
  unsigned is_mig = 0;
  EXPECT_EQ(n.nvmlDeviceIsMigDeviceHandle(mig, &is_mig), NVML_SUCCESS);
  EXPECT_EQ(is_mig, 1U);
  nvmlDevice_t back = nullptr;
  EXPECT_EQ(n.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mig, &back), NVML_SUCCESS);
  EXPECT_EQ(back, parent);
  unsigned mig_index = 99;
  EXPECT_EQ(n.nvmlDeviceGetIndex(mig, &mig_index), NVML_SUCCESS);
  EXPECT_EQ(mig_index, index);

  const std::string uuid = uuid_of(mig);
  EXPECT_EQ(uuid.rfind("MIG-", 0), 0U) << uuid;
  EXPECT_TRUE(uuids.insert(uuid).second) << "duplicate " << uuid;
  nvmlDevice_t by_uuid = nullptr;
  EXPECT_EQ(n.nvmlDeviceGetHandleByUUID(uuid.c_str(), &by_uuid), NVML_SUCCESS);
  EXPECT_EQ(by_uuid, mig);
  EXPECT_EQ(name_of(mig).rfind(name_of(parent) + " MIG ", 0), 0U) << name_of(mig);

  nvmlDeviceAttributes_t attributes{};
  ASSERT_EQ(n.nvmlDeviceGetAttributes_v2(mig, &attributes), NVML_SUCCESS);
  EXPECT_GT(attributes.multiprocessorCount, 0U);
  EXPECT_GT(attributes.gpuInstanceSliceCount, 0U);
  nvmlMemory_t memory{};
  ASSERT_EQ(n.nvmlDeviceGetMemoryInfo(mig, &memory), NVML_SUCCESS);
  EXPECT_EQ(memory.total, attributes.memorySizeMB << 20);
  EXPECT_EQ(memory.free + memory.used, memory.total);

  unsigned gi_id = 0;
  unsigned ci_id = 0;
  ASSERT_EQ(n.nvmlDeviceGetGpuInstanceId(mig, &gi_id), NVML_SUCCESS);
  ASSERT_EQ(n.nvmlDeviceGetComputeInstanceId(mig, &ci_id), NVML_SUCCESS);
  nvmlGpuInstance_t gi = nullptr;
  ASSERT_EQ(n.nvmlDeviceGetGpuInstanceById(parent, gi_id, &gi), NVML_SUCCESS);
  nvmlGpuInstanceInfo_t gi_info{};
  ASSERT_EQ(n.nvmlGpuInstanceGetInfo(gi, &gi_info), NVML_SUCCESS);
  EXPECT_EQ(gi_info.device, parent);
  EXPECT_EQ(gi_info.id, gi_id);
  EXPECT_LE(gi_info.placement.start + gi_info.placement.size, 8U);

  // The GI's profile id is one of the model's profiles, with this size.
  bool profile_found = false;
  for (unsigned p = 0; p < NVML_GPU_INSTANCE_PROFILE_COUNT; ++p) {
    nvmlGpuInstanceProfileInfo_t info{};
    if (n.nvmlDeviceGetGpuInstanceProfileInfo(parent, p, &info) != NVML_SUCCESS || info.id != gi_info.profileId) continue;
    profile_found = true;
    EXPECT_EQ(info.memorySizeMB, attributes.memorySizeMB);
    EXPECT_EQ(info.sliceCount, attributes.gpuInstanceSliceCount);
    EXPECT_EQ(info.multiprocessorCount, attributes.multiprocessorCount);
  }
  EXPECT_TRUE(profile_found) << "profile id " << gi_info.profileId;

  nvmlComputeInstance_t ci = nullptr;
  ASSERT_EQ(n.nvmlGpuInstanceGetComputeInstanceById(gi, ci_id, &ci), NVML_SUCCESS);
  nvmlComputeInstanceInfo_t ci_info{};
  ASSERT_EQ(n.nvmlComputeInstanceGetInfo_v2(ci, &ci_info), NVML_SUCCESS);
  EXPECT_EQ(ci_info.device, parent);
  EXPECT_EQ(ci_info.gpuInstance, gi);
  EXPECT_EQ(ci_info.id, ci_id);
  EXPECT_EQ(ci_info.placement.size, attributes.computeInstanceSliceCount);
}

void check_profile(const std::string& path) {
  SCOPED_TRACE(path);
  const json doc = read_json(path);
  Session session(path);
  ASSERT_EQ(session.rc(), NVML_SUCCESS);
  Library& n = lib();

  unsigned count = 0;
  ASSERT_EQ(n.nvmlDeviceGetCount_v2(&count), NVML_SUCCESS);
  ASSERT_EQ(count, doc["gpus"].size());

  std::vector<nvmlDevice_t> handles;
  std::set<std::string> uuids;
  for (unsigned i = 0; i < count; ++i) {
    SCOPED_TRACE("GPU " + std::to_string(i));
    const json& entry = doc["gpus"][i];
    nvmlDevice_t h = device(i);
    handles.push_back(h);

    EXPECT_FALSE(name_of(h).empty());
    const std::string uuid = uuid_of(h);
    EXPECT_EQ(uuid.rfind("GPU-", 0), 0U) << uuid;
    EXPECT_TRUE(uuids.insert(uuid).second) << "duplicate " << uuid;
    nvmlDevice_t by_uuid = nullptr;
    EXPECT_EQ(n.nvmlDeviceGetHandleByUUID(uuid.c_str(), &by_uuid), NVML_SUCCESS);
    EXPECT_EQ(by_uuid, h);
    unsigned index = 99;
    EXPECT_EQ(n.nvmlDeviceGetIndex(h, &index), NVML_SUCCESS);
    EXPECT_EQ(index, i);
    unsigned is_mig = 1;
    EXPECT_EQ(n.nvmlDeviceIsMigDeviceHandle(h, &is_mig), NVML_SUCCESS);
    EXPECT_EQ(is_mig, 0U);

    // PCI: both bus id forms (and lower case) lead back to the handle.
    nvmlPciInfo_t pci{};
    ASSERT_EQ(n.nvmlDeviceGetPciInfo_v3(h, &pci), NVML_SUCCESS);
    EXPECT_EQ(std::string(pci.busId), entry["pci"]["bus_id"].get<std::string>());
    EXPECT_EQ(std::string(pci.busId).substr(4), std::string(pci.busIdLegacy));
    EXPECT_EQ(pci.pciDeviceId & 0xFFFFU, 0x10DEU);
    for (std::string form : {std::string(pci.busId), std::string(pci.busIdLegacy)}) {
      std::transform(form.begin(), form.end(), form.begin(), [](char c) { return static_cast<char>(std::tolower(c)); });
      nvmlDevice_t by_bus = nullptr;
      EXPECT_EQ(n.nvmlDeviceGetHandleByPciBusId_v2(form.c_str(), &by_bus), NVML_SUCCESS) << form;
      EXPECT_EQ(by_bus, h) << form;
    }

    nvmlMemory_t memory{};
    ASSERT_EQ(n.nvmlDeviceGetMemoryInfo(h, &memory), NVML_SUCCESS);
    EXPECT_GT(memory.total, 0U);
    EXPECT_EQ(memory.free + memory.used, memory.total);
    nvmlMemory_v2_t memory2{};
    memory2.version = kMemoryV2;
    ASSERT_EQ(n.nvmlDeviceGetMemoryInfo_v2(h, &memory2), NVML_SUCCESS);
    EXPECT_EQ(memory2.total, memory.total);
    EXPECT_EQ(memory2.free + memory2.used + memory2.reserved, memory2.total);

    int major = 0;
    int minor = -1;
    EXPECT_EQ(n.nvmlDeviceGetCudaComputeCapability(h, &major, &minor), NVML_SUCCESS);
    EXPECT_GE(major, 7);
    nvmlDeviceArchitecture_t arch = 0;
    EXPECT_EQ(n.nvmlDeviceGetArchitecture(h, &arch), NVML_SUCCESS);
    EXPECT_NE(arch, NVML_DEVICE_ARCH_UNKNOWN);
    unsigned temperature = 0;
    EXPECT_EQ(n.nvmlDeviceGetTemperature(h, NVML_TEMPERATURE_GPU, &temperature), NVML_SUCCESS);
    unsigned long long events = 0;
    EXPECT_EQ(n.nvmlDeviceGetSupportedEventTypes(h, &events), NVML_SUCCESS);
    EXPECT_NE(events & nvmlEventTypeXidCriticalError, 0U);

    // NVLinks to GPUs are reported from both ends.
    for (unsigned link = 0; link < NVML_NVLINK_MAX_LINKS; ++link) {
      nvmlEnableState_t state{};
      const nvmlReturn_t rc = n.nvmlDeviceGetNvLinkState(h, link, &state);
      ASSERT_TRUE(rc == NVML_SUCCESS || rc == NVML_ERROR_NOT_SUPPORTED) << link << ": " << rc;
      if (rc != NVML_SUCCESS || state != NVML_FEATURE_ENABLED) continue;
      nvmlPciInfo_t remote{};
      ASSERT_EQ(n.nvmlDeviceGetNvLinkRemotePciInfo_v2(h, link, &remote), NVML_SUCCESS);
      nvmlDevice_t peer = nullptr;
      if (n.nvmlDeviceGetHandleByPciBusId_v2(remote.busId, &peer) == NVML_SUCCESS) {
        EXPECT_NE(peer, h);
      }
    }

    // MIG devices, when the GPU is in MIG mode.
    unsigned current = 0;
    unsigned pending = 0;
    const nvmlReturn_t mig_rc = n.nvmlDeviceGetMigMode(h, &current, &pending);
    ASSERT_TRUE(mig_rc == NVML_SUCCESS || mig_rc == NVML_ERROR_NOT_SUPPORTED);
    const std::size_t expected_mig =
        entry.contains("mig") && entry["mig"].contains("devices") ? entry["mig"]["devices"].size() : 0;
    if (mig_rc == NVML_SUCCESS && current == NVML_DEVICE_MIG_ENABLE) {
      unsigned max = 0;
      ASSERT_EQ(n.nvmlDeviceGetMaxMigDeviceCount(h, &max), NVML_SUCCESS);
      EXPECT_EQ(max, 7U);
      unsigned found = 0;
      for (unsigned m = 0; m < max; ++m) {
        nvmlDevice_t mig = nullptr;
        const nvmlReturn_t rc = n.nvmlDeviceGetMigDeviceHandleByIndex(h, m, &mig);
        if (rc == NVML_ERROR_NOT_FOUND) break;
        ASSERT_EQ(rc, NVML_SUCCESS);
        check_mig_device(h, m, mig, uuids);
        ++found;
      }
      EXPECT_EQ(found, expected_mig);
    } else {
      EXPECT_EQ(expected_mig, 0U);
      unsigned gi_id = 0;
      EXPECT_EQ(n.nvmlDeviceGetGpuInstanceId(h, &gi_id), NVML_ERROR_NOT_SUPPORTED);
    }

    // Process listing follows the size protocol.
    unsigned processes = 0;
    const nvmlReturn_t rc = n.nvmlDeviceGetComputeRunningProcesses_v3(h, &processes, nullptr);
    const std::size_t expected_processes = entry.contains("processes") ? entry["processes"].size() : 0;
    EXPECT_EQ(rc, expected_processes == 0 ? NVML_SUCCESS : NVML_ERROR_INSUFFICIENT_SIZE);
    EXPECT_EQ(processes, expected_processes);
  }

  // Topology is symmetric and INTERNAL on the diagonal.
  for (unsigned a = 0; a < count; ++a) {
    EXPECT_EQ(topology(handles[a], handles[a]), NVML_TOPOLOGY_INTERNAL);
    for (unsigned b = a + 1; b < count; ++b) {
      EXPECT_EQ(topology(handles[a], handles[b]), topology(handles[b], handles[a])) << a << "," << b;
      EXPECT_NE(topology(handles[a], handles[b]), NVML_TOPOLOGY_INTERNAL) << a << "," << b;
    }
  }
}

TEST(FakeNvmlProfiles, EveryProfileAnswersBasicQueries) {
  const auto profiles = all_profiles();
  ASSERT_GE(profiles.size(), 8U);
  for (const std::string& path : profiles) check_profile(path);
}

// ===========================================================================
// Profile specifics.

TEST(FakeNvmlProfiles, DgxA100TopologyAndNvSwitches) {
  Session session(profile("a100-8x-nvswitch.json"));
  ASSERT_EQ(session.rc(), NVML_SUCCESS);
  Library& n = lib();
  EXPECT_EQ(topology(device(0), device(1)), NVML_TOPOLOGY_SINGLE);
  EXPECT_EQ(topology(device(0), device(2)), NVML_TOPOLOGY_NODE);
  EXPECT_EQ(topology(device(0), device(4)), NVML_TOPOLOGY_SYSTEM);
  EXPECT_EQ(topology(device(6), device(7)), NVML_TOPOLOGY_SINGLE);
  unsigned numa = 9;
  EXPECT_EQ(n.nvmlDeviceGetNumaNodeId(device(3), &numa), NVML_SUCCESS);
  EXPECT_EQ(numa, 0U);
  EXPECT_EQ(n.nvmlDeviceGetNumaNodeId(device(4), &numa), NVML_SUCCESS);
  EXPECT_EQ(numa, 1U);

  nvmlDevice_t h = device(0);
  std::map<std::string, int> per_switch;
  for (unsigned link = 0; link < 12; ++link) {
    nvmlEnableState_t state{};
    ASSERT_EQ(n.nvmlDeviceGetNvLinkState(h, link, &state), NVML_SUCCESS);
    EXPECT_EQ(state, NVML_FEATURE_ENABLED);
    nvmlPciInfo_t remote{};
    ASSERT_EQ(n.nvmlDeviceGetNvLinkRemotePciInfo_v2(h, link, &remote), NVML_SUCCESS);
    EXPECT_EQ(remote.pciDeviceId, 0x1AF110DEU);
    ++per_switch[remote.busId];
  }
  EXPECT_EQ(per_switch.size(), 6U);
  for (const auto& [bus, links] : per_switch) EXPECT_EQ(links, 2) << bus;
  nvmlEnableState_t state{};
  EXPECT_EQ(n.nvmlDeviceGetNvLinkState(h, 12, &state), NVML_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(n.nvmlDeviceGetNvLinkState(h, NVML_NVLINK_MAX_LINKS, &state), NVML_ERROR_INVALID_ARGUMENT);

  // The unversioned query writes the old 52-byte layout: the short bus id in
  // front and zeroed reserved words where today's busId starts.
  nvmlPciInfo_t legacy{};
  std::memset(&legacy, 0x7F, sizeof(legacy));
  ASSERT_EQ(n.nvmlDeviceGetNvLinkRemotePciInfo(h, 0, &legacy), NVML_SUCCESS);
  EXPECT_STREQ(legacy.busIdLegacy, "0000:C4:00.0");
  EXPECT_EQ(legacy.pciDeviceId, 0x1AF110DEU);
  EXPECT_EQ(legacy.busId[0], '\0');
  EXPECT_EQ(legacy.busId[16], 0x7F) << "wrote past the old struct";

  unsigned current = 1;
  unsigned pending = 1;
  EXPECT_EQ(n.nvmlDeviceGetMigMode(h, &current, &pending), NVML_SUCCESS);
  EXPECT_EQ(current, 0U);
  nvmlDevice_t mig = nullptr;
  EXPECT_EQ(n.nvmlDeviceGetMigDeviceHandleByIndex(h, 0, &mig), NVML_ERROR_INVALID_ARGUMENT);
  nvmlEnableState_t retired{};
  EXPECT_EQ(n.nvmlDeviceGetRetiredPagesPendingStatus(h, &retired), NVML_ERROR_NOT_SUPPORTED);
  unsigned rows[4] = {9, 9, 9, 9};
  EXPECT_EQ(n.nvmlDeviceGetRemappedRows(h, &rows[0], &rows[1], &rows[2], &rows[3]), NVML_SUCCESS);
  EXPECT_EQ(rows[0] + rows[1] + rows[2] + rows[3], 0U);
}

TEST(FakeNvmlProfiles, Dgx1HybridCubeMesh) {
  Session session(profile("v100-8x-dgx1.json"));
  ASSERT_EQ(session.rc(), NVML_SUCCESS);
  Library& n = lib();
  // links[a][b]: NVLinks between GPU a and GPU b, read through the API.
  std::vector<nvmlDevice_t> handles;
  for (unsigned i = 0; i < 8; ++i) handles.push_back(device(i));
  std::vector<std::vector<int>> links(8, std::vector<int>(8, 0));
  for (unsigned a = 0; a < 8; ++a) {
    for (unsigned link = 0; link < NVML_NVLINK_MAX_LINKS; ++link) {
      nvmlPciInfo_t remote{};
      const nvmlReturn_t rc = n.nvmlDeviceGetNvLinkRemotePciInfo_v2(handles[a], link, &remote);
      if (rc == NVML_ERROR_NOT_SUPPORTED) {
        EXPECT_EQ(link, 6U);
        break;
      }
      ASSERT_EQ(rc, NVML_SUCCESS);
      nvmlDevice_t peer = nullptr;
      ASSERT_EQ(n.nvmlDeviceGetHandleByPciBusId(remote.busIdLegacy, &peer), NVML_SUCCESS);
      const auto b = static_cast<std::size_t>(std::find(handles.begin(), handles.end(), peer) - handles.begin());
      ++links[a][b];
    }
  }
  EXPECT_EQ(links[0][1], 1);
  EXPECT_EQ(links[0][3], 2);
  EXPECT_EQ(links[0][4], 2);
  EXPECT_EQ(links[0][5], 0);
  for (unsigned a = 0; a < 8; ++a) {
    for (unsigned b = 0; b < 8; ++b) EXPECT_EQ(links[a][b], links[b][a]);
  }
  EXPECT_EQ(topology(handles[0], handles[1]), NVML_TOPOLOGY_SINGLE);
  EXPECT_EQ(topology(handles[0], handles[2]), NVML_TOPOLOGY_NODE);
  EXPECT_EQ(topology(handles[3], handles[4]), NVML_TOPOLOGY_SYSTEM);
  nvmlBrandType_t brand{};
  EXPECT_EQ(n.nvmlDeviceGetBrand(handles[0], &brand), NVML_SUCCESS);
  EXPECT_EQ(brand, NVML_BRAND_TESLA);
}

TEST(FakeNvmlProfiles, Dgx2TopologyLevels) {
  Session session(profile("v100-16x-dgx2.json"));
  ASSERT_EQ(session.rc(), NVML_SUCCESS);
  EXPECT_EQ(topology(device(0), device(1)), NVML_TOPOLOGY_SINGLE);
  EXPECT_EQ(topology(device(0), device(2)), NVML_TOPOLOGY_MULTIPLE);
  EXPECT_EQ(topology(device(0), device(4)), NVML_TOPOLOGY_NODE);
  EXPECT_EQ(topology(device(0), device(8)), NVML_TOPOLOGY_SYSTEM);
  nvmlPciInfo_t a{};
  nvmlPciInfo_t b{};
  ASSERT_EQ(lib().nvmlDeviceGetNvLinkRemotePciInfo_v2(device(0), 0, &a), NVML_SUCCESS);
  ASSERT_EQ(lib().nvmlDeviceGetNvLinkRemotePciInfo_v2(device(8), 0, &b), NVML_SUCCESS);
  EXPECT_EQ(a.pciDeviceId, 0x1AC110DEU);
  EXPECT_STRNE(a.busId, b.busId) << "the two boards have their own switches";
}

TEST(FakeNvmlProfiles, H100PcieAcrossSockets) {
  Session session(profile("h100-2x-pcie-2numa.json"));
  ASSERT_EQ(session.rc(), NVML_SUCCESS);
  Library& n = lib();
  EXPECT_EQ(topology(device(0), device(1)), NVML_TOPOLOGY_SYSTEM);
  unsigned numa = 9;
  EXPECT_EQ(n.nvmlDeviceGetNumaNodeId(device(1), &numa), NVML_SUCCESS);
  EXPECT_EQ(numa, 1U);
  nvmlEnableState_t state{};
  EXPECT_EQ(n.nvmlDeviceGetNvLinkState(device(0), 0, &state), NVML_ERROR_NOT_SUPPORTED);
  unsigned max = 0;
  EXPECT_EQ(n.nvmlDeviceGetMaxMigDeviceCount(device(0), &max), NVML_SUCCESS);
  EXPECT_EQ(max, 7U);
  nvmlDeviceArchitecture_t arch = 0;
  EXPECT_EQ(n.nvmlDeviceGetArchitecture(device(0), &arch), NVML_SUCCESS);
  EXPECT_EQ(arch, static_cast<nvmlDeviceArchitecture_t>(NVML_DEVICE_ARCH_HOPPER));
  nvmlMemory_t memory{};
  EXPECT_EQ(n.nvmlDeviceGetMemoryInfo(device(0), &memory), NVML_SUCCESS);
  EXPECT_EQ(memory.total, 81559ULL << 20);
}

TEST(FakeNvmlProfiles, T4LacksNvLinkMigAndRowRemapping) {
  Session session(profile("t4-1x.json"));
  ASSERT_EQ(session.rc(), NVML_SUCCESS);
  Library& n = lib();
  nvmlDevice_t h = device(0);
  nvmlEnableState_t state{};
  EXPECT_EQ(n.nvmlDeviceGetNvLinkState(h, 0, &state), NVML_ERROR_NOT_SUPPORTED);
  nvmlPciInfo_t pci{};
  EXPECT_EQ(n.nvmlDeviceGetNvLinkRemotePciInfo_v2(h, 0, &pci), NVML_ERROR_NOT_SUPPORTED);
  unsigned current = 0;
  unsigned pending = 0;
  EXPECT_EQ(n.nvmlDeviceGetMigMode(h, &current, &pending), NVML_ERROR_NOT_SUPPORTED);
  unsigned max = 0;
  EXPECT_EQ(n.nvmlDeviceGetMaxMigDeviceCount(h, &max), NVML_ERROR_NOT_SUPPORTED);
  nvmlGpuInstanceProfileInfo_t info{};
  EXPECT_EQ(n.nvmlDeviceGetGpuInstanceProfileInfo(h, NVML_GPU_INSTANCE_PROFILE_1_SLICE, &info),
            NVML_ERROR_NOT_SUPPORTED);
  unsigned rows[4];
  EXPECT_EQ(n.nvmlDeviceGetRemappedRows(h, &rows[0], &rows[1], &rows[2], &rows[3]), NVML_ERROR_NOT_SUPPORTED);
  nvmlEnableState_t retired{};
  EXPECT_EQ(n.nvmlDeviceGetRetiredPagesPendingStatus(h, &retired), NVML_SUCCESS);
  unsigned long long events = 0;
  EXPECT_EQ(n.nvmlDeviceGetSupportedEventTypes(h, &events), NVML_SUCCESS);
  EXPECT_EQ(events & nvmlEventMigConfigChange, 0U);
  int major = 0;
  int minor = 0;
  EXPECT_EQ(n.nvmlDeviceGetCudaComputeCapability(h, &major, &minor), NVML_SUCCESS);
  EXPECT_EQ(major * 10 + minor, 75);
}

TEST(FakeNvmlProfiles, H200InactiveLinksAndProfileTable) {
  Session session(profile("h200-1x.json"));
  ASSERT_EQ(session.rc(), NVML_SUCCESS);
  Library& n = lib();
  nvmlDevice_t h = device(0);
  for (unsigned link = 0; link < NVML_NVLINK_MAX_LINKS; ++link) {
    nvmlEnableState_t state = NVML_FEATURE_ENABLED;
    EXPECT_EQ(n.nvmlDeviceGetNvLinkState(h, link, &state), NVML_SUCCESS);
    EXPECT_EQ(state, NVML_FEATURE_DISABLED);
  }
  nvmlPciInfo_t pci{};
  EXPECT_EQ(n.nvmlDeviceGetNvLinkRemotePciInfo_v2(h, 0, &pci), NVML_ERROR_NOT_FOUND);
  nvmlBrandType_t brand{};
  EXPECT_EQ(n.nvmlDeviceGetBrand(h, &brand), NVML_SUCCESS);
  EXPECT_EQ(brand, NVML_BRAND_NVIDIA);
  int cuda = 0;
  EXPECT_EQ(n.nvmlSystemGetCudaDriverVersion_v2(&cuda), NVML_SUCCESS);
  EXPECT_EQ(cuda, 12080);

  nvmlGpuInstanceProfileInfo_v2_t info{};
  info.version = kGpuInstanceProfileInfoV2;
  ASSERT_EQ(n.nvmlDeviceGetGpuInstanceProfileInfoV(h, NVML_GPU_INSTANCE_PROFILE_7_SLICE, &info), NVML_SUCCESS);
  EXPECT_STREQ(info.name, "MIG 7g.141gb");
  EXPECT_EQ(info.id, 0U);
  EXPECT_EQ(info.version, kGpuInstanceProfileInfoV2);
  info.version = 1;
  EXPECT_EQ(n.nvmlDeviceGetGpuInstanceProfileInfoV(h, NVML_GPU_INSTANCE_PROFILE_1_SLICE, &info),
            NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
  nvmlGpuInstanceProfileInfo_t old_info{};
  EXPECT_EQ(n.nvmlDeviceGetGpuInstanceProfileInfo(h, NVML_GPU_INSTANCE_PROFILE_8_SLICE, &old_info),
            NVML_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(n.nvmlDeviceGetGpuInstanceProfileInfo(h, NVML_GPU_INSTANCE_PROFILE_COUNT, &old_info),
            NVML_ERROR_INVALID_ARGUMENT);
}

TEST(FakeNvmlProfiles, MixedMigLayout) {
  Session session(profile("a100-mig-mixed.json"));
  ASSERT_EQ(session.rc(), NVML_SUCCESS);
  Library& n = lib();
  nvmlDevice_t gpu0 = device(0);

  // Profile table of the A100-SXM4-80GB.
  const std::map<unsigned, std::pair<unsigned, unsigned long long>> expected = {
      {NVML_GPU_INSTANCE_PROFILE_1_SLICE, {19, 9856}}, {NVML_GPU_INSTANCE_PROFILE_2_SLICE, {14, 19968}},
      {NVML_GPU_INSTANCE_PROFILE_3_SLICE, {9, 40192}}, {NVML_GPU_INSTANCE_PROFILE_4_SLICE, {5, 40192}},
      {NVML_GPU_INSTANCE_PROFILE_7_SLICE, {0, 80896}}, {NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2, {15, 19968}}};
  for (const auto& [constant, id_and_memory] : expected) {
    nvmlGpuInstanceProfileInfo_t info{};
    ASSERT_EQ(n.nvmlDeviceGetGpuInstanceProfileInfo(gpu0, constant, &info), NVML_SUCCESS) << constant;
    EXPECT_EQ(info.id, id_and_memory.first);
    EXPECT_EQ(info.memorySizeMB, id_and_memory.second);
  }

  const std::vector<std::string> names = {"3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"};
  for (unsigned i = 0; i < names.size(); ++i) {
    nvmlDevice_t mig = nullptr;
    ASSERT_EQ(n.nvmlDeviceGetMigDeviceHandleByIndex(gpu0, i, &mig), NVML_SUCCESS);
    EXPECT_EQ(name_of(mig), "NVIDIA A100-SXM4-80GB MIG " + names[i]);
    nvmlDevice_t again = nullptr;
    ASSERT_EQ(n.nvmlDeviceGetMigDeviceHandleByIndex(gpu0, i, &again), NVML_SUCCESS);
    EXPECT_EQ(again, mig) << "handles are stable";
  }
  nvmlDevice_t mig = nullptr;
  EXPECT_EQ(n.nvmlDeviceGetMigDeviceHandleByIndex(gpu0, 4, &mig), NVML_ERROR_NOT_FOUND);

  // The 3g.40gb instance runs process 7101 with 30000 MiB.
  ASSERT_EQ(n.nvmlDeviceGetMigDeviceHandleByIndex(gpu0, 0, &mig), NVML_SUCCESS);
  nvmlProcessInfo_t process{};
  unsigned count = 1;
  ASSERT_EQ(n.nvmlDeviceGetComputeRunningProcesses_v3(mig, &count, &process), NVML_SUCCESS);
  ASSERT_EQ(count, 1U);
  EXPECT_EQ(process.pid, 7101U);
  EXPECT_EQ(process.gpuInstanceId, 2U);
  EXPECT_EQ(process.computeInstanceId, 0U);
  nvmlMemory_v2_t memory{};
  memory.version = kMemoryV2;
  ASSERT_EQ(n.nvmlDeviceGetMemoryInfo_v2(mig, &memory), NVML_SUCCESS);
  EXPECT_EQ(memory.total, 40192ULL << 20);
  EXPECT_EQ(memory.used, 30000ULL << 20);
  nvmlDevice_t other = nullptr;
  ASSERT_EQ(n.nvmlDeviceGetMigDeviceHandleByIndex(gpu0, 1, &other), NVML_SUCCESS);
  count = 1;
  EXPECT_EQ(n.nvmlDeviceGetComputeRunningProcesses_v3(other, &count, &process), NVML_SUCCESS);
  EXPECT_EQ(count, 0U);

  nvmlGpuInstance_t gi = nullptr;
  ASSERT_EQ(n.nvmlDeviceGetGpuInstanceById(gpu0, 2, &gi), NVML_SUCCESS);
  nvmlGpuInstanceInfo_t gi_info{};
  ASSERT_EQ(n.nvmlGpuInstanceGetInfo(gi, &gi_info), NVML_SUCCESS);
  EXPECT_EQ(gi_info.profileId, 9U);
  EXPECT_EQ(gi_info.placement.start, 4U);
  EXPECT_EQ(gi_info.placement.size, 4U);
  EXPECT_EQ(n.nvmlDeviceGetGpuInstanceById(gpu0, 5, &gi), NVML_ERROR_NOT_FOUND);
  nvmlComputeInstance_t ci = nullptr;
  ASSERT_EQ(n.nvmlDeviceGetGpuInstanceById(gpu0, 2, &gi), NVML_SUCCESS);
  EXPECT_EQ(n.nvmlGpuInstanceGetComputeInstanceById(gi, 1, &ci), NVML_ERROR_NOT_FOUND);

  // GPU 3: MIG capable, disabled.
  unsigned current = 1;
  unsigned pending = 1;
  ASSERT_EQ(n.nvmlDeviceGetMigMode(device(3), &current, &pending), NVML_SUCCESS);
  EXPECT_EQ(current, 0U);
  EXPECT_EQ(pending, 0U);
  EXPECT_EQ(n.nvmlDeviceGetMigDeviceHandleByIndex(device(3), 0, &mig), NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(n.nvmlDeviceGetGpuInstanceById(device(3), 2, &gi), NVML_ERROR_INVALID_ARGUMENT);
  nvmlDeviceAttributes_t attributes{};
  EXPECT_EQ(n.nvmlDeviceGetAttributes(device(3), &attributes), NVML_ERROR_NOT_SUPPORTED);
  unsigned minor = 0;
  EXPECT_EQ(n.nvmlDeviceGetMinorNumber(device(3), &minor), NVML_SUCCESS);
  EXPECT_EQ(minor, 3U);
}

// ===========================================================================
// Argument checking.

TEST(FakeNvmlArguments, BuffersPointersAndHandles) {
  Session session(profile("a100-8x-nvswitch.json"));
  ASSERT_EQ(session.rc(), NVML_SUCCESS);
  Library& n = lib();
  char small[4];
  EXPECT_EQ(n.nvmlSystemGetDriverVersion(small, sizeof(small)), NVML_ERROR_INSUFFICIENT_SIZE);
  EXPECT_EQ(n.nvmlSystemGetDriverVersion(nullptr, 80), NVML_ERROR_INVALID_ARGUMENT);
  char version[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE];
  EXPECT_EQ(n.nvmlSystemGetNVMLVersion(version, sizeof(version)), NVML_SUCCESS);
  EXPECT_STREQ(version, "12.550.54.15");
  EXPECT_EQ(n.nvmlDeviceGetName(device(0), small, sizeof(small)), NVML_ERROR_INSUFFICIENT_SIZE);
  EXPECT_EQ(n.nvmlDeviceGetUUID(device(0), small, sizeof(small)), NVML_ERROR_INSUFFICIENT_SIZE);
  EXPECT_EQ(n.nvmlDeviceGetCount(nullptr), NVML_ERROR_INVALID_ARGUMENT);

  nvmlDevice_t h = nullptr;
  EXPECT_EQ(n.nvmlDeviceGetHandleByIndex_v2(8, &h), NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(n.nvmlDeviceGetHandleByIndex_v2(0, nullptr), NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(n.nvmlDeviceGetHandleByUUID("GPU-00000000-0000-0000-0000-000000000000", &h), NVML_ERROR_NOT_FOUND);
  EXPECT_EQ(n.nvmlDeviceGetHandleByPciBusId_v2("not a bus id", &h), NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(n.nvmlDeviceGetHandleByPciBusId_v2("0000:01:00.0", &h), NVML_ERROR_NOT_FOUND);

  // A pointer the library never handed out is rejected, never read.
  long not_a_handle[4] = {};
  unsigned temp = 0;
  EXPECT_EQ(n.nvmlDeviceGetTemperature(reinterpret_cast<nvmlDevice_t>(&not_a_handle), NVML_TEMPERATURE_GPU, &temp),
            NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(n.nvmlDeviceGetTemperature(nullptr, NVML_TEMPERATURE_GPU, &temp), NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(n.nvmlDeviceGetTemperature(device(0), NVML_TEMPERATURE_GPU, nullptr), NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(n.nvmlDeviceGetTemperature(device(0), static_cast<nvmlTemperatureSensors_t>(1), &temp),
            NVML_ERROR_INVALID_ARGUMENT);
  nvmlEventData_t data{};
  EXPECT_EQ(n.nvmlEventSetWait_v2(reinterpret_cast<nvmlEventSet_t>(&not_a_handle), &data, 0),
            NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(n.nvmlGpuInstanceGetInfo(reinterpret_cast<nvmlGpuInstance_t>(&not_a_handle), nullptr),
            NVML_ERROR_INVALID_ARGUMENT);

  nvmlMemory_v2_t memory{};
  memory.version = 1;
  EXPECT_EQ(n.nvmlDeviceGetMemoryInfo_v2(device(0), &memory), NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
  memory.version = kMemoryV2;
  EXPECT_EQ(n.nvmlDeviceGetMemoryInfo_v2(device(0), &memory), NVML_SUCCESS);
  EXPECT_EQ(memory.reserved, 512ULL << 20);
  unsigned clock = 0;
  EXPECT_EQ(n.nvmlDeviceGetClockInfo(device(0), NVML_CLOCK_SM, &clock), NVML_SUCCESS);
  EXPECT_EQ(clock, 1410U);
  unsigned long long count = 0;
  EXPECT_EQ(n.nvmlDeviceGetTotalEccErrors(device(0), NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC, &count),
            NVML_SUCCESS);
  EXPECT_EQ(count, 0U);
}

TEST(FakeNvmlArguments, ProcessQueriesUseTheSizeProtocol) {
  Session session(profile("a100-8x-nvswitch.json"));
  ASSERT_EQ(session.rc(), NVML_SUCCESS);
  Library& n = lib();
  unsigned count = 0;
  EXPECT_EQ(n.nvmlDeviceGetComputeRunningProcesses_v3(device(0), &count, nullptr), NVML_SUCCESS);
  EXPECT_EQ(count, 0U);
  EXPECT_EQ(n.nvmlDeviceGetComputeRunningProcesses_v3(device(1), &count, nullptr), NVML_ERROR_INSUFFICIENT_SIZE);
  ASSERT_EQ(count, 1U);
  nvmlProcessInfo_t infos[2] = {};
  count = 2;
  ASSERT_EQ(n.nvmlDeviceGetComputeRunningProcesses_v3(device(1), &count, infos), NVML_SUCCESS);
  EXPECT_EQ(count, 1U);
  EXPECT_EQ(infos[0].pid, 41873U);
  EXPECT_EQ(infos[0].usedGpuMemory, 20480ULL << 20);
  EXPECT_EQ(infos[0].gpuInstanceId, 0xFFFFFFFFU);
  nvmlProcessInfo_v1_t old_infos[1] = {};
  count = 1;
  ASSERT_EQ(n.nvmlDeviceGetComputeRunningProcesses(device(1), &count, old_infos), NVML_SUCCESS);
  EXPECT_EQ(old_infos[0].pid, 41873U);

  unsigned samples = 0;
  EXPECT_EQ(n.nvmlDeviceGetProcessUtilization(device(1), nullptr, &samples, 0), NVML_ERROR_INSUFFICIENT_SIZE);
  ASSERT_EQ(samples, 1U);
  nvmlProcessUtilizationSample_t sample{};
  ASSERT_EQ(n.nvmlDeviceGetProcessUtilization(device(1), &sample, &samples, 0), NVML_SUCCESS);
  EXPECT_EQ(sample.pid, 41873U);
  EXPECT_EQ(sample.smUtil, 85U);
  EXPECT_EQ(n.nvmlDeviceGetProcessUtilization(device(1), &sample, &samples, sample.timeStamp), NVML_ERROR_NOT_FOUND);
  EXPECT_EQ(n.nvmlDeviceGetProcessUtilization(device(0), &sample, &samples, 0), NVML_ERROR_NOT_FOUND);

  nvmlUtilization_t utilization{};
  EXPECT_EQ(n.nvmlDeviceGetUtilizationRates(device(1), &utilization), NVML_SUCCESS);
  EXPECT_EQ(utilization.gpu, 87U);
  nvmlMemory_t memory{};
  EXPECT_EQ(n.nvmlDeviceGetMemoryInfo(device(1), &memory), NVML_SUCCESS);
  EXPECT_EQ(memory.used, (20480ULL + 512) << 20) << "v1 counts reserved memory as used";
}

// ===========================================================================
// Events and the control socket.

TEST(FakeNvmlEvents, WaitTimesOutWithoutEvents) {
  Session session(profile("a100-8x-nvswitch.json"));
  ASSERT_EQ(session.rc(), NVML_SUCCESS);
  Library& n = lib();
  nvmlEventSet_t set = nullptr;
  ASSERT_EQ(n.nvmlEventSetCreate(&set), NVML_SUCCESS);
  ASSERT_EQ(n.nvmlDeviceRegisterEvents(device(0), nvmlEventTypeXidCriticalError, set), NVML_SUCCESS);
  EXPECT_EQ(n.nvmlDeviceRegisterEvents(device(0), nvmlEventTypePState, set), NVML_ERROR_NOT_SUPPORTED);
  nvmlEventData_t data{};
  const auto start = steady_clock::now();
  EXPECT_EQ(n.nvmlEventSetWait_v2(set, &data, 50), NVML_ERROR_TIMEOUT);
  EXPECT_GE(steady_clock::now() - start, milliseconds(45));
  EXPECT_EQ(n.nvmlEventSetWait_v2(set, &data, 0), NVML_ERROR_TIMEOUT);
  EXPECT_EQ(n.nvmlEventSetFree(set), NVML_SUCCESS);
  EXPECT_EQ(n.nvmlEventSetFree(set), NVML_ERROR_INVALID_ARGUMENT);
}

TEST(FakeNvmlControl, XidAndEccReachEventWait) {
  const std::string socket = temp_path(".sock");
  Session session(profile("a100-8x-nvswitch.json"), socket);
  ASSERT_EQ(session.rc(), NVML_SUCCESS);
  Library& n = lib();
  nvmlEventSet_t set = nullptr;
  ASSERT_EQ(n.nvmlEventSetCreate(&set), NVML_SUCCESS);
  const unsigned long long types =
      nvmlEventTypeXidCriticalError | nvmlEventTypeDoubleBitEccError | nvmlEventTypeSingleBitEccError;
  ASSERT_EQ(n.nvmlDeviceRegisterEvents(device(0), types, set), NVML_SUCCESS);
  ASSERT_EQ(n.nvmlDeviceRegisterEvents(device(1), types, set), NVML_SUCCESS);

  // A waiter blocks first; the event must wake it long before its timeout.
  auto waiter = std::async(std::launch::async, [&n, set] {
    nvmlEventData_t data{};
    const auto start = steady_clock::now();
    const nvmlReturn_t rc = n.nvmlEventSetWait_v2(set, &data, 10000);
    return std::make_tuple(rc, data, steady_clock::now() - start);
  });
  ControlClient control(socket);
  const auto sent = steady_clock::now();
  const json reply = control.ok({{"cmd", "xid"}, {"gpu", 1}, {"xid", 79}});
  const auto answered = steady_clock::now();
  // queued_ns: when the event was queued, on the steady clock (benchmarks time from it).
  ASSERT_TRUE(reply.contains("queued_ns")) << reply.dump();
  const steady_clock::time_point queued{std::chrono::nanoseconds(reply["queued_ns"].get<int64_t>())};
  EXPECT_GE(queued, sent);
  EXPECT_LE(queued, answered);
  const auto [rc, data, elapsed] = waiter.get();
  ASSERT_EQ(rc, NVML_SUCCESS);
  EXPECT_EQ(data.device, device(1));
  EXPECT_EQ(data.eventType, nvmlEventTypeXidCriticalError);
  EXPECT_EQ(data.eventData, 79U);
  EXPECT_EQ(data.gpuInstanceId, 0xFFFFFFFFU);
  EXPECT_LT(elapsed, milliseconds(5000));

  // Events for unregistered GPUs are not delivered; others arrive in order.
  control.ok({{"cmd", "xid"}, {"gpu", 5}, {"xid", 13}});
  control.ok({{"cmd", "ecc"}, {"gpu", 0}, {"type", "double"}, {"count", 2}});
  control.ok({{"cmd", "xid"}, {"uuid", uuid_of(device(0))}, {"xid", 48}});
  nvmlEventData_t next{};
  ASSERT_EQ(n.nvmlEventSetWait_v2(set, &next, 1000), NVML_SUCCESS);
  EXPECT_EQ(next.eventType, nvmlEventTypeDoubleBitEccError);
  EXPECT_EQ(next.device, device(0));
  ASSERT_EQ(n.nvmlEventSetWait(set, &next, 1000), NVML_SUCCESS);
  EXPECT_EQ(next.eventData, 48U);
  EXPECT_EQ(n.nvmlEventSetWait_v2(set, &next, 0), NVML_ERROR_TIMEOUT);
  unsigned long long ecc = 0;
  EXPECT_EQ(n.nvmlDeviceGetTotalEccErrors(device(0), NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_AGGREGATE_ECC, &ecc),
            NVML_SUCCESS);
  EXPECT_EQ(ecc, 2U);

  // The queue keeps the newest 1024 events.
  for (int i = 1; i <= 1030; ++i) control.ok({{"cmd", "xid"}, {"gpu", 0}, {"xid", i}});
  ASSERT_EQ(n.nvmlEventSetWait_v2(set, &next, 1000), NVML_SUCCESS);
  EXPECT_EQ(next.eventData, 7U);
  EXPECT_EQ(n.nvmlEventSetFree(set), NVML_SUCCESS);
}

// As real NVML: an event is kept only on the sets registered when it was
// raised. One queued on a set freed before it was read, or raised while no
// set held the GPU, is never delivered to a later set; only its trace (the
// ECC counters) remains. The health checker must not count on more.
TEST(FakeNvmlControl, EventsOfAGapAreNotDeliveredToALaterSet) {
  const std::string socket = temp_path(".sock");
  Session session(profile("a100-8x-nvswitch.json"), socket);
  ASSERT_EQ(session.rc(), NVML_SUCCESS);
  Library& n = lib();
  ControlClient control(socket);
  const unsigned long long types = nvmlEventTypeXidCriticalError | nvmlEventTypeDoubleBitEccError;
  nvmlEventSet_t old_set = nullptr;
  ASSERT_EQ(n.nvmlEventSetCreate(&old_set), NVML_SUCCESS);
  ASSERT_EQ(n.nvmlDeviceRegisterEvents(device(0), types, old_set), NVML_SUCCESS);
  control.ok({{"cmd", "fail"}, {"function", "nvmlEventSetWait"}, {"error", "UNKNOWN"}});
  control.ok({{"cmd", "xid"}, {"gpu", 0}, {"xid", 48}});
  nvmlEventData_t data{};
  EXPECT_EQ(n.nvmlEventSetWait_v2(old_set, &data, 0), NVML_ERROR_UNKNOWN);
  EXPECT_EQ(n.nvmlEventSetFree(old_set), NVML_SUCCESS);          // the XID goes with it
  control.ok({{"cmd", "ecc"}, {"gpu", 0}, {"type", "double"}});  // no set at all
  control.ok({{"cmd", "fail"}, {"function", "nvmlEventSetWait"}, {"error", nullptr}});

  nvmlEventSet_t new_set = nullptr;
  ASSERT_EQ(n.nvmlEventSetCreate(&new_set), NVML_SUCCESS);
  ASSERT_EQ(n.nvmlDeviceRegisterEvents(device(0), types, new_set), NVML_SUCCESS);
  EXPECT_EQ(n.nvmlEventSetWait_v2(new_set, &data, 0), NVML_ERROR_TIMEOUT);
  unsigned long long ecc = 0;
  EXPECT_EQ(n.nvmlDeviceGetTotalEccErrors(device(0), NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                                          NVML_VOLATILE_ECC, &ecc),
            NVML_SUCCESS);
  EXPECT_EQ(ecc, 1U);
  EXPECT_EQ(n.nvmlEventSetFree(new_set), NVML_SUCCESS);
}

TEST(FakeNvmlControl, LostGpuFailsWhileOthersWork) {
  const std::string socket = temp_path(".sock");
  Session session(profile("a100-8x-nvswitch.json"), socket);
  ASSERT_EQ(session.rc(), NVML_SUCCESS);
  Library& n = lib();
  nvmlDevice_t old_handle = device(1);
  const std::string uuid = uuid_of(old_handle);
  nvmlEventSet_t set = nullptr;
  ASSERT_EQ(n.nvmlEventSetCreate(&set), NVML_SUCCESS);
  ASSERT_EQ(n.nvmlDeviceRegisterEvents(old_handle, nvmlEventTypeXidCriticalError, set), NVML_SUCCESS);

  ControlClient control(socket);
  control.ok({{"cmd", "lost"}, {"gpu", 1}, {"lost", true}});
  nvmlEventData_t data{};
  ASSERT_EQ(n.nvmlEventSetWait_v2(set, &data, 5000), NVML_SUCCESS);
  EXPECT_EQ(data.eventData, 79U);

  unsigned count = 0;
  EXPECT_EQ(n.nvmlDeviceGetCount_v2(&count), NVML_SUCCESS);
  EXPECT_EQ(count, 8U);
  nvmlDevice_t h = nullptr;
  EXPECT_EQ(n.nvmlDeviceGetHandleByIndex_v2(1, &h), NVML_ERROR_GPU_IS_LOST);
  EXPECT_EQ(n.nvmlDeviceGetHandleByUUID(uuid.c_str(), &h), NVML_ERROR_GPU_IS_LOST);
  char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
  EXPECT_EQ(n.nvmlDeviceGetName(old_handle, name, sizeof(name)), NVML_ERROR_GPU_IS_LOST);
  unsigned temp = 0;
  EXPECT_EQ(n.nvmlDeviceGetTemperature(old_handle, NVML_TEMPERATURE_GPU, &temp), NVML_ERROR_GPU_IS_LOST);
  EXPECT_EQ(n.nvmlDeviceGetTopologyCommonAncestor(device(0), old_handle, nullptr), NVML_ERROR_GPU_IS_LOST);
  EXPECT_EQ(n.nvmlDeviceGetTemperature(device(0), NVML_TEMPERATURE_GPU, &temp), NVML_SUCCESS);
  EXPECT_EQ(name_of(device(2)), "NVIDIA A100-SXM4-80GB");
  EXPECT_EQ(control.ok({{"cmd", "get"}, {"gpu", 1}})["gpu"]["lost"], true);

  control.ok({{"cmd", "lost"}, {"gpu", 1}, {"lost", false}});
  EXPECT_EQ(n.nvmlDeviceGetHandleByIndex_v2(1, &h), NVML_SUCCESS);
  EXPECT_EQ(h, old_handle);
  EXPECT_EQ(n.nvmlDeviceGetName(old_handle, name, sizeof(name)), NVML_SUCCESS);
  EXPECT_EQ(n.nvmlEventSetFree(set), NVML_SUCCESS);
}

TEST(FakeNvmlControl, EventWaitOnASetWithALostGpuFailsAfterItsQueuedEvents) {
  const std::string socket = temp_path(".sock");
  Session session(profile("a100-8x-nvswitch.json"), socket);
  ASSERT_EQ(session.rc(), NVML_SUCCESS);
  Library& n = lib();
  nvmlEventSet_t with_lost = nullptr, without = nullptr;
  ASSERT_EQ(n.nvmlEventSetCreate(&with_lost), NVML_SUCCESS);
  ASSERT_EQ(n.nvmlEventSetCreate(&without), NVML_SUCCESS);
  ASSERT_EQ(n.nvmlDeviceRegisterEvents(device(0), nvmlEventTypeXidCriticalError, with_lost), NVML_SUCCESS);
  const nvmlDevice_t gpu1 = device(1);
  ASSERT_EQ(n.nvmlDeviceRegisterEvents(gpu1, nvmlEventTypeXidCriticalError, with_lost), NVML_SUCCESS);
  ASSERT_EQ(n.nvmlDeviceRegisterEvents(device(0), nvmlEventTypeXidCriticalError, without), NVML_SUCCESS);

  // A waiter blocked on the set is woken by the loss itself (no XID queued).
  auto waiter = std::async(std::launch::async, [&n, with_lost] {
    nvmlEventData_t data{};
    return n.nvmlEventSetWait_v2(with_lost, &data, 60000);
  });
  ControlClient control(socket);
  control.ok({{"cmd", "lost"}, {"gpu", 1}, {"xid", false}});
  EXPECT_EQ(waiter.get(), NVML_ERROR_GPU_IS_LOST);
  // Events queued meanwhile still come first, then the loss again.
  control.ok({{"cmd", "xid"}, {"gpu", 0}, {"xid", 62}});
  nvmlEventData_t data{};
  ASSERT_EQ(n.nvmlEventSetWait_v2(with_lost, &data, 1000), NVML_SUCCESS);
  EXPECT_EQ(data.eventData, 62U);
  EXPECT_EQ(n.nvmlEventSetWait_v2(with_lost, &data, 1000), NVML_ERROR_GPU_IS_LOST);
  // A set without the lost GPU is not affected.
  ASSERT_EQ(n.nvmlEventSetWait_v2(without, &data, 1000), NVML_SUCCESS);
  EXPECT_EQ(data.eventData, 62U);
  EXPECT_EQ(n.nvmlEventSetWait_v2(without, &data, 0), NVML_ERROR_TIMEOUT);
  // The lost GPU cannot join a set; once back, it can, and the old set waits again.
  nvmlEventSet_t fresh = nullptr;
  ASSERT_EQ(n.nvmlEventSetCreate(&fresh), NVML_SUCCESS);
  EXPECT_EQ(n.nvmlDeviceRegisterEvents(gpu1, nvmlEventTypeXidCriticalError, fresh), NVML_ERROR_GPU_IS_LOST);
  control.ok({{"cmd", "lost"}, {"gpu", 1}, {"lost", false}});
  EXPECT_EQ(n.nvmlDeviceRegisterEvents(gpu1, nvmlEventTypeXidCriticalError, fresh), NVML_SUCCESS);
  EXPECT_EQ(n.nvmlEventSetWait_v2(with_lost, &data, 0), NVML_ERROR_TIMEOUT);
  for (nvmlEventSet_t s : {with_lost, without, fresh}) EXPECT_EQ(n.nvmlEventSetFree(s), NVML_SUCCESS);
}

TEST(FakeNvmlControl, SensorsAndInjectedFailures) {
  const std::string socket = temp_path(".sock");
  Session session(profile("a100-8x-nvswitch.json"), socket);
  ASSERT_EQ(session.rc(), NVML_SUCCESS);
  Library& n = lib();
  ControlClient control(socket);
  control.ok({{"cmd", "set"},
              {"gpu", 0},
              {"sensors",
               {{"temperature_c", 91},
                {"clocks_mhz", {{"sm", 705}}},
                {"throttle_reasons", nvmlClocksThrottleReasonHwThermalSlowdown},
                {"remapped_rows", {{"pending", true}}}}}});
  unsigned value = 0;
  EXPECT_EQ(n.nvmlDeviceGetTemperature(device(0), NVML_TEMPERATURE_GPU, &value), NVML_SUCCESS);
  EXPECT_EQ(value, 91U);
  EXPECT_EQ(n.nvmlDeviceGetClockInfo(device(0), NVML_CLOCK_SM, &value), NVML_SUCCESS);
  EXPECT_EQ(value, 705U);
  EXPECT_EQ(n.nvmlDeviceGetClockInfo(device(0), NVML_CLOCK_GRAPHICS, &value), NVML_SUCCESS);
  EXPECT_EQ(value, 1410U) << "untouched keys keep their values";
  unsigned long long throttle = 0;
  unsigned long long event_reasons = 0;
  EXPECT_EQ(n.nvmlDeviceGetCurrentClocksThrottleReasons(device(0), &throttle), NVML_SUCCESS);
  EXPECT_EQ(n.nvmlDeviceGetCurrentClocksEventReasons(device(0), &event_reasons), NVML_SUCCESS);
  EXPECT_EQ(throttle, nvmlClocksThrottleReasonHwThermalSlowdown);
  EXPECT_EQ(event_reasons, throttle);
  unsigned rows[4] = {};
  EXPECT_EQ(n.nvmlDeviceGetRemappedRows(device(0), &rows[0], &rows[1], &rows[2], &rows[3]), NVML_SUCCESS);
  EXPECT_EQ(rows[2], 1U);
  EXPECT_EQ(n.nvmlDeviceGetTemperature(device(1), NVML_TEMPERATURE_GPU, &value), NVML_SUCCESS);
  EXPECT_NE(value, 91U);

  // Per-GPU failure, then a node-wide one.
  control.ok({{"cmd", "fail"}, {"gpu", 0}, {"function", "nvmlDeviceGetTemperature"}, {"error", "UNKNOWN"}});
  EXPECT_EQ(n.nvmlDeviceGetTemperature(device(0), NVML_TEMPERATURE_GPU, &value), NVML_ERROR_UNKNOWN);
  EXPECT_EQ(n.nvmlDeviceGetTemperature(device(1), NVML_TEMPERATURE_GPU, &value), NVML_SUCCESS);
  control.ok({{"cmd", "fail"}, {"gpu", 0}, {"function", "nvmlDeviceGetTemperature"}, {"error", nullptr}});
  EXPECT_EQ(n.nvmlDeviceGetTemperature(device(0), NVML_TEMPERATURE_GPU, &value), NVML_SUCCESS);
  control.ok({{"cmd", "fail"}, {"function", "nvmlDeviceGetCount"}, {"error", "DRIVER_NOT_LOADED"}});
  unsigned count = 0;
  EXPECT_EQ(n.nvmlDeviceGetCount(&count), NVML_ERROR_DRIVER_NOT_LOADED);
  EXPECT_EQ(n.nvmlDeviceGetCount_v2(&count), NVML_ERROR_DRIVER_NOT_LOADED) << "the unversioned name covers _v2";
  control.ok({{"cmd", "fail"}, {"function", "nvmlDeviceGetCount"}, {"error", nullptr}});
  EXPECT_EQ(n.nvmlDeviceGetCount_v2(&count), NVML_SUCCESS);

  // Processes replaced at run time.
  control.ok({{"cmd", "processes"},
              {"gpu", 2},
              {"processes", {{{"pid", 100}, {"used_memory_mib", 1024}}, {{"pid", 101}, {"used_memory_mib", 2048}}}}});
  nvmlProcessInfo_t infos[4] = {};
  count = 4;
  EXPECT_EQ(n.nvmlDeviceGetComputeRunningProcesses_v3(device(2), &count, infos), NVML_SUCCESS);
  EXPECT_EQ(count, 2U);
  EXPECT_EQ(infos[1].pid, 101U);
  const json gpu = control.ok({{"cmd", "get"}, {"gpu", 2}})["gpu"];
  EXPECT_EQ(gpu["memory"]["used_mib"], 3072);
  EXPECT_EQ(gpu["uuid"], uuid_of(device(2)));
}

TEST(FakeNvmlControl, MigReconfigurationKeepsSurvivingHandles) {
  const std::string socket = temp_path(".sock");
  Session session(profile("a100-mig-mixed.json"), socket);
  ASSERT_EQ(session.rc(), NVML_SUCCESS);
  Library& n = lib();
  nvmlDevice_t gpu1 = device(1);
  nvmlEventSet_t set = nullptr;
  ASSERT_EQ(n.nvmlEventSetCreate(&set), NVML_SUCCESS);
  ASSERT_EQ(n.nvmlDeviceRegisterEvents(gpu1, nvmlEventMigConfigChange, set), NVML_SUCCESS);

  std::vector<nvmlDevice_t> before(7);
  for (unsigned i = 0; i < 7; ++i) ASSERT_EQ(n.nvmlDeviceGetMigDeviceHandleByIndex(gpu1, i, &before[i]), NVML_SUCCESS);
  ControlClient control(socket);
  const json layout = control.ok({{"cmd", "get"}, {"gpu", 1}})["gpu"]["mig"];

  // Keep the first two 1g devices, replace the rest with a 3g.40gb.
  json mig = {{"mode", 1}, {"devices", json::array()}};
  mig["devices"].push_back(layout["devices"][0]);
  mig["devices"].push_back(layout["devices"][1]);
  mig["devices"].push_back({{"profile", "3g.40gb"}, {"gpu_instance_id", 2}, {"placement_start", 4},
                            {"uuid", "MIG-2f0c1d9e-7a4b-5c3d-9e8f-0a1b2c3d4e5f"}});
  control.ok({{"cmd", "mig"}, {"gpu", 1}, {"mig", mig}});

  nvmlEventData_t data{};
  ASSERT_EQ(n.nvmlEventSetWait_v2(set, &data, 5000), NVML_SUCCESS);
  EXPECT_EQ(data.eventType, nvmlEventMigConfigChange);
  EXPECT_EQ(data.device, gpu1);
  nvmlDevice_t after = nullptr;
  ASSERT_EQ(n.nvmlDeviceGetMigDeviceHandleByIndex(gpu1, 1, &after), NVML_SUCCESS);
  EXPECT_EQ(after, before[1]);
  ASSERT_EQ(n.nvmlDeviceGetMigDeviceHandleByIndex(gpu1, 2, &after), NVML_SUCCESS);
  EXPECT_EQ(name_of(after), "NVIDIA A100-SXM4-80GB MIG 3g.40gb");
  EXPECT_EQ(n.nvmlDeviceGetMigDeviceHandleByIndex(gpu1, 3, &after), NVML_ERROR_NOT_FOUND);
  char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
  EXPECT_EQ(n.nvmlDeviceGetUUID(before[5], uuid, sizeof(uuid)), NVML_ERROR_INVALID_ARGUMENT)
      << "a MIG handle whose device is gone";

  // An impossible layout is refused and changes nothing.
  json too_big = mig;
  too_big["devices"].push_back({{"profile", "4g.40gb"}, {"gpu_instance_id", 5},
                                {"uuid", "MIG-3a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"}});
  const json reply = control.send({{"cmd", "mig"}, {"gpu", 1}, {"mig", too_big}});
  EXPECT_EQ(reply["ok"], false);
  EXPECT_NE(reply["error"].get<std::string>().find("compute slices"), std::string::npos) << reply.dump();
  EXPECT_EQ(n.nvmlDeviceGetMigDeviceHandleByIndex(gpu1, 2, &after), NVML_SUCCESS);
  EXPECT_EQ(n.nvmlEventSetFree(set), NVML_SUCCESS);
}

TEST(FakeNvmlControl, XidOnMigDeviceCarriesInstanceIds) {
  const std::string socket = temp_path(".sock");
  Session session(profile("a100-mig-mixed.json"), socket);
  ASSERT_EQ(session.rc(), NVML_SUCCESS);
  Library& n = lib();
  nvmlEventSet_t set = nullptr;
  ASSERT_EQ(n.nvmlEventSetCreate(&set), NVML_SUCCESS);
  ASSERT_EQ(n.nvmlDeviceRegisterEvents(device(0), nvmlEventTypeXidCriticalError | nvmlEventTypeSingleBitEccError, set),
            NVML_SUCCESS);
  nvmlDevice_t mig = nullptr;
  ASSERT_EQ(n.nvmlDeviceGetMigDeviceHandleByIndex(device(0), 0, &mig), NVML_SUCCESS);
  EXPECT_EQ(n.nvmlDeviceRegisterEvents(mig, nvmlEventTypeXidCriticalError, set), NVML_ERROR_NOT_SUPPORTED);

  ControlClient control(socket);
  control.ok({{"cmd", "xid"}, {"uuid", uuid_of(mig)}, {"xid", 43}});
  control.ok({{"cmd", "ecc"}, {"gpu", 0}, {"type", "single"}});
  nvmlEventData_t data{};
  ASSERT_EQ(n.nvmlEventSetWait_v2(set, &data, 5000), NVML_SUCCESS);
  EXPECT_EQ(data.device, device(0));
  EXPECT_EQ(data.eventData, 43U);
  EXPECT_EQ(data.gpuInstanceId, 2U);
  EXPECT_EQ(data.computeInstanceId, 0U);
  ASSERT_EQ(n.nvmlEventSetWait_v2(set, &data, 5000), NVML_SUCCESS);
  EXPECT_EQ(data.eventType, nvmlEventTypeSingleBitEccError);
  unsigned long long corrected = 0;
  EXPECT_EQ(n.nvmlDeviceGetTotalEccErrors(device(0), NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_VOLATILE_ECC, &corrected),
            NVML_SUCCESS);
  EXPECT_EQ(corrected, 1U);

  // "get" without a GPU describes the whole node.
  const json node = control.ok({{"cmd", "get"}});
  EXPECT_EQ(node["gpus"].size(), 4U);
  EXPECT_EQ(node["driver_version"], "550.54.15");
  EXPECT_EQ(node["gpus"][0]["mig"]["devices"].size(), 4U);
  EXPECT_EQ(n.nvmlEventSetFree(set), NVML_SUCCESS);
}

TEST(FakeNvmlControl, BadCommandsGetClearErrors) {
  const std::string socket = temp_path(".sock");
  Session session(profile("t4-1x.json"), socket);
  ASSERT_EQ(session.rc(), NVML_SUCCESS);
  ControlClient control(socket);
  const auto error_of = [&control](const std::string& line) {
    const json reply = json::parse(control.send_raw(line));
    EXPECT_EQ(reply["ok"], false) << line;
    return reply.value("error", std::string());
  };
  EXPECT_NE(error_of("{not json").find("bad JSON"), std::string::npos);
  EXPECT_NE(error_of(R"({"cmd":"explode"})").find("unknown command"), std::string::npos);
  EXPECT_NE(error_of(R"({"cmd":"xid","gpu":3,"xid":79})").find("no GPU with index 3"), std::string::npos);
  EXPECT_NE(error_of(R"({"cmd":"xid","gpu":0})").find("missing field \"xid\""), std::string::npos);
  EXPECT_NE(error_of(R"({"cmd":"xid","gpu":0,"xid":79,"colour":"red"})").find("unknown field"), std::string::npos);
  EXPECT_NE(error_of(R"({"cmd":"set","gpu":0,"sensors":{"temperature_c":"hot"}})").find("temperature_c"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"cmd":"fail","gpu":0,"function":"nvmlNope","error":"UNKNOWN"})").find("nvmlNope"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"cmd":"mig","gpu":0,"mig":{"mode":1}})").find("not MIG capable"), std::string::npos);
  EXPECT_NE(error_of(R"({"cmd":"lost","uuid":"GPU-nope"})").find("GPU-nope"), std::string::npos);
  EXPECT_EQ(control.ok({{"cmd", "ping"}})["ok"], true) << "the server keeps serving";
}

TEST(FakeNvmlControl, CtlToolRoundTrip) {
  const std::string socket = temp_path(".sock");
  Session session(profile("a100-8x-nvswitch.json"), socket);
  ASSERT_EQ(session.rc(), NVML_SUCCESS);
  const auto run = [&socket](const std::string& command, std::string& output) {
    const std::string line = std::string(FAKE_NVML_CTL_PATH) + " --socket " + socket + " '" + command + "' 2>&1";
    FILE* pipe = ::popen(line.c_str(), "r");
    if (pipe == nullptr) return -1;
    char chunk[4096];
    output.clear();
    while (std::fgets(chunk, sizeof(chunk), pipe) != nullptr) output += chunk;
    const int status = ::pclose(pipe);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  };
  std::string output;
  EXPECT_EQ(run(R"({"cmd":"set","gpu":3,"sensors":{"power_mw":123000}})", output), 0) << output;
  EXPECT_NE(output.find("\"ok\":true"), std::string::npos) << output;
  unsigned power = 0;
  EXPECT_EQ(lib().nvmlDeviceGetPowerUsage(device(3), &power), NVML_SUCCESS);
  EXPECT_EQ(power, 123000U);
  EXPECT_EQ(run(R"({"cmd":"get","gpu":3})", output), 0) << output;
  EXPECT_NE(output.find("123000"), std::string::npos) << output;
  EXPECT_EQ(run(R"({"cmd":"get","gpu":42})", output), 1) << output;
  EXPECT_NE(output.find("no GPU with index 42"), std::string::npos) << output;
}

TEST(FakeNvmlControl, ShutdownWakesWaitersAndRemovesTheSocket) {
  const std::string socket = temp_path(".sock");
  ::setenv("FAKE_NVML_PROFILE", profile("t4-1x.json").c_str(), 1);
  ::setenv("FAKE_NVML_CONTROL", socket.c_str(), 1);
  ASSERT_EQ(lib().nvmlInit_v2(), NVML_SUCCESS);
  ::unsetenv("FAKE_NVML_PROFILE");
  ::unsetenv("FAKE_NVML_CONTROL");
  struct stat info {};
  EXPECT_EQ(::stat(socket.c_str(), &info), 0);
  EXPECT_TRUE(S_ISSOCK(info.st_mode));

  nvmlEventSet_t set = nullptr;
  ASSERT_EQ(lib().nvmlEventSetCreate(&set), NVML_SUCCESS);
  ASSERT_EQ(lib().nvmlDeviceRegisterEvents(device(0), nvmlEventTypeXidCriticalError, set), NVML_SUCCESS);
  auto waiter = std::async(std::launch::async, [set] {
    nvmlEventData_t data{};
    return lib().nvmlEventSetWait_v2(set, &data, 60000);
  });
  ControlClient idle_client(socket);  // an idle connection must not delay shutdown
  const auto start = steady_clock::now();
  ASSERT_EQ(lib().nvmlShutdown(), NVML_SUCCESS);
  EXPECT_EQ(waiter.get(), NVML_ERROR_UNINITIALIZED);
  EXPECT_LT(steady_clock::now() - start, milliseconds(5000));
  EXPECT_NE(::stat(socket.c_str(), &info), 0) << "socket file removed";
}

TEST(FakeNvmlControl, UnusableSocketPathFailsInit) {
  const std::string long_path = "/tmp/" + std::string(120, 'x') + ".sock";
  StderrCapture capture;
  Session session(profile("t4-1x.json"), long_path);
  EXPECT_EQ(session.rc(), NVML_ERROR_UNKNOWN);
  EXPECT_NE(capture.text().find("control socket"), std::string::npos);
  unsigned count = 0;
  EXPECT_EQ(lib().nvmlDeviceGetCount_v2(&count), NVML_ERROR_UNINITIALIZED);
}

// ===========================================================================
// Exported symbols.

TEST(FakeNvmlSymbols, EveryHeaderFunctionIsExported) {
  const std::string header = read_text(FAKE_NVML_ABI_HEADER);
  ASSERT_FALSE(header.empty()) << FAKE_NVML_ABI_HEADER;
  const std::regex prototype(R"((?:nvmlReturn_t|const char\*)\s+(nvml\w+)\s*\()");
  std::set<std::string> names;
  for (auto it = std::sregex_iterator(header.begin(), header.end(), prototype); it != std::sregex_iterator(); ++it) {
    names.insert((*it)[1].str());
  }
  EXPECT_GE(names.size(), 60U);
  for (const std::string& name : names) EXPECT_NE(::dlsym(lib().handle, name.c_str()), nullptr) << name;
}

TEST(FakeNvmlSymbols, LegacyLibraryLacksNewerEntryPoints) {
  Library& old = legacy_lib();
  ASSERT_NE(old.handle, nullptr);
  const std::vector<std::pair<const char*, const char*>> newer_and_older = {
      {"nvmlDeviceGetNumaNodeId", nullptr},
      {"nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"},
      {"nvmlDeviceGetRemappedRows", nullptr},
      {"nvmlDeviceGetGpuInstanceProfileInfoV", "nvmlDeviceGetGpuInstanceProfileInfo"},
      {"nvmlEventSetWait_v2", "nvmlEventSetWait"},
      {"nvmlDeviceGetMemoryInfo_v2", "nvmlDeviceGetMemoryInfo"},
      {"nvmlSystemGetCudaDriverVersion_v2", "nvmlSystemGetCudaDriverVersion"},
      {"nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses"},
      {"nvmlDeviceGetAttributes_v2", "nvmlDeviceGetAttributes"},
      {"nvmlComputeInstanceGetInfo_v2", "nvmlComputeInstanceGetInfo"},
      {"nvmlDeviceGetNvLinkRemotePciInfo_v2", "nvmlDeviceGetNvLinkRemotePciInfo"},
      {"nvmlDeviceGetHandleByPciBusId_v2", "nvmlDeviceGetHandleByPciBusId"},
  };
  for (const auto& [newer, older] : newer_and_older) {
    EXPECT_EQ(::dlsym(old.handle, newer), nullptr) << newer;
    EXPECT_NE(::dlsym(lib().handle, newer), nullptr) << newer;
    if (older != nullptr) {
      EXPECT_NE(::dlsym(old.handle, older), nullptr) << older;
    }
  }
  // It is otherwise a working library with its own state.
  Session session(profile("a100-8x-nvswitch.json"), "", old);
  ASSERT_EQ(session.rc(), NVML_SUCCESS);
  unsigned count = 0;
  EXPECT_EQ(old.nvmlDeviceGetCount(&count), NVML_SUCCESS);
  EXPECT_EQ(count, 8U);
  EXPECT_EQ(lib().nvmlDeviceGetCount(&count), NVML_ERROR_UNINITIALIZED) << "the full library is not initialised";
  nvmlDevice_t h = nullptr;
  ASSERT_EQ(old.nvmlDeviceGetHandleByPciBusId("0000:07:00.0", &h), NVML_SUCCESS);
  nvmlPciInfo_t remote{};
  EXPECT_EQ(old.nvmlDeviceGetNvLinkRemotePciInfo(h, 0, &remote), NVML_SUCCESS);
  EXPECT_STREQ(remote.busIdLegacy, "0000:C4:00.0");
}

// ===========================================================================
// Creating and destroying MIG instances (mig_instances.cc).

// A100-80GB driver profile ids (nvidia-smi mig -lgip).
constexpr unsigned kGi1g10 = 19;
constexpr unsigned kGi1g10me = 20;
constexpr unsigned kGi1g20 = 15;
constexpr unsigned kGi2g20 = 14;
constexpr unsigned kGi3g40 = 9;
constexpr unsigned kGi4g40 = 5;
constexpr unsigned kGi7g80 = 0;

std::vector<std::pair<unsigned, unsigned>> placements_of(nvmlDevice_t d, unsigned profile_id) {
  unsigned count = 0;
  EXPECT_EQ(lib().nvmlDeviceGetGpuInstancePossiblePlacements_v2(d, profile_id, nullptr, &count),
            NVML_SUCCESS);
  std::vector<nvmlGpuInstancePlacement_t> buffer(count);
  EXPECT_EQ(
      lib().nvmlDeviceGetGpuInstancePossiblePlacements_v2(d, profile_id, buffer.data(), &count),
      NVML_SUCCESS);
  std::vector<std::pair<unsigned, unsigned>> out;
  for (unsigned i = 0; i < count; ++i) out.emplace_back(buffer[i].start, buffer[i].size);
  return out;
}

unsigned mig_device_count(nvmlDevice_t d) {
  unsigned n = 0;
  nvmlDevice_t mig = nullptr;
  while (lib().nvmlDeviceGetMigDeviceHandleByIndex(d, n, &mig) == NVML_SUCCESS) ++n;
  return n;
}

TEST(FakeNvmlMigInstances, PlacementsFollowTheA100Table) {
  Session session(profile("a100-mig-mixed.json"));
  ASSERT_EQ(session.rc(), NVML_SUCCESS);
  using P = std::vector<std::pair<unsigned, unsigned>>;
  for (unsigned gpu : {0U, 3U}) {  // MIG on and off: placements do not depend on the mode
    const nvmlDevice_t d = device(gpu);
    EXPECT_EQ(placements_of(d, kGi1g10),
              (P{{0, 1}, {1, 1}, {2, 1}, {3, 1}, {4, 1}, {5, 1}, {6, 1}}));
    EXPECT_EQ(placements_of(d, kGi1g10me),
              (P{{0, 1}, {1, 1}, {2, 1}, {3, 1}, {4, 1}, {5, 1}, {6, 1}}));
    EXPECT_EQ(placements_of(d, kGi1g20), (P{{0, 2}, {2, 2}, {4, 2}, {6, 2}}));
    EXPECT_EQ(placements_of(d, kGi2g20), (P{{0, 2}, {2, 2}, {4, 2}}));
    EXPECT_EQ(placements_of(d, kGi3g40), (P{{0, 4}, {4, 4}}));
    EXPECT_EQ(placements_of(d, kGi4g40), (P{{0, 4}}));
    EXPECT_EQ(placements_of(d, kGi7g80), (P{{0, 8}}));
  }
  const nvmlDevice_t d = device(0);
  unsigned count = 1;
  nvmlGpuInstancePlacement_t one[1];
  EXPECT_EQ(lib().nvmlDeviceGetGpuInstancePossiblePlacements_v2(d, kGi1g10, one, &count),
            NVML_ERROR_INSUFFICIENT_SIZE);
  EXPECT_EQ(count, 7U);
  EXPECT_EQ(lib().nvmlDeviceGetGpuInstancePossiblePlacements_v2(d, 99, nullptr, &count),
            NVML_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(lib().nvmlDeviceGetGpuInstancePossiblePlacements_v2(d, kGi1g10, nullptr, nullptr),
            NVML_ERROR_INVALID_ARGUMENT);
}

TEST(FakeNvmlMigInstances, ProfileInfoV3HasTheV3Layout) {
  Session session(profile("a100-mig-mixed.json"));
  ASSERT_EQ(session.rc(), NVML_SUCCESS);
  nvmlGpuInstanceProfileInfo_v3_t v3{};
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wold-style-cast"
  v3.version = nvmlGpuInstanceProfileInfo_v3;
#pragma GCC diagnostic pop
  ASSERT_EQ(lib().nvmlDeviceGetGpuInstanceProfileInfoV(
                device(0), NVML_GPU_INSTANCE_PROFILE_3_SLICE,
                reinterpret_cast<nvmlGpuInstanceProfileInfo_v2_t*>(&v3)),
            NVML_SUCCESS);
  EXPECT_EQ(v3.id, kGi3g40);
  EXPECT_EQ(v3.sliceCount, 3U);
  EXPECT_EQ(v3.instanceCount, 2U);
  EXPECT_STREQ(v3.name, "MIG 3g.40gb");
  EXPECT_EQ(v3.capabilities, 0U);
}

TEST(FakeNvmlMigInstances, CreateUseAndDestroy) {
  const std::string socket = temp_path(".sock");
  Session session(profile("a100-mig-mixed.json"), socket);
  ASSERT_EQ(session.rc(), NVML_SUCCESS);
  ControlClient control(socket);
  control.ok({{"cmd", "mig"}, {"gpu", 2}, {"mig", {{"mode", 1}, {"devices", json::array()}}}});
  const nvmlDevice_t d = device(2);
  nvmlEventSet_t set = nullptr;
  ASSERT_EQ(lib().nvmlEventSetCreate(&set), NVML_SUCCESS);
  ASSERT_EQ(lib().nvmlDeviceRegisterEvents(d, nvmlEventMigConfigChange, set), NVML_SUCCESS);

  nvmlGpuInstance_t gi = nullptr;
  nvmlGpuInstancePlacement_t at4{4, 4};
  ASSERT_EQ(lib().nvmlDeviceCreateGpuInstanceWithPlacement(d, kGi3g40, &at4, &gi), NVML_SUCCESS);
  nvmlEventData_t event{};
  ASSERT_EQ(lib().nvmlEventSetWait_v2(set, &event, 1000), NVML_SUCCESS);
  EXPECT_EQ(event.eventType, nvmlEventMigConfigChange);
  EXPECT_EQ(mig_device_count(d), 0U)
      << "a GPU instance without a compute instance is no MIG device";

  nvmlGpuInstanceInfo_t info{};
  ASSERT_EQ(lib().nvmlGpuInstanceGetInfo(gi, &info), NVML_SUCCESS);
  EXPECT_EQ(info.profileId, kGi3g40);
  EXPECT_EQ(info.placement.start, 4U);
  EXPECT_EQ(info.placement.size, 4U);
  nvmlGpuInstance_t listed[2] = {};
  unsigned listed_count = 0;
  ASSERT_EQ(lib().nvmlDeviceGetGpuInstances(d, kGi3g40, listed, &listed_count), NVML_SUCCESS);
  EXPECT_EQ(listed_count, 1U);
  EXPECT_EQ(listed[0], gi);

  // Overlapping, misaligned and unknown.
  nvmlGpuInstance_t other = nullptr;
  nvmlGpuInstancePlacement_t p2g_at4{4, 2};
  EXPECT_EQ(lib().nvmlDeviceCreateGpuInstanceWithPlacement(d, kGi2g20, &p2g_at4, &other),
            NVML_ERROR_INSUFFICIENT_RESOURCES);
  nvmlGpuInstancePlacement_t p2g_at1{1, 2};
  EXPECT_EQ(lib().nvmlDeviceCreateGpuInstanceWithPlacement(d, kGi2g20, &p2g_at1, &other),
            NVML_ERROR_INVALID_ARGUMENT);
  nvmlGpuInstancePlacement_t at0{0, 4};
  EXPECT_EQ(lib().nvmlDeviceCreateGpuInstanceWithPlacement(d, 99, &at0, &other),
            NVML_ERROR_INVALID_ARGUMENT);
  nvmlGpuInstancePlacement_t whole{0, 8};
  EXPECT_EQ(lib().nvmlDeviceCreateGpuInstanceWithPlacement(d, kGi7g80, &whole, &other),
            NVML_ERROR_INSUFFICIENT_RESOURCES);

  // Compute instance: only the profile spanning the GPU instance.
  nvmlComputeInstanceProfileInfo_t ci_info{};
  EXPECT_EQ(lib().nvmlGpuInstanceGetComputeInstanceProfileInfo(
                gi, NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE,
                NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, &ci_info),
            NVML_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(lib().nvmlGpuInstanceGetComputeInstanceProfileInfo(
                gi, NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE, 7, &ci_info),
            NVML_ERROR_INVALID_ARGUMENT);
  ASSERT_EQ(lib().nvmlGpuInstanceGetComputeInstanceProfileInfo(
                gi, NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE,
                NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, &ci_info),
            NVML_SUCCESS);
  EXPECT_EQ(ci_info.sliceCount, 3U);
  nvmlComputeInstanceProfileInfo_v2_t ci_v2{};
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wold-style-cast"
  ci_v2.version = nvmlComputeInstanceProfileInfo_v2;
#pragma GCC diagnostic pop
  ASSERT_EQ(lib().nvmlGpuInstanceGetComputeInstanceProfileInfoV(
                gi, NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE,
                NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, &ci_v2),
            NVML_SUCCESS);
  EXPECT_STREQ(ci_v2.name, "MIG 3c.3g.40gb");
  ci_v2.version = 1;
  EXPECT_EQ(lib().nvmlGpuInstanceGetComputeInstanceProfileInfoV(
                gi, NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE,
                NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, &ci_v2),
            NVML_ERROR_ARGUMENT_VERSION_MISMATCH);

  nvmlComputeInstance_t ci = nullptr;
  ASSERT_EQ(lib().nvmlGpuInstanceCreateComputeInstance(gi, ci_info.id, &ci), NVML_SUCCESS);
  nvmlComputeInstance_t second = nullptr;
  EXPECT_EQ(lib().nvmlGpuInstanceCreateComputeInstance(gi, ci_info.id, &second),
            NVML_ERROR_INSUFFICIENT_RESOURCES);
  ASSERT_EQ(mig_device_count(d), 1U);
  nvmlDevice_t mig = nullptr;
  ASSERT_EQ(lib().nvmlDeviceGetMigDeviceHandleByIndex(d, 0, &mig), NVML_SUCCESS);
  EXPECT_EQ(uuid_of(mig).rfind("MIG-", 0), 0U);
  unsigned gi_id = 0;
  ASSERT_EQ(lib().nvmlDeviceGetGpuInstanceId(mig, &gi_id), NVML_SUCCESS);
  EXPECT_EQ(gi_id, info.id);

  // A second instance beside it.
  nvmlGpuInstance_t gi4 = nullptr;
  ASSERT_EQ(lib().nvmlDeviceCreateGpuInstanceWithPlacement(d, kGi4g40, &at0, &gi4), NVML_SUCCESS);
  EXPECT_NE(gi4, gi);

  // Destroy order: the compute instance first; processes block both.
  EXPECT_EQ(lib().nvmlGpuInstanceDestroy(gi), NVML_ERROR_IN_USE);
  control.ok(
      {{"cmd", "processes"},
       {"gpu", 2},
       {"processes",
        json::array({{{"pid", 77}, {"used_memory_mib", 10}, {"gpu_instance_id", info.id}}})}});
  EXPECT_EQ(lib().nvmlComputeInstanceDestroy(ci), NVML_ERROR_IN_USE);
  control.ok({{"cmd", "processes"}, {"gpu", 2}, {"processes", json::array()}});
  ASSERT_EQ(lib().nvmlComputeInstanceDestroy(ci), NVML_SUCCESS);
  EXPECT_EQ(lib().nvmlComputeInstanceDestroy(ci), NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(mig_device_count(d), 0U);
  ASSERT_EQ(lib().nvmlGpuInstanceDestroy(gi), NVML_SUCCESS);
  EXPECT_EQ(lib().nvmlGpuInstanceGetInfo(gi, &info), NVML_ERROR_INVALID_ARGUMENT);
  ASSERT_EQ(lib().nvmlGpuInstanceDestroy(gi4), NVML_SUCCESS);
  // The slices are free again: the whole GPU fits.
  ASSERT_EQ(lib().nvmlDeviceCreateGpuInstanceWithPlacement(d, kGi7g80, &whole, &other),
            NVML_SUCCESS);
  EXPECT_EQ(lib().nvmlGpuInstanceDestroy(other), NVML_SUCCESS);
  EXPECT_EQ(lib().nvmlEventSetFree(set), NVML_SUCCESS);
}

TEST(FakeNvmlMigInstances, InstanceCountAndMigModeLimitCreation) {
  const std::string socket = temp_path(".sock");
  Session session(profile("a100-mig-mixed.json"), socket);
  ASSERT_EQ(session.rc(), NVML_SUCCESS);
  ControlClient control(socket);
  nvmlGpuInstance_t gi = nullptr;
  nvmlGpuInstancePlacement_t at0{0, 1};
  // GPU 3 is not in MIG mode.
  EXPECT_EQ(lib().nvmlDeviceCreateGpuInstanceWithPlacement(device(3), kGi1g10, &at0, &gi),
            NVML_ERROR_NOT_SUPPORTED);
  control.ok({{"cmd", "mig"}, {"gpu", 2}, {"mig", {{"mode", 1}, {"devices", json::array()}}}});
  const nvmlDevice_t d = device(2);
  // 1g.10gb+me exists once per GPU (the one OFA).
  ASSERT_EQ(lib().nvmlDeviceCreateGpuInstanceWithPlacement(d, kGi1g10me, &at0, &gi), NVML_SUCCESS);
  nvmlGpuInstance_t again = nullptr;
  nvmlGpuInstancePlacement_t at1{1, 1};
  EXPECT_EQ(lib().nvmlDeviceCreateGpuInstanceWithPlacement(d, kGi1g10me, &at1, &again),
            NVML_ERROR_INSUFFICIENT_RESOURCES);
  // The GPU leaves MIG mode under the caller: its instance handles go stale.
  control.ok({{"cmd", "mig"}, {"gpu", 2}, {"mig", {{"mode", 0}}}});
  nvmlGpuInstanceInfo_t info{};
  EXPECT_EQ(lib().nvmlGpuInstanceGetInfo(gi, &info), NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(lib().nvmlGpuInstanceDestroy(gi), NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(lib().nvmlDeviceCreateGpuInstanceWithPlacement(d, kGi1g10, &at1, &again),
            NVML_ERROR_NOT_SUPPORTED);
}

TEST(FakeNvmlMigInstances, ComputeInstanceCreateFailsAfterTheGpuInstanceExists) {
  const std::string socket = temp_path(".sock");
  Session session(profile("a100-mig-mixed.json"), socket);
  ASSERT_EQ(session.rc(), NVML_SUCCESS);
  ControlClient control(socket);
  control.ok({{"cmd", "mig"}, {"gpu", 2}, {"mig", {{"mode", 1}, {"devices", json::array()}}}});
  control.ok({{"cmd", "fail"},
              {"gpu", 2},
              {"function", "nvmlGpuInstanceCreateComputeInstance"},
              {"error", "INSUFFICIENT_RESOURCES"}});
  const nvmlDevice_t d = device(2);
  nvmlGpuInstance_t gi = nullptr;
  nvmlGpuInstancePlacement_t at0{0, 2};
  ASSERT_EQ(lib().nvmlDeviceCreateGpuInstanceWithPlacement(d, kGi2g20, &at0, &gi), NVML_SUCCESS);
  nvmlComputeInstance_t ci = nullptr;
  EXPECT_EQ(
      lib().nvmlGpuInstanceCreateComputeInstance(gi, NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE, &ci),
      NVML_ERROR_INSUFFICIENT_RESOURCES);
  const json state = control.ok({{"cmd", "get"}, {"gpu", 2}});
  EXPECT_EQ(state["gpu"]["mig"]["devices"].size(), 1U) << "the GPU instance stays until destroyed";
  EXPECT_EQ(lib().nvmlGpuInstanceDestroy(gi), NVML_SUCCESS);
  EXPECT_EQ(control.ok({{"cmd", "get"}, {"gpu", 2}})["gpu"]["mig"]["devices"].size(), 0U);
}

}  // namespace
