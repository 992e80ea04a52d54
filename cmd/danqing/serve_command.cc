// `danqing serve`: the HTTP service. Wiring and signals only; the service
// lives in src/service/.
//
// SIGTERM/SIGINT: readiness off at once, requests still served for
// --drain-delay (until every proxy has dropped the endpoint), then drain (new
// inscriptions refused, accepted ones finish, at most --drain-timeout), then
// stop. Exit 0 when every accepted inscription was answered with its image,
// 1 when the drain timeout cut some off (answered 503) or start-up failed, 2
// for bad flags.
#include <signal.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <thread>

#include "commands.h"
#include "perceive/perceiver.h"
#include "render/backend.h"
#include "service/assets.h"
#include "service/inscription_renderer.h"
#include "service/metrics.h"
#include "service/pipeline.h"
#include "service/redis_job_store.h"
#include "service/server.h"
#include "verse/corpus.h"
#include "verse/selector.h"

namespace danqing::cli {
namespace {

struct ServeFlags {
  std::string host = "::";  // every address, IPv6 and IPv4
  int port = 8080;
  int probe_port = -1;
  size_t workers = 0;
  size_t queue = 0;
  int deadline_ms = 20000;
  int drain_timeout_s = 25;
  int drain_delay_s = 5;
  int read_timeout_s = 10;
  int http_threads = 64;
  double max_upload_mb = 10;
  double max_megapixels = 40;
  int max_canvas = 2048;
  std::string verse_file;
  std::string cascade_dir = "/usr/share/opencv4/haarcascades";
  std::string strokes;
  std::string font;
  std::string backend;
  // The shared queue and store (docs/service.md, "One queue for every replica").
  std::string redis;
  std::string redis_namespace = "danqing";
  int result_ttl_s = 24 * 3600;
  double max_result_mb = 32;
  double store_memory_mb = 512;  // the in-process store
  int claim_timeout_s = 60;
  int jobs_per_client = 4;
  size_t event_streams = 16;
  double result_cache_mb = 128;
  bool trust_forwarded_for = false;
};

int Fail(const Status& st) {
  std::fprintf(stderr, "danqing serve: %s\n", st.ToString().c_str());
  return st.code() == StatusCode::kInvalidArgument ? 2 : 1;
}

int RunServe(const ServeFlags& f) {
  if (!f.backend.empty() && !render::ParseBackendChoice(f.backend)) {
    return Fail(InvalidArgument("--backend must be auto, cpu or gpu, got '" + f.backend + "'"));
  }
  // Signals are taken by this thread with sigwait; block them before any
  // other thread starts so none of those receives them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  auto corpus = f.verse_file.empty()
                    ? verse::Corpus::Parse(service::BundledPoems(), "bundled poems.tsv")
                    : verse::Corpus::Load(f.verse_file);
  if (!corpus.ok()) return Fail(corpus.status());

  service::JobStoreOptions store_options;
  store_options.ttl = std::chrono::seconds(f.result_ttl_s);
  store_options.max_entry_bytes = static_cast<size_t>(f.max_result_mb * 1024 * 1024);
  store_options.max_total_bytes = static_cast<size_t>(f.store_memory_mb * 1024 * 1024);
  store_options.claim_timeout = std::chrono::seconds(f.claim_timeout_s);
  std::shared_ptr<service::JobStore> redis_store;
  if (!f.redis.empty()) {
    auto endpoint = service::ParseRedisUrl(f.redis);
    if (!endpoint.ok()) return Fail(endpoint.status());
    if (f.redis_namespace.empty() ||
        f.redis_namespace.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-_.") !=
            std::string::npos) {
      return Fail(
          InvalidArgument("--redis-namespace must be lower-case letters, digits, '-', '_' or '.'"));
    }
    redis_store = std::shared_ptr<service::JobStore>(
        service::NewRedisJobStore(*endpoint, store_options, f.redis_namespace));
    // Unreachable at start is not fatal: uploads get 503 and /readyz fails
    // until it answers.
    if (auto st = redis_store->Ping(); !st.ok()) {
      spdlog::warn("danqing serve: {}; uploads are refused until it answers", st.message());
    } else {
      spdlog::info("danqing serve: shared queue and store at {}:{} (namespace {})", endpoint->host,
                   endpoint->port, f.redis_namespace);
    }
  }
  // With --redis the poems' no-repeat window is shared by every replica too.
  verse::VerseSelector selector(
      *corpus, {}, redis_store ? service::NewRedisRecentChoices(redis_store) : nullptr);

  auto perceiver = perceive::CreateCvPerceiver({.cascade_dir = f.cascade_dir});
  if (!perceiver.ok()) return Fail(perceiver.status());

  auto renderer = service::CreateInscriptionRenderer(
      {.strokes_path = f.strokes, .font_path = f.font, .threads_per_render = 1, .backend = f.backend});
  if (!renderer.ok()) return Fail(renderer.status());

  service::PipelineLimits limits;
  limits.image.max_bytes = static_cast<size_t>(f.max_upload_mb * 1024 * 1024);
  limits.image.max_pixels = static_cast<uint64_t>(f.max_megapixels * 1e6);
  limits.max_canvas_side = f.max_canvas;
  service::Pipeline pipeline(perceiver->get(), &selector, renderer->get(), limits);

  service::Metrics metrics;
  metrics.backend = (*renderer)->Backend();
  metrics.perceiver = (*perceiver)->Name();

  service::ServerOptions options;
  options.host = f.host;
  options.port = f.port;
  options.probe_port = f.probe_port;
  options.workers = f.workers;
  options.queue_capacity = f.queue;
  options.deadline = std::chrono::milliseconds(f.deadline_ms);
  options.read_timeout = std::chrono::seconds(f.read_timeout_s);
  options.write_timeout = std::chrono::seconds(f.read_timeout_s);
  options.http_threads = f.http_threads;
  options.job_store_options = store_options;
  options.max_jobs_per_client = f.jobs_per_client;
  options.max_event_streams = f.event_streams;
  options.result_cache_bytes = static_cast<size_t>(f.result_cache_mb * (1 << 20));
  options.trust_forwarded_for = f.trust_forwarded_for;
  options.job_store = redis_store;
  service::Server server(options, &pipeline, &metrics);
  if (auto st = server.Start(); !st.ok()) return Fail(st);
  spdlog::info("danqing serve: {} poems, perceiver {}, backend {}; open http://localhost:{}/",
               corpus->size(), metrics.perceiver, metrics.backend, server.port());

  int sig = 0;
  while (sigwait(&signals, &sig) != 0) {
  }
  if (f.drain_delay_s > 0) {
    // Until the endpoint's removal reaches every proxy they still send
    // requests here: serve them, with readiness off. A second signal cuts it short.
    server.StopReady();
    spdlog::info("danqing serve: signal {}, not ready; serving {} s more before draining", sig, f.drain_delay_s);
    const timespec delay{f.drain_delay_s, 0};
    sigtimedwait(&signals, nullptr, &delay);
  }
  spdlog::info("danqing serve: draining (at most {} s)", f.drain_timeout_s);
  const auto drain_start = std::chrono::steady_clock::now();
  const auto drain_timeout = std::chrono::seconds(f.drain_timeout_s);
  const bool in_time = server.Drain(drain_timeout);
  // What is left of the drain timeout bounds the connections still open too
  // (an upload trickling in, an answer read slowly).
  const auto left = std::max<std::chrono::milliseconds>(
      std::chrono::milliseconds(0),
      std::chrono::duration_cast<std::chrono::milliseconds>(
          drain_timeout - (std::chrono::steady_clock::now() - drain_start)));
  // At least a second: the answers the drain just gave (503 cut off) are
  // still being written, and must reach their clients before any socket is
  // shut.
  server.Stop(std::max<std::chrono::milliseconds>(left, std::chrono::seconds(1)));
  if (const size_t closed = server.connections_cut(); closed > 0) {
    spdlog::warn("danqing serve: {} connection(s) still open at the drain timeout closed", closed);
  }
  // Exit 1 only when an accepted inscription was not answered with its image.
  const size_t cut = server.cut_off();
  if (cut > 0) {
    spdlog::warn("danqing serve: stopped; {} accepted inscription(s) cut off by the drain timeout",
                 cut);
  } else {
    spdlog::info("danqing serve: stopped{}",
                 in_time ? "" : " (drain timed out; every accepted inscription was answered)");
  }
  return cut == 0 ? 0 : 1;
}

}  // namespace
}  // namespace danqing::cli

