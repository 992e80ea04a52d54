// The JobStore contract, on both implementations: in-process, and Redis on a
// real redis-server (testing/cluster/start-redis.sh, loopback, free port,
// temporary directory). Then what only Redis has: its server lost and back,
// a restart with AOF, corrupt and oversize entries, ids that try key injection.
#include "service/job_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <set>
#include <thread>

#include "service/redis_job_store.h"
#include "testing/cluster/redis_server.h"
#include "verse/corpus.h"
#include "verse/selector.h"

namespace danqing::service {
namespace {

using ::testing::HasSubstr;

std::string Id(int n) {
  char buf[33];
  std::snprintf(buf, sizeof buf, "%032x", n);
  return buf;
}

JobRequest Job(const std::string& photo = "photo-bytes") {
  JobRequest r;
  r.options.width = 480;
  r.options.height = 320;
  r.options.style = "cao";
  r.options.text = "千山鸟飞绝";
  r.photo = photo;
  return r;
}

StoredInscription Result(const std::string& image = "IMG") {
  StoredInscription s;
  s.json = R"({"id":"x"})";
  s.content_type = "image/jpeg";
  s.image = image;
  return s;
}

danqing::testing::RedisServer* g_redis = nullptr;

class JobStoreTest : public ::testing::TestWithParam<std::string> {
 protected:
  static void SetUpTestSuite() {
    g_redis = new danqing::testing::RedisServer();
    ASSERT_TRUE(g_redis->Start()) << "redis-server did not start (scripts/setup.sh installs it)";
  }
  static void TearDownTestSuite() {
    delete g_redis;
    g_redis = nullptr;
  }

  std::unique_ptr<JobStore> Make(JobStoreOptions o = {}) {
    if (GetParam() == "in-process") return NewInProcessJobStore(o);
    // A namespace of its own per store: tests do not see each other's keys.
    static std::atomic<int> n{0};
    auto e = ParseRedisUrl(g_redis->url());
    EXPECT_TRUE(e.ok());
    return NewRedisJobStore(*e, o, "t" + std::to_string(::getpid()) + "-" + std::to_string(++n));
  }

