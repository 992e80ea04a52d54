#include "service/redis_job_store.h"

#include <hiredis/hiredis.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

namespace danqing::service {

Result<RedisEndpoint> ParseRedisUrl(const std::string& url) {
  RedisEndpoint e;
  std::string rest = url;
  if (rest.rfind("redis://", 0) == 0) {
    rest = rest.substr(8);
  } else if (rest.find("://") != std::string::npos) {
    return InvalidArgument("--redis: only redis:// URLs are supported, got '" + url + "'");
  }
  if (auto at = rest.rfind('@'); at != std::string::npos) {
    std::string auth = rest.substr(0, at);
    rest = rest.substr(at + 1);
    if (auto colon = auth.find(':'); colon != std::string::npos) auth = auth.substr(colon + 1);
    e.password = auth;
  }
  if (auto slash = rest.find('/'); slash != std::string::npos) {
    const std::string db = rest.substr(slash + 1);
    rest = rest.substr(0, slash);
    if (!db.empty()) {
      if (db.size() > 2 || db.find_first_not_of("0123456789") != std::string::npos) {
        return InvalidArgument("--redis: the database must be a number 0-99, got '" + db + "'");
      }
      e.db = std::stoi(db);
    }
  }
  std::string port;
  if (!rest.empty() && rest[0] == '[') {  // [IPv6]:port
    const auto close = rest.find(']');
    if (close == std::string::npos)
      return InvalidArgument("--redis: unclosed '[' in '" + url + "'");
    e.host = rest.substr(1, close - 1);
    if (close + 1 < rest.size()) {
      if (rest[close + 1] != ':') return InvalidArgument("--redis: expected ':' after ']'");
      port = rest.substr(close + 2);
    }
  } else if (auto colon = rest.rfind(':'); colon != std::string::npos) {
    e.host = rest.substr(0, colon);
    port = rest.substr(colon + 1);
  } else {
    e.host = rest;
  }
  if (e.host.empty()) return InvalidArgument("--redis: no host in '" + url + "'");
  if (!port.empty()) {
    if (port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos ||
        std::stoi(port) < 1 || std::stoi(port) > 65535) {
      return InvalidArgument("--redis: the port must be 1-65535, got '" + port + "'");
    }
    e.port = std::stoi(port);
  }
  return e;
}

namespace {

struct ReplyFree {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using Reply = std::unique_ptr<redisReply, ReplyFree>;
struct ContextFree {
  void operator()(redisContext* c) const { redisFree(c); }
};
using Context = std::unique_ptr<redisContext, ContextFree>;

timeval Tv(std::chrono::milliseconds ms) {
  return {static_cast<time_t>(ms.count() / 1000),
          static_cast<suseconds_t>((ms.count() % 1000) * 1000)};
}

std::string Hex(std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : s) {
    out.push_back(kHex[c >> 4]);
    out.push_back(kHex[c & 15]);
  }
  return out.substr(0, 128);  // clients are addresses; the bound keeps keys short
}

std::string Str(const redisReply* r) {
  return r && (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS ||
               r->type == REDIS_REPLY_ERROR)
             ? std::string(r->str, r->len)
             : std::string();
}

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Admission and enqueue, whole. ARGV: ns id client payload ttl max_waiting
// max_per_client. {0, ahead} accepted; {1, waiting} queue full; {2, held}
// client limit; {3, 0} id taken.
constexpr const char* kEnqueue = R"lua(
local p, id, client = ARGV[1], ARGV[2], ARGV[3]
local ttl, maxw, maxc = ARGV[5], tonumber(ARGV[6]), tonumber(ARGV[7])
local enq = tonumber(redis.call('GET', p..':seq:enq') or '0')
local cl = tonumber(redis.call('GET', p..':seq:claimed') or '0')
local waiting = enq - cl
if maxw > 0 and waiting >= maxw then return {1, waiting} end
local ck = p..':client:'..client
local held = tonumber(redis.call('GET', ck) or '0')
if maxc > 0 and held >= maxc then return {2, held} end
local jk = p..':job:'..id
if redis.call('EXISTS', jk) == 1 then return {3, 0} end
local ticket = redis.call('INCR', p..':seq:enq') - 1
redis.call('SET', p..':in:'..id, ARGV[4], 'PX', ttl)
redis.call('HSET', jk, 'state', 'queued', 'ticket', ticket, 'client', client)
redis.call('PEXPIRE', jk, ttl)
redis.call('INCR', ck)
redis.call('PEXPIRE', ck, ttl)
redis.call('XADD', p..':jobs', '*', 'id', id)
return {0, ticket - cl}
)lua";

// A worker takes the job of stream entry ARGV[3]. ARGV: ns id sid.
// {request bytes, client}; {0, ''} when the request is missing; nil when the
// job is gone or finished (its entry is then acknowledged and deleted). One
// round trip for what a worker needs of its job.
constexpr const char* kClaim = R"lua(
local p, id, sid = ARGV[1], ARGV[2], ARGV[3]
local jk = p..':job:'..id
local st = redis.call('HGET', jk, 'state')
if st == 'queued' then redis.call('INCR', p..':seq:claimed') end
if st ~= 'queued' and st ~= 'rendering' then
  if st == false then
    -- expired or lost: nobody waits for it any more
    redis.call('INCR', p..':seq:claimed')
  end
  redis.call('XACK', p..':jobs', 'workers', sid)
  redis.call('XDEL', p..':jobs', sid)
  return false
end
redis.call('HSET', jk, 'state', 'rendering', 'sid', sid)
redis.call('PUBLISH', p..':events', id)
local payload = redis.call('GET', p..':in:'..id)
if not payload then return {0, ''} end
return {payload, redis.call('HGET', jk, 'client') or ''}
)lua";

