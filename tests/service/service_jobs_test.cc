// The service's job routes over real HTTP on 127.0.0.1: 202 and status, the
// image from another replica through one Redis, SSE and its bound, QR codes,
// the wall, admission (global bound, per-visitor limit), Redis lost and back.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include <condition_variable>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "service/assets.h"
#include "service/redis_job_store.h"
#include "service/server.h"
#include "testing/cluster/redis_server.h"
#include "verse/corpus.h"

namespace danqing::service {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

std::string Photo() {
  std::ifstream in(std::string(DANQING_SOURCE_DIR) + "/tests/data/photos/coffee.jpg",
                   std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Renders a blank canvas; every Render waits until the gate opens.
class GatedRenderer final : public InscriptionRenderer {
 public:
  explicit GatedRenderer(bool open = false) : open_(open) {}
  Result<image::Image> Render(const InscriptionJob& job, RenderOutcome* outcome) const override {
    std::unique_lock<std::mutex> lock(mu_);
    ++started_;
    cv_.notify_all();
    cv_.wait(lock, [&] { return open_; });
    if (outcome) *outcome = {"cpu", ""};
    return image::Image::Filled(job.width, job.height);
  }
  bool CanRender(char32_t c) const override { return c >= 0x4E00 && c <= 0x9FFF; }
  std::string Backend() const override { return "cpu"; }
  std::string GpuLost() const override { return ""; }
  void Release() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    cv_.notify_all();
  }
  void WaitStarted(int n) const {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return started_ >= n; });
  }

 private:
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  mutable int started_ = 0;
  bool open_;
};

class Service {
 public:
  Service(const InscriptionRenderer* renderer, ServerOptions options) {
    corpus_ = std::make_unique<verse::Corpus>(*verse::Corpus::Parse(BundledPoems()));
    selector_ = std::make_unique<verse::VerseSelector>(*corpus_);
    perceiver_ = std::move(perceive::CreateCvPerceiver()).value();
    pipeline_ =
        std::make_unique<Pipeline>(perceiver_.get(), selector_.get(), renderer, PipelineLimits{});
    options.host = "127.0.0.1";
    options.port = 0;
    options.http_threads = 16;
    server_ = std::make_unique<Server>(options, pipeline_.get(), &metrics_);
    Status st = server_->Start();
    EXPECT_TRUE(st.ok()) << st.ToString();
  }
  ~Service() { server_->Stop(); }
  httplib::Client Client() const {
    httplib::Client c("127.0.0.1", server_->port());
    c.set_read_timeout(30, 0);
    return c;
  }
  Server& server() { return *server_; }
  Metrics& metrics() { return metrics_; }

 private:
  std::unique_ptr<verse::Corpus> corpus_;
  std::unique_ptr<verse::VerseSelector> selector_;
  std::unique_ptr<perceive::Perceiver> perceiver_;
  std::unique_ptr<Pipeline> pipeline_;
  Metrics metrics_;
  std::unique_ptr<Server> server_;
};

ServerOptions Options(int workers = 1) {
  ServerOptions o;
  o.workers = static_cast<size_t>(workers);
  o.queue_capacity = 1;
  o.read_timeout = std::chrono::seconds(2);
  o.keep_alive_timeout = std::chrono::seconds(1);
  return o;
}

std::shared_ptr<JobStore> RedisStore(const danqing::testing::RedisServer& r) {
  return std::shared_ptr<JobStore>(NewRedisJobStore(*ParseRedisUrl(r.url()), {}, "danqing"));
}

httplib::Result Post(httplib::Client& c, const std::string& query = "wait=0") {
  return c.Post(("/v1/inscriptions?width=320&height=256&" + query).c_str(), Photo(), "image/jpeg");
}

