// Planted-mistake tests for scripts/deploy-check.sh: the unchanged deploy/
// passes, and each mistake planted in a copy of it makes the check fail with
// a message that names the mistake.
//
//   node --test tests/deploy/        (ctest runs it as deploy_planted_test)
//
// DANQING_DEVICE_PLUGIN_BIN (set by ctest) enables the agent-config cases.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

const repo = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const check = path.join(repo, "scripts/deploy-check.sh");
const agent = process.env.DANQING_DEVICE_PLUGIN_BIN ?? "";

// A copy of deploy/ with `edit(root)` applied; returns the check's result.
function runCheck(edit, { withAgent = false } = {}) {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), "danqing-deploy-"));
  try {
    fs.cpSync(path.join(repo, "deploy"), path.join(root, "deploy"), { recursive: true });
    if (edit) edit(root);
    const args = ["--root", root];
    if (withAgent) args.push("--agent", agent);
    const r = spawnSync(check, args, { encoding: "utf8" });
    return { status: r.status, out: r.stdout + r.stderr };
  } finally {
    fs.rmSync(root, { recursive: true, force: true });
  }
}

// Replaces `from` (must occur) with `to` in deploy/<file>.
function replaceIn(file, from, to) {
  return (root) => {
    const p = path.join(root, "deploy", file);
    const text = fs.readFileSync(p, "utf8");
    assert.ok(text.includes(from), `${file} lacks ${JSON.stringify(from)}: test out of date`);
    fs.writeFileSync(p, text.replace(from, to));
  };
}

function expectFailure(result, ...messages) {
  assert.equal(result.status, 1, `expected exit 1, got ${result.status}:\n${result.out}`);
  for (const m of messages) {
    assert.ok(result.out.includes(m), `output lacks ${JSON.stringify(m)}:\n${result.out}`);
  }
}