// The claim of job ARGV[2] starts its timeout again, if consumer ARGV[3]
// still holds its stream entry (XCLAIM with no minimum idle time, JUSTID:
// the entry is not delivered again). ARGV: ns id consumer. 1 renewed, 0 not
// ours (taken over, finished or gone).
constexpr const char* kRenew = R"lua(
local p, id, me = ARGV[1], ARGV[2], ARGV[3]
local sid = redis.call('HGET', p..':job:'..id, 'sid')
if not sid then return 0 end
local held = redis.call('XPENDING', p..':jobs', 'workers', sid, sid, 1, me)
if #held == 0 then return 0 end
redis.call('XCLAIM', p..':jobs', 'workers', me, 0, sid, 'JUSTID')
return 1
)lua";

// The first finish of a job. ARGV: ns id ok(1/0) data(result or reason) ttl
// now_ms. 1 finished now, 0 finished before, -1 unknown id.
constexpr const char* kFinish = R"lua(
local p, id, ok, data, ttl, now = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], tonumber(ARGV[6])
local jk = p..':job:'..id
local st = redis.call('HGET', jk, 'state')
if not st then return -1 end
local sid = redis.call('HGET', jk, 'sid')
if st == 'done' or st == 'failed' then return 0 end
if st == 'queued' then redis.call('INCR', p..':seq:claimed') end
if ok == '1' then
  redis.call('SET', p..':out:'..id, data, 'PX', ttl)
  redis.call('HSET', jk, 'state', 'done')
  redis.call('LPUSH', p..':recent', id)
  redis.call('LTRIM', p..':recent', 0, 99)
else
  redis.call('HSET', jk, 'state', 'failed', 'reason', data)
end
redis.call('DEL', p..':in:'..id)
local client = redis.call('HGET', jk, 'client')
if client then
  local ck = p..':client:'..client
  if redis.call('DECR', ck) <= 0 then redis.call('DEL', ck) end
end
redis.call('ZADD', p..':finished', now, id)
redis.call('ZREMRANGEBYSCORE', p..':finished', '-inf', now - 60000)
if sid then
  redis.call('XACK', p..':jobs', 'workers', sid)
  redis.call('XDEL', p..':jobs', sid)
end
redis.call('PUBLISH', p..':events', id)
return 1
)lua";

