// The job routes of Server (server.h): uploads through the shared queue and
// store, status, server-sent events, QR codes, the exhibition wall, and the
// loop that claims jobs for this replica's render workers.
//
//   POST /v1/inscriptions?wait=N     202 Accepted {id, position, estimate_s} +
//                                    Location, or the answer of the synchronous
//                                    path when done within N s
//   GET  /v1/inscriptions/{id}       status: queued (position), rendering,
//                                    done (the inscription's JSON), failed (reason)
//   GET  /v1/inscriptions/{id}/image the image when done
//   GET  /v1/inscriptions/{id}/events text/event-stream of status changes
//   GET  /v1/inscriptions/{id}/qr    SVG QR code of the short URL /i/{id}
//   GET  /i/{id}                     the page, showing that inscription
//   GET  /wall, /v1/wall             the newest inscriptions (page, JSON)
#include <httplib.h>
#include <qrencode.h>
#include <spdlog/spdlog.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "http/bounded_server.h"
#include "service/assets.h"
#include "service/server.h"

namespace danqing::service {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

void JsonError(httplib::Response& res, int code, const std::string& message) {
  res.status = code;
  res.set_content(json{{"error", message}, {"status", code}}.dump(-1, ' ', false,
                                                                  json::error_handler_t::replace),
                  "application/json");
}

int CodeOf(const Status& st) {
  switch (st.code()) {
    case StatusCode::kInvalidArgument: return 400;
    case StatusCode::kNotFound: return 404;
    case StatusCode::kResourceExhausted: return 413;
    case StatusCode::kDeadlineExceeded:
    case StatusCode::kUnavailable: return 503;
    default: return 500;
  }
}

// A failed job's reason is stored as "<HTTP code> <message>".
std::pair<int, std::string> SplitReason(const std::string& reason) {
  if (reason.size() > 4 && reason[3] == ' ' &&
      std::isdigit(static_cast<unsigned char>(reason[0]))) {
    return {std::atoi(reason.substr(0, 3).c_str()), reason.substr(4)};
  }
  return {500, reason};
}

json StatusJson(const std::string& id, const JobStatus& s, double rate) {
  json j = {{"id", id},
            {"state", JobStateName(s.state)},
            {"status_url", "/v1/inscriptions/" + id},
            {"events_url", "/v1/inscriptions/" + id + "/events"}};
  if (s.state == JobState::kQueued || s.state == JobState::kRendering) {
    // Rendering: position 0, and the estimate is one job's time.
    const int64_t ahead = s.state == JobState::kQueued ? s.position : 0;
    j["position"] = ahead;
    if (rate > 0) j["estimate_s"] = std::ceil((static_cast<double>(ahead) + 1) / rate * 10) / 10;
  }
  if (s.state == JobState::kFailed) {
    auto [code, message] = SplitReason(s.reason);
    j["reason"] = message;
    j["code"] = code;
  }
  if (s.state == JobState::kDone) {
    j["image_url"] = "/v1/inscriptions/" + id + "/image";
    j["share_url"] = "/i/" + id;
    j["qr_url"] = "/v1/inscriptions/" + id + "/qr";
  }
  return j;
}

// The stored JSON with the state and the share links added.
std::string DoneJson(const std::string& id, const StoredInscription& s) {
  json j = json::parse(s.json, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return s.json;
  j["state"] = "done";
  j["share_url"] = "/i/" + id;
  j["qr_url"] = "/v1/inscriptions/" + id + "/qr";
  return j.dump();
}

// A host header fit to put in a URL: letters, digits, '.', '-', ':', '[', ']'.
std::string SafeHost(const std::string& host) {
  if (host.empty() || host.size() > 255) return "localhost";
  for (char c : host) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == ':' ||
          c == '[' || c == ']')) {
      return "localhost";
    }
  }
  return host;
}

// The QR code of `text` as SVG (one rect per dark module, 4-module quiet zone).
Result<std::string> QrSvg(const std::string& text) {
  QRcode* qr = QRcode_encodeString8bit(text.c_str(), 0, QR_ECLEVEL_M);
  if (!qr) return Internal("qrencode could not encode the URL");
  const int n = qr->width, size = n + 8;
  std::string svg = "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 " +
                    std::to_string(size) + " " + std::to_string(size) +
                    "\" shape-rendering=\"crispEdges\"><rect width=\"100%\" height=\"100%\" "
                    "fill=\"#fff\"/><path fill=\"#000\" d=\"";
  for (int y = 0; y < n; ++y) {
    for (int x = 0; x < n; ++x) {
      if (qr->data[y * n + x] & 1) {
        svg += "M" + std::to_string(x + 4) + " " + std::to_string(y + 4) + "h1v1h-1z";
      }
    }
  }
  svg += "\"/></svg>\n";
  QRcode_free(qr);
  return svg;
}

