#include "service/render_queue.h"

#include <algorithm>
#include <cmath>

namespace danqing::service {

RenderQueue::RenderQueue(size_t workers, size_t capacity, Metrics* metrics)
    : capacity_(capacity), metrics_(metrics) {
  workers = std::max<size_t>(workers, 1);
  if (metrics_) {
    metrics_->workers = static_cast<int64_t>(workers);
    metrics_->queue_capacity = static_cast<int64_t>(capacity);
  }
  for (size_t i = 0; i < workers; ++i) threads_.emplace_back([this] { Work(); });
  for (size_t i = 0; i < workers; ++i) preparers_.emplace_back([this] { Prepare(); });
  for (size_t i = 0; i < workers; ++i) finishers_.emplace_back([this] { Finish(); });
}

RenderQueue::~RenderQueue() {
  std::deque<Job> left;
  std::deque<Ready> left_ready;
  {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = stopping_ = true;
    left.swap(jobs_);
    left_ready.swap(ready_);
    if (metrics_) metrics_->queue_depth = 0;
  }
  cv_.notify_all();
  prep_cv_.notify_all();
  for (auto& j : left) j.expired();
  for (auto& r : left_ready) r.expired();
  // A preparer busy with a job finishes it, sees the queue stopping and runs
  // its `expired` instead of handing it on.
  for (auto& t : preparers_) t.join();
  for (auto& t : threads_) t.join();
  // The workers are gone: the finishers run every rest still queued (each
  // answers a request), then stop.
  {
    std::lock_guard<std::mutex> lock(mu_);
    finishers_stopping_ = true;
  }
  rest_cv_.notify_all();
  for (auto& t : finishers_) t.join();
}

RenderQueue::Admit RenderQueue::Submit(std::function<void()> run, std::function<void()> expired,
                                       Clock::time_point deadline) {
  return SubmitStaged(
      [run = std::move(run)]() -> Rest {
        run();
        return nullptr;
      },
      std::move(expired), deadline);
}

RenderQueue::Admit RenderQueue::SubmitStaged(std::function<Rest()> run,
                                             std::function<void()> expired,
                                             Clock::time_point deadline) {
  // Nothing to prepare: the preparer hands the job straight on.
  return SubmitPrepared([run = std::move(run)]() mutable -> Render { return std::move(run); },
                        std::move(expired), deadline);
}

RenderQueue::Admit RenderQueue::SubmitPrepared(std::function<Render()> prepare,
                                               std::function<void()> expired,
                                               Clock::time_point deadline) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return Admit::kClosed;
    // Free workers take jobs at once, so only waiting jobs count against capacity.
    const size_t idle = threads_.size() - std::min(threads_.size(), running_);
    if (WaitingLocked() >= capacity_ + idle) return Admit::kFull;
    jobs_.push_back({std::move(prepare), std::move(expired), deadline});
    if (metrics_) metrics_->queue_depth = static_cast<int64_t>(WaitingLocked());
  }
  prep_cv_.notify_one();
  return Admit::kAccepted;
}

void RenderQueue::Close() {
  std::lock_guard<std::mutex> lock(mu_);
  closed_ = true;
}

bool RenderQueue::WaitIdle(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return idle_cv_.wait_for(
      lock, timeout, [&] { return WaitingLocked() == 0 && running_ == 0 && finishing_ == 0; });
}

size_t RenderQueue::Abandon() {
  std::deque<Job> left;
  std::deque<Ready> left_ready;
  {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
    left.swap(jobs_);
    left_ready.swap(ready_);
    if (metrics_) metrics_->queue_depth = static_cast<int64_t>(preparing_);
  }
  for (auto& j : left) j.expired();
  for (auto& r : left_ready) r.expired();
  idle_cv_.notify_all();
  return left.size() + left_ready.size();
}

size_t RenderQueue::depth() const {
  std::lock_guard<std::mutex> lock(mu_);
  return WaitingLocked();
}

size_t RenderQueue::preparing() const {
  std::lock_guard<std::mutex> lock(mu_);
  return preparing_;
}

size_t RenderQueue::in_flight() const {
  std::lock_guard<std::mutex> lock(mu_);
  return running_;
}

size_t RenderQueue::finishing() const {
  std::lock_guard<std::mutex> lock(mu_);
  return finishing_;
}

int RenderQueue::RetryAfterSeconds() const {
  std::lock_guard<std::mutex> lock(mu_);
  const double waves =
      static_cast<double>(WaitingLocked() + running_) / static_cast<double>(threads_.size());
  return std::max(1, static_cast<int>(std::ceil(waves * avg_job_seconds_)));
}

void RenderQueue::Prepare() {
  while (true) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      // At most one job prepared ahead per worker.
      prep_cv_.wait(lock, [&] {
        return stopping_ || (!jobs_.empty() && ready_.size() + preparing_ < threads_.size());
      });
      if (stopping_) return;
      job = std::move(jobs_.front());
      jobs_.pop_front();
      ++preparing_;
    }
    const auto start = Clock::now();
    Render render;
    if (start >= job.deadline) {
      job.expired();
    } else {
      render = job.prepare();
    }
    const double secs = std::chrono::duration<double>(Clock::now() - start).count();
    bool dropped = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      --preparing_;
      if (render && stopping_) {
        dropped = true;
      } else if (render) {
        ready_.push_back({std::move(render), job.expired, job.deadline, secs});
      }
      if (metrics_) metrics_->queue_depth = static_cast<int64_t>(WaitingLocked());
    }
    if (dropped) job.expired();
    cv_.notify_one();
    prep_cv_.notify_one();  // a job that was not handed on left room ahead
    idle_cv_.notify_all();
  }
}

void RenderQueue::Work() {
  while (true) {
    Ready job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !ready_.empty(); });
      if (stopping_) return;
      job = std::move(ready_.front());
      ready_.pop_front();
      ++running_;
      if (metrics_) {
        metrics_->queue_depth = static_cast<int64_t>(WaitingLocked());
        metrics_->in_flight = static_cast<int64_t>(running_);
      }
    }
    prep_cv_.notify_one();  // room for the next job to be prepared
    const auto start = Clock::now();
    const bool expired = start >= job.deadline;
    Rest rest;
    if (expired) {
      job.expired();
    } else {
      rest = job.render();
    }
    // A job's cost is its host part and its render (what RetryAfterSeconds
    // counts a wave by).
    const double secs =
        job.prepare_seconds + std::chrono::duration<double>(Clock::now() - start).count();
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (rest) {
        // Counted before the worker is: WaitIdle never sees the job nowhere.
        rests_.push_back(std::move(rest));
        ++finishing_;
        rest_cv_.notify_one();
      }
      --running_;
      if (!expired) avg_job_seconds_ = 0.8 * avg_job_seconds_ + 0.2 * secs;
      if (metrics_) metrics_->in_flight = static_cast<int64_t>(running_);
    }
    idle_cv_.notify_all();
  }
}

void RenderQueue::Finish() {
  while (true) {
    Rest rest;
    {
      std::unique_lock<std::mutex> lock(mu_);
      rest_cv_.wait(lock, [&] { return finishers_stopping_ || !rests_.empty(); });
      if (rests_.empty()) return;  // stopping, nothing left
      rest = std::move(rests_.front());
      rests_.pop_front();
    }
    rest();
    {
      std::lock_guard<std::mutex> lock(mu_);
      --finishing_;
    }
    idle_cv_.notify_all();
  }
}

}  // namespace danqing::service