// The verse selector's shared no-repeat window: records as the newest the
// first of the poem ids ARGV[4..] (in order of preference) not among the
// newest ARGV[3]. ARGV: ns, (unused), window, ids. Its position (0-based), or
// -1 when every one is there.
constexpr const char* kRecordPoem = R"lua(
local key, n = ARGV[1]..':verse:recent', tonumber(ARGV[3])
local seen = {}
for _, v in ipairs(redis.call('LRANGE', key, 0, n - 1)) do seen[v] = true end
for i = 4, #ARGV do
  if not seen[ARGV[i]] then
    redis.call('LPUSH', key, ARGV[i])
    redis.call('LTRIM', key, 0, n - 1)
    return i - 4
  end
end
return -1
)lua";

// Status. ARGV: ns id. {state, ahead, reason} or false.
constexpr const char* kStatus = R"lua(
local p, id = ARGV[1], ARGV[2]
local v = redis.call('HMGET', p..':job:'..id, 'state', 'ticket', 'reason')
if not v[1] then return false end
local ahead = 0
if v[1] == 'queued' then
  ahead = tonumber(v[2] or '0') - tonumber(redis.call('GET', p..':seq:claimed') or '0')
  if ahead < 0 then ahead = 0 end
end
return {v[1], ahead, v[3] or ''}
)lua";

class RedisJobStore final : public JobStore {
 public:
  RedisJobStore(RedisEndpoint e, JobStoreOptions o, std::string ns, std::string consumer)
      : e_(std::move(e)), o_(o), ns_(std::move(ns)), consumer_(std::move(consumer)) {
    if (consumer_.empty()) {
      char host[256] = {};
      ::gethostname(host, sizeof host - 1);
      consumer_ = std::string(host) + "-" + std::to_string(::getpid());
    }
  }

  Status Enqueue(const std::string& id, const std::string& client, const JobRequest& job,
                 const Admission& admission, int64_t* position, EnqueueRefusal* refusal) override {
    if (!ValidJobId(id)) return InvalidArgument("the id must be 32 hex digits");
    auto r = Eval(kEnqueue, {ns_, id, Hex(client), EncodeJobRequest(job), Ttl(),
                             std::to_string(admission.max_waiting),
                             std::to_string(admission.max_per_client)});
    if (!r.ok()) return r.status();
    const redisReply* v = r->get();
    if (v->type != REDIS_REPLY_ARRAY || v->elements != 2 ||
        v->element[0]->type != REDIS_REPLY_INTEGER || v->element[1]->type != REDIS_REPLY_INTEGER) {
      return Internal("redis: unexpected answer to enqueue");
    }
    const auto code = v->element[0]->integer;
    const auto n = v->element[1]->integer;
    if (code == 0) {
      if (position) *position = n;
      return Status::Ok();
    }
    if (code == 3) return Status(StatusCode::kAlreadyExists, "the id is taken");
    EnqueueRefusal why;
    if (code == 1) {
      why = {EnqueueRefusal::kQueueFull,
             "the shared queue holds " + std::to_string(n) +
                 " inscriptions, more than can be finished within the deadline"};
    } else {
      why = {EnqueueRefusal::kClientLimit,
             "this visitor already has " + std::to_string(n) +
                 " inscriptions in progress (the limit); wait for one to finish"};
    }
    if (refusal) *refusal = why;
    return ResourceExhausted(why.message);
  }

