// The Danqing HTTP service (cpp-httplib): a visitor's photo in, an
// inscription out, under exhibition load.
//
//   POST /v1/inscriptions          multipart (file in field `image`) or a raw
//                                  image body; options as query parameters or
//                                  multipart fields: width, height, style,
//                                  background, format, vertical, text, title,
//                                  signature. Answers the image, or JSON with
//                                  `Accept: application/json` (or ?response=json).
//   GET  /v1/inscriptions/{id}       the JSON of a recent inscription
//   GET  /v1/inscriptions/{id}/image the image of a recent inscription
//   GET  /v1/inscriptions/{id}/writing    its write-time plane (16-bit PNG), with writing=true
//   GET  /v1/inscriptions/{id}/background the page before the writing (JPEG)
//   GET  /v1/inscriptions/{id}/video      the writing as H.264/MP4 (?fps=&seconds=)
//   GET  /                         the upload page
//   GET  /healthz /readyz /metrics
//
// Load: renders run on a RenderQueue sized to the cores; when it is full the
// answer is 429 with Retry-After at once; a request that cannot finish within
// its deadline gets 503. On SIGTERM, StopReady() turns /readyz to 503 while
// requests are still served (the endpoint's removal takes a while to reach
// every proxy); then Drain() refuses new inscriptions with 503 and lets
// accepted ones finish.
//
// Thread-safety: Start/Drain/Stop from one controlling thread; handlers run on
// the HTTP thread pool.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "common/status.h"
#include "service/job_store.h"
#include "service/metrics.h"
#include "service/pipeline.h"
#include "service/render_queue.h"
#include "video/writing_video.h"

namespace danqing::http {
class BoundedServer;
}
namespace httplib {
struct Request;
struct Response;
}  // namespace httplib

