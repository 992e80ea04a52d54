// Validates rendered Kubernetes manifests (the output of `kubectl kustomize`)
// offline, for scripts/deploy-check.sh:
//
//   node tests/deploy/validate.mjs [--adapter-rules FILE] [--scrape-config FILE]
//        [--agent-config-out DIR] RENDERED.yaml...
//
// --agent-config-out writes each rendering's node agent config.yaml (from the
// danqing-device-plugin-config ConfigMap) to DIR/<rendering>.config.yaml, and
// the agent container's environment (NAME=VALUE lines; the downward API's
// node name as "deploy-check-node") to DIR/<rendering>.env.
//
// 1. Schema: every object against the Kubernetes OpenAPI schemas compiled into
//    the pinned npm `kubernetes-models` (and its KEDA and prometheus-operator
//    packages for ScaledObject and PodMonitor). An apiVersion/kind they do not
//    know is an error, not a pass.
// 2. Unknown fields: the API server (kubectl's default --validate=strict)
//    rejects fields its schema lacks; the compiled schemas do not, so the
//    field names are checked against the packages' own type declarations.
// 3. Project checks (docs/operations.md, "What CI checks"):
//    - no container sets NVIDIA_VISIBLE_DEVICES (it overrides the GPU the
//      node agent assigned);
//    - no HPA uses a Resource/ContainerResource metric other than cpu/memory
//      (GPU utilisation is never a resource metric);
//    - every GPU resource (nvidia.com/*) has limits, and requests equal to them;
//    - every HPA Pods/Object metric is one the prometheus-adapter rules serve,
//      and none is GPU utilisation for pods that hold MIG devices only;
//    - HPA and ScaledObject targets exist; priority classes exist;
//    - KEDA's Prometheus triggers fail on an empty result (ignoreNullValues: "false");
//    - images are pinned (no :latest, no untagged image);
//    - the node agent's scrape keeps its pod labels (honor_labels / honorLabels);
//    - the service is scraped on its probe port, which uploads cannot starve;
//    - in dra/split mode the agent gets NODE_NAME from the downward API and
//      the kubelet's plugins_registry and plugins directories, and a
//      DeviceClass selects the configured driver.
//
// Exit 0 when everything passes, 1 with one line per problem otherwise,
// 2 on usage errors.
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import YAML from "yaml";

const here = path.dirname(fileURLToPath(import.meta.url));
const nodeModules = path.join(here, "node_modules");

// ---------------------------------------------------------------- models ----

// apiVersion -> [package, folder inside it]
function modelLocation(apiVersion) {
  const slash = apiVersion.indexOf("/");
  if (slash < 0) return ["kubernetes-models", apiVersion];  // core: v1
  const group = apiVersion.slice(0, slash);
  if (group === "keda.sh" || group === "eventing.keda.sh") {
    return ["@kubernetes-models/keda", apiVersion];
  }
  if (group === "monitoring.coreos.com") {
    return ["@kubernetes-models/prometheus-operator", apiVersion];
  }
  return ["kubernetes-models", apiVersion];
}

async function loadModel(apiVersion, kind) {
  const [pkg, dir] = modelLocation(apiVersion);
  const base = path.join(nodeModules, pkg, dir, kind);
  if (!fs.existsSync(base + ".js")) return null;
  const mod = await import(base + ".js");
  return { Model: mod[kind], dts: base + ".d.ts" };
}

// ------------------------------------------- field names from the .d.ts ----
// A small reader for the generated declaration files: interfaces made of
// quoted fields, Array<...>, inline object types, index signatures, unions
// and named references resolved through the file's imports.

function tokenize(text) {
  const tokens = [];
  const re = /\s+|\/\*[\s\S]*?\*\/|\/\/[^\n]*|"(?:[^"\\]|\\.)*"|[A-Za-z_$][\w$]*|-?\d+(?:\.\d+)?|./g;
  for (const m of text.matchAll(re)) {
    const t = m[0];
    if (/^\s/.test(t) || t.startsWith("/*") || t.startsWith("//")) continue;
    tokens.push(t);
  }
  return tokens;
}