  Result<std::optional<ClaimedJob>> Claim(std::chrono::milliseconds wait) override {
    auto conn = Take();
    if (!conn.ok()) {
      // Not reachable: the caller's loop retries; do not spin.
      std::this_thread::sleep_for(std::min(wait, std::chrono::milliseconds(500)));
      return conn.status();
    }
    Context c = std::move(conn).value();
    // The heartbeat that ActiveReplicas counts, at most every 500 ms (it
    // counts beats of the last 3 s): not a round trip per job.
    const int64_t now = NowMs();
    if (now - last_beat_ms_.load() >= 500) {
      if (auto hb = Command(c, {"ZADD", ns_ + ":replicas", std::to_string(now), consumer_});
          !hb.ok()) {
        return hb.status();
      }
      last_beat_ms_.store(now);
    }
    // Jobs whose worker did not finish within the claim timeout, first. A
    // look that found none is not repeated for a while (half the claim
    // timeout, at most 1 s: a dead worker's job waits that much longer at
    // most); one that found a job is (there may be more).
    const std::string key = ns_ + ":jobs";
    Reply none_reclaimed;
    Result<Reply> r = std::move(none_reclaimed);
    if (now >= autoclaim_after_ms_.load()) {
      r = Command(c, {"XAUTOCLAIM", key, "workers", consumer_,
                      std::to_string(o_.claim_timeout.count()), "0-0", "COUNT", "1"});
      if (!r.ok()) return r.status();
    }
    std::string sid, id;
    bool reclaimed = false;
    if (*r && (*r)->type == REDIS_REPLY_ARRAY && (*r)->elements >= 2 &&
        (*r)->element[1]->type == REDIS_REPLY_ARRAY && (*r)->element[1]->elements > 0) {
      if (!Entry((*r)->element[1]->element[0], &sid, &id)) {
        Give(std::move(c));
        return std::optional<ClaimedJob>();
      }
      reclaimed = true;
    } else {
      if (*r) {
        autoclaim_after_ms_.store(
            now + std::min<int64_t>(1000, std::max<int64_t>(1, o_.claim_timeout.count() / 2)));
      }
      const auto block = std::max<int64_t>(1, wait.count());
      redisSetTimeout(c.get(), Tv(std::chrono::milliseconds(block + 5000)));
      auto rd = Command(c, {"XREADGROUP", "GROUP", "workers", consumer_, "COUNT", "1", "BLOCK",
                            std::to_string(block), "STREAMS", key, ">"});
      if (!rd.ok()) return rd.status();
      redisSetTimeout(c.get(), Tv(kTimeout));
      const redisReply* v = rd->get();
      // [[key, [[sid, [field, value...]]]]]
      if (v->type != REDIS_REPLY_ARRAY || v->elements == 0) {
        Give(std::move(c));
        return std::optional<ClaimedJob>();
      }
      const redisReply* stream = v->element[0];
      if (stream->type != REDIS_REPLY_ARRAY || stream->elements < 2 ||
          stream->element[1]->type != REDIS_REPLY_ARRAY || stream->element[1]->elements == 0 ||
          !Entry(stream->element[1]->element[0], &sid, &id)) {
        Give(std::move(c));
        return std::optional<ClaimedJob>();
      }
    }
    if (!ValidJobId(id)) {
      // Not ours (someone wrote to the stream by hand): drop the entry.
      (void)Command(c, {"XACK", key, "workers", sid});
      (void)Command(c, {"XDEL", key, sid});
      Give(std::move(c));
      return std::optional<ClaimedJob>();
    }
    auto claimed = EvalOn(c, kClaim, {ns_, id, sid});
    if (!claimed.ok()) return claimed.status();
    Give(std::move(c));
    const redisReply* v = claimed->get();
    if (v->type != REDIS_REPLY_ARRAY) return std::optional<ClaimedJob>();  // gone or finished
    if (v->elements != 2 || v->element[0]->type != REDIS_REPLY_STRING) {
      // A job whose request expired or was lost while it was claimable.
      (void)Fail(id, "the stored request is missing");
      return std::optional<ClaimedJob>();
    }
    auto req = DecodeJobRequest(Str(v->element[0]));
    if (!req.ok()) {
      (void)Fail(id, req.status().message());
      return std::optional<ClaimedJob>();
    }
    return std::optional<ClaimedJob>(
        ClaimedJob{id, std::move(req).value(), Str(v->element[1]), reclaimed});
  }

  Status Complete(const std::string& id, const StoredInscription& result) override {
    if (!ValidJobId(id)) return InvalidArgument("the id must be 32 hex digits");
    std::string blob = EncodeStoredInscription(result);
    if (blob.size() > o_.max_entry_bytes) {
      const std::string why = "the inscription is " + std::to_string(blob.size()) +
                              " bytes, over the store's bound of " +
                              std::to_string(o_.max_entry_bytes) + " per entry";
      (void)Fail(id, why);
      return ResourceExhausted(why);
    }
    return Finish(id, "1", std::move(blob));
  }

  Status Fail(const std::string& id, const std::string& reason) override {
    if (!ValidJobId(id)) return InvalidArgument("the id must be 32 hex digits");
    return Finish(id, "0", reason);
  }

  Status Renew(const std::string& id) override {
    if (!ValidJobId(id)) return InvalidArgument("the id must be 32 hex digits");
    auto r = Eval(kRenew, {ns_, id, consumer_});
    return r.ok() ? Status::Ok() : r.status();
  }

