#include "service/server.h"

#include <httplib.h>
#include <spdlog/spdlog.h>
#include <sys/random.h>

#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>
#include <utility>

#include "common/cpus.h"
#include "http/bounded_server.h"
#include "service/assets.h"

namespace danqing::service {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

// Set when a request reaches routing; httplib also logs requests it refuses
// before that (a bad request line, a URI too long), which have none.
thread_local std::optional<Clock::time_point> t_request_start;

std::string RouteOf(const std::string& path) {
  if (path == "/v1/inscriptions") return "/v1/inscriptions";
  if (path.rfind("/v1/inscriptions/", 0) == 0) {
    for (const char* tail : {"/image", "/events", "/qr", "/writing", "/background", "/video"}) {
      const size_t n = std::strlen(tail);
      if (path.size() > n && path.compare(path.size() - n, n, tail) == 0) {
        return "/v1/inscriptions/{id}" + std::string(tail);
      }
    }
    return "/v1/inscriptions/{id}";
  }
  if (path.rfind("/i/", 0) == 0) return "/i/{id}";
  if (path == "/" || path == "/wall" || path == "/v1/wall" || path == "/healthz" ||
      path == "/readyz" || path == "/metrics")
    return path;
  return "other";
}

void Error(httplib::Response& res, int code, const std::string& message) {
  res.status = code;
  // Messages may echo what the client sent: bytes that are not UTF-8 become U+FFFD.
  res.set_content(json{{"error", message}, {"status", code}}.dump(-1, ' ', false, json::error_handler_t::replace),
                  "application/json");
}

// Answers `code` and closes the connection after it: the request's body was
// not read (see BoundedServer).
void Refuse(httplib::Response& res, int code, const std::string& message) {
  res.set_header("Connection", "close");
  http::BoundedServer::CloseAfterResponse();
  Error(res, code, message);
}

// JSON for the errors httplib answers itself (a malformed request, no route).
httplib::Server::HandlerResponse ErrorBody(const httplib::Request& req, httplib::Response& res) {
  if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;  // a handler's own
  switch (res.status) {
    case 404: Error(res, 404, "no such resource: " + req.method + " " + req.path); break;
    case 413: Error(res, 413, "the upload is too large"); break;
    case 414: Error(res, 414, "the request URI is too long"); break;
    case 400:
      // httplib refuses a multipart body it cannot parse (a bad boundary, a
      // part without a name, more than 1024 parts) with a bare 400.
      if (req.is_multipart_form_data()) {
        Error(res, 400,
              "the multipart/form-data body could not be read: it needs well-formed parts, "
              "each with a name, and at most " +
                  std::to_string(CPPHTTPLIB_MULTIPART_FORM_DATA_FILE_MAX_COUNT) + " of them");
      } else {
        Error(res, 400, "malformed request");
      }
      break;
    case 405:
      Error(res, 405,
            req.method + " is not served on " + req.path +
                " (allowed: " + res.get_header_value("Allow") + ")");
      break;
    default: Error(res, res.status, "HTTP error " + std::to_string(res.status)); break;
  }
  return httplib::Server::HandlerResponse::Handled;
}

int HttpCode(const Status& st) {
  switch (st.code()) {
    case StatusCode::kInvalidArgument: return 400;
    case StatusCode::kResourceExhausted: return 413;
    case StatusCode::kDeadlineExceeded: return 503;
    case StatusCode::kUnavailable: return 503;
    default: return 500;
  }
}

// The option named `key` from the multipart fields, else the query; none
// when the request does not name it.
std::optional<std::string> RawOption(const httplib::Request& req, const char* key) {
  if (req.is_multipart_form_data() && req.has_file(key)) {
    const auto f = req.get_file_value(key);
    if (f.filename.empty()) return f.content;
  }
  if (req.has_param(key)) return req.get_param_value(key);
  return std::nullopt;
}

std::string Option(const httplib::Request& req, const char* key, const std::string& fallback) {
  return RawOption(req, key).value_or(fallback);
}

// The options that take a word or a number: none is longer than this. (The
// visitor's text, title and signature have their own byte limit, checked by
// Pipeline::Validate.)
constexpr size_t kMaxShortOptionBytes = 32;
constexpr const char* kShortOptions[] = {"width",  "height",   "style",   "background",
                                         "format", "vertical", "response"};

// INVALID_ARGUMENT naming the first short option longer than it may be.
Status CheckOptionSizes(const httplib::Request& req) {
  for (const char* key : kShortOptions) {
    const auto v = RawOption(req, key);
    if (v && v->size() > kMaxShortOptionBytes) {
      return InvalidArgument(std::string(key) + " is longer than " +
                             std::to_string(kMaxShortOptionBytes) + " bytes");
    }
  }
  return Status::Ok();
}

// A whole number; absent: `fallback`; given but empty or not a number: an error.
Result<int> IntOption(const httplib::Request& req, const char* key, int fallback) {
  const auto v = RawOption(req, key);
  if (!v) return fallback;
  if (v->empty()) return InvalidArgument(std::string(key) + " must be a number, not empty");
  int out = 0;
  for (char c : *v) {
    if (c < '0' || c > '9' || out > 100000)
      return InvalidArgument(std::string(key) + " must be a number");
    out = out * 10 + (c - '0');
  }
  return out;
}

// A yes/no option: true, 1 or yes; false, 0 or no; anything else is none.
std::optional<bool> Flag(const std::string& v) {
  if (v == "true" || v == "1" || v == "yes") return true;
  if (v == "false" || v == "0" || v == "no") return false;
  return std::nullopt;
}

bool WantsJson(const httplib::Request& req) {
  if (Option(req, "response", "") == "json") return true;
  const std::string accept = req.get_header_value("Accept");
  return accept.find("application/json") != std::string::npos;
}

}  // namespace