  static ClaimedJob MustClaim(JobStore& s) {
    auto c = s.Claim(std::chrono::milliseconds(2000));
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_TRUE(c.ok() && c->has_value()) << "nothing to claim";
    return c.ok() && c->has_value() ? **c : ClaimedJob{};
  }
};

TEST_P(JobStoreTest, AJobGoesThroughQueuedRenderingDone) {
  auto s = Make();
  int64_t ahead = -1;
  ASSERT_TRUE(s->Enqueue(Id(1), "1.2.3.4", Job(), {}, &ahead, nullptr).ok());
  EXPECT_EQ(ahead, 0);
  ASSERT_TRUE(s->Enqueue(Id(2), "1.2.3.4", Job(), {}, &ahead, nullptr).ok());
  EXPECT_EQ(ahead, 1);
  auto st = s->GetStatus(Id(2));
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_EQ(st->state, JobState::kQueued);
  EXPECT_EQ(st->position, 1);
  EXPECT_EQ(*s->Waiting(), 2);

  ClaimedJob c = MustClaim(*s);
  EXPECT_EQ(c.id, Id(1));
  EXPECT_EQ(c.request.options.text, "千山鸟飞绝");
  EXPECT_EQ(c.request.options.style, "cao");
  EXPECT_EQ(c.request.photo, "photo-bytes");
  EXPECT_EQ(c.client, GetParam() == "in-process" ? "1.2.3.4" : c.client);
  EXPECT_FALSE(c.reclaimed);
  EXPECT_EQ(s->GetStatus(Id(1))->state, JobState::kRendering);
  EXPECT_EQ(s->GetStatus(Id(2))->position, 0);  // next in line now
  EXPECT_EQ(*s->Waiting(), 1);

  ASSERT_TRUE(s->Complete(Id(1), Result("PIXELS")).ok());
  EXPECT_EQ(s->GetStatus(Id(1))->state, JobState::kDone);
  auto r = s->GetResult(Id(1));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->image, "PIXELS");
  EXPECT_EQ(r->content_type, "image/jpeg");
  EXPECT_EQ(*s->Recent(10), std::vector<std::string>{Id(1)});
}

TEST_P(JobStoreTest, TheFirstFinishWinsAndLaterOnesChangeNothing) {
  auto s = Make();
  ASSERT_TRUE(s->Enqueue(Id(3), "c", Job(), {}, nullptr, nullptr).ok());
  MustClaim(*s);
  ASSERT_TRUE(s->Complete(Id(3), Result("FIRST")).ok());
  ASSERT_TRUE(s->Complete(Id(3), Result("SECOND")).ok());
  ASSERT_TRUE(s->Fail(Id(3), "late failure").ok());
  EXPECT_EQ(s->GetStatus(Id(3))->state, JobState::kDone);
  EXPECT_EQ(s->GetResult(Id(3))->image, "FIRST");
  EXPECT_EQ(s->Recent(10)->size(), 1u);
}

TEST_P(JobStoreTest, AJobWhoseWorkerDiedIsClaimedAgain) {
  JobStoreOptions o;
  o.claim_timeout = std::chrono::milliseconds(300);
  auto s = Make(o);
  ASSERT_TRUE(s->Enqueue(Id(4), "c", Job(), {}, nullptr, nullptr).ok());
  ClaimedJob first = MustClaim(*s);
  EXPECT_FALSE(first.reclaimed);
  // Nothing else to claim before the timeout...
  auto none = s->Claim(std::chrono::milliseconds(50));
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  // ...then the same job again, marked as taken over.
  std::this_thread::sleep_for(std::chrono::milliseconds(350));
  ClaimedJob again = MustClaim(*s);
  EXPECT_EQ(again.id, Id(4));
  EXPECT_TRUE(again.reclaimed);
  EXPECT_EQ(again.request.photo, "photo-bytes");
  ASSERT_TRUE(s->Complete(Id(4), Result()).ok());
  // The dead worker's late answer changes nothing.
  ASSERT_TRUE(s->Fail(Id(4), "from the dead worker").ok());
  EXPECT_EQ(s->GetStatus(Id(4))->state, JobState::kDone);
  std::this_thread::sleep_for(std::chrono::milliseconds(350));
  auto after = s->Claim(std::chrono::milliseconds(50));
  ASSERT_TRUE(after.ok());
  EXPECT_FALSE(after->has_value()) << "a finished job was handed out again";
}

// A worker still rendering renews its claim: the job is not taken over
// while the renewals come, however long past the timeout, and is once they
// stop (the worker died).
TEST_P(JobStoreTest, ARenewedClaimIsNotTakenOver) {
  JobStoreOptions o;
  o.claim_timeout = std::chrono::milliseconds(300);
  auto s = Make(o);
  ASSERT_TRUE(s->Enqueue(Id(5), "c", Job(), {}, nullptr, nullptr).ok());
  ClaimedJob first = MustClaim(*s);
  EXPECT_FALSE(first.reclaimed);
  for (int i = 0; i < 10; ++i) {  // 1 s, three timeouts
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    ASSERT_TRUE(s->Renew(Id(5)).ok());
    auto none = s->Claim(std::chrono::milliseconds(1));
    ASSERT_TRUE(none.ok()) << none.status().ToString();
    EXPECT_FALSE(none->has_value()) << "taken over while renewed, after " << (i + 1) * 100 << " ms";
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(350));
  ClaimedJob again = MustClaim(*s);
  EXPECT_EQ(again.id, Id(5));
  EXPECT_TRUE(again.reclaimed);
  EXPECT_TRUE(s->Renew(Id(6)).ok()) << "a job never claimed: nothing to renew";
  EXPECT_EQ(s->Renew("../x").code(), StatusCode::kInvalidArgument);
}

TEST_P(JobStoreTest, AdmissionRefusesPastTheQueueBoundAndTheClientLimit) {
  auto s = Make();
  Admission a{.max_waiting = 2, .max_per_client = 0};
  ASSERT_TRUE(s->Enqueue(Id(10), "a", Job(), a, nullptr, nullptr).ok());
  ASSERT_TRUE(s->Enqueue(Id(11), "b", Job(), a, nullptr, nullptr).ok());
  EnqueueRefusal why{};
  Status st = s->Enqueue(Id(12), "c", Job(), a, nullptr, &why);
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(why.reason, EnqueueRefusal::kQueueFull);
  EXPECT_THAT(why.message, HasSubstr("holds 2"));
  EXPECT_EQ(s->GetStatus(Id(12)).status().code(), StatusCode::kNotFound)
      << "a refused job was kept";

  Admission per{.max_waiting = 0, .max_per_client = 2};
  ASSERT_TRUE(s->Enqueue(Id(13), "v", Job(), per, nullptr, nullptr).ok());
  ASSERT_TRUE(s->Enqueue(Id(14), "v", Job(), per, nullptr, nullptr).ok());
  st = s->Enqueue(Id(15), "v", Job(), per, nullptr, &why);
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(why.reason, EnqueueRefusal::kClientLimit);
  EXPECT_THAT(why.message, HasSubstr("already has 2"));
  // Another visitor is not held back; and once one of v's jobs finishes, v may add one.
  EXPECT_TRUE(s->Enqueue(Id(16), "w", Job(), per, nullptr, nullptr).ok());
  ASSERT_TRUE(s->Fail(Id(13), "400 bad").ok());
  EXPECT_TRUE(s->Enqueue(Id(17), "v", Job(), per, nullptr, nullptr).ok());
}

TEST_P(JobStoreTest, FailedJobsKeepTheirReasonAndUnknownIdsAreNotFound) {
  auto s = Make();
  ASSERT_TRUE(s->Enqueue(Id(20), "c", Job(), {}, nullptr, nullptr).ok());
  MustClaim(*s);
  ASSERT_TRUE(s->Fail(Id(20), "400 the photo is truncated").ok());
  auto st = s->GetStatus(Id(20));
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->state, JobState::kFailed);
  EXPECT_EQ(st->reason, "400 the photo is truncated");
  EXPECT_EQ(s->GetResult(Id(20)).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(s->GetStatus(Id(21)).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(s->GetResult(Id(21)).status().code(), StatusCode::kNotFound);
}

TEST_P(JobStoreTest, IdsThatAreNot32HexAreRefusedBeforeAnyKey) {
  auto s = Make();
  for (const std::string& bad : std::vector<std::string>{
           "", "../../etc/passwd", std::string(32, 'G'), "0123456789abcdef0123456789ABCDEF",
           std::string(31, 'a') + "*", std::string(32, 'a') + ":x",
           std::string(16, 'a') + "\r\nFLUSHALL\r\n"}) {
    EXPECT_EQ(s->Enqueue(bad, "c", Job(), {}, nullptr, nullptr).code(),
              StatusCode::kInvalidArgument)
        << bad;
    EXPECT_EQ(s->GetStatus(bad).status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(s->GetResult(bad).status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(s->Complete(bad, Result()).code(), StatusCode::kInvalidArgument) << bad;
  }
}

TEST_P(JobStoreTest, AResultOverTheEntryBoundFailsTheJobWithTheReason) {
  JobStoreOptions o;
  o.max_entry_bytes = 1000;
  auto s = Make(o);
  ASSERT_TRUE(s->Enqueue(Id(30), "c", Job(), {}, nullptr, nullptr).ok());
  MustClaim(*s);
  Status st = s->Complete(Id(30), Result(std::string(5000, 'x')));
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted);
  auto status = s->GetStatus(Id(30));
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(status->state, JobState::kFailed);
  EXPECT_THAT(status->reason, HasSubstr("over the store's bound"));
}

TEST_P(JobStoreTest, RecordsExpireAfterTheTtl) {
  JobStoreOptions o;
  o.ttl = std::chrono::milliseconds(300);
  auto s = Make(o);
  ASSERT_TRUE(s->Enqueue(Id(40), "c", Job(), {}, nullptr, nullptr).ok());
  MustClaim(*s);
  ASSERT_TRUE(s->Complete(Id(40), Result()).ok());
  EXPECT_TRUE(s->GetResult(Id(40)).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_EQ(s->GetStatus(Id(40)).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(s->GetResult(Id(40)).status().code(), StatusCode::kNotFound);
}

TEST_P(JobStoreTest, ManyWorkersFinishEveryJobExactlyOnce) {
  auto s = Make();
  constexpr int kJobs = 60;
  for (int i = 0; i < kJobs; ++i) {
    ASSERT_TRUE(
        s->Enqueue(Id(100 + i), "c" + std::to_string(i % 7), Job(), {}, nullptr, nullptr).ok());
  }
  std::mutex mu;
  std::multiset<std::string> seen;
  std::vector<std::thread> workers;
  for (int w = 0; w < 4; ++w) {
    workers.emplace_back([&] {
      while (true) {
        auto c = s->Claim(std::chrono::milliseconds(100));
        if (!c.ok() || !c->has_value()) return;
        {
          std::lock_guard<std::mutex> lock(mu);
          seen.insert((*c)->id);
        }
        EXPECT_TRUE(s->Complete((*c)->id, Result()).ok());
      }
    });
  }
  for (auto& t : workers) t.join();
  EXPECT_EQ(seen.size(), static_cast<size_t>(kJobs));
  for (int i = 0; i < kJobs; ++i) {
    EXPECT_EQ(seen.count(Id(100 + i)), 1u) << i;
    EXPECT_EQ(s->GetStatus(Id(100 + i))->state, JobState::kDone);
  }
  EXPECT_EQ(*s->Waiting(), 0);
  EXPECT_GT(*s->DrainRate(), 0.0);
}

INSTANTIATE_TEST_SUITE_P(Stores, JobStoreTest, ::testing::Values("in-process", "redis"),
                         [](const auto& p) {
                           return p.param == "in-process" ? "InProcess" : "Redis";
                         });

// The writing (issue 28) travels through the shared store: the job's flag,
// and the result's plane, background and length.
TEST(JobEncodingTest, TheWritingRoundTrips) {
  JobRequest job = Job();
  job.options.writing = true;
  auto back = DecodeJobRequest(EncodeJobRequest(job));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(back->options.writing);
  job.options.writing = false;
  back = DecodeJobRequest(EncodeJobRequest(job));
  ASSERT_TRUE(back.ok());
  EXPECT_FALSE(back->options.writing);
  StoredInscription s = Result();
  s.writing_png = "PLANE";
  s.background_jpeg = "BACKGROUND";
  s.writing_end_ms = 9876;
  auto r = DecodeStoredInscription(EncodeStoredInscription(s));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->writing_png, "PLANE");
  EXPECT_EQ(r->background_jpeg, "BACKGROUND");
  EXPECT_EQ(r->writing_end_ms, 9876u);
  EXPECT_EQ(r->image, "IMG");
}

TEST(JobEncodingTest, CorruptOrTruncatedEntriesAreClearErrors) {
  const std::string job = EncodeJobRequest(Job());
  auto back = DecodeJobRequest(job);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->options.text, "千山鸟飞绝");
  for (size_t cut : {size_t{0}, size_t{3}, size_t{10}, job.size() - 1}) {
    auto r = DecodeJobRequest(std::string_view(job).substr(0, cut));
    EXPECT_EQ(r.status().code(), StatusCode::kInternal) << cut;
    EXPECT_THAT(r.status().message(), HasSubstr("corrupt")) << cut;
  }
  EXPECT_THAT(DecodeJobRequest(job + "x").status().message(), HasSubstr("after its last field"));
  const std::string res = EncodeStoredInscription(Result());
  EXPECT_TRUE(DecodeStoredInscription(res).ok());
  EXPECT_THAT(DecodeStoredInscription("garbage").status().message(),
              HasSubstr("not a Danqing entry"));
  std::string huge = "DQR1\xff\xff\xff\x7f";
  EXPECT_THAT(DecodeStoredInscription(huge).status().message(), HasSubstr("truncated at json"));
}

TEST(RedisUrlTest, UrlsAreParsedAndBadOnesNamed) {
  auto e = ParseRedisUrl("redis://:s3cret@redis.danqing.svc:6380/2");
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(e->host, "redis.danqing.svc");
  EXPECT_EQ(e->port, 6380);
  EXPECT_EQ(e->password, "s3cret");
  EXPECT_EQ(e->db, 2);
  e = ParseRedisUrl("127.0.0.1:7000");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->port, 7000);
  e = ParseRedisUrl("redis://[::1]:7001");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->host, "::1");
  EXPECT_THAT(ParseRedisUrl("http://x").status().message(), HasSubstr("only redis://"));
  EXPECT_THAT(ParseRedisUrl("redis://x:99999").status().message(), HasSubstr("port"));
  EXPECT_THAT(ParseRedisUrl("redis://x/abc").status().message(), HasSubstr("database"));
  EXPECT_THAT(ParseRedisUrl("redis://").status().message(), HasSubstr("no host"));
}

std::unique_ptr<JobStore> StoreOn(const danqing::testing::RedisServer& r, JobStoreOptions o = {}) {
  return NewRedisJobStore(*ParseRedisUrl(r.url()), o, "danqing");
}

TEST(RedisJobStoreTest, UnreachableIsUnavailableWithTheReasonAndRecovers) {
  danqing::testing::RedisServer redis;
  auto s = StoreOn(redis);  // nothing listens yet
  Status st = s->Ping();
  EXPECT_EQ(st.code(), StatusCode::kUnavailable);
  EXPECT_THAT(st.message(), HasSubstr("unreachable"));
  EXPECT_EQ(s->Enqueue(Id(1), "c", Job(), {}, nullptr, nullptr).code(), StatusCode::kUnavailable);
  EXPECT_EQ(s->Claim(std::chrono::milliseconds(10)).status().code(), StatusCode::kUnavailable);

  ASSERT_TRUE(redis.Start());
  EXPECT_TRUE(s->Ping().ok());
  ASSERT_TRUE(s->Enqueue(Id(1), "c", Job(), {}, nullptr, nullptr).ok());
  // Lost mid-run (the pooled connections die with it), then back on its AOF.
  redis.Kill();
  EXPECT_EQ(s->GetStatus(Id(1)).status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(s->Enqueue(Id(2), "c", Job(), {}, nullptr, nullptr).code(), StatusCode::kUnavailable);
  ASSERT_TRUE(redis.Start());
  auto status = s->GetStatus(Id(1));
  // The first call after the loss may still meet a dead pooled connection.
  if (!status.ok()) status = s->GetStatus(Id(1));
  ASSERT_TRUE(status.ok()) << status.status().ToString();
  EXPECT_EQ(status->state, JobState::kQueued);
}

// The verse selectors' no-repeat window on Redis: two replicas (two stores,
// two selectors) choose for the same photo again and again, in turn and at
// once, and never repeat each other within the window; with Redis lost each
// still answers, on its own window (counted), and uses the shared one again
// when Redis is back.
TEST(RedisRecentChoicesTest, TwoReplicasShareTheWindowAndALostRedisFallsBack) {
  danqing::testing::RedisServer redis;
  ASSERT_TRUE(redis.Start());
  auto corpus = verse::Corpus::Load(DANQING_SOURCE_DIR "/data/verse/poems.tsv");
  ASSERT_TRUE(corpus.ok());
  std::shared_ptr<JobStore> s1 = StoreOn(redis), s2 = StoreOn(redis);
  auto w1 = NewRedisRecentChoices(s1), w2 = NewRedisRecentChoices(s2);
  ASSERT_NE(w1, nullptr);
  ASSERT_NE(w2, nullptr);
  EXPECT_EQ(NewRedisRecentChoices(NewInProcessJobStore({})), nullptr) << "Redis stores only";
  const verse::SelectorOptions o{.no_repeat_window = 16,
                                 .shared_retry = std::chrono::milliseconds(300)};
  verse::VerseSelector a(*corpus, o, w1), b(*corpus, o, w2);
  const std::vector<verse::ThemeWeight> photo = {{"雪", 1.0}};

  std::vector<int> ids;
  for (int i = 0; i < 40; ++i) ids.push_back((i % 2 ? b : a).Choose(photo, 7).id);
  for (size_t i = 0; i < ids.size(); ++i) {
    for (size_t j = i + 1; j < ids.size() && j < i + 17; ++j) {
      EXPECT_NE(ids[i], ids[j]) << "repeat at " << i << " and " << j;
    }
  }
  EXPECT_EQ(redis.Cli("LLEN danqing:verse:recent"), "16\n") << "the window is bounded";
  EXPECT_EQ(redis.Cli("LINDEX danqing:verse:recent 0"), std::to_string(ids.back()) + "\n");

  // At once, from two threads each: 24 choices, no two the same (window 32;
  // about 40 poems fit this photo).
  redis.Cli("DEL danqing:verse:recent");
  {
    const verse::SelectorOptions wide{.no_repeat_window = 32};
    verse::VerseSelector c(*corpus, wide, w1), d(*corpus, wide, w2);
    std::mutex mu;
    std::vector<int> at_once;
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&, t] {
        for (int i = 0; i < 6; ++i) {
          const int id = (t % 2 ? d : c).Choose(photo, 7).id;
          std::lock_guard<std::mutex> lock(mu);
          at_once.push_back(id);
        }
      });
    }
    for (auto& t : threads) t.join();
    EXPECT_EQ(std::set<int>(at_once.begin(), at_once.end()).size(), at_once.size());
    EXPECT_EQ(c.shared_fallbacks() + d.shared_fallbacks(), 0u);
  }

  // A corrupt entry excludes nothing and breaks nothing.
  redis.Cli("LPUSH danqing:verse:recent not-a-number");
  auto recent = w1->Recent(64);
  ASSERT_TRUE(recent.ok()) << recent.status().ToString();
  EXPECT_EQ(recent->size(), 24u);
  EXPECT_GT(a.Choose(photo, 7).id, 0);

  // Lost: every choice still answers, on the local window, counted.
  redis.Kill();
  std::set<int> local;
  for (int i = 0; i < 4; ++i) local.insert(a.Choose(photo, 7).id);
  EXPECT_EQ(local.size(), 4u) << "no repeat on the local window";
  EXPECT_EQ(a.shared_fallbacks(), 4u);
  EXPECT_EQ(w1->Recent(16).status().code(), StatusCode::kUnavailable);

  // Back: after shared_retry the shared window is used again (the first try
  // may still meet a pooled connection that died with the server).
  ASSERT_TRUE(redis.Start());
  bool shared_again = false;
  for (int n = 0; n < 5 && !shared_again; ++n) {
    std::this_thread::sleep_for(std::chrono::milliseconds(350));
    const int id = a.Choose(photo, 7).id;
    shared_again = redis.Cli("LINDEX danqing:verse:recent 0") == std::to_string(id) + "\n";
  }
  EXPECT_TRUE(shared_again);
}