json WaitDone(httplib::Client& c, const std::string& id) {
  for (int i = 0; i < 300; ++i) {
    auto r = c.Get(("/v1/inscriptions/" + id).c_str());
    if (r && r->status == 200) {
      json j = json::parse(r->body, nullptr, false);
      if (j.value("state", "") == "done" || j.value("state", "") == "failed") return j;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ADD_FAILURE() << id << " did not finish";
  return json();
}

TEST(ServiceJobsTest, AcceptedAsyncThenStatusImageQrWallAndShareUrl) {
  GatedRenderer renderer(/*open=*/false);
  Service svc(&renderer, Options());
  auto c = svc.Client();
  auto res = Post(c);
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 202) << res->body;
  json j = json::parse(res->body);
  const std::string id = j["id"];
  EXPECT_EQ(id.size(), 32u);
  EXPECT_EQ(res->get_header_value("Location"), "/v1/inscriptions/" + id);
  EXPECT_THAT(j.value("state", ""), ::testing::AnyOf("queued", "rendering"));  // claimed at once
  EXPECT_EQ(j["position"], 0);
  EXPECT_TRUE(j.contains("estimate_s"));
  renderer.WaitStarted(1);
  auto st = c.Get(("/v1/inscriptions/" + id).c_str());
  ASSERT_TRUE(st);
  EXPECT_EQ(json::parse(st->body)["state"], "rendering");
  // Not done yet: no image.
  EXPECT_EQ(c.Get(("/v1/inscriptions/" + id + "/image").c_str())->status, 404);
  renderer.Release();
  json done = WaitDone(c, id);
  EXPECT_EQ(done["state"], "done");
  EXPECT_EQ(done["share_url"], "/i/" + id);
  auto img = c.Get(("/v1/inscriptions/" + id + "/image").c_str());
  ASSERT_TRUE(img);
  EXPECT_EQ(img->status, 200);
  EXPECT_EQ(img->get_header_value("Content-Type"), "image/jpeg");
  auto qr = c.Get(("/v1/inscriptions/" + id + "/qr").c_str());
  ASSERT_TRUE(qr);
  EXPECT_EQ(qr->status, 200);
  EXPECT_EQ(qr->get_header_value("Content-Type"), "image/svg+xml");
  EXPECT_THAT(qr->body, HasSubstr("<svg"));
  auto page = c.Get(("/i/" + id).c_str());
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 200);
  auto wall = c.Get("/v1/wall");
  ASSERT_TRUE(wall);
  EXPECT_EQ(json::parse(wall->body)["inscriptions"][0]["id"], id);
  EXPECT_EQ(c.Get("/wall")->status, 200);
}

TEST(ServiceJobsTest, UnknownIdsAre404AndInjectionsMatchNoRoute) {
  GatedRenderer renderer(true);
  Service svc(&renderer, Options());
  auto c = svc.Client();
  for (const char* tail : {"", "/image", "/events", "/qr"}) {
    auto r = c.Get((std::string("/v1/inscriptions/") + std::string(32, 'a') + tail).c_str());
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 404) << tail << " " << r->body;
  }
  for (const char* bad : {"/v1/inscriptions/..%2f..%2fetc", "/v1/inscriptions/danqing:jobs",
                          "/v1/inscriptions/AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"}) {
    auto r = c.Get(bad);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 404) << bad;
  }
  auto r = Post(c, "wait=soon");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_THAT(r->body, HasSubstr("wait must be"));
}

TEST(ServiceJobsTest, WaitGivesTheSynchronousAnswerWhenItFinishesInTime) {
  GatedRenderer renderer(true);
  Service svc(&renderer, Options());
  auto c = svc.Client();
  auto r = Post(c, "wait=10");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->get_header_value("Content-Type"), "image/jpeg");
  EXPECT_FALSE(r->get_header_value("Location").empty());
}