// Each case runs the whole check (6 renderings, one validation) on its own
// copy; a few at once keep the suite short on a 2-core machine. (The cases
// are not indented: their YAML snippets are whitespace-exact.)
describe("deploy-check", { concurrency: 3 }, () => {

test("the unchanged manifests pass", () => {
  const r = runCheck(null, { withAgent: agent !== "" });
  assert.equal(r.status, 0, r.out);
  assert.match(r.out, /rendered exclusive: \d+ objects/);
  assert.match(r.out, /rendered keda: \d+ objects/);
  assert.match(r.out, /deploy-check: ok/);
});

test("article trap 1: NVIDIA_VISIBLE_DEVICES from spec.nodeName", () => {
  const r = runCheck(replaceIn("base/danqing/deployment.yaml",
    `                 "--redis", "redis://danqing-redis-0.danqing-redis:6379"]\n`,
    `                 "--redis", "redis://danqing-redis-0.danqing-redis:6379"]
          env:
            - name: NVIDIA_VISIBLE_DEVICES
              valueFrom:
                fieldRef:
                  fieldPath: spec.nodeName
`));
  expectFailure(r, "Deployment/danqing/danqing: container danqing: sets NVIDIA_VISIBLE_DEVICES by hand");
});

test("article trap 2: HPA on a Resource metric nvidia.com/gpu", () => {
  const r = runCheck(replaceIn("autoscaling/hpa/hpa.yaml",
    `    - type: Pods
      pods:
        metric:
          name: danqing_gpu_utilization
        target:`,
    `    - type: Resource
      resource:
        name: nvidia.com/gpu
        target:
          type: Utilization
          averageUtilization: 70
    - type: Pods
      pods:
        metric:
          name: danqing_gpu_utilization
        target:`));
  expectFailure(r, `metric type Resource "nvidia.com/gpu": resource metrics are only cpu and memory`);
});

test("GPU requests differ from limits", () => {
  const r = runCheck(replaceIn("base/danqing/deployment.yaml",
    `              memory: 2Gi\n              nvidia.com/gpu: 1\n            limits:`,
    `              memory: 2Gi\n              nvidia.com/gpu: 2\n            limits:`));
  expectFailure(r, "nvidia.com/gpu requests 2 != limits 1");
});

test("a MIG Deployment scaled on GPU utilisation", () => {
  const r = runCheck(replaceIn("overlays/mig-mixed/kustomization.yaml",
    "        value: danqing_render_queue_depth\n", "        value: danqing_gpu_utilization\n"));
  expectFailure(r, `metric Pods "danqing_gpu_utilization": danqing's pods hold MIG devices only`);
});

test("GPU requested without a limit", () => {
  const r = runCheck(replaceIn("overlays/batch-training/training-job.yaml",
    `              memory: 16Gi\n              nvidia.com/gpu: 1\n          securityContext:`,
    `              memory: 16Gi\n          securityContext:`));
  expectFailure(r, "Job/danqing/danqing-train: container trainer: nvidia.com/gpu requested without a limit");
});

test("a value of the wrong type fails the OpenAPI schema", () => {
  const r = runCheck(replaceIn("base/agent/daemonset.yaml",
    "containerPort: 9400", `containerPort: "metrics"`));
  expectFailure(r, "DaemonSet/kube-system/danqing-device-plugin: schema:", "containerPort must be integer");
});

test("a misspelt field is refused like the API server would", () => {
  const r = runCheck(replaceIn("base/priorityclasses.yaml",
    "preemptionPolicy: Never", "preemtionPolicy: Never"));
  expectFailure(r, "PriorityClass/danqing-batch: preemtionPolicy: unknown field");
});

test("a misspelt field in a KEDA ScaledObject", () => {
  const r = runCheck(replaceIn("overlays/keda/scaledobject.yaml",
    "minReplicaCount: 2", "minReplicas: 2"));
  expectFailure(r, "ScaledObject/danqing/danqing: spec.minReplicas: unknown field");
});

test("a KEDA trigger that reads no data as zero", () => {
  const r = runCheck(replaceIn("overlays/keda/scaledobject.yaml",
    `ignoreNullValues: "false"`, `ignoreNullValues: "true"`));
  expectFailure(r, `ScaledObject/danqing/danqing: triggers[0]: set metadata.ignoreNullValues: "false"`);
});

test("a kustomization that does not render", () => {
  const r = runCheck(replaceIn("overlays/time-sliced/kustomization.yaml",
    "  - ../../autoscaling/hpa\n", "  - ../../autoscaling/hpa\n  - missing.yaml\n"));
  expectFailure(r, "FAIL kubectl kustomize deploy/overlays/time-sliced/");
});

test("an HPA metric the adapter does not serve", () => {
  const r = runCheck(replaceIn("autoscaling/hpa/hpa.yaml",
    "name: danqing_gpu_utilization", "name: DCGM_FI_DEV_GPU_UTIL"));
  expectFailure(r, `metric Pods "DCGM_FI_DEV_GPU_UTIL" is not served by the prometheus-adapter rules`);
});

test("an adapter rule that does not map pods", () => {
  const r = runCheck(replaceIn("autoscaling/prometheus-adapter/config.yaml",
    `        pod: {resource: "pod"}\n    name:\n      matches: "^danqing_pod_gpu_utilization$"`,
    `    name:\n      matches: "^danqing_pod_gpu_utilization$"`));
  expectFailure(r, "rules[0]: resources.overrides must map namespace and pod");
});

test("scraping the agent without honor_labels", () => {
  const r = runCheck(replaceIn("monitoring/prometheus-scrape.yaml",
    "    honor_labels: true\n", ""));
  expectFailure(r, "job danqing-device-plugin needs honor_labels: true");
});

test("scraping the service on its upload port", () => {
  const r = runCheck(replaceIn("monitoring/prometheus-scrape.yaml",
    "        regex: probes\n", "        regex: http\n"));
  expectFailure(r, `job danqing must scrape the "probes" port (its own threads), not "http"`);
});

test("a PodMonitor for the agent without honorLabels", () => {
  const r = runCheck(replaceIn("monitoring/prometheus-operator/podmonitors.yaml",
    "      honorLabels: true\n", ""));
  expectFailure(r, "PodMonitor/kube-system/danqing-device-plugin: podMetricsEndpoints need honorLabels: true");
});

test("an unpinned image", () => {
  const r = runCheck(replaceIn("base/kustomization.yaml",
    "    newName: registry.example.com/danqing/danqing\n    newTag: 0.1.0",
    "    newName: registry.example.com/danqing/danqing\n    newTag: latest"));
  expectFailure(r, `image "registry.example.com/danqing/danqing:latest" is not pinned`);
});

test("a priority class that does not exist", () => {
  const r = runCheck(replaceIn("overlays/batch-training/training-job.yaml",
    "priorityClassName: danqing-batch", "priorityClassName: low-priority"));
  expectFailure(r, "priorityClassName low-priority is not defined");
});

test("the service image asking the runtime for every GPU", () => {
  const r = runCheck((root) => {
    const p = path.join(root, "deploy/images/danqing.Containerfile");
    fs.appendFileSync(p, "ENV NVIDIA_VISIBLE_DEVICES=all\n");
  });
  expectFailure(r, "deploy/images/danqing.Containerfile: sets NVIDIA_VISIBLE_DEVICES");
});

test("an agent config the agent refuses", { skip: agent === "" && "DANQING_DEVICE_PLUGIN_BIN not set" }, () => {
  const r = runCheck(replaceIn("overlays/mig-mixed/config.yaml",
    "migStrategy: mixed", "migStrategy: mixd"), { withAgent: true });
  expectFailure(r, "agent config of mig-mixed (exit 2)", `invalid MIG strategy "mixd"`);
});

test("a time-slicing config with one replica", { skip: agent === "" && "DANQING_DEVICE_PLUGIN_BIN not set" }, () => {
  const r = runCheck(replaceIn("overlays/time-sliced/config.yaml",
    "replicas: 4", "replicas: 1"), { withAgent: true });
  expectFailure(r, "agent config of time-sliced (exit 2)");
});

test("DRA overlay: the agent without NODE_NAME from the downward API", { skip: agent === "" && "DANQING_DEVICE_PLUGIN_BIN not set" }, () => {
  const r = runCheck(replaceIn("base/agent/daemonset.yaml",
    "            - name: NODE_NAME\n", "            - name: NODE_NAME_UNUSED\n"), { withAgent: true });
  expectFailure(r, "DaemonSet/kube-system/danqing-device-plugin: container agent: danqing.mode dra needs NODE_NAME",
    "agent config of dra (exit 2)", "needs danqing.nodeName");
});

test("DRA overlay: plugins_registry not mounted", () => {
  const r = runCheck(replaceIn("overlays/dra/kustomization.yaml",
    "          mountPath: /var/lib/kubelet/plugins_registry", "          mountPath: /var/lib/kubelet/plugins-registry"));
  expectFailure(r, "needs the kubelet's plugin registration directory mounted at /var/lib/kubelet/plugins_registry");
});

test("DRA overlay: a driver name no DeviceClass selects", () => {
  const r = runCheck(replaceIn("overlays/dra/config.yaml",
    "draDriverName: gpu.danqing.io", "draDriverName: gpu.example.com"));
  expectFailure(r, "no DeviceClass in this rendering selects driver gpu.example.com");
});

test("DRA overlay: a DeviceClass field the API does not have", () => {
  const r = runCheck(replaceIn("overlays/dra/deviceclasses.yaml",
    "  extendedResourceName: nvidia.com/gpu", "  extendedResource: nvidia.com/gpu"));
  expectFailure(r, "DeviceClass/nvidia-gpu.gpu.danqing.io", "extendedResource");
});

});
