#include "service/job_store.h"

#include <condition_variable>
#include <cstring>
#include <deque>
#include <list>
#include <map>
#include <mutex>

namespace danqing::service {

bool ValidJobId(std::string_view id) {
  if (id.size() != 32) return false;
  for (char c : id) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

const char* JobStateName(JobState s) {
  switch (s) {
    case JobState::kQueued: return "queued";
    case JobState::kRendering: return "rendering";
    case JobState::kDone: return "done";
    case JobState::kFailed: return "failed";
  }
  return "unknown";
}

namespace {

// Stored entries: a 4-byte magic, then fields, each a 4-byte little-endian
// length and its bytes. Decoding checks every length against what is left.
void Put(std::string* out, std::string_view field) {
  const auto n = static_cast<uint32_t>(field.size());
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  out->append(field);
}

class Reader {
 public:
  Reader(std::string_view bytes, const char* what) : rest_(bytes), what_(what) {}
  Status Magic(std::string_view magic) {
    if (rest_.substr(0, magic.size()) != magic) {
      return Internal(std::string("the stored ") + what_ + " is corrupt (not a Danqing entry)");
    }
    rest_.remove_prefix(magic.size());
    return Status::Ok();
  }
  Result<std::string_view> Next(const char* field) {
    if (rest_.size() < 4) return Truncated(field);
    uint32_t n = 0;
    for (int i = 0; i < 4; ++i)
      n |= static_cast<uint32_t>(static_cast<uint8_t>(rest_[i])) << (8 * i);
    rest_.remove_prefix(4);
    if (n > rest_.size()) return Truncated(field);
    std::string_view v = rest_.substr(0, n);
    rest_.remove_prefix(n);
    return v;
  }
  Status End() {
    if (!rest_.empty()) {
      return Internal(std::string("the stored ") + what_ + " is corrupt (" +
                      std::to_string(rest_.size()) + " bytes after its last field)");
    }
    return Status::Ok();
  }

 private:
  Status Truncated(const char* field) {
    return Internal(std::string("the stored ") + what_ + " is corrupt (truncated at " + field +
                    ")");
  }
  std::string_view rest_;
  const char* what_;
};

Result<int> SmallInt(std::string_view v, const char* field) {
  if (v.empty() || v.size() > 6)
    return Internal(std::string("the stored job's ") + field + " is corrupt");
  int out = 0;
  for (char c : v) {
    if (c < '0' || c > '9')
      return Internal(std::string("the stored job's ") + field + " is corrupt");
    out = out * 10 + (c - '0');
  }
  return out;
}

}  // namespace

std::string EncodeJobRequest(const JobRequest& r) {
  const auto& o = r.options;
  // DQJ2: DQJ1 and the writing flag (issue 28); both are read back.
  std::string out = "DQJ2";
  out.reserve(r.photo.size() + 256);
  Put(&out, std::to_string(o.width));
  Put(&out, std::to_string(o.height));
  Put(&out, o.style);
  Put(&out, o.background);
  Put(&out, o.format);
  Put(&out, o.vertical ? "1" : "0");
  Put(&out, o.text);
  Put(&out, o.title);
  Put(&out, o.signature);
  Put(&out, r.photo);
  Put(&out, o.writing ? "1" : "0");
  return out;
}

Result<JobRequest> DecodeJobRequest(std::string_view bytes) {
  const bool v2 = bytes.substr(0, 4) == "DQJ2";
  Reader rd(bytes, "job");
  if (Status st = rd.Magic(v2 ? "DQJ2" : "DQJ1"); !st.ok()) return st;
  JobRequest r;
  auto& o = r.options;
  std::string_view f[10];
  static constexpr const char* kNames[10] = {"width",    "height", "style", "background", "format",
                                             "vertical", "text",   "title", "signature",  "photo"};
  for (int i = 0; i < 10; ++i) {
    auto v = rd.Next(kNames[i]);
    if (!v.ok()) return v.status();
    f[i] = *v;
  }
  std::string_view writing = "0";
  if (v2) {
    auto v = rd.Next("writing");
    if (!v.ok()) return v.status();
    writing = *v;
  }
  if (Status st = rd.End(); !st.ok()) return st;
  if (writing != "0" && writing != "1") return Internal("the stored job's writing is corrupt");
  r.options.writing = writing == "1";
  auto w = SmallInt(f[0], "width");
  if (!w.ok()) return w.status();
  auto h = SmallInt(f[1], "height");
  if (!h.ok()) return h.status();
  o.width = *w;
  o.height = *h;
  o.style = f[2];
  o.background = f[3];
  o.format = f[4];
  if (f[5] != "0" && f[5] != "1") return Internal("the stored job's vertical is corrupt");
  o.vertical = f[5] == "1";
  o.text = f[6];
  o.title = f[7];
  o.signature = f[8];
  r.photo = f[9];
  return r;
}

std::string EncodeStoredInscription(const StoredInscription& s) {
  // DQR2: DQR1 and the writing (issue 28); both are read back.
  std::string out = "DQR2";
  out.reserve(s.image.size() + s.json.size() + s.writing_png.size() + s.background_jpeg.size() +
              64);
  Put(&out, s.json);
  Put(&out, s.content_type);
  Put(&out, s.image);
  Put(&out, s.writing_png);
  Put(&out, s.background_jpeg);
  Put(&out, std::to_string(s.writing_end_ms));
  return out;
}

Result<StoredInscription> DecodeStoredInscription(std::string_view bytes) {
  const bool v2 = bytes.substr(0, 4) == "DQR2";
  Reader rd(bytes, "inscription");
  if (Status st = rd.Magic(v2 ? "DQR2" : "DQR1"); !st.ok()) return st;
  StoredInscription s;
  auto json = rd.Next("json");
  if (!json.ok()) return json.status();
  auto type = rd.Next("content_type");
  if (!type.ok()) return type.status();
  auto image = rd.Next("image");
  if (!image.ok()) return image.status();
  if (v2) {
    auto plane = rd.Next("writing_png");
    if (!plane.ok()) return plane.status();
    auto background = rd.Next("background_jpeg");
    if (!background.ok()) return background.status();
    auto end = rd.Next("writing_end_ms");
    if (!end.ok()) return end.status();
    auto end_ms = SmallInt(*end, "writing_end_ms");
    if (!end_ms.ok()) return end_ms.status();
    s.writing_png = *plane;
    s.background_jpeg = *background;
    s.writing_end_ms = static_cast<uint32_t>(*end_ms);
  }
  if (Status st = rd.End(); !st.ok()) return st;
  if (*type != "image/png" && *type != "image/jpeg") {
    return Internal("the stored inscription is corrupt (content type)");
  }
  s.json = *json;
  s.content_type = *type;
  s.image = *image;
  return s;
}

namespace {

using Clock = std::chrono::steady_clock;

class InProcessJobStore final : public JobStore {
 public:
  explicit InProcessJobStore(JobStoreOptions o) : o_(o) {}

  Status Enqueue(const std::string& id, const std::string& client, const JobRequest& job,
                 const Admission& admission, int64_t* position, EnqueueRefusal* refusal) override {
    if (!ValidJobId(id)) return InvalidArgument("the id must be 32 hex digits");
    std::lock_guard<std::mutex> lock(mu_);
    Sweep();
    if (jobs_.count(id)) return Status(StatusCode::kAlreadyExists, "the id is taken");
    const auto waiting = static_cast<int64_t>(waiting_.size());
    if (admission.max_waiting > 0 && waiting >= admission.max_waiting) {
      if (refusal) {
        *refusal = {EnqueueRefusal::kQueueFull,
                    "the shared queue holds " + std::to_string(waiting) +
                        " inscriptions, more than can be finished within the deadline"};
      }
      return ResourceExhausted(refusal ? refusal->message : "queue full");
    }
    if (admission.max_per_client > 0 && clients_[client] >= admission.max_per_client) {
      if (refusal) {
        *refusal = {EnqueueRefusal::kClientLimit,
                    "this visitor already has " + std::to_string(clients_[client]) +
                        " inscriptions in progress (the limit); wait for one to finish"};
      }
      return ResourceExhausted(refusal ? refusal->message : "client limit");
    }
    Record& r = jobs_[id];
    r.ticket = next_ticket_++;
    r.client = client;
    r.request = std::make_shared<JobRequest>(job);
    waiting_.push_back(id);
    ++clients_[client];
    expiry_.push_back({Clock::now() + o_.ttl, id});
    if (position) *position = waiting;
    cv_.notify_one();
    return Status::Ok();
  }

  Result<std::optional<ClaimedJob>> Claim(std::chrono::milliseconds wait) override {
    std::unique_lock<std::mutex> lock(mu_);
    const auto until = Clock::now() + wait;
    while (true) {
      Sweep();
      // A job whose worker did not finish it within the claim timeout first.
      const auto now = Clock::now();
      for (auto& [cid, since] : claimed_) {
        if (now - since >= o_.claim_timeout) {
          since = now;
          auto it = jobs_.find(cid);
          if (it == jobs_.end() || !it->second.request) continue;
          return std::optional<ClaimedJob>(
              ClaimedJob{cid, *it->second.request, it->second.client, true});
        }
      }
      if (!waiting_.empty()) {
        std::string id = waiting_.front();
        waiting_.pop_front();
        ++claimed_tickets_;
        auto it = jobs_.find(id);
        if (it == jobs_.end()) continue;  // expired
        it->second.state = JobState::kRendering;
        claimed_[id] = now;
        return std::optional<ClaimedJob>(
            ClaimedJob{id, *it->second.request, it->second.client, false});
      }
      if (cv_.wait_until(lock, std::min(until, now + std::chrono::milliseconds(200))) ==
              std::cv_status::timeout &&
          Clock::now() >= until) {
        return std::optional<ClaimedJob>();
      }
    }
  }

  Status Complete(const std::string& id, const StoredInscription& result) override {
    if (!ValidJobId(id)) return InvalidArgument("the id must be 32 hex digits");
    const size_t bytes = result.image.size() + result.json.size() + result.content_type.size();
    if (bytes > o_.max_entry_bytes) {
      const std::string why = "the inscription is " + std::to_string(bytes) +
                              " bytes, over the store's bound of " +
                              std::to_string(o_.max_entry_bytes) + " per entry";
      (void)Fail(id, why);
      return ResourceExhausted(why);
    }
    std::lock_guard<std::mutex> lock(mu_);
    auto it = jobs_.find(id);
    if (it == jobs_.end()) return NotFound("no job with this id (expired?)");
    if (!Finish(id, it->second)) return Status::Ok();
    it->second.state = JobState::kDone;
    it->second.result = std::make_shared<StoredInscription>(result);
    total_bytes_ += bytes;
    results_.push_back(id);
    // The memory bound: the oldest results go first.
    while (total_bytes_ > o_.max_total_bytes && results_.size() > 1) {
      auto old = jobs_.find(results_.front());
      results_.pop_front();
      if (old != jobs_.end() && old->second.result) {
        total_bytes_ -= Size(*old->second.result);
        jobs_.erase(old);
      }
    }
    return Status::Ok();
  }

  Status Renew(const std::string& id) override {
    if (!ValidJobId(id)) return InvalidArgument("the id must be 32 hex digits");
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = claimed_.find(id); it != claimed_.end()) it->second = Clock::now();
    return Status::Ok();
  }

  Status Fail(const std::string& id, const std::string& reason) override {
    if (!ValidJobId(id)) return InvalidArgument("the id must be 32 hex digits");
    std::lock_guard<std::mutex> lock(mu_);
    auto it = jobs_.find(id);
    if (it == jobs_.end()) return NotFound("no job with this id (expired?)");
    if (!Finish(id, it->second)) return Status::Ok();
    it->second.state = JobState::kFailed;
    it->second.reason = reason;
    return Status::Ok();
  }

  Result<JobStatus> GetStatus(const std::string& id) override {
    if (!ValidJobId(id)) return InvalidArgument("the id must be 32 hex digits");
    std::lock_guard<std::mutex> lock(mu_);
    Sweep();
    auto it = jobs_.find(id);
    if (it == jobs_.end()) return NotFound("no inscription with this id (unknown or expired)");
    JobStatus s;
    s.state = it->second.state;
    s.reason = it->second.reason;
    if (s.state == JobState::kQueued) s.position = it->second.ticket - claimed_tickets_;
    return s;
  }

  Result<StoredInscription> GetResult(const std::string& id) override {
    if (!ValidJobId(id)) return InvalidArgument("the id must be 32 hex digits");
    std::lock_guard<std::mutex> lock(mu_);
    Sweep();
    auto it = jobs_.find(id);
    if (it == jobs_.end() || !it->second.result) {
      return NotFound("no finished inscription with this id");
    }
    return *it->second.result;
  }

  Result<std::vector<std::string>> Recent(size_t n) override {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<std::string> out;
    for (auto it = results_.rbegin(); it != results_.rend() && out.size() < n; ++it) {
      if (jobs_.count(*it)) out.push_back(*it);
    }
    return out;
  }

  Result<int64_t> Waiting() override {
    std::lock_guard<std::mutex> lock(mu_);
    return static_cast<int64_t>(waiting_.size());
  }

  Result<double> DrainRate() override {
    std::lock_guard<std::mutex> lock(mu_);
    TrimFinished(Clock::now());
    if (finished_.size() < 2) return 0.0;
    const double span = std::chrono::duration<double>(finished_.back() - finished_.front()).count();
    return span <= 0 ? 0.0 : static_cast<double>(finished_.size() - 1) / span;
  }

  Status Ping() override { return Status::Ok(); }
  std::string Name() const override { return "in-process"; }

 private:
  struct Record {
    JobState state = JobState::kQueued;
    int64_t ticket = 0;
    std::string client, reason;
    std::shared_ptr<const JobRequest> request;  // until finished
    std::shared_ptr<const StoredInscription> result;
  };

  static size_t Size(const StoredInscription& s) {
    return s.image.size() + s.json.size() + s.content_type.size();
  }

  // First finish of `id`: false when it was finished already. Caller holds mu_.
  bool Finish(const std::string& id, Record& r) {
    if (r.state == JobState::kDone || r.state == JobState::kFailed) return false;
    if (r.state == JobState::kQueued) {
      // Failed before any worker took it: out of the waiting line.
      for (auto it = waiting_.begin(); it != waiting_.end(); ++it) {
        if (*it == id) {
          waiting_.erase(it);
          ++claimed_tickets_;
          break;
        }
      }
    }
    claimed_.erase(id);
    r.request.reset();
    if (--clients_[r.client] <= 0) clients_.erase(r.client);
    const auto now = Clock::now();
    finished_.push_back(now);
    TrimFinished(now);
    return true;
  }

  void TrimFinished(Clock::time_point now) {
    while (!finished_.empty() && now - finished_.front() > std::chrono::seconds(60)) {
      finished_.pop_front();
    }
  }

  // Drops records past their TTL. Caller holds mu_.
  void Sweep() {
    const auto now = Clock::now();
    while (!expiry_.empty() && expiry_.front().first <= now) {
      auto it = jobs_.find(expiry_.front().second);
      if (it != jobs_.end()) {
        if (it->second.result) total_bytes_ -= Size(*it->second.result);
        if (it->second.state == JobState::kQueued || it->second.state == JobState::kRendering) {
          if (--clients_[it->second.client] <= 0) clients_.erase(it->second.client);
        }
        claimed_.erase(it->first);
        jobs_.erase(it);
      }
      expiry_.pop_front();
    }
  }

  const JobStoreOptions o_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, Record> jobs_;                            // guarded by mu_
  std::deque<std::string> waiting_;                               // guarded by mu_, oldest first
  std::map<std::string, Clock::time_point> claimed_;              // guarded by mu_
  std::map<std::string, int64_t> clients_;                        // guarded by mu_: unfinished jobs
  std::deque<std::pair<Clock::time_point, std::string>> expiry_;  // guarded by mu_
  std::deque<std::string> results_;                               // guarded by mu_, oldest first
  std::deque<Clock::time_point> finished_;                        // guarded by mu_, last minute
  size_t total_bytes_ = 0;                                        // guarded by mu_
  int64_t next_ticket_ = 0, claimed_tickets_ = 0;                 // guarded by mu_
};

}  // namespace

std::unique_ptr<JobStore> NewInProcessJobStore(JobStoreOptions options) {
  return std::make_unique<InProcessJobStore>(options);
}

}  // namespace danqing::service
