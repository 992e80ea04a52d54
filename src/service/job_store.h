// JobStore: where accepted inscriptions wait, are claimed by render workers,
// and where their results are kept for any replica to read.
//
// Two implementations: InProcessJobStore (the embedded default of `danqing
// serve`, one process) and RedisJobStore (redis_job_store.h, `--redis URL`:
// a Redis Stream with a consumer group shared by every replica).
//
// The life of a job: Enqueue (queued, with a ticket in arrival order) ->
// Claim by one worker (rendering) -> Complete or Fail (done / failed with the
// reason). A claimed job that is neither completed nor failed, nor renewed
// (Renew), within the claim timeout (its worker died) is handed to the next
// Claim again.
// Complete and Fail are idempotent per id: the first of them wins, later ones
// change nothing, so a job is finished exactly once or reported failed.
// Records and results expire after the TTL (default 24 h); a result larger
// than the per-entry bound is refused (the job is failed with that reason).
//
// Ids are 32 lower-case hex digits (ValidJobId); every method refuses any
// other id with INVALID_ARGUMENT before it reaches a key.
//
// Errors: UNAVAILABLE when the backing server cannot be reached (the message
// says why); RESOURCE_EXHAUSTED from Enqueue when admission refuses (the
// message says why; Admission says which bound); DATA_LOSS-like corruption of
// a stored entry is INTERNAL with a message naming the entry.
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "service/pipeline.h"

namespace danqing::service {

// True for exactly 32 lower-case hex digits.
bool ValidJobId(std::string_view id);

// What a job carries: the visitor's options and photo.
struct JobRequest {
  InscribeOptions options;
  std::string photo;  // the upload's bytes, checked before Enqueue
};

// A request as stored bytes, and back. Decode: INTERNAL naming what is wrong
// with a corrupt or truncated entry.
std::string EncodeJobRequest(const JobRequest& r);
Result<JobRequest> DecodeJobRequest(std::string_view bytes);

// A finished inscription as the store keeps it.
struct StoredInscription {
  std::string json;  // InscriptionJson
  std::string content_type;
  std::string image;
  // The writing (issue 28), when the upload asked for it: the write-time
  // plane (16-bit PNG), the page before the writing (JPEG), its length.
  std::string writing_png, background_jpeg;
  uint32_t writing_end_ms = 0;
};
std::string EncodeStoredInscription(const StoredInscription& s);
Result<StoredInscription> DecodeStoredInscription(std::string_view bytes);

enum class JobState { kQueued, kRendering, kDone, kFailed };
const char* JobStateName(JobState s);

struct JobStatus {
  JobState state = JobState::kQueued;
  // kQueued: jobs ahead of this one (0: next to be claimed).
  int64_t position = 0;
  std::string reason;  // kFailed: why
};

struct ClaimedJob {
  std::string id;
  JobRequest request;
  std::string client;
  bool reclaimed = false;  // taken over from a worker that did not finish it
};

struct Admission {
  // Waiting (unclaimed) jobs above which Enqueue refuses; 0: no bound.
  int64_t max_waiting = 0;
  // Unfinished jobs one client may hold; 0: no bound.
  int64_t max_per_client = 0;
};

struct EnqueueRefusal {
  enum Reason { kQueueFull, kClientLimit } reason;
  std::string message;
};

struct JobStoreOptions {
  std::chrono::milliseconds ttl{24LL * 3600 * 1000};  // records and results
  size_t max_entry_bytes = 32u << 20;                 // one stored result (image + JSON)
  size_t max_total_bytes = 512u << 20;  // in-process only: every stored result together
  // A claimed job not finished within this is claimed again by another worker.
  std::chrono::milliseconds claim_timeout{60000};
};

class JobStore {
 public:
  virtual ~JobStore() = default;

  // Queues the job. OK: accepted, `*ticket_position` (if given) the jobs
  // ahead of it. RESOURCE_EXHAUSTED with `*refusal` filled when admission
  // refuses it (nothing stored). UNAVAILABLE: the server is unreachable.
  virtual Status Enqueue(const std::string& id, const std::string& client, const JobRequest& job,
                         const Admission& admission, int64_t* position,
                         EnqueueRefusal* refusal) = 0;

  // The next job for a worker, waiting at most `wait`; none when nothing
  // came. Jobs whose worker exceeded the claim timeout come first. A corrupt
  // stored job is failed with the reason and skipped (never handed out).
  virtual Result<std::optional<ClaimedJob>> Claim(std::chrono::milliseconds wait) = 0;

  // Finishes the job: done with `result`, or failed with `reason`. The first
  // finish wins; OK (and nothing changed) for a job already finished.
  // RESOURCE_EXHAUSTED from Complete when the result is over the per-entry
  // bound: the job is then failed with that reason.
  virtual Status Complete(const std::string& id, const StoredInscription& result) = 0;
  virtual Status Fail(const std::string& id, const std::string& reason) = 0;

  // The worker that claimed the job is still rendering it: its claim timeout
  // starts again, so a render longer than the timeout is not taken over
  // while its worker lives (the server renews every claim it holds, every
  // third of the timeout). Only a claim this store instance (its consumer)
  // holds is renewed: a job meanwhile taken over by another worker, or
  // finished, is left as it is (OK). UNAVAILABLE: the server is unreachable.
  virtual Status Renew(const std::string& id) = 0;

  // NOT_FOUND for an unknown or expired id.
  virtual Result<JobStatus> GetStatus(const std::string& id) = 0;
  // NOT_FOUND unless done; INTERNAL for a corrupt or oversize entry.
  virtual Result<StoredInscription> GetResult(const std::string& id) = 0;
  // The newest finished ids, newest first, at most `n`.
  virtual Result<std::vector<std::string>> Recent(size_t n) = 0;

  // Waiting (unclaimed) jobs across every replica.
  virtual Result<int64_t> Waiting() = 0;
  // Jobs finished (done or failed) per second across every replica, over the
  // last minute; 0 when none finished yet.
  virtual Result<double> DrainRate() = 0;
  // Replicas claiming from this store now (each polls at least every
  // second); 1 for the in-process store. For admission before any job has
  // finished (no drain rate measured yet).
  virtual Result<int64_t> ActiveReplicas() { return int64_t{1}; }
  // Change notices: `on_change(id)` is called, from a store thread, when any
  // replica claims or finishes a job (Redis: the scripts PUBLISH the id on
  // <ns>:events; one subscriber connection per store, reconnecting, with an
  // empty id after each (re)connect: "re-read everything"). A token for
  // Unwatch, or 0 when this store sends none (the caller polls). A listener
  // is not called after Unwatch returns.
  virtual int Watch(std::function<void(const std::string& id)> on_change) {
    (void)on_change;
    return 0;
  }
  virtual void Unwatch(int token) { (void)token; }
  // True while notices arrive (subscribed now): waiters may then poll only
  // as a fallback, slowly.
  virtual bool Watching() const { return false; }
  // OK when the server answers.
  virtual Status Ping() = 0;
  // A short name for logs and /readyz: "in-process", "redis".
  virtual std::string Name() const = 0;
};

std::unique_ptr<JobStore> NewInProcessJobStore(JobStoreOptions options);

}  // namespace danqing::service