class TypeReader {
  constructor(tokens) { this.t = tokens; this.i = 0; }
  peek() { return this.t[this.i]; }
  next() { return this.t[this.i++]; }
  expect(tok) {
    const got = this.next();
    if (got !== tok) throw new Error(`d.ts: expected ${tok}, got ${got}`);
  }
  // type := member ('|' member)*
  type() {
    if (this.peek() === "|") this.next();
    const alts = [this.member()];
    while (this.peek() === "|") { this.next(); alts.push(this.member()); }
    const objects = alts.filter((a) => a.kind !== "leaf");
    if (objects.length === 1) return objects[0];
    return objects.length === 0 ? { kind: "leaf" } : { kind: "any" };
  }
  member() {
    const tok = this.next();
    let result;
    if (tok === "{") {
      result = this.objectBody();
    } else if (tok === "Array" && this.peek() === "<") {
      this.next();
      const item = this.type();
      this.expect(">");
      result = { kind: "array", item };
    } else if (/^[A-Za-z_$]/.test(tok)) {
      result = /^I[A-Z]/.test(tok) ? { kind: "ref", name: tok } : { kind: "leaf" };
      if (this.peek() === "[") {  // IFoo["apiVersion"]
        this.next(); this.next(); this.expect("]");
        result = { kind: "leaf" };
      }
    } else {
      result = { kind: "leaf" };  // string or number literal
    }
    while (this.peek() === "[" && this.t[this.i + 1] === "]") {  // X[]
      this.i += 2;
      result = { kind: "array", item: result };
    }
    return result;
  }
  // after '{': fields until '}'
  objectBody() {
    const fields = new Map();
    let index = null;
    while (this.peek() !== "}") {
      const tok = this.next();
      if (tok === "[") {  // [key: string]: T;
        while (this.next() !== "]") { /* key: string */ }
        this.expect(":");
        index = this.type();
      } else {
        const name = tok.startsWith('"') ? JSON.parse(tok) : tok;
        if (this.peek() === "?") this.next();
        this.expect(":");
        fields.set(name, this.type());
      }
      if (this.peek() === ";" || this.peek() === ",") this.next();
    }
    this.expect("}");
    return index ? { kind: "map", item: index } : { kind: "object", fields };
  }
}

const interfaceCache = new Map();  // file -> {shape, imports}

function resolveImport(fromFile, spec) {
  let target = spec.startsWith(".")
    ? path.resolve(path.dirname(fromFile), spec)
    : path.join(nodeModules, spec);
  target = target.replace(/\.js$/, "");
  return target + ".d.ts";
}

function readInterface(file) {
  if (interfaceCache.has(file)) return interfaceCache.get(file);
  const text = fs.readFileSync(file, "utf8");
  const imports = new Map();
  for (const m of text.matchAll(/import \{([^}]*)\} from "([^"]+)"/g)) {
    for (const name of m[1].split(",").map((s) => s.trim()).filter(Boolean)) {
      imports.set(name, resolveImport(file, m[2]));
    }
  }
  const start = text.search(/export interface \w+(?: extends [\w, ]+)? \{/);
  let shape = { kind: "any" };
  if (start >= 0) {
    const tokens = tokenize(text.slice(text.indexOf("{", start)));
    const reader = new TypeReader(tokens);
    reader.expect("{");
    shape = reader.objectBody();
  } else {
    // `export type IFoo = string | number;` and the like.
    const alias = text.match(/export type \w+ = ([^;]+);/);
    if (alias) shape = new TypeReader(tokenize(alias[1])).type();
  }
  const entry = { shape, imports, file };
  interfaceCache.set(file, entry);
  return entry;
}

