#include "deviceplugin/cdi_driver.h"

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

namespace danqing::deviceplugin {
namespace {

namespace fs = std::filesystem;

std::vector<std::string_view> Components(std::string_view path) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < path.size()) {
    const size_t j = std::min(path.find('/', i), path.size());
    if (j > i) out.push_back(path.substr(i, j - i));
    i = j + 1;
  }
  return out;
}

std::string JoinComponents(const std::vector<std::string>& parts) {
  std::string out;
  for (const auto& p : parts) out += "/" + p;
  return out.empty() ? "/" : out;
}

// Resolves `path` (absolute, as seen from inside `root`) one component at a
// time, as the kernel would with `root` as "/" (openat2's RESOLVE_IN_ROOT):
// a symlink anywhere on the path is followed, an absolute target starts again
// at the root and ".." stops there. Each lstat is of a prefix already
// resolved, so no symlink of this process's own file system is followed (only
// those leading to `root` itself). Returns the resolved path, as seen from
// inside `root`, when it names a file of type `want`.
std::optional<std::string> Resolve(const std::string& root, std::string_view path, fs::file_type want) {
  std::vector<std::string> todo;  // components left, the next one last
  auto push = [&todo](std::string_view p) {
    const auto parts = Components(p);
    for (auto it = parts.rbegin(); it != parts.rend(); ++it) todo.emplace_back(*it);
  };
  push(path);
  // "name/" names a directory only, as for the kernel.
  if (!path.empty() && path.back() == '/') todo.insert(todo.begin(), ".");
  std::vector<std::string> done;  // resolved: no symlink among them
  fs::file_type type = fs::file_type::directory;
  int links = 0;
  while (!todo.empty()) {
    std::string c = std::move(todo.back());
    todo.pop_back();
    if (type != fs::file_type::directory) return std::nullopt;  // "file/more", "file/."
    if (c == ".") continue;
    if (c == "..") {
      if (!done.empty()) done.pop_back();
      continue;
    }
    done.push_back(std::move(c));
    const std::string here = UnderRoot(root, JoinComponents(done));
    std::error_code ec;
    const auto st = fs::symlink_status(here, ec);
    if (ec) return std::nullopt;
    if (st.type() != fs::file_type::symlink) {
      type = st.type();
      continue;
    }
    if (++links > 40) return std::nullopt;  // ELOOP
    const fs::path target = fs::read_symlink(here, ec);
    if (ec) return std::nullopt;
    done.pop_back();
    if (target.is_absolute()) done.clear();
    const std::string t = target.string();
    if (!t.empty() && t.back() == '/') todo.emplace_back(".");
    push(t);
  }
  if (type != want) return std::nullopt;
  return JoinComponents(done);
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

constexpr std::string_view kConsequence =
    "; a container given a GPU through CDI alone gets its device nodes but no CUDA driver (the NVIDIA "
    "runtime, where it runs, adds it)";

// The entries of `resolved_dir` (a Resolve result, as seen from inside
// `root`), sorted.
std::vector<std::string> SortedNames(const std::string& root, const std::string& resolved_dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (fs::directory_iterator it(UnderRoot(root, resolved_dir), ec), end; !ec && it != end; it.increment(ec)) {
    names.push_back(it->path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

nlohmann::json Hook(const std::string& hook_path, std::vector<std::string> args) {
  const std::string name = fs::path(hook_path).filename().string();
  std::vector<std::string> argv{name};
  // nvidia-ctk carries the hooks as a subcommand; nvidia-cdi-hook (toolkit
  // 1.16+) is the hooks alone.
  if (name == "nvidia-ctk") argv.emplace_back("hook");
  argv.insert(argv.end(), args.begin(), args.end());
  return {{"hookName", "createContainer"},
          {"path", hook_path},
          {"args", argv},
          {"env", nlohmann::json::array({"NVIDIA_CTK_DEBUG=false"})}};
}

}  // namespace

std::string UnderRoot(std::string_view root, std::string_view path) {
  if (root.empty() || root == "/") return std::string(path);
  if (root.back() == '/') root.remove_suffix(1);
  return std::string(root) + std::string(path);
}

bool IsHostRoot(std::string_view host) {
  return host.empty() || fs::path(host).lexically_normal() == "/";
}

DriverFiles FindDriverFiles(const DriverRoot& given) {
  DriverRoot root = given;
  // "//run/nvidia/driver/" names /run/nvidia/driver: host paths are built on it.
  root.host = IsHostRoot(given.host) ? "/" : fs::path(given.host).lexically_normal().string();
  while (root.host.size() > 1 && root.host.back() == '/') root.host.pop_back();
  DriverFiles out;
  if (root.version.empty()) {
    out.warnings.push_back("without the driver's files: the driver version is unknown, so its libraries cannot "
                           "be told from others" + std::string(kConsequence));
    return out;
  }
  std::error_code ec;
  if (root.local.empty() || !fs::is_directory(root.local, ec)) {
    out.warnings.push_back("without the driver's files: the driver root '" + root.local +
                           "' is not a directory here (mount the host's driver root there read-only, "
                           "as deploy/overlays/cdi does)" + std::string(kConsequence));
    return out;
  }
  std::set<std::string> seen;
  auto add = [&](std::vector<DriverFiles::Mount>& to, const std::string& container_path, const std::string& resolved,
                 bool socket) {
    if (!seen.insert(container_path).second) return;
    to.push_back({container_path, UnderRoot(root.host, resolved), socket});
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
    out.warnings.push_back("without the driver's files: no " + libcuda + " in any library directory under '" +
                           root.local + "' (is the driver root right, and is it driver " + root.version + "?)" +
                           std::string(kConsequence));
    return out;
  }
  // The hook runs on the host. Where the host's own / is what is mounted
  // here, a hook that is not there can be seen to be missing; a runtime would
  // refuse every container naming it, so the spec goes without.
  out.hook = root.hook_path;
  if (!out.hook.empty() && root.host == "/" &&
      !Resolve(root.local, out.hook, fs::file_type::regular)) {
    out.warnings.push_back("without hooks: the CDI hook " + out.hook + " (nvidiaCTKPath) is not on this node (no " +
                           UnderRoot(root.local, out.hook) +
                           "); the libraries' SONAME links are mounted instead of made by its update-ldcache, "
                           "in the library directory and in " + std::string(kNoHookLibraryDir) +
                           " (an image whose loader searches neither will not find libcuda)");
    out.hook.clear();
  }
  const std::string suffix = ".so." + root.version;
  // Found through libcuda.so.<version> just above: resolved once here.
  const auto resolved_dir = Resolve(root.local, out.library_dir, fs::file_type::directory);
  const std::vector<std::string> names =
      resolved_dir ? SortedNames(root.local, *resolved_dir) : std::vector<std::string>{};
  std::set<std::string> libraries;  // resolved
  for (const auto& name : names) {
    if (!EndsWith(name, suffix)) continue;
    const std::string path = out.library_dir + "/" + name;
    if (auto r = Resolve(root.local, path, fs::file_type::regular)) {
      add(out.mounts, path, *r, false);
      libraries.insert(*r);
    }
  }
  // The SONAME links (libcuda.so.1 -> libcuda.so.<version>), for a spec
  // without the hook whose ldconfig would otherwise make them; a library
  // directory holds thousands of other entries, so only then.
  if (out.hook.empty()) {
    for (const auto& name : names) {
      std::error_code link_ec;
      if (EndsWith(name, suffix) || fs::symlink_status(UnderRoot(root.local, *resolved_dir + "/" + name), link_ec)
                                            .type() != fs::file_type::symlink) {
        continue;
      }
      const std::string path = out.library_dir + "/" + name;
      auto r = Resolve(root.local, path, fs::file_type::regular);
      if (r && libraries.count(*r)) out.soname_links.push_back({path, UnderRoot(root.host, *r), false});
    }
  }

  for (std::string_view bin : kBinaries) {
    for (std::string_view dir : kBinaryDirs) {
      const std::string path = std::string(dir) + "/" + std::string(bin);
      if (auto r = Resolve(root.local, path, fs::file_type::regular)) {
        add(out.mounts, path, *r, false);
        break;
      }
    }
  }

  for (std::string_view base : kFirmwareDirs) {
    const std::string dir = std::string(base) + root.version;
    const auto resolved = Resolve(root.local, dir, fs::file_type::directory);
    if (!resolved) continue;
    for (const auto& name : SortedNames(root.local, *resolved)) {
      if (name.rfind("gsp", 0) != 0 || !EndsWith(name, ".bin")) continue;
      const std::string path = dir + "/" + name;
      if (auto r = Resolve(root.local, path, fs::file_type::regular)) add(out.mounts, path, *r, false);
    }
    break;
  }

  for (const auto& paths : kSockets) {
    for (std::string_view p : paths) {
      if (auto r = Resolve(root.local, p, fs::file_type::socket)) {
        add(out.mounts, std::string(p), *r, true);
        break;
      }
    }
  }

  return out;
}

void AddDriverEdits(const DriverFiles& files, nlohmann::json& container_edits) {
  if (files.library_dir.empty() || files.mounts.empty()) return;
  nlohmann::json& mounts = container_edits["mounts"];
  if (!mounts.is_array()) mounts = nlohmann::json::array();
  auto mount = [&mounts](const DriverFiles::Mount& m) {
    nlohmann::json options = {"ro", "nosuid", "nodev", "bind"};
    if (m.socket) options.push_back("noexec");
    mounts.push_back({{"hostPath", m.host_path}, {"containerPath", m.container_path}, {"options", options}});
  };
  for (const auto& m : files.mounts) mount(m);
  // Without the hook nobody runs ldconfig in the container, which would make
  // libcuda.so.1 and the other SONAME links: mount them as files. (With it,
  // a file mounted where ldconfig puts a link would make the hook fail.)
  if (files.hook.empty()) {
    for (const auto& m : files.soname_links) {
      mount(m);
      // Nor does the container's loader then search a directory its own
      // distribution does not use (a RHEL host's /usr/lib64 under an Ubuntu
      // image): the links go also where CUDA's images point LD_LIBRARY_PATH.
      if (files.library_dir != kNoHookLibraryDir) {
        DriverFiles::Mount copy = m;
        copy.container_path = std::string(kNoHookLibraryDir) + "/" + fs::path(m.container_path).filename().string();
        mount(copy);
      }
    }
  }
  // The spec now gives the container a complete driver: keep the NVIDIA
  // runtime's own hook from adding GPUs beside it (an image that sets
  // NVIDIA_VISIBLE_DEVICES=all, as CUDA's do, would get every GPU of the
  // node), as NVIDIA's specs do. Left out when the libraries were not found:
  // the NVIDIA runtime is then what completes the container.
  nlohmann::json& env = container_edits["env"];
  if (!env.is_array()) env = nlohmann::json::array();
  env.push_back("NVIDIA_VISIBLE_DEVICES=void");
  if (files.hook.empty()) return;
  nlohmann::json& hooks = container_edits["hooks"];
  if (!hooks.is_array()) hooks = nlohmann::json::array();
  // Programs that dlopen("libcuda.so") (the development name, which the
  // driver does not install) find the driver too; ldconfig makes the
  // libcuda.so.1 link itself.
  hooks.push_back(Hook(files.hook, {"create-symlinks", "--link", "libcuda.so.1::" + files.library_dir + "/libcuda.so"}));
  hooks.push_back(Hook(files.hook, {"update-ldcache", "--folder", files.library_dir}));
}

}  // namespace danqing::deviceplugin
