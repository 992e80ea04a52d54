// Fake NVML: the control command language (State::handle_control). Each
// command is a JSON object with a "cmd" member; the reply is {"ok":true,...}
// or {"ok":false,"error":"..."}. README.md lists the commands.
//
// Thread-safety: handle_control() parses outside the lock, then runs the
// command with the state mutex held, so a command is atomic with respect to
// NVML calls and other commands.
#include <chrono>
#include <initializer_list>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>

#include "codes.h"
#include "state.h"

namespace fake_nvml {
namespace {

// A command that cannot be carried out; the message goes to the client.
class CommandError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

std::string in_quotes(std::string_view text) { return "\"" + std::string(text) + "\""; }

// Rejects members other than "cmd" and the listed ones (typos would
// otherwise be silently ignored).
void allow_only(const json& command, std::initializer_list<std::string_view> allowed) {
  for (const auto& [key, value] : command.items()) {
    if (key == "cmd") continue;
    bool known = false;
    for (const std::string_view name : allowed) known = known || key == name;
    if (!known) throw CommandError("unknown field " + in_quotes(key) + " for command " + in_quotes(command.at("cmd").get<std::string>()));
  }
}

unsigned get_uint(const json& command, std::string_view key, std::optional<unsigned> fallback = std::nullopt) {
  const auto it = command.find(key);
  if (it == command.end() || it->is_null()) {
    if (fallback) return *fallback;
    throw CommandError("missing field " + in_quotes(key));
  }
  if (!it->is_number_unsigned() && !(it->is_number_integer() && it->get<long long>() >= 0)) {
    throw CommandError(in_quotes(key) + " must be a non-negative integer, got " + it->dump());
  }
  const auto value = it->get<unsigned long long>();
  if (value > 0xFFFFFFFFULL) throw CommandError(in_quotes(key) + " is out of range");
  return static_cast<unsigned>(value);
}

const json& get_member(const json& command, std::string_view key) {
  const auto it = command.find(key);
  if (it == command.end()) throw CommandError("missing field " + in_quotes(key));
  return *it;
}

// The GPU (and MIG device) a command addresses: "gpu": index, or "uuid":
// a GPU UUID or a MIG device UUID.
struct Target {
  unsigned index = 0;
  Gpu* gpu = nullptr;
  const MigDevice* mig = nullptr;
};

std::optional<Target> find_target(Node& node, const json& command) {
  const bool by_index = command.contains("gpu");
  const bool by_uuid = command.contains("uuid");
  if (by_index && by_uuid) throw CommandError("give \"gpu\" or \"uuid\", not both");
  if (by_index) {
    const unsigned index = get_uint(command, "gpu");
    if (index >= node.gpus.size()) {
      throw CommandError("no GPU with index " + std::to_string(index) + " (this node has " +
                         std::to_string(node.gpus.size()) + ")");
    }
    return Target{index, &node.gpus[index], nullptr};
  }
  if (by_uuid) {
    const json& value = command["uuid"];
    if (!value.is_string()) throw CommandError("\"uuid\" must be a string");
    const auto& uuid = value.get_ref<const std::string&>();
    for (unsigned i = 0; i < node.gpus.size(); ++i) {
      Gpu& gpu = node.gpus[i];
      if (gpu.uuid == uuid) return Target{i, &gpu, nullptr};
      if (const MigDevice* device = gpu.find_mig_by_uuid(uuid)) return Target{i, &gpu, device};
    }
    throw CommandError("no GPU or MIG device with UUID " + in_quotes(uuid));
  }
  return std::nullopt;
}

Target require_target(Node& node, const json& command, bool mig_allowed) {
  const auto target = find_target(node, command);
  if (!target) throw CommandError("this command needs \"gpu\" (an index) or \"uuid\"");
  if (target->mig != nullptr && !mig_allowed) {
    throw CommandError("UUID " + in_quotes(target->mig->uuid) + " is a MIG device; this command addresses whole GPUs");
  }
  return *target;
}

std::uint64_t now_us() {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count());
}

json ok() { return {{"ok", true}}; }

// ---------------------------------------------------------------------------
// The commands. Each runs with the state mutex held.

json cmd_xid(State& state, const json& command) {
  allow_only(command, {"gpu", "uuid", "xid", "gpu_instance_id", "compute_instance_id"});
  const Target target = require_target(state.node(), command, true);
  QueuedEvent event;
  event.gpu = target.index;
  event.type = nvmlEventTypeXidCriticalError;
  event.data = get_uint(command, "xid");
  if (target.mig != nullptr) {
    event.gpu_instance_id = target.mig->gpu_instance_id;
    event.compute_instance_id = target.mig->compute_instance_id;
  }
  event.gpu_instance_id = get_uint(command, "gpu_instance_id", event.gpu_instance_id);
  event.compute_instance_id = get_uint(command, "compute_instance_id", event.compute_instance_id);
  state.queue_event(event);
  // When the event entered the queues, on the steady clock (CLOCK_MONOTONIC, the
  // same in every process of the machine): benchmarks time from here, leaving
  // out the control socket.
  json reply = ok();
  reply["queued_ns"] = std::chrono::duration_cast<std::chrono::nanoseconds>(
                           std::chrono::steady_clock::now().time_since_epoch())
                           .count();
  return reply;
}

json cmd_ecc(State& state, const json& command) {
  allow_only(command, {"gpu", "uuid", "type", "count"});
  const Target target = require_target(state.node(), command, true);
  const json& type = get_member(command, "type");
  const bool is_double = type == "double";
  if (!is_double && type != "single") throw CommandError("\"type\" must be \"double\" or \"single\"");
  const unsigned count = get_uint(command, "count", 1U);
  if (count == 0) throw CommandError("\"count\" must be at least 1");

  Sensors& sensors = target.gpu->sensors;
  auto& counter_volatile = is_double ? sensors.ecc_volatile.uncorrected : sensors.ecc_volatile.corrected;
  auto& counter_aggregate = is_double ? sensors.ecc_aggregate.uncorrected : sensors.ecc_aggregate.corrected;
  counter_volatile += count;
  counter_aggregate += count;

  QueuedEvent event;
  event.gpu = target.index;
  event.type = is_double ? nvmlEventTypeDoubleBitEccError : nvmlEventTypeSingleBitEccError;
  if (target.mig != nullptr) {
    event.gpu_instance_id = target.mig->gpu_instance_id;
    event.compute_instance_id = target.mig->compute_instance_id;
  }
  state.queue_event(event);
  return ok();
}

json cmd_lost(State& state, const json& command) {
  allow_only(command, {"gpu", "uuid", "lost", "xid"});
  const Target target = require_target(state.node(), command, false);
  bool lost = true;
  if (const auto it = command.find("lost"); it != command.end()) {
    if (!it->is_boolean()) throw CommandError("\"lost\" must be true or false");
    lost = it->get<bool>();
  }
  // "xid": true (default) queues XID 79, a number queues that XID, false none.
  std::optional<unsigned> xid = 79;
  if (const auto it = command.find("xid"); it != command.end()) {
    if (it->is_boolean()) {
      if (!it->get<bool>()) xid.reset();
    } else {
      xid = get_uint(command, "xid");
    }
  }
  const bool was_lost = target.gpu->lost;
  target.gpu->lost = lost;
  if (lost && !was_lost && xid) {
    QueuedEvent event;
    event.gpu = target.index;
    event.type = nvmlEventTypeXidCriticalError;
    event.data = *xid;
    state.queue_event(event);
  }
  if (lost && !was_lost) state.wake_event_sets();  // their sets now answer GPU_IS_LOST
  return ok();
}

json cmd_set(State& state, const json& command) {
  allow_only(command, {"gpu", "uuid", "sensors"});
  const Target target = require_target(state.node(), command, false);
  const json& update = get_member(command, "sensors");
  if (!update.is_object()) throw CommandError("\"sensors\" must be an object");
  json merged = sensors_to_json(target.gpu->sensors);
  merged.merge_patch(update);
  Sensors sensors = parse_sensors(merged, "sensors");
  const Gpu& gpu = *target.gpu;
  if (sensors.memory_used_mib && *sensors.memory_used_mib > gpu.memory_total_mib - gpu.memory_reserved_mib) {
    throw CommandError("sensors.memory_used_mib exceeds the GPU's usable memory");
  }
  target.gpu->sensors = sensors;
  return ok();
}

json cmd_processes(State& state, const json& command) {
  allow_only(command, {"gpu", "uuid", "processes"});
  const Target target = require_target(state.node(), command, false);
  target.gpu->processes = parse_processes(get_member(command, "processes"), *target.gpu, "processes");
  target.gpu->processes_timestamp_us = now_us();
  return ok();
}

json cmd_mig(State& state, const json& command) {
  allow_only(command, {"gpu", "uuid", "mig"});
  Node& node = state.node();
  const Target target = require_target(node, command, false);
  MigConfig mig = parse_mig(get_member(command, "mig"), *target.gpu, "mig");
  // MIG UUIDs must stay unique across the node.
  std::set<std::string, std::less<>> taken;
  for (unsigned i = 0; i < node.gpus.size(); ++i) {
    taken.insert(node.gpus[i].uuid);
    if (i == target.index) continue;
    for (const MigDevice& d : node.gpus[i].mig.devices) taken.insert(d.uuid);
  }
  for (const MigDevice& d : mig.devices) {
    if (taken.contains(d.uuid)) throw CommandError("UUID " + in_quotes(d.uuid) + " is already used on this node");
  }
  target.gpu->mig = std::move(mig);
  QueuedEvent event;
  event.gpu = target.index;
  event.type = nvmlEventMigConfigChange;
  state.queue_event(event);
  return ok();
}

json cmd_fail(State& state, const json& command) {
  allow_only(command, {"gpu", "uuid", "function", "error"});
  const auto target = find_target(state.node(), command);
  if (target && target->mig != nullptr) throw CommandError("\"fail\" addresses whole GPUs, not MIG devices");
  const json& function_value = get_member(command, "function");
  if (!function_value.is_string()) throw CommandError("\"function\" must be a string");
  const auto& function = function_value.get_ref<const std::string&>();
  if (function != "*" && !is_exported_function(function)) {
    throw CommandError(in_quotes(function) + " is not an NVML function this library exports (or \"*\")");
  }
  FailureMap& failures = target ? target->gpu->failures : state.node().failures;
  const json& error = get_member(command, "error");
  if (error.is_null()) {
    failures.erase(function);
    return ok();
  }
  if (!error.is_string()) throw CommandError("\"error\" must be a return-code name like \"UNKNOWN\", or null");
  const auto code = parse_return_code(error.get<std::string>());
  if (!code) throw CommandError("unknown NVML return code " + error.dump());
  if (*code == NVML_SUCCESS) {
    failures.erase(function);
  } else {
    failures[function] = *code;
  }
  return ok();
}

json cmd_get(State& state, const json& command) {
  allow_only(command, {"gpu", "uuid"});
  Node& node = state.node();
  if (const auto target = find_target(node, command)) {
    return {{"ok", true}, {"gpu", gpu_to_json(*target->gpu, target->index)}};
  }
  json gpus = json::array();
  for (unsigned i = 0; i < node.gpus.size(); ++i) gpus.push_back(gpu_to_json(node.gpus[i], i));
  json failures = json::object();
  for (const auto& [function, code] : node.failures) failures[function] = std::string(return_code_name(code));
  return {{"ok", true},
          {"driver_version", node.driver_version},
          {"cuda_driver_version", node.cuda_driver_version},
          {"failures", std::move(failures)},
          {"gpus", std::move(gpus)}};
}

json run_command(State& state, const json& command) {
  const auto it = command.find("cmd");
  if (it == command.end() || !it->is_string()) throw CommandError("missing \"cmd\" (a string)");
  const auto& name = it->get_ref<const std::string&>();
  if (name == "ping") {
    allow_only(command, {});
    return ok();
  }
  if (name == "xid") return cmd_xid(state, command);
  if (name == "ecc") return cmd_ecc(state, command);
  if (name == "lost") return cmd_lost(state, command);
  if (name == "set") return cmd_set(state, command);
  if (name == "processes") return cmd_processes(state, command);
  if (name == "mig") return cmd_mig(state, command);
  if (name == "fail") return cmd_fail(state, command);
  if (name == "get") return cmd_get(state, command);
  throw CommandError("unknown command " + in_quotes(name) +
                     " (known: ping, xid, ecc, lost, set, processes, mig, fail, get)");
}

json error_reply(const std::string& message) { return {{"ok", false}, {"error", message}}; }

}  // namespace

std::string State::handle_control(std::string_view line) {
  json reply;
  try {
    const json command = json::parse(line);
    if (!command.is_object()) throw CommandError("a command must be a JSON object");
    const auto held = lock();
    if (!initialised()) throw CommandError("NVML is not initialised");
    reply = run_command(*this, command);
  } catch (const json::parse_error& e) {
    reply = error_reply(std::string("bad JSON: ") + e.what());
  } catch (const CommandError& e) {
    reply = error_reply(e.what());
  } catch (const ProfileError& e) {
    reply = error_reply(e.what());
  } catch (const std::exception& e) {
    reply = error_reply(std::string("internal error: ") + e.what());
  }
  // Replace invalid UTF-8 (echoed from a bad command) rather than throw.
  return reply.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace fake_nvml