struct Server::Pending {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;     // guarded by mu
  bool cut_off = false;  // guarded by mu: answered by CutOffPending
  Result<InscriptionResult> result = Status(StatusCode::kInternal, "not run");  // guarded by mu

  // The first answer counts; a render that finishes after a cut-off is dropped.
  void Finish(Result<InscriptionResult>&& r, bool cut = false) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (done) return;
      result = std::move(r);
      cut_off = cut;
      done = true;
    }
    cv.notify_all();
  }
};

std::string InscriptionJson(const std::string& id, const InscriptionResult& r,
                            const std::string& backend) {
  const auto& f = r.perception.features;
  json themes = json::array();
  for (const auto& t : r.perception.themes) {
    if (themes.size() >= 6) break;
    themes.push_back({{"theme", t.theme}, {"score", std::round(t.score * 1000) / 1000}});
  }
  json palette = json::array();
  for (const auto& c : f.palette) {
    char hex[8];
    std::snprintf(hex, sizeof hex, "#%02x%02x%02x", c.r, c.g, c.b);
    palette.push_back({{"color", hex}, {"share", std::round(c.share * 1000) / 1000}});
  }
  const auto r3 = [](double v) { return std::round(v * 1000) / 1000; };
  const auto& t = r.timings;
  json j = {
      {"id", id},
      {"image_url", "/v1/inscriptions/" + id + "/image"},
      {"content_type", r.content_type},
      {"width", r.width},
      {"height", r.height},
      {"photo", {{"width", r.photo_width}, {"height", r.photo_height}}},
      {"verse",
       {{"source", r.verse_source},
        {"id", r.poem_id},
        {"title", r.title},
        {"author", r.author},
        {"lines", r.lines}}},
      {"themes", themes},
      {"features",
       {{"brightness", r3(f.brightness)},
        {"contrast", r3(f.contrast)},
        {"saturation", r3(f.saturation)},
        {"warmth", r3(f.warmth)},
        {"sky", r3(f.sky)},
        {"water", r3(f.water)},
        {"vegetation", r3(f.vegetation)},
        {"snow", r3(f.snow)},
        {"sunset", r3(f.sunset)},
        {"autumn", r3(f.autumn)},
        {"flower", r3(f.flower)},
        {"night", r3(f.night)},
        {"edge_density", r3(f.edge_density)},
        {"top_edges", r3(f.top_edges)},
        {"earth", r3(f.earth)},
        {"vessels", f.vessels},
        {"faces", f.faces},
        {"cat_faces", f.cat_faces},
        {"palette", palette}}},
      {"timings_ms",
       {{"queue", r3(t.queue_ms)},
        {"decode", r3(t.decode_ms)},
        {"perceive", r3(t.perceive_ms)},
        {"verse", r3(t.verse_ms)},
        {"render", r3(t.render_ms)},
        {"encode", r3(t.encode_ms)},
        {"total", r3(t.total_ms)}}},
      {"backend", backend},
      {"gpu_fallback", r.gpu_fallback},
  };
  if (!r.writing_png.empty()) {  // issue 28: the page plays the writing from these
    j["writing"] = {{"plane_url", "/v1/inscriptions/" + id + "/writing"},
                    {"background_url", "/v1/inscriptions/" + id + "/background"},
                    {"video_url", "/v1/inscriptions/" + id + "/video"},
                    {"encoding", "png-grey16-ms-half"},
                    {"end_ms", r.writing_end_ms},
                    {"seal_ms", r.writing_seal_ms},
                    {"plane_bytes", r.writing_png.size()},
                    {"background_bytes", r.background_jpeg.size()}};
  }
  return j.dump();
}

