// doctor: checks a GPU node the way an operator would, and says how to fix
// what is wrong. `danqing-device-plugin doctor` prints the findings.
//
// Checks, in order: the configuration; the NVIDIA driver through NVML and
// the GPUs it reports; the device nodes containers need; the kubelet's
// device-plugin directory and socket; the pod-resources socket; the CDI
// directory; the container runtime's CDI setting (when its config file is
// readable); the DRA side in dra/split mode (registration directory present
// and writable, its socket, the API server reachable with the agent's
// credentials and their permissions (SelfSubjectAccessReviews), this
// driver's DeviceClasses, checkpoint sane, claim source); device events; and each GPU's health with
// reasons: the running agent's view when one answers on this host's metricsAddr (it saw the XIDs
// and ECC events), else one reading of the sensors.
//
// Thread-safety: a function of its inputs and the filesystem.
#pragma once

#include <string>
#include <vector>

#include "agent/agent.h"
#include "common/status.h"
#include "config/config.h"

namespace danqing::agent {

struct Finding {
  enum class Level { kOk, kInfo, kWarn, kFail };
  Level level = Level::kOk;
  std::string check;   // "kubelet socket"
  std::string detail;  // what was found
  std::string fix;     // what to do; empty for OK
};

struct DoctorOptions {
  // Container runtime configuration files read for their CDI setting.
  std::string containerd_config = "/etc/containerd/config.toml";
  std::string crio_config = "/etc/crio/crio.conf";
  // The API server, for the DRA checks (dra/split mode): a kubeconfig file;
  // empty: the in-cluster config from `service_account_dir` (the pod's
  // service account, as the agent itself reaches the API server).
  std::string kubeconfig;
  std::string service_account_dir = "/var/run/secrets/kubernetes.io/serviceaccount";
};

// `config` is the resolved configuration or the error resolving it (the
// other checks then run on the defaults).
std::vector<Finding> RunDoctor(const Result<config::Config>& config, const BackendFactory& factory,
                               const DoctorOptions& options = {});

// "[ ok ] check: detail" lines, with "       fix: ..." under problems, and
// a summary line.
std::string RenderFindings(const std::vector<Finding>& findings);

bool AnyFailed(const std::vector<Finding>& findings);

}  // namespace danqing::agent
