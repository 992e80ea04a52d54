// The driver's user-space files a CDI spec must carry for CUDA to work in a
// container started by a CDI-aware runtime alone (containerd or CRI-O with
// CDI on, no NVIDIA runtime): the libraries of the running driver version,
// its command-line tools, its GSP firmware and the daemons' sockets, each
// mounted read-only at its own path, and the two hooks NVIDIA's generator
// adds (a libcuda.so link for programs that dlopen the unversioned name, and
// an ld.so.cache update so that the mounted directory is searched).
//
// The files are looked for under the directory where the host's driver root
// is visible to this process (containerDriverRoot, /driver-root in the
// DaemonSet), and named in the spec by their host path (nvidiaDriverRoot +
// the same path), as NVIDIA's device plugin does.
//
// Thread-safety: pure functions over the file system.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace danqing::deviceplugin {

// Library directories of the distributions NVIDIA builds drivers for, in the
// order they are searched (relative to a driver root).
inline constexpr std::string_view kDriverLibraryDirs[] = {
    "/usr/lib64",  "/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/lib64",
    "/lib/x86_64-linux-gnu", "/lib/aarch64-linux-gnu", "/usr/lib"};

// Where a spec without hooks also mounts the SONAME links: CUDA's images
// set LD_LIBRARY_PATH=/usr/local/nvidia/lib:/usr/local/nvidia/lib64.
inline constexpr std::string_view kNoHookLibraryDir = "/usr/local/nvidia/lib64";

// `path` (absolute) under `root`: `path` itself when `root` is "" or "/";
// one trailing '/' of `root` is dropped. For host paths of device nodes and
// driver files, and for looking at them from here.
std::string UnderRoot(std::string_view root, std::string_view path);

// Whether `host` names the host's own / ("", "/", "//").
bool IsHostRoot(std::string_view host);

struct DriverRoot {
  std::string local;           // where this process reads it ("/driver-root", or "/" on the host)
  std::string host = "/";      // the same directory on the host: the spec's hostPath prefix
  std::string version;         // nvmlSystemGetDriverVersion, e.g. "550.54.15"
  std::string hook_path;       // nvidiaCTKPath, on the host; empty: no hooks
};

struct DriverFiles {
  struct Mount {
    std::string container_path;  // absolute, as seen in the driver root
    std::string host_path;       // absolute, on the host
    bool socket = false;         // mounted noexec
    bool operator==(const Mount&) const = default;
  };
  std::vector<Mount> mounts;
  std::vector<Mount> soname_links;     // libcuda.so.1 etc.; looked for only when there is no hook
  std::string library_dir;             // container path of libcuda.so.<version>'s directory; empty: not found
  std::string hook;                    // the hook to name; empty: none (not asked for, or seen missing)
  std::vector<std::string> warnings;   // each a sentence: what the spec goes without, and why

  bool operator==(const DriverFiles&) const = default;
};

// Finds the files of driver `root.version` under `root.local`. Libraries:
// every `*.so.<version>` in the first library directory that holds
// libcuda.so.<version>; then the tools, the GSP firmware and the daemons'
// sockets. Paths are resolved inside the root, as the kernel would with the
// root as "/" (a symlink anywhere on the path is followed, an absolute target
// is taken from the root, ".." stops there), and the host path names the
// file a path resolves to. No libcuda, no files at all: a driver is given
// whole or not. The hook is dropped, with a warning, where the host's / is
// the root and the hook is not in it. Nothing found is not an error:
// `warnings` says what is missing.
DriverFiles FindDriverFiles(const DriverRoot& root);

// Adds `files` to a CDI containerEdits object when the libraries were found:
// "mounts"; NVIDIA_VISIBLE_DEVICES=void (so that the NVIDIA runtime, where it
// also runs, adds no GPU of its own); and the "hooks" run at createContainer
// by files.hook (nvidia-ctk, called as `nvidia-ctk hook <cmd>`, or
// nvidia-cdi-hook, called as `nvidia-cdi-hook <cmd>`, chosen by the file name
// as NVIDIA does), or, with no hook, the SONAME links mounted as files, in
// the library directory and in kNoHookLibraryDir.
void AddDriverEdits(const DriverFiles& files, nlohmann::json& container_edits);

}  // namespace danqing::deviceplugin