Server::Server(ServerOptions options, const Pipeline* pipeline, Metrics* metrics)
    : options_(std::move(options)), pipeline_(pipeline), metrics_(metrics) {
  // The pod's CPU limit, not the node's core count (common/cpus.h).
  const size_t workers = options_.workers ? options_.workers : AvailableCpus();
  const size_t capacity = options_.queue_capacity ? options_.queue_capacity : 2 * workers;
  queue_ = std::make_unique<RenderQueue>(workers, capacity, metrics_);
  store_ = options_.job_store
               ? options_.job_store
               : std::shared_ptr<JobStore>(NewInProcessJobStore(options_.job_store_options));
  http_ = std::make_unique<http::BoundedServer>(64 * 1024, options_.header_deadline);
  // Waiters wake on the store's notices (a job claimed or finished by any
  // replica) instead of polling it.
  watch_token_ = store_->Watch([this](const std::string& id) { WakeWaiters(id); });
  Routes();
}

Server::~Server() {
  Stop();
  if (watch_token_) store_->Unwatch(watch_token_);
}

void Server::WakeWaiters(const std::string& id) {
  {
    std::lock_guard<std::mutex> lock(done_mu_);
    notices_.emplace_back(++done_gen_, id);
    while (notices_.size() > 256) notices_.pop_front();
  }
  done_cv_.notify_all();
}

void Server::WaitForNotice(std::unique_lock<std::mutex>& lock, const std::string& id, uint64_t gen,
                           std::chrono::steady_clock::time_point last_read,
                           std::chrono::steady_clock::time_point deadline) {
  constexpr auto kOthers = std::chrono::milliseconds(250);
  const auto mine = [&] {
    if (done_gen_ == gen) return false;
    // Fewer notices kept than came since `gen`: treat it as "every job".
    if (notices_.empty() || notices_.front().first > gen + 1) return true;
    for (auto it = notices_.rbegin(); it != notices_.rend() && it->first > gen; ++it) {
      if (it->second.empty() || it->second == id) return true;
    }
    return false;
  };
  // Another job's notice moves this one's queue position at most: re-read at
  // most every 250 ms for those, so a busy cluster's notices do not make
  // every waiter read the store on each.
  if (done_cv_.wait_until(lock, std::min(deadline, last_read + kOthers), mine)) return;
  if (std::chrono::steady_clock::now() >= deadline) return;
  done_cv_.wait_until(lock, deadline, [&] { return done_gen_ != gen; });
}

std::chrono::milliseconds Server::FallbackPoll(std::chrono::milliseconds without_push) const {
  return store_->Watching() ? std::chrono::milliseconds(2000) : without_push;
}