function unknownFields(value, shape, ctx, at, out) {
  if (value === null || value === undefined) return;
  switch (shape.kind) {
    case "ref": {
      const file = ctx.imports.get(shape.name);
      if (!file || !fs.existsSync(file)) return;  // unknown reference: no check
      const iface = readInterface(file);
      unknownFields(value, iface.shape, iface, at, out);
      return;
    }
    case "array":
      if (Array.isArray(value)) {
        value.forEach((v, i) => unknownFields(v, shape.item, ctx, `${at}[${i}]`, out));
      }
      return;
    case "map":
      if (typeof value === "object" && !Array.isArray(value)) {
        for (const [k, v] of Object.entries(value)) unknownFields(v, shape.item, ctx, `${at}.${k}`, out);
      }
      return;
    case "object":
      if (typeof value !== "object" || Array.isArray(value)) return;
      for (const [k, v] of Object.entries(value)) {
        const field = shape.fields.get(k);
        if (!field) {
          out.push(`${at ? at + "." : ""}${k}: unknown field (the API server rejects it)`);
          continue;
        }
        unknownFields(v, field, ctx, at ? `${at}.${k}` : k, out);
      }
      return;
    default:
      return;
  }
}

// -------------------------------------------------------- project checks ----

const podTemplatePaths = {
  Pod: (o) => o.spec,
  Deployment: (o) => o.spec?.template?.spec,
  DaemonSet: (o) => o.spec?.template?.spec,
  StatefulSet: (o) => o.spec?.template?.spec,
  ReplicaSet: (o) => o.spec?.template?.spec,
  Job: (o) => o.spec?.template?.spec,
  CronJob: (o) => o.spec?.jobTemplate?.spec?.template?.spec,
};

const GPU_RESOURCE = /^nvidia\.com\//;

function quantityEqual(a, b) {
  return String(a) === String(b);
}

function checkPodSpec(podSpec, problems) {
  const containers = [
    ...(podSpec.initContainers ?? []),
    ...(podSpec.containers ?? []),
    ...(podSpec.ephemeralContainers ?? []),
  ];
  for (const c of containers) {
    const where = `container ${c.name}`;
    for (const e of c.env ?? []) {
      if (e.name === "NVIDIA_VISIBLE_DEVICES") {
        problems.push(`${where}: sets NVIDIA_VISIBLE_DEVICES by hand; it overrides the GPU ` +
          `the node agent assigned (request nvidia.com/gpu instead)`);
      }
    }
    const limits = c.resources?.limits ?? {};
    const requests = c.resources?.requests ?? {};
    for (const name of new Set([...Object.keys(limits), ...Object.keys(requests)])) {
      if (!GPU_RESOURCE.test(name)) continue;
      if (!(name in limits)) {
        problems.push(`${where}: ${name} requested without a limit; GPU resources need ` +
          `requests = limits`);
      } else if (name in requests && !quantityEqual(requests[name], limits[name])) {
        problems.push(`${where}: ${name} requests ${requests[name]} != limits ${limits[name]}; ` +
          `GPU resources need requests = limits`);
      }
      if (name in limits && !/^[1-9][0-9]*$/.test(String(limits[name]))) {
        problems.push(`${where}: ${name} is ${limits[name]}; GPU resources are whole numbers`);
      }
    }
    const image = c.image ?? "";
    const lastPart = image.split("/").pop();
    if (!image.includes("@") && (!lastPart.includes(":") || lastPart.endsWith(":latest"))) {
      problems.push(`${where}: image "${image}" is not pinned (give a version tag or digest)`);
    }
  }
}

function checkHpaMetrics(hpa, served, problems) {
  for (const m of hpa.spec?.metrics ?? []) {
    if (m.type === "Resource" || m.type === "ContainerResource") {
      const name = (m.resource ?? m.containerResource)?.name;
      if (name !== "cpu" && name !== "memory") {
        problems.push(`metric type ${m.type} "${name}": resource metrics are only cpu and ` +
          `memory, this HPA never gets a value; use a Pods metric through prometheus-adapter`);
      }
    }
    if ((m.type === "Pods" || m.type === "Object") && served) {
      const name = (m.pods ?? m.object)?.metric?.name;
      if (!served.has(name)) {
        problems.push(`metric ${m.type} "${name}" is not served by the prometheus-adapter ` +
          `rules (${[...served].join(", ")}); the HPA would show <unknown>`);
      }
    }
  }
}