TEST(RedisJobStoreTest, ARestartWithAofLosesNoAcceptedJob) {
  danqing::testing::RedisServer redis;
  ASSERT_TRUE(redis.Start());
  {
    auto s = StoreOn(redis);
    for (int i = 0; i < 20; ++i)
      ASSERT_TRUE(s->Enqueue(Id(i), "c", Job(), {}, nullptr, nullptr).ok());
    // One claimed by a worker that then dies with the server.
    auto c = s->Claim(std::chrono::milliseconds(1000));
    ASSERT_TRUE(c.ok() && c->has_value());
  }
  redis.Kill();  // SIGKILL: only what the AOF holds survives
  ASSERT_TRUE(redis.Start());
  JobStoreOptions o;
  o.claim_timeout = std::chrono::milliseconds(100);
  auto s = StoreOn(redis, o);
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  std::set<std::string> finished;
  for (int n = 0; n < 40 && finished.size() < 20; ++n) {
    auto c = s->Claim(std::chrono::milliseconds(200));
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    if (!c->has_value()) continue;
    ASSERT_TRUE(s->Complete((*c)->id, Result()).ok());
    finished.insert((*c)->id);
  }
  EXPECT_EQ(finished.size(), 20u);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(s->GetStatus(Id(i))->state, JobState::kDone) << i;
}