  Result<JobStatus> GetStatus(const std::string& id) override {
    if (!ValidJobId(id)) return InvalidArgument("the id must be 32 hex digits");
    auto r = Eval(kStatus, {ns_, id});
    if (!r.ok()) return r.status();
    const redisReply* v = r->get();
    if (v->type == REDIS_REPLY_NIL)
      return NotFound("no inscription with this id (unknown or expired)");
    if (v->type != REDIS_REPLY_ARRAY || v->elements != 3)
      return Internal("redis: unexpected status answer");
    JobStatus s;
    const std::string state = Str(v->element[0]);
    if (state == "queued") {
      s.state = JobState::kQueued;
    } else if (state == "rendering") {
      s.state = JobState::kRendering;
    } else if (state == "done") {
      s.state = JobState::kDone;
    } else if (state == "failed") {
      s.state = JobState::kFailed;
    } else {
      return Internal("the stored state of " + id + " is corrupt ('" + state.substr(0, 32) + "')");
    }
    s.position = v->element[1]->type == REDIS_REPLY_INTEGER ? v->element[1]->integer : 0;
    s.reason = Str(v->element[2]);
    return s;
  }

  Result<StoredInscription> GetResult(const std::string& id) override {
    if (!ValidJobId(id)) return InvalidArgument("the id must be 32 hex digits");
    // The length first: an entry over the bound is not read into memory.
    auto len = Run({"STRLEN", ns_ + ":out:" + id});
    if (!len.ok()) return len.status();
    if ((*len)->type != REDIS_REPLY_INTEGER) return Internal("redis: unexpected STRLEN answer");
    if ((*len)->integer == 0) return NotFound("no finished inscription with this id");
    if (static_cast<size_t>((*len)->integer) > o_.max_entry_bytes + 1024) {
      return Internal("the stored inscription " + id + " is " + std::to_string((*len)->integer) +
                      " bytes, over the bound of " + std::to_string(o_.max_entry_bytes));
    }
    auto r = Run({"GET", ns_ + ":out:" + id});
    if (!r.ok()) return r.status();
    if ((*r)->type == REDIS_REPLY_NIL) return NotFound("no finished inscription with this id");
    if ((*r)->type != REDIS_REPLY_STRING) return Internal("redis: unexpected GET answer");
    return DecodeStoredInscription(std::string_view((*r)->str, (*r)->len));
  }

  Result<std::vector<std::string>> Recent(size_t n) override {
    auto r = Run({"LRANGE", ns_ + ":recent", "0", std::to_string(n == 0 ? 0 : n - 1)});
    if (!r.ok()) return r.status();
    std::vector<std::string> out;
    if ((*r)->type != REDIS_REPLY_ARRAY) return out;
    for (size_t i = 0; i < (*r)->elements && out.size() < n; ++i) {
      std::string id = Str((*r)->element[i]);
      if (ValidJobId(id)) out.push_back(std::move(id));
    }
    return out;
  }

  Result<int64_t> Waiting() override {
    auto r = Run({"MGET", ns_ + ":seq:enq", ns_ + ":seq:claimed"});
    if (!r.ok()) return r.status();
    if ((*r)->type != REDIS_REPLY_ARRAY || (*r)->elements != 2)
      return Internal("redis: unexpected MGET answer");
    const auto num = [](const redisReply* e) -> int64_t {
      const std::string s = Str(e);
      return s.empty() || s.find_first_not_of("0123456789") != std::string::npos ? 0
                                                                                 : std::stoll(s);
    };
    return std::max<int64_t>(0, num((*r)->element[0]) - num((*r)->element[1]));
  }

  Result<double> DrainRate() override {
    const int64_t now = NowMs();
    const std::string from = std::to_string(now - 60000);
    auto r =
        Run({"ZRANGEBYSCORE", ns_ + ":finished", from, "+inf", "WITHSCORES", "LIMIT", "0", "1"});
    if (!r.ok()) return r.status();
    auto n = Run({"ZCOUNT", ns_ + ":finished", from, "+inf"});
    if (!n.ok()) return n.status();
    if ((*n)->type != REDIS_REPLY_INTEGER || (*n)->integer < 2 || (*r)->type != REDIS_REPLY_ARRAY ||
        (*r)->elements != 2) {
      return 0.0;
    }
    const double first = std::strtod(Str((*r)->element[1]).c_str(), nullptr);
    const double span = (static_cast<double>(now) - first) / 1000.0;
    return span <= 0.05 ? 0.0 : static_cast<double>((*n)->integer - 1) / span;
  }