function adapterMetricNames(rulesFile, problems) {
  const doc = YAML.parse(fs.readFileSync(rulesFile, "utf8"));
  const names = new Set();
  for (const [i, r] of (doc?.rules ?? []).entries()) {
    const where = `${rulesFile}: rules[${i}]`;
    for (const key of ["seriesQuery", "metricsQuery"]) {
      if (typeof r[key] !== "string") problems.push(`${where}: ${key} missing`);
    }
    for (const tmpl of ["<<.Series>>", "<<.LabelMatchers>>", "<<.GroupBy>>"]) {
      if (typeof r.metricsQuery === "string" && !r.metricsQuery.includes(tmpl)) {
        problems.push(`${where}: metricsQuery lacks ${tmpl}`);
      }
    }
    const o = r.resources?.overrides ?? {};
    if (o.namespace?.resource !== "namespace" || o.pod?.resource !== "pod") {
      problems.push(`${where}: resources.overrides must map namespace and pod ` +
        `(the HPA asks for per-pod values)`);
    }
    const as = r.name?.as;
    if (as) names.add(as);
    else problems.push(`${where}: name.as missing`);
  }
  if (names.size === 0) problems.push(`${rulesFile}: no rules`);
  return names;
}

function checkScrapeConfig(file, problems) {
  const doc = YAML.parse(fs.readFileSync(file, "utf8"));
  const jobs = doc?.scrape_configs ?? [];
  const agent = jobs.find((j) => j.job_name === "danqing-device-plugin");
  if (!agent) problems.push(`${file}: no danqing-device-plugin job`);
  else if (agent.honor_labels !== true) {
    problems.push(`${file}: job danqing-device-plugin needs honor_labels: true (the namespace/pod ` +
      `labels name the pod holding each GPU, not the agent)`);
  }
  const service = jobs.find((j) => j.job_name === "danqing");
  if (!service) problems.push(`${file}: no danqing job`);
  else {
    const port = (service.relabel_configs ?? []).find((r) =>
      (r.source_labels ?? []).includes("__meta_kubernetes_pod_container_port_name") && r.action === "keep");
    if (port?.regex !== "probes") {
      problems.push(`${file}: job danqing must scrape the "probes" port (its own threads), ` +
        `not ${JSON.stringify(port?.regex ?? "every port")}`);
    }
  }
}

// ------------------------------------------------------------------ main ----

// ------------------------------------------------------- the node agent ----

function agentContainer(ds) {
  const cs = ds.spec?.template?.spec?.containers ?? [];
  return cs.find((c) => c.name === "agent") ?? cs[0];
}

// The agent container's environment as the kubelet sets it: literal values,
// and the downward API's spec.nodeName as a stand-in node name. CONFIG_FILE
// is left out (deploy-check.sh passes the rendered file itself).
function agentEnvironment(ds) {
  const env = [];
  for (const e of agentContainer(ds)?.env ?? []) {
    if (e.name === "CONFIG_FILE") continue;
    if (typeof e.value === "string") env.push([e.name, e.value]);
    else if (e.valueFrom?.fieldRef?.fieldPath === "spec.nodeName") env.push([e.name, "deploy-check-node"]);
  }
  return env;
}