constexpr const char* kWallHtml = R"html(<!doctype html>
<html lang="zh"><head><meta charset="utf-8"><title>丹青识画 · wall</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
body{margin:0;background:#111;color:#eee;font-family:serif}
h1{font-weight:normal;margin:.5em 1em}
#wall{display:grid;grid-template-columns:repeat(auto-fill,minmax(320px,1fr));gap:12px;padding:12px}
figure{margin:0;background:#222;padding:6px}
figure img{width:100%;display:block}
figcaption{font-size:14px;padding:4px 2px;color:#ccc}
</style></head><body>
<h1>丹青识画 — the newest inscriptions</h1>
<div id="wall"></div>
<script>
const wall = document.getElementById('wall');
const shown = new Set();
async function refresh() {
  try {
    const r = await fetch('/v1/wall?n=24');
    if (!r.ok) return;
    const items = (await r.json()).inscriptions;
    for (const it of items.slice().reverse()) {
      if (shown.has(it.id)) continue;
      shown.add(it.id);
      const fig = document.createElement('figure');
      fig.dataset.id = it.id;
      const img = document.createElement('img');
      img.src = it.image_url; img.alt = it.title || '';
      const cap = document.createElement('figcaption');
      cap.textContent = (it.title || '') + (it.author ? ' · ' + it.author : '');
      fig.append(img, cap);
      wall.prepend(fig);
    }
    while (wall.children.length > 24) wall.lastChild.remove();
  } catch (e) {}
}
refresh();
setInterval(refresh, 3000);
</script></body></html>
)html";

}  // namespace

bool Server::UsesJobs(const httplib::Request& req) const {
  if (options_.job_store) return true;
  if (req.has_param("wait")) return true;
  return req.get_header_value("Prefer").find("respond-async") != std::string::npos;
}

Status Server::StoreHealth() {
  return store_ ? store_->Ping() : Status::Ok();
}

double Server::LocalRate() const {
  return static_cast<double>(queue_->workers()) / std::max(0.01, avg_job_seconds_.load());
}

void Server::StartJobs() {
  stop_claims_ = false;
  if (!claimer_.joinable()) claimer_ = std::thread([this] { ClaimLoop(); });
  if (!renewer_.joinable()) renewer_ = std::thread([this] { RenewLoop(); });
}

void Server::StopJobs() {
  stop_claims_ = true;
  slots_cv_.notify_all();
  {
    std::lock_guard<std::mutex> lock(leases_mu_);  // no wake-up lost between check and wait
  }
  leases_cv_.notify_all();
  if (claimer_.joinable()) claimer_.join();
  if (renewer_.joinable()) renewer_.join();
}

void Server::RenewLoop() {
  const auto every = std::max<std::chrono::milliseconds>(
      std::chrono::milliseconds(50), options_.job_store_options.claim_timeout / 3);
  std::unique_lock<std::mutex> lock(leases_mu_);
  while (!stop_claims_) {
    leases_cv_.wait_for(lock, every, [&] { return stop_claims_.load(); });
    if (stop_claims_) return;
    const std::vector<std::string> held(leases_.begin(), leases_.end());
    lock.unlock();
    for (const std::string& id : held) {
      // A failed renewal only lets another worker take the job over after
      // the timeout, as it would if this replica had died: logged, not fatal.
      if (Status st = store_->Renew(id); !st.ok()) {
        spdlog::warn("job {}: claim not renewed: {}", id, st.message());
      }
    }
    lock.lock();
  }
}

void Server::ClaimLoop() {
  bool was_down = false;
  while (!stop_claims_ && !draining_) {
    {
      // A job is claimed only when a worker is free for it: the others stay
      // in the shared queue for the other replicas.
      std::unique_lock<std::mutex> lock(slots_mu_);
      slots_cv_.wait(lock, [&] { return stop_claims_ || busy_slots_ < queue_->workers(); });
      if (stop_claims_) return;
      ++busy_slots_;
    }
    auto claimed = store_->Claim(std::chrono::milliseconds(500));
    const bool got = claimed.ok() && claimed->has_value();
    if (!got) {
      {
        std::lock_guard<std::mutex> lock(slots_mu_);
        --busy_slots_;
      }
      if (!claimed.ok()) {
        if (!was_down) spdlog::warn("job store: {}", claimed.status().message());
        was_down = true;
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
      } else if (was_down) {
        spdlog::info("job store: reachable again");
        was_down = false;
      }
      continue;
    }
    was_down = false;
    RunClaimed(std::move(**claimed));
  }
}

void Server::RunClaimed(ClaimedJob job) {
  if (job.reclaimed) {
    ++jobs_reclaimed_;
    spdlog::info("job {}: taken over from a worker that did not finish it", job.id);
  }
  {
    std::lock_guard<std::mutex> lock(leases_mu_);
    leases_.insert(job.id);
  }
  const auto release = [this, id = job.id] {
    {
      std::lock_guard<std::mutex> lock(leases_mu_);
      leases_.erase(id);
    }
    {
      std::lock_guard<std::mutex> lock(slots_mu_);
      --busy_slots_;
    }
    slots_cv_.notify_all();
    WakeWaiters("");
  };
  auto shared = std::make_shared<ClaimedJob>(std::move(job));
  const auto start = Clock::now();
  // The same staged path as a synchronous upload (SubmitInscription): its
  // host stages overlap the render before it, the encode leaves the worker.
  const auto admit = SubmitInscription(
      std::shared_ptr<const std::string>(shared, &shared->request.photo), shared->request.options,
      [this, shared, release, start](Result<InscriptionResult> r) {
        const double secs = std::chrono::duration<double>(Clock::now() - start).count();
        avg_job_seconds_ = 0.8 * avg_job_seconds_.load() + 0.2 * secs;
        Status st;
        if (r.ok()) {
          st = store_->Complete(shared->id,
                                StoredAnswer(shared->id, std::move(r).value(), metrics_->backend));
          if (st.ok()) ++jobs_done_;
        } else {
          st = store_->Fail(shared->id,
                            std::to_string(CodeOf(r.status()) == 503 ? 500 : CodeOf(r.status())) +
                                " " + r.status().message());
          if (st.ok()) ++jobs_failed_;
        }
        // Not stored (the store is unreachable): the job stays claimed and
        // another worker takes it after the claim timeout.
        if (!st.ok()) spdlog::warn("job {}: result not stored: {}", shared->id, st.message());
        release();
      },
      // Dropped by a drain that ran out of time: left claimed, so another
      // replica takes it after the claim timeout (the in-process store's own
      // workers are gone with it: failed with the reason).
      [this, shared, release] {
        if (!options_.job_store) {
          (void)store_->Fail(shared->id,
                             "503 the service shut down before this inscription was rendered");
        }
        release();
      },
      start, Clock::time_point::max());
  if (admit != RenderQueue::Admit::kAccepted) {
    if (!options_.job_store) {
      (void)store_->Fail(shared->id,
                         "503 the service shut down before this inscription was rendered");
    }
    release();
  }
}

void Server::AcceptJob(const httplib::Request& req, httplib::Response& res,
                       const InscribeOptions& o, std::shared_ptr<const std::string> photo) {
  // How long the client waits for the answer: ?wait=N seconds (0: at once);
  // by default the deadline (the synchronous answer, as before) unless it
  // asked for an asynchronous one.
  const auto deadline_s = std::chrono::duration<double>(options_.deadline).count();
  double wait_s =
      req.get_header_value("Prefer").find("respond-async") != std::string::npos ? 0.0 : deadline_s;
  if (req.has_param("wait")) {
    const std::string w = req.get_param_value("wait");
    if (w.empty() || w.size() > 6 || w.find_first_not_of("0123456789") != std::string::npos) {
      metrics_->rejected.Add("reason=\"bad_options\"");
      return JsonError(res, 400, "wait must be a whole number of seconds");
    }
    wait_s = std::min(deadline_s, static_cast<double>(std::stoi(w)));
  }
  std::string client = req.remote_addr;
  if (options_.trust_forwarded_for && req.has_header("X-Forwarded-For")) {
    const std::string xff = req.get_header_value("X-Forwarded-For");
    const auto comma = xff.rfind(',');
    client = xff.substr(comma == std::string::npos ? 0 : comma + 1);
    while (!client.empty() && client.front() == ' ') client.erase(0, 1);
  }
  // Admission: the shared queue may hold what the cluster finishes within
  // the deadline, at the measured drain rate (at least this replica's own).
  auto measured = store_->DrainRate();
  double rate = measured.ok() ? *measured : 0.0;
  if (rate <= 0) {
    // Nothing finished yet (a cold start): every live replica's workers at
    // this replica's mean job time.
    auto replicas = store_->ActiveReplicas();
    rate = LocalRate() * static_cast<double>(replicas.ok() ? *replicas : 1);
  }
  rate = std::max(rate, LocalRate());
  Admission admission;
  admission.max_waiting = std::max<int64_t>(static_cast<int64_t>(queue_->capacity()),
                                            static_cast<int64_t>(std::floor(rate * deadline_s)));
  admission.max_per_client = options_.max_jobs_per_client;
  JobRequest job{o, *photo};
  const std::string id = NewId();
  int64_t ahead = 0;
  EnqueueRefusal refusal{};
  if (Status st = store_->Enqueue(id, client, job, admission, &ahead, &refusal); !st.ok()) {
    if (st.code() == StatusCode::kResourceExhausted) {
      const bool full = refusal.reason == EnqueueRefusal::kQueueFull;
      metrics_->rejected.Add(full ? "reason=\"queue_full\"" : "reason=\"client_limit\"");
      auto waiting = store_->Waiting();
      // Full: until the jobs over the bound have drained (then there is room
      // for one more), not until the whole queue has.
      const double over =
          waiting.ok() ? static_cast<double>(*waiting - admission.max_waiting + 1) : 1.0;
      const double secs = full ? std::max(1.0, over) / rate : avg_job_seconds_.load();
      res.set_header("Retry-After", std::to_string(std::max(1, static_cast<int>(std::ceil(secs)))));
      return JsonError(res, 429, refusal.message);
    }
    metrics_->rejected.Add("reason=\"store_unavailable\"");
    res.set_header("Retry-After", "5");
    spdlog::warn("upload refused: {}", st.message());
    return JsonError(res, 503, "the job store is unavailable: " + st.message());
  }
  res.set_header("Location", "/v1/inscriptions/" + id);
  res.set_header("X-Danqing-Inscription-Id", id);

  // Wait for it here when asked to.
  const auto until = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                        std::chrono::duration<double>(wait_s));
  JobStatus status;
  status.position = ahead;
  std::chrono::milliseconds poll{20};
  while (true) {
    uint64_t gen;
    {
      std::lock_guard<std::mutex> lock(done_mu_);
      gen = done_gen_;
    }
    auto s = store_->GetStatus(id);
    if (s.ok()) status = *s;
    if (status.state == JobState::kDone || status.state == JobState::kFailed) break;
    if (Clock::now() >= until || draining_) break;
    std::unique_lock<std::mutex> lock(done_mu_);
    // Woken at once by a job finished here or by the store's notice of this
    // job's change in any replica (notices after the read above count: none
    // is lost between the read and the wait); polling is the fallback when
    // the store sends none or its subscriber is down (backing off to 250 ms,
    // so that many waiters do not flood the store).
    const auto read_at = Clock::now();
    WaitForNotice(lock, id, gen, read_at, std::min(until, read_at + FallbackPoll(poll)));
    poll = std::min(poll * 2, std::chrono::milliseconds(250));
  }
  if (status.state == JobState::kDone) {
    auto r = store_->GetResult(id);
    if (r.ok()) {
      if (req.get_param_value("response") == "json" ||
          req.get_header_value("Accept").find("application/json") != std::string::npos) {
        res.set_content(DoneJson(id, *r), "application/json");
      } else {
        res.set_content(r->image, r->content_type.c_str());
      }
      return;
    }
  }
  if (status.state == JobState::kFailed) {
    auto [code, message] = SplitReason(status.reason);
    if (code == 400 || code == 413) metrics_->rejected.Add("reason=\"bad_image\"");
    return JsonError(res, code, message);
  }
  res.status = 202;
  res.set_content(StatusJson(id, status, rate).dump(), "application/json");
}