// Waiters wake on PUBLISHed notices, not by polling: a claim and a finish in
// one replica reach another replica's listener; the subscriber comes back
// after Redis does, with an "every job" notice.
// A renewal only keeps a claim its own consumer holds: replica A's worker,
// taken for dead and its job taken over by B, does not take the job back
// or keep B's claim alive by renewing; when B dies too, C takes it.
TEST(RedisJobStoreTest, ARenewalKeepsOnlyItsOwnConsumersClaim) {
  danqing::testing::RedisServer redis;
  ASSERT_TRUE(redis.Start()) << "redis-server did not start (scripts/setup.sh installs it)";
  auto e = ParseRedisUrl(redis.url());
  ASSERT_TRUE(e.ok());
  JobStoreOptions o;
  o.claim_timeout = std::chrono::milliseconds(300);
  auto a = NewRedisJobStore(*e, o, "renew", "a");
  auto b = NewRedisJobStore(*e, o, "renew", "b");
  auto c = NewRedisJobStore(*e, o, "renew", "c");
  ASSERT_TRUE(a->Enqueue(Id(7), "v", Job(), {}, nullptr, nullptr).ok());
  auto claim = [](JobStore& s) {
    auto r = s.Claim(std::chrono::milliseconds(500));
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : std::optional<ClaimedJob>();
  };
  ASSERT_TRUE(claim(*a).has_value());
  std::this_thread::sleep_for(std::chrono::milliseconds(400));  // A looks dead
  auto taken = claim(*b);
  ASSERT_TRUE(taken.has_value());
  EXPECT_TRUE(taken->reclaimed);
  // A renews for two timeouts; B (now dead too) renews nothing.
  for (int i = 0; i < 6; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    ASSERT_TRUE(a->Renew(Id(7)).ok());
  }
  auto third = claim(*c);
  ASSERT_TRUE(third.has_value()) << "A's renewals kept a claim it no longer held";
  EXPECT_EQ(third->id, Id(7));
  EXPECT_TRUE(third->reclaimed);
}