TEST(ServiceJobsTest, GlobalBoundAndPerVisitorLimitAre429WithTheReason) {
  GatedRenderer renderer(false);
  ServerOptions o = Options();
  o.deadline = std::chrono::milliseconds(1000);  // the queue may hold 1 (1 worker, ~1 s a job)
  o.max_jobs_per_client = 0;
  Service svc(&renderer, o);
  auto c = svc.Client();
  ASSERT_EQ(Post(c)->status, 202);
  renderer.WaitStarted(1);
  ASSERT_EQ(Post(c)->status, 202);  // waits
  auto full = Post(c);
  ASSERT_TRUE(full);
  EXPECT_EQ(full->status, 429) << full->body;
  EXPECT_THAT(full->body, HasSubstr("shared queue holds 1"));
  EXPECT_GE(std::stoi(full->get_header_value("Retry-After")), 1);
  EXPECT_EQ(svc.metrics().rejected.Get("reason=\"queue_full\""), 1u);
  renderer.Release();

  GatedRenderer r2(false);
  ServerOptions o2 = Options();
  o2.max_jobs_per_client = 2;
  Service svc2(&r2, o2);
  auto c2 = svc2.Client();
  ASSERT_EQ(Post(c2)->status, 202);
  ASSERT_EQ(Post(c2)->status, 202);
  auto mine = Post(c2);
  ASSERT_TRUE(mine);
  EXPECT_EQ(mine->status, 429);
  EXPECT_THAT(mine->body, HasSubstr("this visitor already has 2"));
  r2.Release();
}

TEST(ServiceJobsTest, EventStreamsTellEachChangeAndAreBounded) {
  GatedRenderer renderer(false);
  ServerOptions o = Options();
  o.max_event_streams = 1;
  Service svc(&renderer, o);
  auto c = svc.Client();
  const std::string id = json::parse(Post(c)->body)["id"];
  renderer.WaitStarted(1);
  std::mutex mu;
  std::condition_variable cv;
  std::string events;
  std::thread reader([&] {
    auto rc = svc.Client();
    rc.Get(("/v1/inscriptions/" + id + "/events").c_str(), [&](const char* data, size_t n) {
      std::lock_guard<std::mutex> lock(mu);
      events.append(data, n);
      cv.notify_all();
      return true;
    });
  });
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return !events.empty(); });  // the one stream is open
  }
  // The one stream is open: a second is refused.
  int code = 0;
  std::string body;
  for (int i = 0; i < 100 && code != 429; ++i) {
    auto second = c.Get(("/v1/inscriptions/" + id + "/events").c_str());
    code = second ? second->status : 0;
    body = second ? second->body : "";
    if (code != 429) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(code, 429);
  EXPECT_THAT(body, HasSubstr("too many event streams"));
  renderer.Release();
  reader.join();  // the stream ends when the job has
  EXPECT_THAT(events, HasSubstr("\"state\":\"rendering\""));
  EXPECT_THAT(events, HasSubstr("\"state\":\"done\""));
  EXPECT_THAT(events, HasSubstr("event: status"));
}

TEST(ServiceJobsTest, ReplicasShareOneRedisQueueAndStore) {
  danqing::testing::RedisServer redis;
  ASSERT_TRUE(redis.Start());
  GatedRenderer renderer(true);
  ServerOptions a = Options(), b = Options();
  a.job_store = RedisStore(redis);
  b.job_store = RedisStore(redis);
  a.max_jobs_per_client = b.max_jobs_per_client = 0;  // every post comes from 127.0.0.1
  Service sa(&renderer, a), sb(&renderer, b);
  auto ca = sa.Client(), cb = sb.Client();
  // Synchronous by default, as before.
  auto sync = Post(ca, "");
  ASSERT_TRUE(sync);
  EXPECT_EQ(sync->status, 200) << sync->body;
  const std::string sync_id = sync->get_header_value("X-Danqing-Inscription-Id");
  EXPECT_EQ(cb.Get(("/v1/inscriptions/" + sync_id + "/image").c_str())->status, 200);
  // Asynchronous: posted to one, fetched from the other.
  std::vector<std::string> ids;
  for (int i = 0; i < 6; ++i) {
    auto r = Post(i % 2 ? ca : cb);
    ASSERT_EQ(r->status, 202) << r->body;
    ids.push_back(json::parse(r->body)["id"]);
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    auto& other = i % 2 ? cb : ca;
    EXPECT_EQ(WaitDone(other, ids[i])["state"], "done");
    EXPECT_EQ(other.Get(("/v1/inscriptions/" + ids[i] + "/image").c_str())->status, 200);
  }
  auto m = ca.Get("/metrics");
  // /metrics is on the main port too.
  ASSERT_TRUE(m);
  EXPECT_THAT(m->body, HasSubstr("danqing_queue_depth 0"));
  EXPECT_THAT(m->body, HasSubstr("danqing_job_store_up{store=\"redis\"} 1"));
}