// In dra or split mode (the rendering's agent config), the agent needs the
// node's name from the downward API (the DRA pool's name), the kubelet's
// plugin registration directory and its plugins directory (dra.sock and the
// prepared-claims checkpoint, on the node's disk).
function checkAgentDaemonSet(ds, objects, own) {
  const cm = objects.find((x) => x.kind === "ConfigMap" && x.metadata?.name === "danqing-device-plugin-config");
  let cfg = null;
  try {
    cfg = YAML.parse(cm?.data?.["config.yaml"] ?? "") ?? null;
  } catch {
    return;  // the agent's own parser reports it (deploy-check.sh --agent)
  }
  const mode = cfg?.danqing?.mode ?? "device-plugin";
  if (mode !== "dra" && mode !== "split") return;
  const c = agentContainer(ds);
  const nodeName = (c?.env ?? []).find((e) => e.name === "NODE_NAME");
  if (!cfg?.danqing?.nodeName && nodeName?.valueFrom?.fieldRef?.fieldPath !== "spec.nodeName") {
    own.push(`container ${c?.name}: danqing.mode ${mode} needs NODE_NAME from the downward API (fieldRef spec.nodeName): it names the DRA pool`);
  }
  const mounts = (c?.volumeMounts ?? []).map((m) => m.mountPath.replace(/\/+$/, ""));
  const registry = cfg?.danqing?.draPluginsRegistry ?? "/var/lib/kubelet/plugins_registry";
  if (!mounts.includes(registry)) {
    own.push(`container ${c?.name}: danqing.mode ${mode} needs the kubelet's plugin registration directory mounted at ${registry}`);
  }
  const driver = cfg?.danqing?.draDriverName ?? "gpu.danqing.io";
  const selects = (dc) => (dc.spec?.selectors ?? []).some((x) => (x.cel?.expression ?? "").includes(`"${driver}"`));
  if (!objects.some((x) => x.kind === "DeviceClass" && selects(x))) {
    own.push(`danqing.mode ${mode}: no DeviceClass in this rendering selects driver ${driver} (claims could not name its devices)`);
  }
  const pluginDir = cfg?.danqing?.draPluginDir ?? `/var/lib/kubelet/plugins/${driver}`;
  if (!mounts.some((m) => pluginDir === m || pluginDir.startsWith(m + "/"))) {
    own.push(`container ${c?.name}: danqing.mode ${mode} needs ${pluginDir} (dra.sock, the checkpoint) on a hostPath mount`);
  }
}