TEST(RedisJobStoreTest, ClaimsAndFinishesArePublishedToEveryReplicasListener) {
  danqing::testing::RedisServer redis;
  ASSERT_TRUE(redis.Start());
  // Before the stores: b's listener may run until b is destroyed.
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::string> seen;
  auto a = NewRedisJobStore(*ParseRedisUrl(redis.url()), {}, "danqing", "replica-a");
  auto b = NewRedisJobStore(*ParseRedisUrl(redis.url()), {}, "danqing", "replica-b");
  const int token = b->Watch([&](const std::string& id) {
    std::lock_guard<std::mutex> lock(mu);
    seen.push_back(id);
    cv.notify_all();
  });
  ASSERT_GT(token, 0);
  const auto wait_for = [&](auto pred) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, std::chrono::seconds(10), [&] { return pred(seen); });
  };
  const auto count = [](const std::vector<std::string>& v, const std::string& id) {
    return std::count(v.begin(), v.end(), id);
  };
  // Subscribed: the first notice is "re-read everything".
  ASSERT_TRUE(wait_for([&](const auto& v) { return count(v, "") >= 1; }));
  EXPECT_TRUE(b->Watching());
  ASSERT_TRUE(a->Enqueue(Id(50), "c", Job(), {}, nullptr, nullptr).ok());
  auto c = a->Claim(std::chrono::milliseconds(1000));
  ASSERT_TRUE(c.ok() && c->has_value());
  EXPECT_TRUE(wait_for([&](const auto& v) { return count(v, Id(50)) >= 1; }))
      << "the claim was not published";
  ASSERT_TRUE(a->Complete(Id(50), Result()).ok());
  EXPECT_TRUE(wait_for([&](const auto& v) { return count(v, Id(50)) >= 2; }))
      << "the finish was not published";
  // Redis goes away and comes back: the subscriber reconnects.
  redis.Kill();
  ASSERT_TRUE(wait_for([&](const auto& v) { return count(v, "") >= 2; }))
      << "losing the subscription wakes the waiters (they poll now)";
  EXPECT_FALSE(b->Watching());
  ASSERT_TRUE(redis.Start());
  EXPECT_TRUE(wait_for([&](const auto& v) { return count(v, "") >= 3; }))
      << "the subscriber did not come back";
  EXPECT_TRUE(b->Watching());
  b->Unwatch(token);
  const size_t before = [&] {
    std::lock_guard<std::mutex> lock(mu);
    return seen.size();
  }();
  // a's pooled connections died with the server: the first call finds out.
  for (int i = 0; i < 5 && !a->Ping().ok(); ++i) {
  }
  ASSERT_TRUE(a->Enqueue(Id(51), "c", Job(), {}, nullptr, nullptr).ok());
  ASSERT_TRUE(a->Claim(std::chrono::milliseconds(1000)).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(seen.size(), before) << "a listener was called after Unwatch";
  EXPECT_EQ(NewInProcessJobStore({})->Watch([](const std::string&) {}), 0);
}

