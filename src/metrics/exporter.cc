#include "metrics/exporter.h"

#include <malloc.h>

#include <httplib.h>
#include <spdlog/spdlog.h>

#include <charconv>
#include <cstring>

#include "http/bounded_server.h"
#include "metrics/agent_metrics.h"

namespace danqing::metrics {

Result<std::pair<std::string, int>> ParseListenAddress(const std::string& addr) {
  size_t colon = addr.rfind(':');
  if (colon == std::string::npos) {
    return InvalidArgument("metrics address '" + addr + "' is not [host]:port");
  }
  std::string host = addr.substr(0, colon);
  std::string port_text = addr.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  } else if (host.find(':') != std::string::npos) {
    return InvalidArgument("metrics address '" + addr +
                           "': write IPv6 hosts in brackets, [::1]:9400");
  }
  int port = -1;
  auto [p, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (port_text.empty() || ec != std::errc() || p != port_text.data() + port_text.size() ||
      port < 0 || port > 65535) {
    return InvalidArgument("metrics address '" + addr + "': port '" + port_text +
                           "' is not a number from 0 to 65535");
  }
  return std::make_pair(host, port);  // an empty host: every address, IPv6 and IPv4
}

Exporter::Exporter(ExporterOptions options, Sources sources)
    : options_(std::move(options)), collector_(options_.collector, std::move(sources), registry_) {
  scrapes_ =
      &registry_.AddCounter("danqing_exporter_scrapes", "Scrapes served, by format.", {"format"});
  AgentMetrics();  // build info is there from the start
}

Result<std::unique_ptr<Exporter>> Exporter::Start(ExporterOptions options, Sources sources) {
  auto addr = ParseListenAddress(options.listen);
  if (!addr.ok()) return addr.status();
  if (options.interval <= std::chrono::milliseconds(0)) {
    return InvalidArgument("metrics collection interval must be positive");
  }
  std::unique_ptr<Exporter> e(new Exporter(std::move(options), std::move(sources)));
  e->snap_ = e->collector_.Collect();

  // Bounded (src/http): a request line without a newline, or a body, cannot
  // make the agent (memory limit 128 MiB) grow; the port is bound alone.
  e->server_ = std::make_unique<http::BoundedServer>(16 * 1024);
  e->server_->new_task_queue = [] { return new httplib::ThreadPool(4); };
  // Connections waiting for bytes hold no thread, only their part of a head
  // (16 KiB at most): 128 of them, 2 MiB at most, then the oldest is closed.
  e->server_->set_max_idle_connections(128);
  e->server_->set_payload_max_length(0);
  e->server_->set_pre_routing_handler([](const httplib::Request& req, httplib::Response& res) {
    if (auto refusal = http::RefuseBody(req, 0)) {  // these endpoints take no body
      res.status = refusal->code;
      res.set_header("Connection", "close");
      http::BoundedServer::CloseAfterResponse();
      res.set_content(refusal->message + "\n", "text/plain");
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  Exporter* self = e.get();
  e->server_->Get("/metrics", [self](const httplib::Request& req, httplib::Response& res) {
    Format f = NegotiateFormat(req.get_header_value("Accept"));
    res.set_content(self->Render(f), std::string(ContentType(f)));
  });
  // Probes for the DaemonSet: alive while this server answers; ready when the
  // owner says so (the agent: registered with the kubelet).
  e->server_->Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("ok\n", "text/plain");
  });
  e->server_->Get("/readyz", [self](const httplib::Request&, httplib::Response& res) {
    const bool ready = !self->options_.ready || self->options_.ready();
    res.status = ready ? 200 : 503;
    res.set_content(ready ? "ready\n" : "not ready\n", "text/plain");
  });
  e->server_->Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("<html><body><a href=\"/metrics\">/metrics</a></body></html>\n", "text/html");
  });
  auto [host, port] = *addr;
  e->port_ = http::BindEveryAddress(*e->server_, host, port);
  if (e->port_ <= 0) {
    return Unavailable("cannot listen for metrics on " + e->options_.listen + ": " +
                       std::strerror(errno));
  }
  e->http_thread_ = std::thread([self] {
    self->server_->listen_after_bind();
    self->http_done_ = true;
  });
  e->collect_thread_ = std::thread([self] { self->Loop(); });
  spdlog::info("metrics: serving /metrics on {}:{} every {} ms", host.empty() ? "*" : host, e->port_,
               e->options_.interval.count());
  return e;
}

Exporter::~Exporter() {
  Stop();
}

void Exporter::Stop() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (http_thread_.joinable()) {
    // httplib's stop() only works once listen_after_bind() is running.
    while (!server_->is_running() && !http_done_.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    server_->stop();
    http_thread_.join();
  }
  if (collect_thread_.joinable()) collect_thread_.join();
}

void Exporter::Loop() {
  std::unique_lock<std::mutex> l(mu_);
  while (!stopping_) {
    cv_.wait_for(l, options_.interval, [this] { return stopping_ || requested_ > completed_; });
    if (stopping_) break;
    uint64_t target = requested_;
    l.unlock();
    auto snap = collector_.Collect();
    l.lock();
    snap_ = std::move(snap);
    completed_ = std::max(completed_, target);
    cv_.notify_all();
    l.unlock();
    // A collection and the scrapes in between allocate and free a few hundred
    // KiB of short-lived buffers (200 pods: ~280 KiB per rendered body); give
    // the freed pages back instead of keeping them resident until the next.
    ::malloc_trim(0);
    l.lock();
  }
  cv_.notify_all();
}

Status Exporter::CollectNow() {
  std::unique_lock<std::mutex> l(mu_);
  if (stopping_) return Unavailable("metrics exporter stopped");
  uint64_t mine = ++requested_;
  cv_.notify_all();
  cv_.wait(l, [&] { return stopping_ || completed_ >= mine; });
  return completed_ >= mine ? Status::Ok() : Unavailable("metrics exporter stopped");
}

std::string Exporter::Render(Format format) {
  const int slot = format == Format::kOpenMetrics100 ? 1 : 0;
  scrapes_->WithLabels({format == Format::kOpenMetrics100 ? "openmetrics" : "text"}).Inc();
  std::shared_ptr<const Snapshot> snap;
  std::string body;
  {
    std::lock_guard<std::mutex> l(mu_);
    snap = snap_;
    if (snap && cached_generation_[slot] == snap->generation) body = cached_[slot];
  }
  if (snap && body.empty()) {
    body.reserve(64 * 1024);
    metrics::Render(snap->families, format, body);
    std::lock_guard<std::mutex> l(mu_);
    if (snap_ == snap) {
      cached_[slot] = body;
      cached_generation_[slot] = snap->generation;
    }
  }
  metrics::Render(registry_.Collect(), format, body);
  metrics::Render(DefaultRegistry().Collect(), format, body);
  RenderEof(format, body);
  return body;
}

}  // namespace danqing::metrics