void Server::JobRoutes() {
  auto& s = *http_;
  s.Get(R"(/v1/inscriptions/([0-9a-f]{32}))", [this](const httplib::Request& req,
                                                     httplib::Response& res) {
    const std::string id = req.matches[1];
    if (auto stored = Find(id)) return res.set_content(stored->json, "application/json");
    auto st = store_->GetStatus(id);
    if (!st.ok()) return JsonError(res, CodeOf(st.status()), st.status().message());
    if (st->state == JobState::kDone) {
      auto r = store_->GetResult(id);
      if (!r.ok()) return JsonError(res, CodeOf(r.status()), r.status().message());
      return res.set_content(DoneJson(id, *r), "application/json");
    }
    auto rate = store_->DrainRate();
    res.set_content(StatusJson(id, *st, std::max(rate.ok() ? *rate : 0.0, LocalRate())).dump(),
                    "application/json");
  });
  s.Get(R"(/v1/inscriptions/([0-9a-f]{32})/image)",
        [this](const httplib::Request& req, httplib::Response& res) {
          const std::string id = req.matches[1];
          std::string image, type;
          if (auto stored = Find(id)) {
            image = stored->image;
            type = stored->content_type;
          } else {
            auto r = store_->GetResult(id);
            if (!r.ok()) {
              return JsonError(
                  res, CodeOf(r.status()),
                  r.status().code() == StatusCode::kNotFound
                      ? "no finished inscription with this id (unknown, expired, or not done yet)"
                      : r.status().message());
            }
            image = std::move(r->image);
            type = r->content_type;
          }
          if (req.has_param("download") && req.get_param_value("download") != "false" &&
              req.get_param_value("download") != "0") {
            const char* ext = type == "image/jpeg" ? "jpg" : "png";
            res.set_header("Content-Disposition",
                           "attachment; filename=\"danqing-" + id + "." + ext + "\"");
          }
          res.set_header("Cache-Control", "public, max-age=86400, immutable");
          res.set_content(image, type.c_str());
        });
  s.Get(R"(/v1/inscriptions/([0-9a-f]{32})/qr)",
        [this](const httplib::Request& req, httplib::Response& res) {
          const std::string id = req.matches[1];
          if (!Find(id)) {
            auto st = store_->GetStatus(id);
            if (!st.ok()) return JsonError(res, CodeOf(st.status()), st.status().message());
          }
          auto svg = QrSvg("http://" + SafeHost(req.get_header_value("Host")) + "/i/" + id);
          if (!svg.ok()) return JsonError(res, 500, svg.status().message());
          res.set_content(*svg, "image/svg+xml");
        });
  s.Get(R"(/v1/inscriptions/([0-9a-f]{32})/events)", [this](const httplib::Request& req,
                                                            httplib::Response& res) {
    const std::string id = req.matches[1];
    auto first = store_->GetStatus(id);
    if (!first.ok()) return JsonError(res, CodeOf(first.status()), first.status().message());
    // Each stream holds an HTTP thread while it is open: bounded.
    if (event_streams_.fetch_add(1) >= options_.max_event_streams) {
      --event_streams_;
      metrics_->rejected.Add("reason=\"event_streams\"");
      res.set_header("Retry-After", "2");
      return JsonError(res, 429,
                       "too many event streams open (" +
                           std::to_string(options_.max_event_streams) +
                           "); poll GET /v1/inscriptions/" + id + " instead");
    }
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    auto last = std::make_shared<std::string>();
    auto opened = Clock::now();
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, id, last, opened](size_t, httplib::DataSink& sink) {
          // One event per change; the stream ends when the job has.
          // A keep-alive comment at least every 10 s between changes.
          const auto call_until = Clock::now() + std::chrono::seconds(10);
          while (Clock::now() < call_until) {
            uint64_t gen;
            {
              std::lock_guard<std::mutex> lock(done_mu_);
              gen = done_gen_;
            }
            auto st = store_->GetStatus(id);
            std::string data;
            bool end = false;
            if (!st.ok()) {
              data =
                  json{{"id", id}, {"state", "unknown"}, {"error", st.status().message()}}.dump();
              end = st.status().code() == StatusCode::kNotFound;
            } else {
              auto rate = store_->DrainRate();
              data = StatusJson(id, *st, std::max(rate.ok() ? *rate : 0.0, LocalRate())).dump();
              end = st->state == JobState::kDone || st->state == JobState::kFailed;
            }
            if (data != *last) {
              *last = data;
              const std::string ev = "event: status\ndata: " + data + "\n\n";
              if (!sink.write(ev.data(), ev.size())) return false;
            }
            if (end || stop_claims_ || Clock::now() - opened > std::chrono::minutes(5)) {
              sink.done();
              return true;
            }
            std::unique_lock<std::mutex> lock(done_mu_);
            const auto read_at = Clock::now();
            WaitForNotice(lock, id, gen, read_at,
                          read_at + FallbackPoll(std::chrono::milliseconds(250)));
          }
          const std::string ping = ": keep-alive\n\n";
          return sink.write(ping.data(), ping.size());
        },
        [this](bool) { --event_streams_; });
  });
  s.Get(R"(/i/([0-9a-f]{32}))", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(std::string(IndexHtml()), "text/html; charset=utf-8");
  });
  s.Get("/wall", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(kWallHtml, "text/html; charset=utf-8");
  });
  s.Get("/v1/wall", [this](const httplib::Request& req, httplib::Response& res) {
    size_t n = 24;
    if (req.has_param("n")) {
      const std::string v = req.get_param_value("n");
      if (v.empty() || v.size() > 3 || v.find_first_not_of("0123456789") != std::string::npos) {
        return JsonError(res, 400, "n must be a number from 1 to 100");
      }
      n = std::clamp<size_t>(std::stoul(v), 1, 100);
    }
    auto ids = store_->Recent(n);
    if (!ids.ok()) return JsonError(res, CodeOf(ids.status()), ids.status().message());
    json items = json::array();
    for (const auto& id : *ids) {
      auto r = store_->GetResult(id);
      if (!r.ok()) continue;  // expired meanwhile
      json j = json::parse(r->json, nullptr, false);
      json item = {{"id", id},
                   {"image_url", "/v1/inscriptions/" + id + "/image"},
                   {"share_url", "/i/" + id}};
      if (j.is_object() && j.contains("verse")) {
        item["title"] = j["verse"].value("title", "");
        item["author"] = j["verse"].value("author", "");
      }
      items.push_back(item);
    }
    res.set_content(json{{"inscriptions", items}}.dump(), "application/json");
  });
}