void RegisterServeCommand(CLI::App& app) {
  using danqing::cli::RunServe;
  using danqing::cli::ServeFlags;
  auto flags = std::make_shared<ServeFlags>();
  CLI::App* cmd =
      app.add_subcommand("serve", "Serve the HTTP API and upload page (docs/service.md)");
  cmd->add_option("--host", flags->host, "Address to listen on")->capture_default_str();
  cmd->add_option("--port", flags->port, "Port to listen on (0: any free port)")
      ->capture_default_str()
      ->check(CLI::Range(0, 65535));
  cmd->add_option("--probe-port", flags->probe_port,
                  "Also serve /healthz /readyz /metrics here, on threads of their own (-1: off)")
      ->capture_default_str()
      ->check(CLI::Range(-1, 65535));
  // Bounded: a negative value would wrap to a huge count (threads that cannot
  // be started; a queue with no limit).
  cmd->add_option(
         "--workers", flags->workers,
         "Render workers (0: one per CPU the process may use: cores, affinity, cgroup CPU limit)")
      ->capture_default_str()
      ->check(CLI::Range(size_t{0}, size_t{1024}));
  cmd->add_option("--queue", flags->queue, "Renders that may wait (0: 2 x workers)")
      ->capture_default_str()
      ->check(CLI::Range(size_t{0}, size_t{100000}));
  cmd->add_option("--deadline-ms", flags->deadline_ms, "Per-request deadline")
      ->capture_default_str()
      ->check(CLI::Range(100, 600000));
  cmd->add_option("--drain-timeout", flags->drain_timeout_s, "Seconds to drain on SIGTERM")
      ->capture_default_str()
      ->check(CLI::Range(0, 3600));
  cmd->add_option("--drain-delay", flags->drain_delay_s,
                  "Seconds SIGTERM keeps serving, readiness off, before draining")
      ->capture_default_str()
      ->check(CLI::Range(0, 600));
  cmd->add_option("--read-timeout", flags->read_timeout_s,
                  "Seconds a client may stall a read or write")
      ->capture_default_str()
      ->check(CLI::Range(1, 600));
  cmd->add_option("--http-threads", flags->http_threads,
                  "Requests served at once (idle connections hold none)")
      ->capture_default_str()
      ->check(CLI::Range(4, 4096));
  cmd->add_option("--max-upload-mb", flags->max_upload_mb, "Largest upload")
      ->capture_default_str()
      ->check(CLI::Range(0.01, 512.0));
  cmd->add_option("--max-megapixels", flags->max_megapixels,
                  "Largest photo (checked from its header)")
      ->capture_default_str()
      ->check(CLI::Range(0.01, 1000.0));
  cmd->add_option("--max-canvas", flags->max_canvas, "Largest inscription side in pixels")
      ->capture_default_str()
      ->check(CLI::Range(256, 8192));
  cmd->add_option("--verse-file", flags->verse_file, "Verse corpus TSV (default: the bundled one)");
  cmd->add_option("--cascade-dir", flags->cascade_dir, "OpenCV Haar cascades (opencv-data)")
      ->capture_default_str();
  cmd->add_option("--strokes", flags->strokes, "Stroke data file (default: the renderer's lookup)");
  cmd->add_option("--font", flags->font, "Fallback Kai font (default: the renderer's)");
  cmd->add_option("--backend", flags->backend,
                  "Render backend: auto, cpu or gpu (default: $DANQING_RENDER_BACKEND, else auto)");
  cmd->add_option("--redis", flags->redis,
                  "Shared queue and store for every replica: redis://[:password@]host[:port][/db] "
                  "(default: in-process) [env DANQING_REDIS]")
      ->envname("DANQING_REDIS");
  cmd->add_option("--redis-namespace", flags->redis_namespace, "Prefix of every Redis key")
      ->capture_default_str();
  cmd->add_option("--result-ttl", flags->result_ttl_s, "Seconds a result is kept")
      ->capture_default_str()
      ->check(CLI::Range(60, 30 * 24 * 3600));
  cmd->add_option("--max-result-mb", flags->max_result_mb, "Largest stored result (image + JSON)")
      ->capture_default_str()
      ->check(CLI::Range(0.01, 512.0));
  cmd->add_option("--store-memory-mb", flags->store_memory_mb,
                  "Results kept in memory together, without --redis (oldest dropped first)")
      ->capture_default_str()
      ->check(CLI::Range(1.0, 1024.0 * 1024));
  cmd->add_option("--claim-timeout", flags->claim_timeout_s,
                  "Seconds after which a claimed job whose replica stopped renewing it is taken by "
                  "another worker")
      ->capture_default_str()
      ->check(CLI::Range(1, 3600));
  cmd->add_option("--jobs-per-client", flags->jobs_per_client,
                  "Unfinished inscriptions one visitor may hold (0: no limit)")
      ->capture_default_str()
      ->check(CLI::Range(0, 100000));
  cmd->add_option("--event-streams", flags->event_streams,
                  "Server-sent event streams open at once (each holds an HTTP thread)")
      ->capture_default_str()
      ->check(CLI::Range(size_t{0}, size_t{4096}));
  cmd->add_option("--result-cache-mb", flags->result_cache_mb,
                  "Recent results kept in this replica's memory for GET (the store keeps them all)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 65536.0));
  cmd->add_flag("--trust-forwarded-for", flags->trust_forwarded_for,
                "Take the visitor's address from the last X-Forwarded-For hop (behind a proxy)");
  cmd->callback([flags] {
    const int rc = RunServe(*flags);
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
}
