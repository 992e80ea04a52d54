#include "deviceplugin/cdi_driver.h"

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

namespace danqing::deviceplugin {
namespace {

namespace fs = std::filesystem;

std::string Under(const std::string& root, std::string_view path) {
  if (root.empty() || root == "/") return std::string(path);
  std::string out = root;
  while (out.size() > 1 && out.back() == '/') out.pop_back();
  return out + std::string(path);
}

// Follows `path` (absolute, relative to `root`) while it is a symlink, keeping
// every target inside `root`: an absolute target is re-rooted, and ".." never
// climbs above the root (lexically_normal drops it at "/"). Returns the path
// it ends at, relative to `root`, when that is of type `want`.
std::optional<std::string> Resolve(const std::string& root, std::string path, fs::file_type want) {
  for (int hop = 0; hop < 32; ++hop) {
    std::error_code ec;
    const auto st = fs::symlink_status(Under(root, path), ec);
    if (ec) return std::nullopt;
    if (st.type() != fs::file_type::symlink) {
      if (st.type() == want) return path;
      return std::nullopt;
    }
    const fs::path target = fs::read_symlink(Under(root, path), ec);
    if (ec) return std::nullopt;
    const fs::path next = target.is_absolute() ? target : fs::path(path).parent_path() / target;
    path = next.lexically_normal().string();
  }
  return std::nullopt;  // a loop
}

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

constexpr std::string_view kBinaryDirs[] = {"/usr/bin", "/usr/sbin", "/bin", "/sbin"};
constexpr std::string_view kBinaries[] = {"nvidia-smi", "nvidia-debugdump", "nvidia-persistenced",
                                          "nvidia-cuda-mps-control", "nvidia-cuda-mps-server"};
constexpr std::string_view kFirmwareDirs[] = {"/lib/firmware/nvidia/", "/usr/lib/firmware/nvidia/"};
// Each daemon's socket, at the first of its paths that exists.
constexpr std::string_view kSockets[][2] = {
    {"/run/nvidia-persistenced/socket", "/var/run/nvidia-persistenced/socket"},
    {"/run/nvidia-fabricmanager/socket", "/var/run/nvidia-fabricmanager/socket"}};

std::vector<std::string> SortedNames(const std::string& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    names.push_back(it->path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

nlohmann::json Hook(std::string_view hook_path, std::vector<std::string> args) {
  const std::string name = fs::path(hook_path).filename().string();
  std::vector<std::string> argv{name};
  // nvidia-ctk carries the hooks as a subcommand; nvidia-cdi-hook (toolkit
  // 1.17+) is the hooks alone.
  if (name == "nvidia-ctk") argv.emplace_back("hook");
  argv.insert(argv.end(), args.begin(), args.end());
  return {{"hookName", "createContainer"},
          {"path", hook_path},
          {"args", argv},
          {"env", nlohmann::json::array({"NVIDIA_CTK_DEBUG=false"})}};
}

}  // namespace

DriverFiles FindDriverFiles(const DriverRoot& root) {
  DriverFiles out;
  if (root.version.empty()) {
    out.warnings.push_back("the driver version is unknown, so its libraries cannot be told from others");
    return out;
  }
  std::error_code ec;
  if (root.local.empty() || !fs::is_directory(root.local, ec)) {
    out.warnings.push_back("the driver root '" + root.local +
                           "' is not a directory here (mount the host's driver root there read-only, "
                           "as deploy/overlays/cdi does)");
    return out;
  }
  std::set<std::string> seen;
  auto add = [&](const std::string& container_path, const std::string& resolved, bool socket) {
    if (!seen.insert(container_path).second) return;
    out.mounts.push_back({container_path, Under(root.host, resolved), socket});
  };

  const std::string libcuda = "libcuda.so." + root.version;
  for (std::string_view dir : kDriverLibraryDirs) {
    if (Resolve(root.local, std::string(dir) + "/" + libcuda, fs::file_type::regular)) {
      out.library_dir = dir;
      break;
    }
  }
  if (out.library_dir.empty()) {
    // All or nothing: tools without their libraries would only half-make a
    // driver, and the NVIDIA runtime (if any) then adds the whole of it.
    out.warnings.push_back("no " + libcuda + " in any library directory under '" + root.local +
                           "' (is the driver root right, and is it driver " + root.version + "?)");
    return out;
  }
  const std::string suffix = ".so." + root.version;
  for (const auto& name : SortedNames(Under(root.local, out.library_dir))) {
    if (!EndsWith(name, suffix)) continue;
    const std::string path = out.library_dir + "/" + name;
    if (auto r = Resolve(root.local, path, fs::file_type::regular)) add(path, *r, false);
  }

  for (std::string_view bin : kBinaries) {
    for (std::string_view dir : kBinaryDirs) {
      const std::string path = std::string(dir) + "/" + std::string(bin);
      if (auto r = Resolve(root.local, path, fs::file_type::regular)) {
        add(path, *r, false);
        break;
      }
    }
  }

  for (std::string_view base : kFirmwareDirs) {
    const std::string dir = std::string(base) + root.version;
    if (!fs::is_directory(Under(root.local, dir), ec)) continue;
    for (const auto& name : SortedNames(Under(root.local, dir))) {
      if (name.rfind("gsp", 0) != 0 || !EndsWith(name, ".bin")) continue;
      const std::string path = dir + "/" + name;
      if (auto r = Resolve(root.local, path, fs::file_type::regular)) add(path, *r, false);
    }
    break;
  }

  for (const auto& paths : kSockets) {
    for (std::string_view p : paths) {
      if (auto r = Resolve(root.local, std::string(p), fs::file_type::socket)) {
        add(std::string(p), *r, true);
        break;
      }
    }
  }
  return out;
}

void AddDriverEdits(const DriverFiles& files, std::string_view hook_path, nlohmann::json& container_edits) {
  if (files.mounts.empty()) return;
  nlohmann::json& mounts = container_edits["mounts"];
  if (!mounts.is_array()) mounts = nlohmann::json::array();
  for (const auto& m : files.mounts) {
    nlohmann::json options = {"ro", "nosuid", "nodev", "bind"};
    if (m.socket) options.push_back("noexec");
    mounts.push_back({{"hostPath", m.host_path}, {"containerPath", m.container_path}, {"options", options}});
  }
  if (files.library_dir.empty()) return;
  // The spec now gives the container a complete driver: keep the NVIDIA
  // runtime's own hook from adding GPUs beside it (an image that sets
  // NVIDIA_VISIBLE_DEVICES=all, as CUDA's do, would get every GPU of the
  // node), as NVIDIA's specs do. Left out when the libraries were not found:
  // the NVIDIA runtime is then what completes the container.
  nlohmann::json& env = container_edits["env"];
  if (!env.is_array()) env = nlohmann::json::array();
  env.push_back("NVIDIA_VISIBLE_DEVICES=void");
  if (hook_path.empty()) return;
  nlohmann::json& hooks = container_edits["hooks"];
  if (!hooks.is_array()) hooks = nlohmann::json::array();
  // Programs that dlopen("libcuda.so") (the development name, which the
  // driver does not install) find the driver too; ldconfig makes the
  // libcuda.so.1 link itself.
  hooks.push_back(Hook(hook_path, {"create-symlinks", "--link", "libcuda.so.1::" + files.library_dir + "/libcuda.so"}));
  hooks.push_back(Hook(hook_path, {"update-ldcache", "--folder", files.library_dir}));
}

}  // namespace danqing::deviceplugin