std::string Server::JobMetrics() {
  std::string out;
  auto waiting = store_->Waiting();
  auto rate = store_->DrainRate();
  out += "# HELP danqing_queue_depth Inscriptions waiting in the shared queue (every replica's).\n";
  out += "# TYPE danqing_queue_depth gauge\n";
  out += "danqing_queue_depth " + std::to_string(waiting.ok() ? *waiting : 0) + "\n";
  out +=
      "# HELP danqing_queue_drain_rate Inscriptions finished per second by every replica (last "
      "minute).\n";
  out += "# TYPE danqing_queue_drain_rate gauge\n";
  out += "danqing_queue_drain_rate " + std::to_string(rate.ok() ? *rate : 0.0) + "\n";
  out += "# HELP danqing_job_store_up Whether the job store answers (1) or not (0).\n";
  out += "# TYPE danqing_job_store_up gauge\n";
  out +=
      "danqing_job_store_up{store=\"" + store_->Name() + "\"} " + (waiting.ok() ? "1" : "0") + "\n";
  out += "# HELP danqing_jobs_finished_total Jobs this replica finished, by outcome.\n";
  out += "# TYPE danqing_jobs_finished_total counter\n";
  out +=
      "danqing_jobs_finished_total{outcome=\"done\"} " + std::to_string(jobs_done_.load()) + "\n";
  out += "danqing_jobs_finished_total{outcome=\"failed\"} " + std::to_string(jobs_failed_.load()) +
         "\n";
  out +=
      "# HELP danqing_jobs_reclaimed_total Jobs this replica took over from a worker that did not "
      "finish them.\n";
  out += "# TYPE danqing_jobs_reclaimed_total counter\n";
  out += "danqing_jobs_reclaimed_total " + std::to_string(jobs_reclaimed_.load()) + "\n";
  out +=
      "# HELP danqing_verse_window_fallbacks_total Poems chosen on this replica's own no-repeat "
      "window because the shared one (Redis) failed.\n";
  out += "# TYPE danqing_verse_window_fallbacks_total counter\n";
  out += "danqing_verse_window_fallbacks_total " +
         std::to_string(pipeline_->selector().shared_fallbacks()) + "\n";
  return out;
}

}  // namespace danqing::service
