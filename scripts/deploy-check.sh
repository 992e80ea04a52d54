#!/usr/bin/env bash
# Validates deploy/ offline: renders every kustomization with `kubectl
# kustomize`, validates every object against the Kubernetes OpenAPI schemas
# (tests/deploy/validate.mjs, pinned npm kubernetes-models) and runs the
# project's checks; optionally parses each overlay's node agent config with
# the agent itself.
#
#   scripts/deploy-check.sh [--root DIR] [--agent PATH] [--keep DIR]
#
#   --root DIR    the tree to check (default: this repository); the
#                 planted-mistake tests point it at a modified copy
#   --agent PATH  danqing-device-plugin binary: each rendered config.yaml must
#                 parse (it is run with a missing NVML library and the
#                 DaemonSet's environment: exit 3 = the config is fine,
#                 exit 2 = the config is wrong)
#   --keep DIR    write the renderings to DIR instead of a temporary folder
#
# Exit 0: all good; 1: a check failed (each problem on a FAIL line);
# 2: a tool is missing (kubectl with kustomize v4+, node, the npm packages).
set -uo pipefail

here="$(cd "$(dirname "$0")/.." && pwd)"
root="$here"
agent=""
keep=""
while (($#)); do
  case "$1" in
    --root) root="$2"; shift 2 ;;
    --agent) agent="$2"; shift 2 ;;
    --keep) keep="$2"; shift 2 ;;
    *) echo "deploy-check: unknown argument $1" >&2; exit 2 ;;
  esac
done

if ! command -v kubectl >/dev/null 2>&1; then
  echo "deploy-check: kubectl not found (it renders the kustomizations); see scripts/setup.sh" >&2
  exit 2
fi
kver="$(kubectl version --client 2>/dev/null | sed -n 's/^Kustomize Version: v\([0-9]*\).*/\1/p')"
if [ -z "$kver" ] || [ "$kver" -lt 4 ]; then
  echo "deploy-check: kubectl's kustomize is v${kver:-?}; v4 or later is needed (kubectl 1.21+)" >&2
  exit 2
fi
if ! command -v node >/dev/null 2>&1 || [ ! -d "$here/tests/deploy/node_modules/kubernetes-models" ]; then
  echo "deploy-check: node and tests/deploy/node_modules are needed; run scripts/setup.sh" >&2
  exit 2
fi

if [ -n "$keep" ]; then
  out="$keep"; mkdir -p "$out"
else
  out="$(mktemp -d)"; trap 'rm -rf "$out"' EXIT
fi

failed=0
fail() { echo "FAIL $*"; failed=1; }

# 1. Render every kustomization an operator applies.
renders=()
targets=()
for d in "$root"/deploy/overlays/*/ "$root"/deploy/monitoring/prometheus-operator/; do
  [ -f "$d/kustomization.yaml" ] || continue
  targets+=("$d")
done
if ((${#targets[@]} == 0)); then
  fail "no kustomizations under $root/deploy"
fi
for d in "${targets[@]}"; do
  name="$(basename "$d")"
  if kubectl kustomize "$d" >"$out/$name.yaml" 2>"$out/$name.err"; then
    echo "rendered $name: $(grep -c '^kind:' "$out/$name.yaml") objects"
    renders+=("$out/$name.yaml")
  else
    fail "kubectl kustomize ${d#"$root"/}: $(tr '\n' ' ' <"$out/$name.err")"
  fi
done

# 2. Schemas, unknown fields and the project's checks.
mkdir -p "$out/agent-config"
if ((${#renders[@]})); then
  node "$here/tests/deploy/validate.mjs" \
    --adapter-rules "$root/deploy/autoscaling/prometheus-adapter/config.yaml" \
    --scrape-config "$root/deploy/monitoring/prometheus-scrape.yaml" \
    --agent-config-out "$out/agent-config" \
    "${renders[@]}" || failed=1
fi

# 3. Images: only the node agent's image may ask the NVIDIA runtime for GPUs
#    (it needs them all to run NVML); the service gets its GPU from Allocate.
for f in "$root"/deploy/images/*.Containerfile; do
  [ -e "$f" ] || continue
  case "$(basename "$f")" in
    device-plugin.Containerfile) ;;
    *) if grep -v '^[[:space:]]*#' "$f" | grep -q 'NVIDIA_VISIBLE_DEVICES'; then
         fail "${f#"$root"/}: sets NVIDIA_VISIBLE_DEVICES; only the node agent's image may"
       fi ;;
  esac
  if grep -Eiq '^[[:space:]]*FROM[[:space:]]+[^[:space:]]+:latest' "$f"; then
    fail "${f#"$root"/}: FROM an unpinned :latest image"
  fi
done

# 4. The node agent's own parser on each rendered config.
if [ -n "$agent" ]; then
  for c in "$out"/agent-config/*.config.yaml; do
    [ -e "$c" ] || continue
    # With the environment the DaemonSet gives it (NODE_NAME from the
    # downward API as a stand-in name), as the kubelet would start it.
    envs=()
    if [ -f "${c%.config.yaml}.env" ]; then
      mapfile -t envs <"${c%.config.yaml}.env"
    fi
    env ${envs[@]+"${envs[@]}"} "$agent" --config-file "$c" \
      --nvml-lib /nonexistent/libnvidia-ml.so.1 gpus >/dev/null 2>"$out/agent.err"
    rc=$?
    if [ "$rc" -eq 3 ]; then
      echo "agent config $(basename "$c" .config.yaml): parses"
    else
      fail "agent config of $(basename "$c" .config.yaml) (exit $rc): $(tr '\n' ' ' <"$out/agent.err")"
    fi
  done
fi

# (No promtool step: Debian's prometheus is built without Kubernetes service
# discovery, so its promtool rejects kubernetes_sd_configs. validate.mjs
# checks the scrape config's honor_labels instead.)

if ((failed)); then
  echo "deploy-check: FAILED"
  exit 1
fi
echo "deploy-check: ok"