TEST(RedisJobStoreTest, ActiveReplicasCountsConsumersThatReadRecently) {
  danqing::testing::RedisServer redis;
  ASSERT_TRUE(redis.Start());
  auto a = NewRedisJobStore(*ParseRedisUrl(redis.url()), {}, "danqing", "replica-a");
  auto b = NewRedisJobStore(*ParseRedisUrl(redis.url()), {}, "danqing", "replica-b");
  ASSERT_TRUE(a->Claim(std::chrono::milliseconds(10)).ok());
  EXPECT_EQ(*a->ActiveReplicas(), 1);
  ASSERT_TRUE(b->Claim(std::chrono::milliseconds(10)).ok());
  EXPECT_EQ(*a->ActiveReplicas(), 2);
  EXPECT_EQ(*NewInProcessJobStore({})->ActiveReplicas(), 1);
}

TEST(RedisJobStoreTest, CorruptAndOversizeEntriesAreErrorsNotCrashes) {
  danqing::testing::RedisServer redis;
  ASSERT_TRUE(redis.Start());
  JobStoreOptions o;
  o.max_entry_bytes = 10000;
  auto s = StoreOn(redis, o);
  // A finished job whose stored result was overwritten with garbage.
  ASSERT_TRUE(s->Enqueue(Id(1), "c", Job(), {}, nullptr, nullptr).ok());
  ASSERT_TRUE(s->Claim(std::chrono::milliseconds(1000)).ok());
  ASSERT_TRUE(s->Complete(Id(1), Result()).ok());
  redis.Cli("SET danqing:out:" + Id(1) + " garbage");
  auto r = s->GetResult(Id(1));
  EXPECT_EQ(r.status().code(), StatusCode::kInternal);
  EXPECT_THAT(r.status().message(), HasSubstr("corrupt"));
  // Oversize: not even read.
  redis.Cli("SETRANGE danqing:out:" + Id(1) + " 20000 x");
  r = s->GetResult(Id(1));
  EXPECT_EQ(r.status().code(), StatusCode::kInternal);
  EXPECT_THAT(r.status().message(), HasSubstr("over the bound"));
  // A corrupt state.
  redis.Cli("HSET danqing:job:" + Id(1) + " state bogus");
  EXPECT_THAT(s->GetStatus(Id(1)).status().message(), HasSubstr("corrupt"));
  // A queued job whose request is garbage: failed with the reason, not handed out.
  ASSERT_TRUE(s->Enqueue(Id(2), "c", Job(), {}, nullptr, nullptr).ok());
  redis.Cli("SET danqing:in:" + Id(2) + " junk");
  auto c = s->Claim(std::chrono::milliseconds(1000));
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE(c->has_value());
  auto st = s->GetStatus(Id(2));
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->state, JobState::kFailed);
  EXPECT_THAT(st->reason, HasSubstr("corrupt"));
  // A stream entry someone added by hand with a key-injecting id: dropped.
  redis.Cli("XADD danqing:jobs '*' id 'x:y'");
  c = s->Claim(std::chrono::milliseconds(300));
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE(c->has_value());
  EXPECT_EQ(redis.Cli("XLEN danqing:jobs"), "0\n");
}

}  // namespace
}  // namespace danqing::service