std::string Server::NewId() {
  // 128 bits from the kernel's CSPRNG: an id tells nothing of any other, so
  // one visitor's id cannot lead to another's text or photo.
  uint8_t bytes[16];
  size_t got = 0;
  while (got < sizeof bytes) {
    const ssize_t n = ::getrandom(bytes + got, sizeof bytes - got, 0);
    if (n > 0) {
      got += static_cast<size_t>(n);
    } else if (n < 0 && errno != EINTR) {
      // Only before the kernel's pool is first seeded (early boot), or with
      // a kernel older than 3.17: nothing to serve ids from, and guessable
      // ones would hand out visitors' photos.
      spdlog::critical("getrandom failed: {}", std::strerror(errno));
      std::abort();
    }
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id(2 * sizeof bytes, '0');
  for (size_t i = 0; i < sizeof bytes; ++i) {
    id[2 * i] = kHex[bytes[i] >> 4];
    id[2 * i + 1] = kHex[bytes[i] & 15];
  }
  return id;
}

namespace {
size_t StoredBytes(const StoredInscription& s) {
  return s.json.size() + s.content_type.size() + s.image.size() + s.writing_png.size() +
         s.background_jpeg.size();
}
}  // namespace

void Server::Store(const std::string& id, std::shared_ptr<const Stored> stored) {
  std::lock_guard<std::mutex> lock(cache_mu_);
  if (auto it = cache_.find(id); it != cache_.end()) {  // kept again: moves to the front
    cache_bytes_ -= StoredBytes(*it->second);
    cache_order_.remove(id);
  }
  cache_bytes_ += StoredBytes(*stored);
  cache_[id] = std::move(stored);
  cache_order_.push_front(id);
  while (cache_order_.size() > 1 && (cache_order_.size() > options_.result_cache_entries ||
                                     cache_bytes_ > options_.result_cache_bytes)) {
    auto oldest = cache_.find(cache_order_.back());
    cache_bytes_ -= StoredBytes(*oldest->second);
    cache_.erase(oldest);
    cache_order_.pop_back();
  }
}

std::shared_ptr<const Server::Stored> Server::Find(const std::string& id) const {
  std::lock_guard<std::mutex> lock(cache_mu_);
  auto it = cache_.find(id);
  return it == cache_.end() ? nullptr : it->second;
}

std::shared_ptr<const Server::Stored> Server::FindOrFetch(const std::string& id) {
  if (auto stored = Find(id)) return stored;
  if (!store_) return nullptr;
  auto result = store_->GetResult(id);
  if (!result.ok()) return nullptr;
  return Keep(id, std::move(result).value());
}

StoredInscription StoredAnswer(const std::string& id, InscriptionResult&& r,
                               const std::string& default_backend) {
  StoredInscription s;
  s.json = InscriptionJson(id, r, r.backend.empty() ? default_backend : r.backend);
  s.content_type = r.content_type;
  s.image = std::move(r.image);
  s.writing_png = std::move(r.writing_png);  // issue 28
  s.background_jpeg = std::move(r.background_jpeg);
  s.writing_end_ms = r.writing_end_ms;
  return s;
}

std::shared_ptr<const Server::Stored> Server::Keep(const std::string& id,
                                                   StoredInscription answer) {
  auto stored = std::make_shared<Stored>();
  static_cast<StoredInscription&>(*stored) = std::move(answer);
  // The backend that rendered it (NVENC is tried only after a CUDA render).
  if (const auto j = nlohmann::json::parse(stored->json, nullptr, false);
      j.is_object() && j.contains("backend") && j["backend"].is_string()) {
    stored->backend = j["backend"].get<std::string>();
  }
  stored->videos = std::make_shared<VideoCache>();
  Store(id, stored);
  return stored;
}

void Server::ObserveInscription(const InscriptionResult& r) {
  const auto& t = r.timings;
  metrics_->ObserveStage("queue", t.queue_ms / 1000);
  metrics_->ObserveStage("decode", t.decode_ms / 1000);
  metrics_->ObserveStage("perceive", t.perceive_ms / 1000);
  metrics_->ObserveStage("verse", t.verse_ms / 1000);
  metrics_->ObserveStage("render", t.render_ms / 1000);
  metrics_->ObserveStage("encode", t.encode_ms / 1000);
  metrics_->ObserveRender(r.render_began, r.render_ended, r.backend);
  metrics_->renders.Add("backend=\"" + r.backend + "\",gpu_fallback=\"" +
                        (r.gpu_fallback ? "true" : "false") + "\"");
}

RenderQueue::Admit Server::SubmitInscription(std::shared_ptr<const std::string> photo,
                                             const InscribeOptions& o,
                                             std::function<void(Result<InscriptionResult>)> finish,
                                             std::function<void()> expired, Clock::time_point start,
                                             Clock::time_point deadline) {
  return queue_->SubmitPrepared(
      [this, photo, o, finish, start]() -> RenderQueue::Render {
        const auto prepare_began = Clock::now();
        auto prepared =
            pipeline_->Prepare(std::span<const uint8_t>(
                                   reinterpret_cast<const uint8_t*>(photo->data()), photo->size()),
                               o);
        if (!prepared.ok()) {
          finish(prepared.status());
          return nullptr;
        }
        const auto prepare_ended = Clock::now();
        auto held = std::make_shared<Pipeline::Prepared>(std::move(prepared).value());
        return [this, held, finish, start, prepare_began, prepare_ended]() -> RenderQueue::Rest {
          const auto render_began = Clock::now();
          auto rendered = pipeline_->Render(std::move(*held));
          if (!rendered.ok()) {
            finish(rendered.status());
            return nullptr;
          }
          auto canvas = std::make_shared<Pipeline::Rendered>(std::move(rendered).value());
          // Queue time: before the host stages began, and between their end
          // and the render's start (the wait for a worker).
          const double queue_ms = std::chrono::duration<double, std::milli>(
                                      (prepare_began - start) + (render_began - prepare_ended))
                                      .count();
          return [this, canvas, finish, queue_ms] {
            auto r = pipeline_->Encode(std::move(*canvas));
            if (r.ok()) {
              r->timings.queue_ms = queue_ms;
              ObserveInscription(*r);
            }
            finish(std::move(r));
          };
        };
      },
      std::move(expired), deadline);
}

void Server::Routes() {
  auto& s = *http_;
  const int threads = std::max(4, options_.http_threads);
  s.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  s.set_read_timeout(options_.read_timeout);
  s.set_write_timeout(options_.write_timeout);
  s.set_keep_alive_timeout(options_.keep_alive_timeout.count());
  s.set_body_deadline(options_.body_deadline, options_.body_min_rate);
  s.set_max_idle_connections(options_.max_idle_connections);
  // The multipart envelope adds a little to the image's own limit.
  s.set_payload_max_length(pipeline_->limits().image.max_bytes + 64 * 1024);

  s.set_error_handler(httplib::Server::HandlerWithResponse(ErrorBody));
  const size_t max_body = pipeline_->limits().image.max_bytes + 64 * 1024;
  // Both run before httplib reads the body: an upload it must not read is
  // refused unread, and its connection closed (http::RefuseBody).
  // A body that must not be read is refused (and counted, on the
  // inscriptions route only, as an inscription refused); 0 when it may be.
  const auto refuse_body = [this, max_body](const httplib::Request& req, httplib::Response& res) {
    const auto refusal = http::RefuseBody(req, max_body);
    if (!refusal) return 0;
    if (req.path.starts_with("/v1/inscriptions")) {
      metrics_->rejected.Add(std::string("reason=\"") + refusal->reason + "\"");
    }
    Refuse(res, refusal->code, refusal->message);
    return refusal->code;
  };
  s.set_pre_routing_handler([refuse_body](const httplib::Request& req, httplib::Response& res) {
    t_request_start = Clock::now();
    return refuse_body(req, res) != 0 ? httplib::Server::HandlerResponse::Handled
                                      : httplib::Server::HandlerResponse::Unhandled;
  });
  // A client that asks first (Expect: 100-continue) is told before it sends.
  s.set_expect_100_continue_handler(
      [refuse_body](const httplib::Request& req, httplib::Response& res) {
        const int code = refuse_body(req, res);
        return code != 0 ? code : 100;
      });
  s.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    const std::string route = RouteOf(req.path);
    // A request httplib refused before routing has no start: counted, not timed.
    const std::optional<Clock::time_point> start = std::exchange(t_request_start, std::nullopt);
    const double secs = start ? std::chrono::duration<double>(Clock::now() - *start).count() : 0.0;
    if (start) metrics_->request_seconds.Observe(route, secs);
    if (start && route == "/v1/inscriptions" && req.method == "POST") {
      const int c = res.status;
      const char* outcome = c == 200 || c == 202   ? "ok"
                            : c == 429 || c == 503 ? "refused"
                            : c < 500              ? "client_error"
                                                   : "error";
      metrics_->inscription_seconds.Observe(outcome, secs);
    }
    metrics_->requests.Add("route=\"" + route + "\",code=\"" + std::to_string(res.status) + "\"");
    if (res.status >= 500 || req.path == "/v1/inscriptions") {
      spdlog::info("{} {} -> {} in {:.1f} ms", req.method, req.path, res.status, secs * 1000);
    }
  });
  s.set_exception_handler(
      [](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "unknown exception";
        try {
          std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        spdlog::error("{} {}: {}", req.method, req.path, what);
        Error(res, 500, "internal error");
      });

  s.Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(std::string(IndexHtml()), "text/html; charset=utf-8");
  });
  ProbeRoutes(s);
  // GET /v1/inscriptions/{id}[/writing|/background|/video] (server_writing.cc).
  WritingRoutes(s);
  // GET /v1/inscriptions/{id}[/image|/events|/qr], /wall (server_jobs.cc).
  JobRoutes();
  s.Post("/v1/inscriptions", [this](const httplib::Request& req, httplib::Response& res) {
    const auto start = Clock::now();
    const auto deadline = start + options_.deadline;
    if (draining_) {
      metrics_->rejected.Add("reason=\"draining\"");
      res.set_header("Retry-After", "5");
      return Refuse(res, 503, "the service is shutting down; retry on another replica");
    }
    // The image: a multipart file field `image`, or the whole body. The job
    // keeps its own copy: it may outlive this handler when the deadline passes.
    if (req.is_multipart_form_data() && !req.has_file("image")) {
      return Error(res, 400, "multipart upload needs the photo in a field named 'image'");
    }
    const auto raw = std::make_shared<const std::string>(
        req.is_multipart_form_data() ? req.get_file_value("image").content : req.body);
    const std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(raw->data()),
                                         raw->size());

    if (Status st = CheckOptionSizes(req); !st.ok()) {
      metrics_->rejected.Add("reason=\"bad_options\"");
      return Error(res, 400, st.message());
    }
    InscribeOptions o;
    auto w = IntOption(req, "width", o.width);
    auto h = IntOption(req, "height", o.height);
    if (!w.ok() || !h.ok()) {
      metrics_->rejected.Add("reason=\"bad_options\"");
      return Error(res, 400, (w.ok() ? h.status() : w.status()).message());
    }
    o.width = *w;
    o.height = *h;
    o.style = Option(req, "style", o.style);
    o.background = Option(req, "background", o.background);
    o.format = Option(req, "format", o.format);
    const auto vertical = Flag(Option(req, "vertical", "true"));
    if (!vertical) {
      metrics_->rejected.Add("reason=\"bad_options\"");
      return Error(res, 400, "vertical must be true or false");
    }
    o.vertical = *vertical;
    o.text = Option(req, "text", "");
    o.title = Option(req, "title", "");
    o.signature = Option(req, "signature", "");
    // Issue 28: also record the writing (for the page's animation and the video).
    const auto writing = Flag(Option(req, "writing", "false"));
    if (!writing) {
      metrics_->rejected.Add("reason=\"bad_options\"");
      return Error(res, 400, "writing must be true or false");
    }
    o.writing = *writing;
    if (Status st = pipeline_->Validate(o); !st.ok()) {
      metrics_->rejected.Add("reason=\"bad_options\"");
      return Error(res, 400, st.message());
    }
    auto header = pipeline_->Check(bytes);
    if (!header.ok()) {
      const bool not_image = header.status().code() == StatusCode::kInvalidArgument &&
                             image::Sniff(bytes) == image::Format::kUnknown && !bytes.empty();
      const bool too_large = header.status().code() == StatusCode::kResourceExhausted &&
                             bytes.size() > pipeline_->limits().image.max_bytes;
      metrics_->rejected.Add(too_large ? "reason=\"too_large\"" : "reason=\"bad_image\"");
      return Error(res, not_image ? 415 : HttpCode(header.status()), header.status().message());
    }
    // Through the shared queue (always with --redis; else when asked).
    if (UsesJobs(req)) return AcceptJob(req, res, o, raw);

    // Hand the work to a render worker and wait for it, at most until the
    // deadline (or until a drain that ran out of time cuts it off).
    auto pending = std::make_shared<Pending>();
    {
      std::lock_guard<std::mutex> lock(pending_mu_);
      pending_.insert(pending);
    }
    struct Unregister {
      Server* self;
      std::shared_ptr<Pending> p;
      ~Unregister() {
        std::lock_guard<std::mutex> lock(self->pending_mu_);
        self->pending_.erase(p);
      }
    } unregister{this, pending};
    const std::function<void(Result<InscriptionResult>)> finish =
        [pending](Result<InscriptionResult>&& r) { pending->Finish(std::move(r)); };
    // The host stages on a preparer thread (while the worker renders the
    // request before), the render on a worker, the encode, the metrics and
    // the answer on a finisher thread (SubmitInscription).
    const auto admit = SubmitInscription(
        raw, o, finish,
        [finish] {
          finish(Status(StatusCode::kDeadlineExceeded, "the deadline passed while waiting"));
        },
        start, deadline);
    if (admit != RenderQueue::Admit::kAccepted) {
      const bool full = admit == RenderQueue::Admit::kFull;
      metrics_->rejected.Add(full ? "reason=\"queue_full\"" : "reason=\"draining\"");
      res.set_header("Retry-After", std::to_string(full ? queue_->RetryAfterSeconds() : 5));
      return Error(res, full ? 429 : 503,
                   full ? "too many inscriptions in progress; retry later"
                        : "the service is shutting down; retry on another replica");
    }
    std::unique_lock<std::mutex> lock(pending->mu);
    if (!pending->cv.wait_until(lock, deadline, [&] { return pending->done; })) {
      metrics_->rejected.Add("reason=\"deadline\"");
      res.set_header("Retry-After", std::to_string(queue_->RetryAfterSeconds()));
      return Error(res, 503, "the inscription did not finish within its deadline");
    }
    if (pending->cut_off) {
      ++cut_off_;
      metrics_->rejected.Add("reason=\"cut_off\"");
      res.set_header("Retry-After", "5");
      return Refuse(res, 503, pending->result.status().message());
    }
    if (!pending->result.ok()) {
      const Status& st = pending->result.status();
      if (st.code() == StatusCode::kDeadlineExceeded) {
        metrics_->rejected.Add("reason=\"deadline\"");
        res.set_header("Retry-After", std::to_string(queue_->RetryAfterSeconds()));
      } else if (st.code() == StatusCode::kInvalidArgument ||
                 st.code() == StatusCode::kResourceExhausted) {
        // The photo's header passed; its pixels did not (truncated, corrupt,
        // a progressive JPEG too large to decode).
        metrics_->rejected.Add("reason=\"bad_image\"");
      }
      return Error(res, HttpCode(st), st.message());
    }
    const std::string id = NewId();
    auto stored = Keep(id, StoredAnswer(id, std::move(pending->result.value()), metrics_->backend));
    res.set_header("X-Danqing-Inscription-Id", id);
    res.set_header("Location", "/v1/inscriptions/" + id);
    if (draining_) {
      res.set_header("Connection", "close");
      http::BoundedServer::CloseAfterResponse();
    }
    if (WantsJson(req)) {
      res.set_content(stored->json, "application/json");
    } else {
      res.set_content(stored->image, stored->content_type.c_str());
    }
  });
}