// A render longer than the claim timeout is not taken over while its replica
// lives: the replica renews its claims (every third of the timeout). Replica
// A's render is held for five timeouts; replica B, idle beside it, takes
// nothing over, and A's answer is the one stored.
TEST(ServiceJobsTest, ALongRenderIsNotTakenOverWhileItsReplicaLives) {
  danqing::testing::RedisServer redis;
  ASSERT_TRUE(redis.Start());
  JobStoreOptions store;
  store.claim_timeout = std::chrono::milliseconds(300);
  auto shared = [&] {
    return std::shared_ptr<JobStore>(
        NewRedisJobStore(*ParseRedisUrl(redis.url()), store, "danqing"));
  };
  GatedRenderer held, open(true);
  ServerOptions a = Options(), b = Options();
  a.job_store = shared();
  b.job_store = shared();
  a.job_store_options = b.job_store_options = store;
  Service sa(&held, a);
  auto ca = sa.Client();
  auto r = Post(ca);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 202) << r->body;
  const std::string id = json::parse(r->body)["id"];
  held.WaitStarted(1);  // A's worker has it
  Service sb(&open, b);
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  auto cb = sb.Client();
  auto status = cb.Get(("/v1/inscriptions/" + id).c_str());
  ASSERT_TRUE(status);
  EXPECT_EQ(json::parse(status->body).value("state", ""), "rendering") << status->body;
  EXPECT_THAT(cb.Get("/metrics")->body, HasSubstr("danqing_jobs_reclaimed_total 0"));
  held.Release();
  EXPECT_EQ(WaitDone(cb, id)["state"], "done");
  EXPECT_THAT(cb.Get("/metrics")->body, HasSubstr("danqing_jobs_reclaimed_total 0"));
}

TEST(ServiceJobsTest, RedisLostGives503AndFailingReadinessThenRecovers) {
  danqing::testing::RedisServer redis;
  ASSERT_TRUE(redis.Start());
  GatedRenderer renderer(true);
  ServerOptions o = Options();
  o.job_store = RedisStore(redis);
  Service svc(&renderer, o);
  auto c = svc.Client();
  ASSERT_EQ(c.Get("/readyz")->status, 200);
  redis.Kill();
  // The first call may still meet a pooled connection that just died.
  int code = 0;
  std::string body;
  for (int i = 0; i < 3 && code != 503; ++i) {
    auto r = Post(c);
    code = r ? r->status : 0;
    body = r ? r->body : "";
  }
  EXPECT_EQ(code, 503);
  EXPECT_THAT(body, HasSubstr("unreachable"));
  auto ready = c.Get("/readyz");
  EXPECT_EQ(ready->status, 503);
  EXPECT_THAT(ready->body, HasSubstr("job store is unavailable"));
  ASSERT_TRUE(redis.Start());
  code = 0;
  for (int i = 0; i < 5 && code != 200; ++i) code = c.Get("/readyz")->status;
  EXPECT_EQ(code, 200);
  auto ok = Post(c, "wait=10");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200) << ok->body;
}

}  // namespace
}  // namespace danqing::service
