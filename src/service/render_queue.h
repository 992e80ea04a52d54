// A bounded queue in front of a fixed set of render workers. Submit() never
// blocks: when `capacity` jobs already wait, it answers kFull at once so the
// HTTP layer can refuse with 429 instead of piling up work. A job whose deadline
// passes while it waits is not run; its `expired` callback runs instead.
//
// A job may also come in two parts (SubmitStaged): the part on the render
// worker returns what is left (the encode), which runs on one of as many
// finisher threads as workers, so the worker takes its next job at once
// instead of encoding: on a GPU backend the worker is the device's feeder.
//
// Thread-safety: every method may be called from any thread. The destructor
// closes the queue, runs `expired` for jobs still waiting, runs what is left
// of the jobs already rendered and joins every thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "service/metrics.h"

namespace danqing::service {

class RenderQueue {
 public:
  using Clock = std::chrono::steady_clock;
  enum class Admit { kAccepted, kFull, kClosed };

  // workers >= 1. metrics may be null.
  RenderQueue(size_t workers, size_t capacity, Metrics* metrics);
  ~RenderQueue();
  RenderQueue(const RenderQueue&) = delete;
  RenderQueue& operator=(const RenderQueue&) = delete;

  Admit Submit(std::function<void()> run, std::function<void()> expired,
               Clock::time_point deadline);
  // `run` on a render worker; what it returns (if not empty) then runs on a
  // finisher thread. Admission, deadline and `expired` as Submit.
  using Rest = std::function<void()>;
  Admit SubmitStaged(std::function<Rest()> run, std::function<void()> expired,
                     Clock::time_point deadline);

  // Refuse new jobs (kClosed); jobs already accepted still run.
  void Close();
  // True once nothing waits and nothing runs (finishers included); false if
  // `timeout` passed first.
  bool WaitIdle(std::chrono::milliseconds timeout);
  // Closes the queue and takes out every job still waiting, running its
  // `expired` callback instead (on the caller's thread); jobs already
  // running finish. The number taken out.
  size_t Abandon();

  size_t depth() const;
  size_t in_flight() const;  // on render workers
  size_t finishing() const;  // handed to the finishers, not yet done
  size_t workers() const { return threads_.size(); }
  size_t capacity() const { return capacity_; }
  // Seconds a new job would wait, from the recent job durations (at least 1).
  int RetryAfterSeconds() const;

 private:
  struct Job {
    std::function<Rest()> run;
    std::function<void()> expired;
    Clock::time_point deadline;
  };
  void Work();
  void Finish();

  const size_t capacity_;
  Metrics* const metrics_;
  mutable std::mutex mu_;
  std::condition_variable cv_;       // work arrived or stopping
  std::condition_variable idle_cv_;  // a job finished
  std::deque<Job> jobs_;             // guarded by mu_
  std::deque<Rest> rests_;           // guarded by mu_; for the finishers
  std::condition_variable rest_cv_;  // a rest arrived or stopping
  size_t running_ = 0;               // guarded by mu_
  size_t finishing_ = 0;             // guarded by mu_: rests queued or running
  bool closed_ = false;              // guarded by mu_
  bool stopping_ = false;            // guarded by mu_
  double avg_job_seconds_ = 1.0;     // EWMA, guarded by mu_
  bool finishers_stopping_ = false;  // guarded by mu_
  std::vector<std::thread> threads_;
  std::vector<std::thread> finishers_;
};

}  // namespace danqing::service