// Caller: Routes, and Start for the probe listener.
void Server::ProbeRoutes(http::BoundedServer& s) {
  s.Get("/healthz", [this](const httplib::Request&, httplib::Response& res) {
    // A lost CUDA context comes back only in a new process: fail liveness so
    // the kubelet restarts the container (renders meanwhile run on the CPU).
    if (const std::string lost = pipeline_->renderer().GpuLost(); !lost.empty()) {
      res.status = 503;
      res.set_content("the GPU's CUDA context is lost (" + lost + "); restart to use the GPU again\n",
                      "text/plain");
      return;
    }
    res.set_content("ok\n", "text/plain");
  });
  s.Get("/readyz", [this](const httplib::Request&, httplib::Response& res) {
    if (not_ready_) {
      res.status = 503;
      res.set_content("draining\n", "text/plain");
    } else if (Status st = StoreHealth(); !st.ok()) {
      res.status = 503;
      res.set_content("the job store is unavailable: " + st.message() + "\n", "text/plain");
    } else {
      res.set_content("ready\n", "text/plain");
    }
  });
  s.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    metrics_->gpu_lost = pipeline_->renderer().GpuLost().empty() ? 0 : 1;
    res.set_content(metrics_->Render() + JobMetrics(), "text/plain; version=0.0.4; charset=utf-8");
  });
}