namespace danqing::service {

struct ServerOptions {
  std::string host = "::";  // every address, IPv6 and IPv4
  int port = 8080;                            // 0: any free port (see Server::port())
  size_t workers = 0;                         // render workers; 0: the number of cores
  size_t queue_capacity = 0;                  // waiting renders; 0: 2 x workers
  std::chrono::milliseconds deadline{20000};  // per inscription request
  // Requests served at once. A connection waiting for bytes (idle between
  // requests, or its headers not all there) holds none (http::BoundedServer).
  int http_threads = 64;
  std::chrono::seconds read_timeout{10};  // slow clients: per read
  // A request's line and headers must all arrive within this, however the
  // reads are spaced (a client trickling a header line every few seconds
  // would otherwise hold a thread for good).
  std::chrono::milliseconds header_deadline{10'000};
  // A body must keep pace: n bytes within body_deadline + n / body_min_rate
  // (bytes per second) after its headers, or the connection is closed (a
  // body trickled a byte every few seconds held a thread for good). The
  // defaults take an 8 MiB photo at 16 KiB/s, a slow mobile uplink, in
  // about 8.5 minutes.
  std::chrono::milliseconds body_deadline{10'000};
  size_t body_min_rate = 16 * 1024;
  std::chrono::seconds write_timeout{10};
  // An idle connection is closed after this (it holds no thread meanwhile).
  std::chrono::seconds keep_alive_timeout{5};
  // Connections waiting for bytes, per port; past it the longest waiting is closed.
  size_t max_idle_connections = 512;
  // Recent inscriptions kept in this replica for GET by id (in front of the
  // job store, which keeps every result for its TTL): at most this many, and
  // at most this many bytes of images, JSON and writing data together (the
  // newest is kept even when it alone is larger).
  size_t result_cache_entries = 64;
  size_t result_cache_bytes = 128u << 20;
  // /healthz, /readyz and /metrics also on this port, with threads of their
  // own, so that the kubelet's probes are answered while uploads (slow phones,
  // or clients that stall on purpose) hold every thread of the main port.
  // -1: none; 0: any free port (see Server::probe_port()).
  int probe_port = -1;

  // The shared queue and store (job_store.h, server_jobs.cc). Given (`--redis`):
  // every upload goes through it, and every replica reads its results. Null:
  // an in-process one, used by uploads that ask for an asynchronous answer
  // (`?wait=N` or `Prefer: respond-async`); the others are answered as before.
  std::shared_ptr<JobStore> job_store;
  JobStoreOptions job_store_options;  // for the in-process store
  int max_jobs_per_client = 4;        // unfinished jobs per visitor (0: no bound)
  size_t max_event_streams = 16;      // SSE streams open at once (each holds a thread)
  // The visitor is the last X-Forwarded-For hop (set behind a proxy that adds it).
  bool trust_forwarded_for = false;
  // Tests (issue 28): the video encoder fails after this many frames (-1: never).
  int video_fail_after_frames = -1;
};

class Server {
 public:
  Server(ServerOptions options, const Pipeline* pipeline, Metrics* metrics);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds and starts serving on a background thread. UNAVAILABLE when the
  // address cannot be bound.
  Status Start();
  int port() const { return port_; }
  int probe_port() const { return probe_port_; }  // -1 without a probe listener

  // Readiness off; everything else is served as before.
  void StopReady();
  // Readiness off, new inscriptions refused (503), then waits until accepted
  // renders have finished or `timeout` passed. True when everything finished.
  // At the timeout the drain ends: every accepted inscription not yet
  // answered is answered 503 at once (cut off, counted in cut_off()), and
  // those still waiting for a worker are dropped unrendered; renders already
  // drawing finish on their workers, unanswered.
  bool Drain(std::chrono::milliseconds timeout);
  // Accepted inscriptions answered 503 because a drain ran out of time
  // (final once Stop() has returned).
  size_t cut_off() const { return cut_off_.load(); }
  // Stops listening and joins the HTTP threads. Connections still being
  // served (a trickled upload, an answer the client does not read) get
  // `grace` to finish, then are closed: Stop() returns within about it.
  void Stop(std::chrono::milliseconds grace = std::chrono::seconds(5));
  // Connections closed by Stop() when the grace ran out (final once Stop()
  // has returned).
  size_t connections_cut() const;

 private:
  struct Pending;  // an accepted inscription's answer, awaited by its handler
  // The videos made of one inscription, by "fps/seconds" (at most 2 kept).
  struct VideoCache {
    std::mutex mu;
    std::map<std::string, std::shared_ptr<const std::string>> mp4;  // guarded by mu
  };
  // A kept answer (StoredAnswer's), with what this replica adds to it.
  struct Stored : StoredInscription {
    std::string backend;  // from the JSON: NVENC is tried only after a CUDA render
    std::shared_ptr<VideoCache> videos;
  };
  // Kept in this replica's cache under `id`, with a video cache of its own.
  std::shared_ptr<const Stored> Keep(const std::string& id, StoredInscription answer);
  // One inscription through the queue (sync POST and the shared queue's
  // claimed jobs): decode, perceive and verse on a preparer thread while the
  // worker renders the one before; the render on the worker; the encode and
  // the stage metrics on a finisher, then `finish` with the result. `start`:
  // when the request was admitted (its queue time is counted from it).
  RenderQueue::Admit SubmitInscription(std::shared_ptr<const std::string> photo,
                                       const InscribeOptions& o,
                                       std::function<void(Result<InscriptionResult>)> finish,
                                       std::function<void()> expired,
                                       std::chrono::steady_clock::time_point start,
                                       std::chrono::steady_clock::time_point deadline);
  // The stage, busy-share and render metrics of a finished inscription.
  void ObserveInscription(const InscriptionResult& r);
  void Routes();
  // server_jobs.cc: the job routes, the claim loop and their metrics.
  void JobRoutes();
  void StartJobs();
  void StopJobs();
  void ClaimLoop();
  void RenewLoop();
  void RunClaimed(ClaimedJob job);
  // Queues an upload that passed its checks and answers 202, or waits for it
  // (`?wait=N`) and answers like the synchronous path.
  void AcceptJob(const httplib::Request& req, httplib::Response& res, const InscribeOptions& o,
                 std::shared_ptr<const std::string> photo);
  bool UsesJobs(const httplib::Request& req) const;
  // OK, or why the store cannot take uploads (for /readyz and 503s).
  Status StoreHealth();
  std::string JobMetrics();
  double LocalRate() const;
  // GET .../writing, .../background, .../video (issue 28; server_writing.cc).
  void WritingRoutes(http::BoundedServer& s);
  std::atomic<size_t> videos_in_flight_{0};
  // Whether this pod's GPU has NVENC (probed once, logged).
  const video::NvencSupport& Nvenc();
  std::once_flag nvenc_once_;
  video::NvencSupport nvenc_;
  void ProbeRoutes(http::BoundedServer& s);
  void Store(const std::string& id, std::shared_ptr<const Stored> stored);
  std::shared_ptr<const Stored> Find(const std::string& id) const;
  // Find, else the shared store's result (kept in this replica's cache from
  // then on, with its own video cache): for the writing's routes (issue 28).
  std::shared_ptr<const Stored> FindOrFetch(const std::string& id);
  std::string NewId();
  // Answers every pending inscription at once with the cut-off error.
  void CutOffPending();

  const ServerOptions options_;
  std::shared_ptr<JobStore> store_;
  std::thread claimer_;
  std::atomic<bool> stop_claims_{false};
  // The claimed jobs this replica is rendering, renewed in the store every
  // third of the claim timeout by renewer_ (RenewLoop), so that a render
  // longer than the timeout is not taken over while this replica lives.
  std::thread renewer_;
  std::mutex leases_mu_;
  std::condition_variable leases_cv_;  // StopJobs wakes the renewer
  std::set<std::string> leases_;       // guarded by leases_mu_
  std::mutex slots_mu_;
  std::condition_variable slots_cv_;  // a claimed job finished, or stopping
  size_t busy_slots_ = 0;             // guarded by slots_mu_: claimed jobs not yet finished
  std::mutex done_mu_;
  std::condition_variable done_cv_;  // a job finished here, or a store notice came
  uint64_t done_gen_ = 0;            // bumped by WakeWaiters, guarded by done_mu_
  // The latest notices (generation, job id; "" = every job), guarded by done_mu_.
  std::deque<std::pair<uint64_t, std::string>> notices_;
  int watch_token_ = 0;  // the store's change notices (0: none: poll)
  // Wakes the waiters (?wait=N, SSE streams) to re-read their job's status:
  // the waiter of `id` at once, the others (whose queue position may have
  // moved) at most every 250 ms; "" wakes every one.
  void WakeWaiters(const std::string& id);
  // Waits on done_cv_ (lock held) until a notice concerns `id` after
  // generation `gen` (or one for another job when `last_read` is 250 ms
  // old), or `deadline`.
  void WaitForNotice(std::unique_lock<std::mutex>& lock, const std::string& id, uint64_t gen,
                     std::chrono::steady_clock::time_point last_read,
                     std::chrono::steady_clock::time_point deadline);
  // How long a waiter sleeps before it re-reads anyway: long when the store
  // pushes changes (a fallback), short when it does not.
  std::chrono::milliseconds FallbackPoll(std::chrono::milliseconds without_push) const;
  std::atomic<double> avg_job_seconds_{1.0};
  std::atomic<size_t> event_streams_{0};
  std::atomic<uint64_t> jobs_done_{0}, jobs_failed_{0}, jobs_reclaimed_{0};
  const Pipeline* const pipeline_;
  Metrics* const metrics_;
  std::unique_ptr<RenderQueue> queue_;
  std::unique_ptr<http::BoundedServer> http_;
  std::thread listener_;
  int port_ = 0;
  std::unique_ptr<http::BoundedServer> probe_http_;
  std::thread probe_listener_;
  int probe_port_ = -1;
  std::atomic<bool> draining_{false};
  std::atomic<bool> not_ready_{false};
  std::atomic<size_t> cut_off_{0};

  std::mutex pending_mu_;
  std::set<std::shared_ptr<Pending>> pending_;  // guarded by pending_mu_

  mutable std::mutex cache_mu_;
  std::list<std::string> cache_order_;  // guarded by cache_mu_, newest first
  std::map<std::string, std::shared_ptr<const Stored>> cache_;  // guarded by cache_mu_
  size_t cache_bytes_ = 0;  // guarded by cache_mu_: the bytes of what cache_ holds
};

// The JSON body describing an inscription (verse, themes, features, timings).
std::string InscriptionJson(const std::string& id, const InscriptionResult& r,
                            const std::string& backend);
// The answer kept for `id` (in this replica's cache or the shared store),
// taking the result's bytes: its JSON (with `default_backend` when the result
// names none), image and writing.
StoredInscription StoredAnswer(const std::string& id, InscriptionResult&& r,
                               const std::string& default_backend);

}  // namespace danqing::service