  Result<int64_t> ActiveReplicas() override {
    // Replicas whose claim loop beat within the last 3 s (it beats at a
    // Claim when its last beat is 500 ms old; the loop claims at least
    // every second).
    const int64_t now = NowMs();
    (void)Run({"ZREMRANGEBYSCORE", ns_ + ":replicas", "-inf", std::to_string(now - 60000)});
    auto r = Run({"ZCOUNT", ns_ + ":replicas", std::to_string(now - 3000), "+inf"});
    if (!r.ok()) return r.status();
    if ((*r)->type != REDIS_REPLY_INTEGER) return Internal("redis: unexpected ZCOUNT answer");
    return std::max<int64_t>(1, (*r)->integer);
  }

  ~RedisJobStore() override {
    {
      std::lock_guard<std::mutex> lock(watch_mu_);
      stop_watch_ = true;
      if (sub_fd_ >= 0) ::shutdown(sub_fd_, SHUT_RDWR);  // ends its blocking read
    }
    watch_cv_.notify_all();
    if (watch_thread_.joinable()) watch_thread_.join();
  }

  int Watch(std::function<void(const std::string& id)> on_change) override {
    std::lock_guard<std::mutex> lock(watch_mu_);
    const int token = ++next_watch_;
    watchers_.emplace(token, std::move(on_change));
    if (!watch_thread_.joinable()) watch_thread_ = std::thread([this] { WatchLoop(); });
    return token;
  }
  void Unwatch(int token) override {
    std::lock_guard<std::mutex> lock(watch_mu_);  // a notice in flight ends first
    watchers_.erase(token);
  }
  bool Watching() const override { return subscribed_.load(); }

  Status Ping() override {
    auto r = Run({"PING"});
    return r.ok() ? Status::Ok() : r.status();
  }
  std::string Name() const override { return "redis"; }

  // The verse window (NewRedisRecentChoices).
  Result<std::vector<int>> RecentPoems(size_t window) {
    if (window == 0) return std::vector<int>{};
    auto r = Run({"LRANGE", ns_ + ":verse:recent", "0", std::to_string(window - 1)});
    if (!r.ok()) return r.status();
    std::vector<int> ids;
    if ((*r)->type != REDIS_REPLY_ARRAY) return ids;
    for (size_t i = 0; i < (*r)->elements; ++i) {
      // Anything but a number (a corrupt entry) excludes no poem.
      const std::string v = Str((*r)->element[i]);
      if (v.empty() || v.size() > 9 || v.find_first_not_of("0123456789-") != std::string::npos)
        continue;
      ids.push_back(std::atoi(v.c_str()));
    }
    return ids;
  }
  Result<int> RecordPoem(const std::vector<int>& poem_ids, size_t window) {
    if (poem_ids.empty()) return -1;
    if (window == 0) return 0;
    std::vector<std::string> argv = {ns_, "", std::to_string(window)};
    for (int id : poem_ids) argv.push_back(std::to_string(id));
    auto r = Eval(kRecordPoem, std::move(argv));
    if (!r.ok()) return r.status();
    if ((*r)->type != REDIS_REPLY_INTEGER)
      return Internal("redis: the verse window script answered no number");
    return static_cast<int>((*r)->integer);
  }
  std::string VerseWindowName() const { return "redis " + Where() + " " + ns_ + ":verse:recent"; }

 private:
  static constexpr std::chrono::milliseconds kTimeout{2000};

  std::string Ttl() const { return std::to_string(o_.ttl.count()); }