namespace {

// A host as it is written in a URL: IPv6 in brackets, every address as [::].
std::string UrlHost(const std::string& host) {
  if (host.empty()) return "[::]";
  return host.find(':') != std::string::npos ? "[" + host + "]" : host;
}

// Binds `s` to host:port (0: any free port); the port bound.
Result<int> Bind(http::BoundedServer& s, const std::string& host, int port, const char* what) {
  const int bound = http::BindEveryAddress(s, host, port);
  if (bound > 0) return bound;
  const std::string where = (host.empty() || host == "::" ? "every address" : host) + ", port " +
                            (port == 0 ? std::string("any") : std::to_string(port));
  return Unavailable(std::string("cannot bind ") + what + " on " + where + " (in use, or not permitted)");
}

}  // namespace

Status Server::Start() {
  auto port = Bind(*http_, options_.host, options_.port, "the port");
  if (!port.ok()) return port.status();
  port_ = *port;
  if (options_.probe_port >= 0) {
    // A probe is one small request on a new connection, sent at once: 2 s
    // for its headers and 1 s of keep-alive, so connections that send
    // nothing, or trickle, free the few threads quickly.
    probe_http_ = std::make_unique<http::BoundedServer>(
        16 * 1024,
        std::min<std::chrono::milliseconds>(options_.header_deadline, std::chrono::seconds(2)));
    probe_http_->new_task_queue = [] { return new httplib::ThreadPool(8); };
    probe_http_->set_read_timeout(std::chrono::seconds(5));
    probe_http_->set_write_timeout(std::chrono::seconds(5));
    probe_http_->set_keep_alive_timeout(1);
    probe_http_->set_max_idle_connections(options_.max_idle_connections);
    probe_http_->set_payload_max_length(0);
    probe_http_->set_error_handler(httplib::Server::HandlerWithResponse(ErrorBody));
    // The probes take no body: any is refused unread.
    probe_http_->set_pre_routing_handler([](const httplib::Request& req, httplib::Response& res) {
      if (auto refusal = http::RefuseBody(req, 0)) {
        Refuse(res, refusal->code, refusal->message);
        return httplib::Server::HandlerResponse::Handled;
      }
      return httplib::Server::HandlerResponse::Unhandled;
    });
    ProbeRoutes(*probe_http_);
    auto probe = Bind(*probe_http_, options_.host, options_.probe_port, "the probe port");
    if (!probe.ok()) return probe.status();
    probe_port_ = *probe;
    probe_listener_ = std::thread([this] { probe_http_->listen_after_bind(); });
    spdlog::info("probes (/healthz /readyz /metrics) also on http://{}:{}", UrlHost(options_.host), probe_port_);
  }
  StartJobs();
  listener_ = std::thread([this] { http_->listen_after_bind(); });
  // httplib's stop() does nothing to a server whose listener has not begun
  // (a SIGTERM just after start would then wait forever in Stop): return
  // once both listen.
  for (int i = 0; i < 5000 && !(http_->is_running() && (!probe_http_ || probe_http_->is_running())); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  spdlog::info("serving on http://{}:{} ({} render workers, queue {}, deadline {} ms)",
               UrlHost(options_.host), port_, queue_->workers(), queue_->capacity(),
               options_.deadline.count());
  return Status::Ok();
}

void Server::StopReady() {
  not_ready_ = true;
  metrics_->draining = 1;
}

bool Server::Drain(std::chrono::milliseconds timeout) {
  StopReady();
  draining_ = true;
  StopJobs();  // no more claims; claimed jobs finish on the queue
  queue_->Close();
  spdlog::info("draining: {} waiting, {} rendering", queue_->depth(), queue_->in_flight());
  if (queue_->WaitIdle(timeout)) return true;
  // The timeout bounds the drain: nothing accepted is left waiting for an
  // answer past it.
  // First the answers (503, cut off), then the waiting jobs are dropped.
  CutOffPending();
  const size_t dropped = queue_->Abandon();
  spdlog::warn(
      "drain timeout: {} waiting renders dropped, {} still drawing; every unanswered "
      "inscription was answered 503",
      dropped, queue_->in_flight());
  return false;
}

void Server::CutOffPending() {
  std::lock_guard<std::mutex> lock(pending_mu_);
  for (const auto& p : pending_) {
    p->Finish(Unavailable("the service shut down before this inscription was finished; retry"),
              /*cut=*/true);
  }
}

void Server::Stop(std::chrono::milliseconds grace) {
  StopJobs();
  if (http_) {
    http_->set_stop_grace(grace);
    http_->stop();
  }
  if (listener_.joinable()) listener_.join();
  if (probe_http_) {
    probe_http_->set_stop_grace(grace);
    probe_http_->stop();
  }
  if (probe_listener_.joinable()) probe_listener_.join();
}

size_t Server::connections_cut() const {
  return (http_ ? http_->cut_at_stop() : 0) + (probe_http_ ? probe_http_->cut_at_stop() : 0);
}

}  // namespace danqing::service
