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
// A job may also begin with a host part (SubmitPrepared: decode, perceive,
// verse) that runs on one of as many preparer threads as workers, ahead of
// the render workers: while a worker renders job N, job N+1's host work runs,
// so a worker (the GPU's feeder) finds its next job ready. At most `workers`
// jobs are prepared ahead (each holds a decoded photo), so the stage is
// bounded; jobs start preparing in the order they were admitted.
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
  // `prepare` on a preparer thread; the render it returns (if not empty) on
  // a render worker, and that one's rest on a finisher. The deadline is
  // checked before each of the first two; `expired` runs at most once, in
  // place of what was left. Admission as Submit.
  using Render = std::function<Rest()>;
  Admit SubmitPrepared(std::function<Render()> prepare, std::function<void()> expired,
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

  size_t depth() const;      // admitted, not yet on a render worker
  size_t preparing() const;  // on preparer threads
  size_t in_flight() const;  // on render workers
  size_t finishing() const;  // handed to the finishers, not yet done
  size_t workers() const { return threads_.size(); }
  size_t capacity() const { return capacity_; }
  // Seconds a new job would wait, from the recent job durations (at least 1).
  int RetryAfterSeconds() const;

 private:
  struct Job {
    std::function<Render()> prepare;
    std::function<void()> expired;
    Clock::time_point deadline;
  };
  struct Ready {
    Render render;
    std::function<void()> expired;
    Clock::time_point deadline;
    double prepare_seconds = 0;
  };
  // Admitted and not yet on a render worker. Caller holds mu_.
  size_t WaitingLocked() const { return jobs_.size() + preparing_ + ready_.size(); }
  void Prepare();
  void Work();
  void Finish();

  const size_t capacity_;
  Metrics* const metrics_;
  mutable std::mutex mu_;
  std::condition_variable cv_;       // work arrived or stopping
  std::condition_variable idle_cv_;  // a job finished
  std::deque<Job> jobs_;             // guarded by mu_; waiting to be prepared
  std::condition_variable prep_cv_;  // a job arrived, room ahead, or stopping
  size_t preparing_ = 0;             // guarded by mu_
  std::deque<Ready> ready_;          // guarded by mu_; prepared, for the workers
  std::deque<Rest> rests_;           // guarded by mu_; for the finishers
  std::condition_variable rest_cv_;  // a rest arrived or stopping
  size_t running_ = 0;               // guarded by mu_
  size_t finishing_ = 0;             // guarded by mu_: rests queued or running
  bool closed_ = false;              // guarded by mu_
  bool stopping_ = false;            // guarded by mu_
  double avg_job_seconds_ = 1.0;     // EWMA, guarded by mu_
  bool finishers_stopping_ = false;  // guarded by mu_
  std::vector<std::thread> preparers_;
  std::vector<std::thread> threads_;
  std::vector<std::thread> finishers_;
};

}  // namespace danqing::service