  static bool Entry(const redisReply* e, std::string* sid, std::string* id) {
    // [sid, [field, value, ...]]; XAUTOCLAIM gives nil for deleted entries
    if (!e || e->type != REDIS_REPLY_ARRAY || e->elements != 2) return false;
    *sid = Str(e->element[0]);
    const redisReply* f = e->element[1];
    if (!f || f->type != REDIS_REPLY_ARRAY) return false;
    for (size_t i = 0; i + 1 < f->elements; i += 2) {
      if (Str(f->element[i]) == "id") *id = Str(f->element[i + 1]);
    }
    return !sid->empty();
  }

  Status Finish(const std::string& id, const char* ok, std::string data) {
    auto r = Eval(kFinish, {ns_, id, ok, std::move(data), Ttl(), std::to_string(NowMs())});
    if (!r.ok()) return r.status();
    if ((*r)->type == REDIS_REPLY_INTEGER && (*r)->integer < 0) {
      return NotFound("no job with this id (expired?)");
    }
    return Status::Ok();
  }

  // A connection from the pool, or a new one (the consumer group made).
  Result<Context> Take() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!pool_.empty()) {
        Context c = std::move(pool_.back());
        pool_.pop_back();
        return c;
      }
    }
    Context c(redisConnectWithTimeout(e_.host.c_str(), e_.port, Tv(kTimeout)));
    if (!c) return Unavailable("redis at " + Where() + ": out of memory for a connection");
    if (c->err) {
      return Unavailable("redis at " + Where() + " is unreachable: " + std::string(c->errstr));
    }
    redisSetTimeout(c.get(), Tv(kTimeout));
    if (!e_.password.empty()) {
      auto r = Command(c, {"AUTH", e_.password});
      if (!r.ok()) return r.status();
    }
    if (e_.db != 0) {
      auto r = Command(c, {"SELECT", std::to_string(e_.db)});
      if (!r.ok()) return r.status();
    }
    // The group reads from the start: entries still in the stream are jobs
    // not yet finished (finished ones are deleted).
    auto g = Command(c, {"XGROUP", "CREATE", ns_ + ":jobs", "workers", "0", "MKSTREAM"},
                     /*busy_ok=*/true);
    if (!g.ok()) return g.status();
    return c;
  }

  void Give(Context c) {
    std::lock_guard<std::mutex> lock(mu_);
    if (pool_.size() < 16) pool_.push_back(std::move(c));
  }

  std::string Where() const { return e_.host + ":" + std::to_string(e_.port); }

  // The subscriber: one connection SUBSCRIBEd to <ns>:events, blocking on
  // its next message; reconnects every 500 ms while the server is away.
  void WatchLoop() {
    while (true) {
      Context c(redisConnectWithTimeout(e_.host.c_str(), e_.port, Tv(kTimeout)));
      bool ok = c && !c->err;
      if (ok) redisSetTimeout(c.get(), Tv(kTimeout));
      if (ok && !e_.password.empty()) ok = Command(c, {"AUTH", e_.password}).ok() && c;
      if (ok) ok = Command(c, {"SUBSCRIBE", ns_ + ":events"}).ok() && c;
      if (ok) {
        {
          std::lock_guard<std::mutex> lock(watch_mu_);
          if (stop_watch_) return;
          sub_fd_ = c->fd;
        }
        redisSetTimeout(c.get(), timeval{0, 0});  // a message may be hours away
        subscribed_ = true;
        Notify("");  // what changed while not subscribed: re-read
        while (true) {
          void* raw = nullptr;
          if (redisGetReply(c.get(), &raw) != REDIS_OK) break;
          Reply r(static_cast<redisReply*>(raw));
          if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 3 &&
              Str(r->element[0]) == "message") {
            Notify(Str(r->element[2]));
          }
        }
        subscribed_ = false;
        Notify("");  // waiters fall back to polling now
      }
      std::unique_lock<std::mutex> lock(watch_mu_);
      sub_fd_ = -1;
      if (watch_cv_.wait_for(lock, std::chrono::milliseconds(500), [&] { return stop_watch_; }))
        return;
    }
  }

  void Notify(const std::string& id) {
    std::lock_guard<std::mutex> lock(watch_mu_);
    for (auto& [token, fn] : watchers_) fn(id);
  }

  // One command on `c`. UNAVAILABLE (and `c` reset) on a connection error;
  // INTERNAL on an error reply.
  Result<Reply> Command(Context& c, const std::vector<std::string>& args, bool busy_ok = false) {
    std::vector<const char*> argv;
    std::vector<size_t> lens;
    for (const auto& a : args) {
      argv.push_back(a.data());
      lens.push_back(a.size());
    }
    Reply r(static_cast<redisReply*>(
        redisCommandArgv(c.get(), static_cast<int>(argv.size()), argv.data(), lens.data())));
    if (!r) {
      const std::string why = c->errstr[0] ? c->errstr : "connection lost";
      c.reset();
      return Unavailable("redis at " + Where() + " is unreachable: " + why);
    }
    if (r->type == REDIS_REPLY_ERROR) {
      const std::string msg = Str(r.get());
      if (busy_ok && msg.rfind("BUSYGROUP", 0) == 0) return r;
      if (msg.rfind("LOADING", 0) == 0)
        return Unavailable("redis at " + Where() + " is loading its data");
      if (msg.rfind("NOGROUP", 0) == 0) {
        // The stream or its group is gone (a Redis restarted without its
        // data): a new connection makes them again.
        c.reset();
        return Unavailable("redis at " + Where() + " lost the job stream; reconnecting");
      }
      return Internal("redis " + args[0] + ": " + msg);
    }
    return r;
  }

  // One command on a pooled connection.
  Result<Reply> Run(const std::vector<std::string>& args) {
    auto conn = Take();
    if (!conn.ok()) return conn.status();
    Context c = std::move(conn).value();
    auto r = Command(c, args);
    if (c) Give(std::move(c));
    return r;
  }

  Result<Reply> EvalOn(Context& c, const char* script, std::vector<std::string> argv) {
    std::vector<std::string> args = {"EVAL", script, "0"};
    for (auto& a : argv) args.push_back(std::move(a));
    return Command(c, args);
  }

  Result<Reply> Eval(const char* script, std::vector<std::string> argv) {
    auto conn = Take();
    if (!conn.ok()) return conn.status();
    Context c = std::move(conn).value();
    auto r = EvalOn(c, script, std::move(argv));
    if (c) Give(std::move(c));
    return r;
  }

  const RedisEndpoint e_;
  const JobStoreOptions o_;
  const std::string ns_;
  std::string consumer_;
  std::mutex watch_mu_;  // guards the members below
  std::condition_variable watch_cv_;
  std::map<int, std::function<void(const std::string&)>> watchers_;
  int next_watch_ = 0;
  bool stop_watch_ = false;
  int sub_fd_ = -1;  // the subscriber's socket while it is connected
  std::atomic<bool> subscribed_{false};
  std::thread watch_thread_;
  std::atomic<int64_t> last_beat_ms_{0};        // the last heartbeat sent
  std::atomic<int64_t> autoclaim_after_ms_{0};  // no XAUTOCLAIM before this
  std::mutex mu_;
  std::vector<Context> pool_;  // guarded by mu_
};

