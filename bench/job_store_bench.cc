// The shared queue's overhead per job (enqueue + claim + store + the
// waiter's status read), in-process and on a real redis-server on loopback
// (testing/cluster/start-redis.sh: AOF; fsync everysec, then always), with a real 1080p
// inscription as the result; and Redis's memory per stored inscription.
// Also the verse selector's shared no-repeat window: the time of a choice on
// it against the same choice on the process's own window.
//   build/default/bench/job_store_bench [jobs] [result.jpg] [photo.jpg]
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "service/job_store.h"
#include "service/redis_job_store.h"
#include "testing/cluster/redis_server.h"
#include "verse/corpus.h"
#include "verse/selector.h"

using namespace danqing::service;
using Clock = std::chrono::steady_clock;

namespace {

std::string Read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string Id(int n) {
  char buf[33];
  std::snprintf(buf, sizeof buf, "%032x", n);
  return buf;
}

void Run(const char* name, JobStore& s, int jobs, const std::string& photo,
         const std::string& image) {
  std::vector<double> ms;
  JobRequest req;
  req.photo = photo;
  StoredInscription out;
  out.json = std::string(2000, '{');
  out.content_type = "image/jpeg";
  out.image = image;
  for (int i = 0; i < jobs; ++i) {
    const auto t0 = Clock::now();
    if (!s.Enqueue(Id(i), "bench", req, {}, nullptr, nullptr).ok())
      return (void)std::puts("enqueue failed");
    auto c = s.Claim(std::chrono::milliseconds(1000));
    if (!c.ok() || !c->has_value()) return (void)std::puts("claim failed");
    if (!s.Complete((*c)->id, out).ok()) return (void)std::puts("complete failed");
    auto st = s.GetStatus((*c)->id);
    if (!st.ok() || st->state != JobState::kDone) return (void)std::puts("status failed");
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  const auto q = [&](double p) {
    return ms[std::min(ms.size() - 1, static_cast<size_t>(p * ms.size()))];
  };
  std::printf(
      "%-10s jobs %d  photo %zu B  result %zu B  per job: p50 %.3f ms  p99 %.3f ms  max %.3f ms\n",
      name, jobs, photo.size(), image.size(), q(0.5), q(0.99), ms.back());
}

// Wake-up latency: from a worker's Complete on one replica to another
// replica's listener (its waiters) hearing of it, through PUBLISH; before,
// a waiter saw it at its next poll (20 ms backing off to 250 ms).
void WakeUp(const danqing::testing::RedisServer& redis, const std::string& photo,
            const std::string& image) {
  // Declared before the stores: b's listener runs until b is destroyed.
  std::mutex mu;
  std::condition_variable cv;
  std::string want;
  Clock::time_point heard;
  auto a = NewRedisJobStore(*ParseRedisUrl(redis.url()), {}, "wake", "replica-a");
  auto b = NewRedisJobStore(*ParseRedisUrl(redis.url()), {}, "wake", "replica-b");
  b->Watch([&](const std::string& id) {
    std::lock_guard<std::mutex> lock(mu);
    if (id == want) {
      heard = Clock::now();
      want.clear();
      cv.notify_all();
    }
  });
  while (!b->Watching()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  JobRequest req;
  req.photo = photo;
  StoredInscription out;
  out.content_type = "image/jpeg";
  out.image = image;
  std::vector<double> ms;
  for (int i = 0; i < 200; ++i) {
    const std::string id = Id(100000 + i);
    if (!a->Enqueue(id, "bench", req, {}, nullptr, nullptr).ok()) return (void)std::puts("enqueue");
    auto c = a->Claim(std::chrono::milliseconds(1000));
    if (!c.ok() || !c->has_value()) return (void)std::puts("claim failed");
    std::this_thread::sleep_for(std::chrono::milliseconds(2));  // the claim's notice passes
    std::unique_lock<std::mutex> lock(mu);
    want = id;
    lock.unlock();
    const auto t0 = Clock::now();
    if (!a->Complete(id, out).ok()) return (void)std::puts("complete failed");
    lock.lock();
    if (!cv.wait_for(lock, std::chrono::seconds(5), [&] { return want.empty(); }))
      return (void)std::puts("no notice within 5 s");
    ms.push_back(std::chrono::duration<double, std::milli>(heard - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  std::printf(
      "wake-up, Complete on one replica -> the other's listener (PUBLISH): p50 %.3f ms  "
      "p99 %.3f ms  max %.3f ms (%zu jobs; includes the Complete's own round trip)\n",
      ms[ms.size() / 2], ms[std::min(ms.size() - 1, ms.size() * 99 / 100)], ms.back(), ms.size());
}

// A poem choice (VerseSelector::Choose on the bundled 4000 poems, window
// 64) on the process's own window, then on the window shared through Redis
// (one LRANGE + one script per choice): the added cost per choice.
void VerseWindow(const danqing::testing::RedisServer& redis, int choices) {
  using danqing::verse::Corpus;
  using danqing::verse::VerseSelector;
  auto corpus = Corpus::Load(std::string(DANQING_SOURCE_DIR) + "/data/verse/poems.tsv");
  if (!corpus.ok()) return (void)std::puts("no corpus");
  const std::vector<std::vector<danqing::verse::ThemeWeight>> photos = {
      {{"花", 0.9}, {"春", 0.4}},
      {{"雨", 0.8}, {"江河湖海", 0.3}},
      {{"月夜", 1.0}},
      {{"雪", 0.7}, {"山水", 0.5}}};
  std::shared_ptr<JobStore> store = NewRedisJobStore(*ParseRedisUrl(redis.url()), {}, "verse");
  VerseSelector local(*corpus), shared(*corpus, {}, NewRedisRecentChoices(store));
  redis.Cli("CONFIG RESETSTAT");
  for (VerseSelector* s : {&local, &shared}) {
    std::vector<double> us;
    for (int i = 0; i < choices; ++i) {
      const auto t0 = Clock::now();
      const int id = s->Choose(photos[static_cast<size_t>(i) % photos.size()],
                               static_cast<uint64_t>(i) * 2654435761u)
                         .id;
      us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
      if (id <= 0) return (void)std::puts("no poem");
    }
    std::sort(us.begin(), us.end());
    std::printf("verse choice, %s window: p50 %.1f us  p99 %.1f us  max %.1f us (%d choices)\n",
                s == &local ? "local " : "shared", us[us.size() / 2],
                us[std::min(us.size() - 1, us.size() * 99 / 100)], us.back(), choices);
  }
  const std::string stats = redis.Cli("INFO commandstats");
  const auto calls = [&](const std::string& cmd) {
    const auto at = stats.find("cmdstat_" + cmd + ":calls=");
    return at == std::string::npos ? 0.0 : std::atof(stats.c_str() + at + 15 + cmd.size());
  };
  // The script's own LRANGE is counted too: round trips are LRANGE - EVAL + EVAL.
  std::printf("  per shared choice: round trips %.2f (LRANGE %.2f, EVAL %.2f)  fallbacks %llu\n",
              calls("lrange") / choices, (calls("lrange") - calls("eval")) / choices,
              calls("eval") / choices, static_cast<unsigned long long>(shared.shared_fallbacks()));
}

}  // namespace

int main(int argc, char** argv) {
  const int jobs = argc > 1 ? std::atoi(argv[1]) : 500;
  const std::string image = Read(argc > 2 ? argv[2] : "/tmp/i1080.jpg");
  const std::string photo =
      Read(argc > 3 ? argv[3] : std::string(DANQING_SOURCE_DIR) + "/tests/data/photos/coffee.jpg");
  if (image.empty() || photo.empty()) {
    std::fprintf(stderr, "usage: job_store_bench [jobs] [1080p result.jpg] [photo.jpg]\n");
    return 2;
  }
  JobStoreOptions o;
  auto local = NewInProcessJobStore(o);
  Run("in-process", *local, jobs, photo, image);
  // Each fsync policy on a fresh server (the same data size at the start):
  // everysec (Redis's default, deploy/) first, then always (the tests).
  // Last, no AOF at all: what the disk adds to the tail.
  for (const char* policy : {"everysec", "always", "no-aof"}) {
    danqing::testing::RedisServer redis;
    if (!redis.Start()) return 1;
    if (std::string(policy) == "no-aof") {
      redis.Cli("CONFIG SET appendonly no");
    } else {
      redis.Cli(std::string("CONFIG SET appendfsync ") + policy);
    }
    redis.Cli("CONFIG RESETSTAT");
    auto shared = NewRedisJobStore(*ParseRedisUrl(redis.url()), o, "danqing");
    Run((std::string("redis-") + policy).c_str(), *shared, jobs, photo, image);
    // Round trips per job: the commands the client sent (scripts' inner
    // commands are counted under their own names, so only these four).
    const std::string stats = redis.Cli("INFO commandstats");
    const auto calls = [&](const std::string& cmd) {
      const auto at = stats.find("cmdstat_" + cmd + ":calls=");
      return at == std::string::npos ? 0.0 : std::atof(stats.c_str() + at + 15 + cmd.size());
    };
    std::printf(
        "  per job: EVAL %.2f  XREADGROUP %.2f  XAUTOCLAIM %.2f  (+ HGET/ZADD outside scripts "
        "in older builds)\n",
        calls("eval") / jobs, calls("xreadgroup") / jobs, calls("xautoclaim") / jobs);
    if (std::string(policy) == "everysec") WakeUp(redis, photo, image);
    VerseWindow(redis, 2000);
    if (std::string(policy) != "always") continue;
    // Memory per stored inscription: the result key as Redis counts it, and
    // used_memory over all keys (job hash, result, recent list, finish times).
    std::printf("redis MEMORY USAGE of one result key: %s",
                redis.Cli("MEMORY USAGE danqing:out:" + Id(0)).c_str());
    const std::string info = redis.Cli("INFO memory");
    const auto at = info.find("used_memory:");
    const double used = at == std::string::npos ? 0 : std::atof(info.c_str() + at + 12);
    std::printf("redis used_memory with %d stored inscriptions: %.1f MiB (%.0f B each, all keys)\n",
                jobs, used / 1048576.0, used / jobs);
  }
  return 0;
}