async function validateFile(file, served, problems, agentConfigOut) {
  const docs = YAML.parseAllDocuments(fs.readFileSync(file, "utf8"));
  const objects = [];
  for (const d of docs) {
    if (d.errors.length) {
      problems.push(`${file}: YAML: ${d.errors[0].message}`);
      continue;
    }
    const o = d.toJS();
    if (o) objects.push(o);
  }
  const names = new Set(objects.map((o) => `${o.kind}/${o.metadata?.namespace ?? ""}/${o.metadata?.name}`));
  const priorityClasses = new Set(objects.filter((o) => o.kind === "PriorityClass").map((o) => o.metadata.name));
  for (const o of objects) {
    const id = `${file}: ${o.kind}/${o.metadata?.namespace ? o.metadata.namespace + "/" : ""}${o.metadata?.name}`;
    const own = [];
    if (!o.apiVersion || !o.kind) {
      problems.push(`${id}: apiVersion and kind are required`);
      continue;
    }
    const model = await loadModel(o.apiVersion, o.kind);
    if (!model) {
      problems.push(`${id}: no schema for ${o.apiVersion} ${o.kind} (unknown or removed API)`);
      continue;
    }
    try {
      new model.Model(o).validate();
    } catch (e) {
      own.push(`schema: ${e.message}`);
    }
    const unknown = [];
    unknownFields(o, readInterface(model.dts).shape, readInterface(model.dts), "", unknown);
    own.push(...unknown);
    const podSpec = podTemplatePaths[o.kind]?.(o);
    if (podSpec) {
      checkPodSpec(podSpec, own);
      const pc = podSpec.priorityClassName;
      if (pc && !pc.startsWith("system-") && !priorityClasses.has(pc)) {
        own.push(`priorityClassName ${pc} is not defined in this rendering`);
      }
    }
    if (o.kind === "HorizontalPodAutoscaler") {
      checkHpaMetrics(o, served, own);
      // NVML has no utilisation for MIG devices: pods that hold only MIG
      // devices have no GPU utilisation series, and an HPA on it never scales.
      const ref = o.spec?.scaleTargetRef;
      const target = objects.find((t) => t.kind === (ref?.kind ?? "Deployment") &&
        t.metadata?.name === ref?.name && (t.metadata?.namespace ?? "") === (o.metadata?.namespace ?? ""));
      const gpus = new Set();
      for (const c of target?.spec?.template?.spec?.containers ?? []) {
        for (const k of Object.keys(c.resources?.limits ?? {})) if (k.startsWith("nvidia.com/")) gpus.add(k);
      }
      const migOnly = gpus.size > 0 && [...gpus].every((k) => k.startsWith("nvidia.com/mig-"));
      for (const m of o.spec?.metrics ?? []) {
        if (migOnly && m.type === "Pods" && /gpu_utilization/.test(m.pods?.metric?.name ?? "")) {
          own.push(`metric Pods "${m.pods.metric.name}": ${ref?.name}'s pods hold MIG devices only, ` +
            `which have no utilisation in NVML; scale on danqing_render_queue_depth`);
        }
      }
    }
    if (o.kind === "HorizontalPodAutoscaler" || o.kind === "ScaledObject") {
      const ref = o.spec?.scaleTargetRef;
      const target = `${ref?.kind ?? "Deployment"}/${o.metadata?.namespace ?? ""}/${ref?.name}`;
      if (!names.has(target)) own.push(`scaleTargetRef ${ref?.kind} ${ref?.name} is not in this rendering`);
    }
    if (o.kind === "ScaledObject") {
      for (const [i, t] of (o.spec?.triggers ?? []).entries()) {
        // KEDA reads an empty Prometheus result as 0 unless told to fail: a
        // lost scrape would shrink the Deployment instead of holding it.
        if (t.type === "prometheus" && String(t.metadata?.ignoreNullValues) !== "false") {
          own.push(`triggers[${i}]: set metadata.ignoreNullValues: "false" (an empty result must hold, not scale to the minimum)`);
        }
      }
    }
    if (o.kind === "PodMonitor" && o.metadata?.name === "danqing-device-plugin") {
      for (const ep of o.spec?.podMetricsEndpoints ?? []) {
        if (ep.honorLabels !== true) own.push("podMetricsEndpoints need honorLabels: true (pod labels of the GPU holder)");
      }
    }
    if (o.kind === "ConfigMap" && o.metadata?.name === "danqing-device-plugin-config" && agentConfigOut) {
      // The agent's own parser checks it (scripts/deploy-check.sh --agent).
      const out = path.join(agentConfigOut, path.basename(file, ".yaml") + ".config.yaml");
      fs.writeFileSync(out, o.data?.["config.yaml"] ?? "");
    }
    if (o.kind === "DaemonSet" && o.metadata?.name === "danqing-device-plugin") {
      checkAgentDaemonSet(o, objects, own);
      if (agentConfigOut) {
        // The environment the kubelet gives the agent, for its parser.
        const out = path.join(agentConfigOut, path.basename(file, ".yaml") + ".env");
        fs.writeFileSync(out, agentEnvironment(o).map(([k, v]) => `${k}=${v}\n`).join(""));
      }
    }
    if (o.kind === "ConfigMap") {
      for (const k of Object.keys(o.data ?? {})) {
        if (k === "NVIDIA_VISIBLE_DEVICES") own.push("key NVIDIA_VISIBLE_DEVICES: would reach containers through envFrom");
      }
    }
    for (const p of own) problems.push(`${id}: ${p}`);
  }
  return objects.length;
}

async function main(argv) {
  const files = [];
  let rulesFile = null;
  let scrapeFile = null;
  let agentConfigOut = null;
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === "--adapter-rules") rulesFile = argv[++i];
    else if (argv[i] === "--scrape-config") scrapeFile = argv[++i];
    else if (argv[i] === "--agent-config-out") agentConfigOut = argv[++i];
    else if (argv[i].startsWith("--")) {
      console.error(`validate.mjs: unknown option ${argv[i]}`);
      return 2;
    } else files.push(argv[i]);
  }
  if (files.length === 0) {
    console.error("usage: validate.mjs [--adapter-rules FILE] [--scrape-config FILE] [--agent-config-out DIR] RENDERED.yaml...");
    return 2;
  }
  const problems = [];
  const served = rulesFile ? adapterMetricNames(rulesFile, problems) : null;
  if (scrapeFile) checkScrapeConfig(scrapeFile, problems);
  let count = 0;
  for (const f of files) count += await validateFile(f, served, problems, agentConfigOut);
  for (const p of problems) console.log(`FAIL ${p}`);
  console.log(`validate: ${count} objects in ${files.length} renderings, ${problems.length} problems`);
  return problems.length ? 1 : 0;
}

process.exitCode = await main(process.argv.slice(2));