// The window on the store's connections (the store is kept alive with it).
class RedisRecentChoices final : public verse::RecentChoices {
 public:
  RedisRecentChoices(std::shared_ptr<JobStore> keep, RedisJobStore* store)
      : keep_(std::move(keep)), store_(store) {}
  Result<std::vector<int>> Recent(size_t window) override { return store_->RecentPoems(window); }
  Result<int> Record(const std::vector<int>& poem_ids, size_t window) override {
    return store_->RecordPoem(poem_ids, window);
  }
  std::string Name() const override { return store_->VerseWindowName(); }

 private:
  const std::shared_ptr<JobStore> keep_;
  RedisJobStore* const store_;
};

}  // namespace

std::shared_ptr<verse::RecentChoices> NewRedisRecentChoices(std::shared_ptr<JobStore> store) {
  auto* redis = dynamic_cast<RedisJobStore*>(store.get());
  if (!redis) return nullptr;
  return std::make_shared<RedisRecentChoices>(std::move(store), redis);
}

std::unique_ptr<JobStore> NewRedisJobStore(RedisEndpoint endpoint, JobStoreOptions options,
                                           std::string ns, std::string consumer) {
  return std::make_unique<RedisJobStore>(std::move(endpoint), options, std::move(ns),
                                         std::move(consumer));
}

}  // namespace danqing::service
