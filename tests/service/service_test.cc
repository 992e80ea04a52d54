// End-to-end tests of the HTTP service over real HTTP on 127.0.0.1 (port 0):
// real photos, every bad input, overload, deadlines, draining, metrics.
#include <arpa/inet.h>
// clang-format off
#include <cstdio>  // jpeglib.h needs FILE
#include <jpeglib.h>
// clang-format on
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "image/image.h"
#include "image/png16.h"
#include "service/assets.h"
#include "service/metrics.h"
#include "service/pipeline.h"
#include "service/render_queue.h"
#include "service/server.h"
#include "testing/support/loopback.h"
#include "testing/support/progressive_jpeg.h"
#include "verse/corpus.h"

namespace danqing::service {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
using ::testing::Not;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string Photo(const std::string& name) {
  std::string s = ReadFile(std::string(DANQING_SOURCE_DIR) + "/tests/data/photos/" + name);
  EXPECT_FALSE(s.empty()) << name;
  return s;
}

uint32_t Crc32(const std::string& s) {
  uint32_t c = 0xffffffffu;
  for (unsigned char b : s) {
    c ^= b;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1u)));
  }
  return ~c;
}

void Be32(std::string* s, uint32_t v) {
  for (int i = 3; i >= 0; --i) s->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

// A PNG whose header claims width x height and whose pixels are not there.
std::string PngHeaderOnly(uint32_t width, uint32_t height) {
  std::string png = "\x89PNG\r\n\x1a\n";
  std::string ihdr = "IHDR";
  Be32(&ihdr, width);
  Be32(&ihdr, height);
  ihdr += std::string("\x08\x02\x00\x00\x00", 5);
  Be32(&png, 13);
  png += ihdr;
  Be32(&png, Crc32(ihdr));
  std::string idat = "IDAT";
  idat += std::string("\x78\x9c\x03\x00\x00\x00\x00\x01", 8);
  Be32(&png, 8);
  png += idat;
  Be32(&png, Crc32(idat));
  return png;
}

// The JPEG with an EXIF APP1 segment saying "rotate 90° clockwise" (orientation 6).
std::string WithExifOrientation6(const std::string& jpeg) {
  const std::string payload =
      std::string("Exif\0\0MM\0*\0\0\0\x08\0\x01\x01\x12\0\x03\0\0\0\x01\0\x06\0\0\0\0\0\0", 32);
  std::string seg = "\xff\xe1";
  seg.push_back(static_cast<char>(0));
  seg.push_back(static_cast<char>(payload.size() + 2));
  return jpeg.substr(0, 2) + seg + payload + jpeg.substr(2);
}

// A renderer the test controls: every Render blocks until Release().
class GatedRenderer final : public InscriptionRenderer {
 public:
  Result<image::Image> Render(const InscriptionJob& job, RenderOutcome* outcome) const override {
    std::unique_lock<std::mutex> lock(mu_);
    ++started_;
    cv_.notify_all();
    cv_.wait(lock, [&] { return open_; });
    if (outcome != nullptr) *outcome = outcome_;
    return image::Image::Filled(job.width, job.height);
  }
  bool CanRender(char32_t c) const override { return c >= 0x4E00 && c <= 0x9FFF; }
  std::string Backend() const override { return "cpu"; }
  std::string GpuLost() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return lost_;
  }
  void Lose(std::string why) {
    std::lock_guard<std::mutex> lock(mu_);
    lost_ = std::move(why);
  }
  void Release() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    cv_.notify_all();
  }
  // What each Render reports, as a GPU renderer whose device failed would.
  void Report(RenderOutcome outcome) {
    std::lock_guard<std::mutex> lock(mu_);
    outcome_ = std::move(outcome);
  }
  void WaitStarted(int n) const {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return started_ >= n; });
  }

 private:
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  mutable int started_ = 0;
  bool open_ = false;
  RenderOutcome outcome_{"cpu", ""};
  std::string lost_;
};

// One service on 127.0.0.1, any free port.
class Service {
 public:
  // `perceiver`, when given, outlives the service; else the classical one.
  Service(const InscriptionRenderer* renderer, ServerOptions options, PipelineLimits limits = {},
          perceive::Perceiver* perceiver = nullptr) {
    corpus_ = std::make_unique<verse::Corpus>(*verse::Corpus::Parse(BundledPoems()));
    selector_ = std::make_unique<verse::VerseSelector>(*corpus_);
    if (perceiver == nullptr) {
      auto p = perceive::CreateCvPerceiver();
      EXPECT_TRUE(p.ok()) << p.status().ToString();
      perceiver_ = std::move(p).value();
      perceiver = perceiver_.get();
    }
    pipeline_ = std::make_unique<Pipeline>(perceiver, selector_.get(), renderer, limits);
    options.host = "127.0.0.1";
    options.port = 0;
    server_ = std::make_unique<Server>(options, pipeline_.get(), &metrics_);
    Status st = server_->Start();
    EXPECT_TRUE(st.ok()) << st.ToString();
  }
  ~Service() { server_->Stop(); }

  httplib::Client Client() const {
    httplib::Client c("127.0.0.1", server_->port());
    c.set_read_timeout(60, 0);
    return c;
  }
  Server& server() { return *server_; }
  Metrics& metrics() { return metrics_; }
  const Pipeline& pipeline() const { return *pipeline_; }

 private:
  std::unique_ptr<verse::Corpus> corpus_;
  std::unique_ptr<verse::VerseSelector> selector_;
  std::unique_ptr<perceive::Perceiver> perceiver_;
  std::unique_ptr<Pipeline> pipeline_;
  Metrics metrics_;
  std::unique_ptr<Server> server_;
};

ServerOptions SmallOptions() {
  ServerOptions o;
  o.workers = 2;
  o.queue_capacity = 2;
  o.http_threads = 16;
  o.read_timeout = std::chrono::seconds(1);
  o.write_timeout = std::chrono::seconds(5);
  o.keep_alive_timeout = std::chrono::seconds(1);
  return o;
}

// Tests against the real renderer (CreateInscriptionRenderer).
class ServiceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto r = CreateInscriptionRenderer({});
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    renderer_ = std::move(r).value().release();
    PipelineLimits limits;
    limits.image.max_bytes = 1 << 20;
    limits.image.max_pixels = 20'000'000;
    limits.image.max_side = 10000;
    service_ = new Service(renderer_, SmallOptions(), limits);
  }
  static void TearDownTestSuite() {
    delete service_;
    delete renderer_;
  }

  // Raw body upload; small canvas to keep the tests fast.
  static httplib::Result PostRaw(const std::string& body, const std::string& query = "",
                                 const std::string& content_type = "application/octet-stream",
                                 bool json_answer = true) {
    auto c = service_->Client();
    httplib::Headers h;
    if (json_answer) h.emplace("Accept", "application/json");
    // Small canvas unless the query sets its own size.
    const std::string size =
        query.find("width=") == std::string::npos ? "width=480&height=320" : "height=320";
    return c.Post(("/v1/inscriptions?" + size + query).c_str(), h, body, content_type.c_str());
  }

  static json Ok(const httplib::Result& res) {
    EXPECT_TRUE(res) << "no response";
    if (!res) return json();
    EXPECT_EQ(res->status, 200) << res->body;
    return json::parse(res->body, nullptr, false);
  }

  static void ExpectError(const httplib::Result& res, int code, const std::string& words) {
    ASSERT_TRUE(res) << "no response";
    EXPECT_EQ(res->status, code) << res->body;
    const json j = json::parse(res->body, nullptr, false);
    ASSERT_TRUE(j.is_object()) << res->body;
    EXPECT_THAT(j.value("error", ""), HasSubstr(words));
  }

  static std::vector<std::string> Themes(const json& j, size_t n) {
    std::vector<std::string> out;
    for (const auto& t : j["themes"]) {
      if (out.size() < n && t["score"].get<double>() > 0.05) out.push_back(t["theme"]);
    }
    return out;
  }

  static InscriptionRenderer* renderer_;
  static Service* service_;
};
InscriptionRenderer* ServiceTest::renderer_ = nullptr;
Service* ServiceTest::service_ = nullptr;

TEST_F(ServiceTest, PhotosGetPlausibleThemesAndAVerse) {
  struct Case {
    const char* photo;
    const char* theme;  // expected among the top themes
  };
  for (const Case& c :
       {Case{"astronaut.jpg", "人物"}, Case{"hubble_deep_field.jpg", "月夜"},
        Case{"chelsea.jpg", "禽兽"}, Case{"coffee.jpg", "茶酒"}, Case{"rocket.jpg", "天空"}}) {
    SCOPED_TRACE(c.photo);
    const json j = Ok(PostRaw(Photo(c.photo)));
    ASSERT_TRUE(j.is_object());
    EXPECT_THAT(Themes(j, 3), ::testing::Contains(c.theme)) << j["themes"].dump();
    EXPECT_EQ(j["verse"]["source"], "corpus");
    EXPECT_FALSE(j["verse"]["title"].get<std::string>().empty());
    EXPECT_GE(j["verse"]["lines"].size(), 4u);
    EXPECT_EQ(j["width"], 480);
    EXPECT_EQ(j["height"], 320);
    EXPECT_EQ(j["backend"], "cpu");
    EXPECT_GT(j["timings_ms"]["total"].get<double>(), 0.0);
  }
}

// A multipart body httplib cannot parse (here: more parts than it keeps) is
// a 400 that says what a multipart upload must look like, not "malformed".
TEST_F(ServiceTest, AnUnreadableMultipartBodySaysWhatIsExpected) {
  auto c = service_->Client();
  httplib::MultipartFormDataItems items = {
      {"image", Photo("rocket.jpg"), "rocket.jpg", "image/jpeg"}};
  for (int i = 0; i < 1100; ++i) items.push_back({"x" + std::to_string(i), "1", "", ""});
  auto res = c.Post("/v1/inscriptions", items);
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400);
  EXPECT_THAT(res->body, HasSubstr("multipart/form-data body could not be read"));
  EXPECT_THAT(res->body, HasSubstr("at most 1024"));
}

TEST_F(ServiceTest, MultipartUploadAnswersTheImageAndKeepsItsJson) {
  auto c = service_->Client();
  httplib::MultipartFormDataItems items = {
      {"image", Photo("rocket.jpg"), "rocket.jpg", "image/jpeg"},
      {"width", "400", "", ""},
      {"height", "300", "", ""},
      {"style", "kai", "", ""},
      {"format", "jpeg", "", ""},
  };
  auto res = c.Post("/v1/inscriptions", items);
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(res->get_header_value("Content-Type"), "image/jpeg");
  ASSERT_GE(res->body.size(), 3u);
  EXPECT_EQ(res->body.substr(0, 3), "\xff\xd8\xff");
  const std::string id = res->get_header_value("X-Danqing-Inscription-Id");
  ASSERT_EQ(id.size(), 32u);

  auto meta = c.Get(("/v1/inscriptions/" + id).c_str());
  ASSERT_TRUE(meta);
  ASSERT_EQ(meta->status, 200);
  const json j = json::parse(meta->body);
  EXPECT_EQ(j["id"], id);
  EXPECT_EQ(j["width"], 400);

  auto img = c.Get(("/v1/inscriptions/" + id + "/image?download=1").c_str());
  ASSERT_TRUE(img);
  EXPECT_EQ(img->status, 200);
  EXPECT_EQ(img->body, res->body);
  EXPECT_THAT(img->get_header_value("Content-Disposition"), HasSubstr("attachment"));
  auto inline_img = c.Get(("/v1/inscriptions/" + id + "/image?download=0").c_str());
  ASSERT_TRUE(inline_img);
  EXPECT_FALSE(inline_img->has_header("Content-Disposition"));

  EXPECT_EQ(c.Get("/v1/inscriptions/0123456789abcdef0123456789abcdef")->status, 404);

  // response=json as a form field, like the other options.
  items.push_back({"response", "json", "", ""});
  auto as_json = c.Post("/v1/inscriptions", items);
  ASSERT_TRUE(as_json);
  ASSERT_EQ(as_json->status, 200) << as_json->body;
  EXPECT_EQ(as_json->get_header_value("Content-Type"), "application/json");
}

// Issue 28: with writing=true the inscription keeps its write-time plane and
// background (for the page's animation) and makes the writing as an MP4 on
// request, cached; bad clip options, unknown ids and inscriptions made
// without the writing are named errors.
TEST_F(ServiceTest, WritingPlaneBackgroundAndVideo) {
  auto c = service_->Client();
  c.set_read_timeout(60, 0);
  const json j = Ok(PostRaw(Photo("rocket.jpg"), "&writing=true&style=cao"));
  ASSERT_TRUE(j.contains("writing")) << j.dump();
  const std::string id = j["id"];
  const json& w = j["writing"];
  EXPECT_EQ(w["encoding"], "png-grey16-ms-half");
  EXPECT_GE(w["end_ms"].get<int>(), 1000);
  EXPECT_LT(w["seal_ms"].get<int>(), w["end_ms"].get<int>());
  auto plane = c.Get(w["plane_url"].get<std::string>().c_str());
  ASSERT_TRUE(plane);
  ASSERT_EQ(plane->status, 200);
  EXPECT_EQ(plane->get_header_value("Content-Type"), "image/png");
  auto g = image::DecodePngGrey16(std::span<const uint8_t>(
      reinterpret_cast<const uint8_t*>(plane->body.data()), plane->body.size()));
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ(g->width, 240);
  EXPECT_EQ(g->height, 160);
  EXPECT_EQ(plane->body.size(), w["plane_bytes"].get<size_t>());
  auto bg = c.Get(w["background_url"].get<std::string>().c_str());
  ASSERT_TRUE(bg);
  EXPECT_EQ(bg->status, 200);
  EXPECT_EQ(bg->body.substr(0, 3), "\xff\xd8\xff");

  auto v = c.Get(("/v1/inscriptions/" + id + "/video?fps=10&seconds=2").c_str());
  ASSERT_TRUE(v);
  ASSERT_EQ(v->status, 200) << v->body;
  EXPECT_EQ(v->get_header_value("Content-Type"), "video/mp4");
  ASSERT_GT(v->body.size(), 1000u);
  EXPECT_EQ(v->body.substr(4, 4), "ftyp");
  EXPECT_NE(v->body.find("moov"), std::string::npos);
  EXPECT_LT(v->body.find("moov"), v->body.find("mdat")) << "faststart";
  auto again = c.Get(("/v1/inscriptions/" + id + "/video?fps=10&seconds=2").c_str());
  ASSERT_TRUE(again);
  EXPECT_EQ(again->body, v->body) << "cached with the inscription";
  auto metrics = c.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_THAT(metrics->body,
              HasSubstr("danqing_videos_total{encoder=\"libx264\",result=\"ok\"} 1"));
  EXPECT_THAT(metrics->body, HasSubstr("danqing_videos_total{encoder=\"cache\",result=\"ok\"} 1"));
  EXPECT_THAT(metrics->body,
              HasSubstr("danqing_video_encode_seconds_count{encoder=\"libx264\"} 1"));
  // The CPU backend composes on the CPU; nothing fell back.
  EXPECT_THAT(metrics->body, HasSubstr("danqing_video_compose_seconds_count{composer=\"cpu\"} 1"));
  EXPECT_THAT(metrics->body, Not(HasSubstr("danqing_video_compose_fallbacks_total{")));
  EXPECT_THAT(metrics->body, HasSubstr("danqing_video_bytes_total{encoder=\"libx264\"} " +
                                       std::to_string(v->body.size())));

  auto bad = [&](const std::string& q, int code, const std::string& words) {
    auto r = c.Get(("/v1/inscriptions/" + id + "/video?" + q).c_str());
    ExpectError(r, code, words);
  };
  bad("fps=61", 400, "fps");
  bad("fps=abc", 400, "fps");
  bad("fps=2.5", 400, "fps");
  bad("seconds=31", 400, "seconds");
  bad("seconds=0", 400, "seconds");
  ExpectError(c.Get("/v1/inscriptions/0123456789abcdef0123456789abcdef/video"), 404,
              "no recent inscription");
  ExpectError(c.Get("/v1/inscriptions/0123456789abcdef0123456789abcdef/writing"), 404,
              "no recent inscription");
  // Made without the writing: no plane, no video.
  const json plain = Ok(PostRaw(Photo("rocket.jpg")));
  EXPECT_FALSE(plain.contains("writing"));
  const std::string pid = plain["id"];
  ExpectError(c.Get(("/v1/inscriptions/" + pid + "/video").c_str()), 409, "writing=true");
  ExpectError(c.Get(("/v1/inscriptions/" + pid + "/writing").c_str()), 409, "writing=true");
  ExpectError(PostRaw(Photo("rocket.jpg"), "&writing=maybe"), 400, "writing");
}

// Issue 28: an encoder that fails mid-stream is a 500, nothing is cached or
// served as a video, the worker is free again (the next inscription renders)
// and the failure is counted.
TEST(ServiceVideoTest, EncoderFailureMidStreamIs500AndNothingIsKept) {
  auto r = CreateInscriptionRenderer({});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ServerOptions o = SmallOptions();
  o.video_fail_after_frames = 4;
  Service svc(r->get(), o);
  auto c = svc.Client();
  const std::string photo = Photo("rocket.jpg");
  auto post = [&] {
    return c.Post("/v1/inscriptions?width=320&height=256&writing=true",
                  httplib::Headers{{"Accept", "application/json"}}, photo, "image/jpeg");
  };
  auto res = post();
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  const std::string id = json::parse(res->body)["id"];
  for (int k = 0; k < 2; ++k) {  // not cached: the second try fails the same way
    auto v = c.Get(("/v1/inscriptions/" + id + "/video?fps=10&seconds=2").c_str());
    ASSERT_TRUE(v);
    EXPECT_EQ(v->status, 500) << v->body;
    EXPECT_NE(v->get_header_value("Content-Type"), "video/mp4");
    EXPECT_THAT(v->body, HasSubstr("after 4 frames"));
  }
  EXPECT_THAT(svc.metrics().Render(),
              HasSubstr("danqing_videos_total{encoder=\"libx264\",result=\"error\"} 2"));
  auto again = post();  // the workers are free
  ASSERT_TRUE(again);
  EXPECT_EQ(again->status, 200);
  // No temporary video left behind.
  for (const auto& e :
       std::filesystem::directory_iterator(std::filesystem::temp_directory_path())) {
    EXPECT_EQ(e.path().filename().string().find("danqing-video-" + std::to_string(::getpid())),
              std::string::npos)
        << e.path();
  }
}

// The real renderer, reported as the CUDA backend on a named GPU (what the
// service sees on a GPU node).
class NamedGpuRenderer final : public InscriptionRenderer {
 public:
  NamedGpuRenderer(const InscriptionRenderer* real, Gpu gpu) : real_(real), gpu_(std::move(gpu)) {}
  Result<image::Image> Render(const InscriptionJob& job, RenderOutcome* outcome) const override {
    auto r = real_->Render(job, outcome);
    if (outcome != nullptr) *outcome = {"cuda", ""};
    return r;
  }
  bool CanRender(char32_t c) const override { return real_->CanRender(c); }
  std::string Backend() const override { return "cuda"; }
  Gpu RenderGpu() const override { return gpu_; }

 private:
  const InscriptionRenderer* real_;
  Gpu gpu_;
};

// Issue 28: after a CUDA render, a GPU without NVENC (H200) encodes with
// libx264 without trying NVENC, counted as reason="no_nvenc"; one with NVENC
// (L4) tries it first (here, without an NVIDIA driver, it does not open: the
// video still comes, counted as reason="open_failed").
TEST(ServiceVideoTest, NvencOnlyOnAGpuThatHasOne) {
  auto real = CreateInscriptionRenderer({});
  ASSERT_TRUE(real.ok()) << real.status().ToString();
  const std::string photo = Photo("rocket.jpg");
  for (const auto& [gpu, reason] :
       {std::pair{InscriptionRenderer::Gpu{"NVIDIA H200", 9, 0}, "no_nvenc"},
        std::pair{InscriptionRenderer::Gpu{"NVIDIA L4", 8, 9}, "open_failed"}}) {
    NamedGpuRenderer renderer(real->get(), gpu);
    Service svc(&renderer, SmallOptions());
    auto c = svc.Client();
    auto res = c.Post("/v1/inscriptions?width=320&height=256&writing=true",
                      httplib::Headers{{"Accept", "application/json"}}, photo, "image/jpeg");
    ASSERT_TRUE(res);
    ASSERT_EQ(res->status, 200) << res->body;
    const json j = json::parse(res->body);
    EXPECT_EQ(j["backend"], "cuda");
    const std::string id = j["id"];
    auto v = c.Get(("/v1/inscriptions/" + id + "/video?fps=10&seconds=2").c_str());
    ASSERT_TRUE(v);
    EXPECT_EQ(v->status, 200) << gpu.name << ": " << v->body;
    const std::string m = svc.metrics().Render();
    EXPECT_THAT(m, HasSubstr("danqing_video_nvenc_fallbacks_total{reason=\"" + std::string(reason) +
                             "\"} 1"))
        << gpu.name;
    EXPECT_THAT(m, HasSubstr("danqing_videos_total{encoder=\"libx264\",result=\"ok\"} 1"))
        << gpu.name;
    // The CUDA backend composes the frames on the GPU; with no device here
    // (or no CUDA in the build) the CPU does, counted and logged.
    EXPECT_THAT(m, HasSubstr("danqing_video_compose_fallbacks_total{composer=\"cuda\"} 1"))
        << gpu.name;
    EXPECT_THAT(m, HasSubstr("danqing_video_compose_seconds_count{composer=\"cpu\"} 1"))
        << gpu.name;
  }
}

// A small inscription with its writing (synchronous); its id ("" on failure).
std::string PostSmallWriting(httplib::Client& c, const std::string& photo) {
  auto res = c.Post("/v1/inscriptions?width=320&height=256&writing=true",
                    httplib::Headers{{"Accept", "application/json"}}, photo, "image/jpeg");
  EXPECT_TRUE(res && res->status == 200);
  return res ? json::parse(res->body, nullptr, false)["id"].get<std::string>() : "";
}

// Issue 28: a video asked for an inscription the cache no longer holds (one
// entry kept, a newer inscription took its place) is a 404 naming why, and
// nothing is encoded for it; the newer one's video is served.
TEST(ServiceVideoTest, EvictedInscriptionIs404) {
  auto r = CreateInscriptionRenderer({});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ServerOptions o = SmallOptions();
  o.result_cache_entries = 1;
  Service svc(r->get(), o);
  auto c = svc.Client();
  const std::string photo = Photo("rocket.jpg");
  auto post = [&] { return PostSmallWriting(c, photo); };
  const std::string evicted = post();
  const std::string kept = post();
  ASSERT_FALSE(evicted.empty());
  auto gone = c.Get(("/v1/inscriptions/" + evicted + "/video?fps=10&seconds=2").c_str());
  ASSERT_TRUE(gone);
  EXPECT_EQ(gone->status, 404) << gone->body;
  EXPECT_THAT(json::parse(gone->body, nullptr, false).value("error", ""),
              HasSubstr("no recent inscription"));
  EXPECT_THAT(svc.metrics().Render(), Not(HasSubstr("danqing_videos_total{encoder=\"libx264\"")));
  auto v = c.Get(("/v1/inscriptions/" + kept + "/video?fps=10&seconds=2").c_str());
  ASSERT_TRUE(v);
  EXPECT_EQ(v->status, 200) << v->body;
  EXPECT_EQ(v->body.substr(4, 4), "ftyp");
}

// The replica's cache is bounded in bytes too, not only in entries: with a
// bound smaller than one inscription only the newest synchronous answer is
// kept (its video is served) and the one before has left (a 404), though
// the entry bound (64) would have kept both.
TEST(ServiceVideoTest, CacheBoundInBytesKeepsOnlyTheNewest) {
  auto r = CreateInscriptionRenderer({});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ServerOptions o = SmallOptions();
  ASSERT_GE(o.result_cache_entries, 2u);
  o.result_cache_bytes = 1;
  Service svc(r->get(), o);
  auto c = svc.Client();
  const std::string photo = Photo("rocket.jpg");
  auto post = [&] { return PostSmallWriting(c, photo); };
  const std::string older = post();
  const std::string newest = post();
  ASSERT_FALSE(older.empty());
  auto gone = c.Get(("/v1/inscriptions/" + older + "/video?fps=10&seconds=2").c_str());
  ASSERT_TRUE(gone);
  EXPECT_EQ(gone->status, 404) << gone->body;
  auto v = c.Get(("/v1/inscriptions/" + newest + "/video?fps=10&seconds=2").c_str());
  ASSERT_TRUE(v);
  EXPECT_EQ(v->status, 200) << v->body;
}

// Issue 28: a video runs on a render worker, and at most half the workers
// encode videos at once: while one encodes (2 workers), a second video is
// refused with 429 and Retry-After, and a still is served; a client that
// drops the download half-way leaves the server serving.
TEST(ServiceVideoTest, VideosCannotStarveStills) {
  auto r = CreateInscriptionRenderer({});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  Service svc(r->get(), SmallOptions());
  auto c = svc.Client();
  const std::string photo = Photo("rocket.jpg");
  auto post = [&](const std::string& size) {
    return c.Post(("/v1/inscriptions?writing=true&" + size).c_str(),
                  httplib::Headers{{"Accept", "application/json"}}, photo, "image/jpeg");
  };
  auto res = post("width=640&height=512");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  const std::string id = json::parse(res->body)["id"];
  const std::string long_video = "/v1/inscriptions/" + id + "/video?fps=60&seconds=30";
  // The still's worker counts itself out after its answer: wait for that first.
  for (int i = 0;
       i < 3000 && svc.metrics().Render().find("danqing_renders_in_flight 0") == std::string::npos;
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::thread first([&] {
    auto c1 = svc.Client();
    c1.set_read_timeout(120, 0);
    auto v = c1.Get(long_video.c_str());
    ASSERT_TRUE(v);
    EXPECT_EQ(v->status, 200) << v->body;
  });
  // Wait until the video is on a worker.
  bool running = false;
  for (int i = 0; i < 3000 && !running; ++i) {  // up to 30 s on a loaded machine
    running = svc.metrics().Render().find("danqing_renders_in_flight 1") != std::string::npos;
    if (!running) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(running) << "the video never reached a worker";
  auto second = c.Get(("/v1/inscriptions/" + id + "/video?fps=30&seconds=29").c_str());
  ASSERT_TRUE(second);
  bool still_encoding =
      svc.metrics().Render().find("danqing_renders_in_flight 1") != std::string::npos;
  if (still_encoding) {
    EXPECT_EQ(second->status, 429) << second->body;
    EXPECT_TRUE(second->has_header("Retry-After"));
    auto still = post("width=320&height=256");  // the other worker takes stills
    ASSERT_TRUE(still);
    EXPECT_EQ(still->status, 200) << still->body;
    EXPECT_THAT(svc.metrics().Render(),
                HasSubstr("danqing_videos_total{encoder=\"none\",result=\"busy\"} 1"));
  } else {
    std::printf(
        "the first video finished before the second was asked for: the 429 was not exercised\n");
  }
  first.join();
  // A download dropped after its first bytes: the server goes on serving.
  {
    httplib::Client c2 = svc.Client();
    size_t got = 0;
    auto v = c2.Get(long_video.c_str(), [&](const char*, size_t n) {
      got += n;
      return got < 1000;  // stop reading: the client goes away
    });
    EXPECT_GT(got, 0u);
  }
  auto whole = c.Get(long_video.c_str());
  ASSERT_TRUE(whole);
  EXPECT_EQ(whole->status, 200);
  EXPECT_GT(whole->body.size(), 1000u);
}

TEST_F(ServiceTest, VisitorTextReplacesTheVerse) {
  const json j = Ok(PostRaw(Photo("coffee.jpg"), "&text=%E6%98%8E%E6%9C%88%E5%85%89"));  // 明月光
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j["verse"]["source"], "visitor");
  EXPECT_EQ(j["verse"]["lines"][0], "明月光");
}

TEST_F(ServiceTest, ContentIsSniffedNotTakenFromTheContentType) {
  // A JPEG labelled as PNG is still a JPEG; a text labelled as JPEG is refused.
  EXPECT_EQ(PostRaw(Photo("chelsea.jpg"), "", "image/png")->status, 200);
  ExpectError(PostRaw("hello, this is not a photo", "", "image/jpeg"), 415, "not a PNG or JPEG");
}

TEST_F(ServiceTest, ExifOrientationIsHonoured) {
  const std::string jpeg = Photo("rocket.jpg");  // 640 x 427 as stored
  const json plain = Ok(PostRaw(jpeg));
  const json rotated = Ok(PostRaw(WithExifOrientation6(jpeg)));
  ASSERT_TRUE(plain.is_object() && rotated.is_object());
  EXPECT_EQ(plain["photo"]["width"], 640);
  EXPECT_EQ(plain["photo"]["height"], 427);
  EXPECT_EQ(rotated["photo"]["width"], 427);
  EXPECT_EQ(rotated["photo"]["height"], 640);
}

std::string ManyScanJpeg(int w, int h, int scans) {
  const auto jpeg = danqing::testing::ManyScanJpeg(w, h, scans);
  return std::string(jpeg.begin(), jpeg.end());
}

// A progressive JPEG with more scans than its size allows is a 400 that says
// so (a 1000-scan file pinned a worker for seconds); one at the bound renders.
TEST_F(ServiceTest, ManyScanJpegsAreClearClientErrors) {
  ExpectError(PostRaw(ManyScanJpeg(320, 240, 101)), 400, "more than 100 scans");
  EXPECT_EQ(PostRaw(ManyScanJpeg(320, 240, 100))->status, 200);
}

// A large photo, stored sideways, as the background: decoded DCT-scaled (to
// the wash plane and the perceiver's size), turned upright, and reported at
// its full upright size.
TEST_F(ServiceTest, LargeSidewaysPhotoBackgroundIsScaledAndUpright) {
  const std::string small = Photo("rocket.jpg");
  auto decoded = image::Decode(
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(small.data()), small.size()));
  ASSERT_TRUE(decoded.ok());
  auto big = image::EncodeJpeg(image::Resize(*decoded, 2048, 1366), 85);
  ASSERT_TRUE(big.ok());
  const json j = Ok(PostRaw(WithExifOrientation6(*big), "&background=photo"));
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j["photo"]["width"], 1366);
  EXPECT_EQ(j["photo"]["height"], 2048);
  EXPECT_EQ(j["width"], 480);
  EXPECT_GT(j["timings_ms"]["decode"].get<double>(), 0.0);
}

TEST_F(ServiceTest, BadImagesAreClearClientErrors) {
  ExpectError(PostRaw(""), 400, "empty");
  const std::string jpeg = Photo("coffee.jpg");
  ExpectError(PostRaw(jpeg.substr(0, jpeg.size() / 3)), 400, "");  // truncated
  ExpectError(PostRaw(std::string("\xff\xd8\xff\xe0", 4) + std::string(3000, 'x')), 400,
              "");  // corrupt
  std::string png = PngHeaderOnly(640, 480);
  ExpectError(PostRaw(png), 400, "");  // header fine, no pixel data
  // Decompression bombs: refused from the header, before any pixel is decoded.
  ExpectError(PostRaw(PngHeaderOnly(9000, 9000)), 413, "limit");  // 81 Mpx > 20 Mpx
  ExpectError(PostRaw(PngHeaderOnly(60000, 100)), 413, "limit");  // side > 10000
  // Over the upload cap (1 MiB here): the server does not read it all.
  auto big = PostRaw(std::string(3 << 20, '\xff'));
  ASSERT_TRUE(big);
  EXPECT_EQ(big->status, 413);
  // Multipart without the `image` field.
  auto c = service_->Client();
  auto res = c.Post("/v1/inscriptions",
                    httplib::MultipartFormDataItems{{"photo", jpeg, "a.jpg", "image/jpeg"}});
  ExpectError(res, 400, "'image'");
  // The service still works.
  EXPECT_EQ(PostRaw(jpeg)->status, 200);
}

TEST_F(ServiceTest, BadOptionsAreNamed) {
  const std::string jpeg = Photo("chelsea.jpg");
  ExpectError(PostRaw(jpeg, "&style=brush"), 400, "style");
  ExpectError(PostRaw(jpeg, "&background=space"), 400, "background");
  ExpectError(PostRaw(jpeg, "&format=gif"), 400, "format");
  ExpectError(PostRaw(jpeg, "&width=10"), 400, "width");
  ExpectError(PostRaw(jpeg, "&width=abc"), 400, "width");
  ExpectError(PostRaw(jpeg, "&vertical=sideways"), 400, "vertical");
  ExpectError(PostRaw(jpeg, "&text=%F0%9F%98%80"), 400,
              "text has characters that cannot be written: \xf0\x9f\x98\x80");  // an emoji
  ExpectError(PostRaw(jpeg, "&title=%E5%B1%B1%F0%9F%98%80"), 400,
              "title has characters that cannot be written: \xf0\x9f\x98\x80");
  ExpectError(PostRaw(jpeg, "&text=%E6%98%8E%FF"), 400, "UTF-8");
  ExpectError(PostRaw(jpeg, "&text=%E3%80%82%E3%80%82"), 400, "no character to write");  // 。。
  // The field and the byte a UTF-8 error is at; an empty number as an empty word.
  ExpectError(PostRaw(jpeg, "&text=%E6%98%8E&title=%E6%98%8E%FF"), 400,
              "title is not valid UTF-8 (at byte 3)");
  ExpectError(PostRaw(jpeg, "&text=%E6%98%8E&signature=%C0%80"), 400,
              "signature is not valid UTF-8");
  ExpectError(PostRaw(jpeg, "&width="), 400, "width must be a number");
  ExpectError(PostRaw(jpeg, "&style="), 400, "style");
}

// format=auto, the default, answers JPEG on every background; png and jpeg are
// kept as asked.
TEST_F(ServiceTest, FormatAutoIsJpegAndPngIsKeptWhenAsked) {
  const std::string jpeg = Photo("chelsea.jpg");
  for (const char* background : {"landscape", "paper", "photo"}) {
    for (const char* format : {"", "&format=auto"}) {
      auto res = PostRaw(jpeg, std::string("&background=") + background + format, "image/jpeg",
                         /*json_answer=*/false);
      ASSERT_TRUE(res);
      ASSERT_EQ(res->status, 200) << res->body;
      EXPECT_EQ(res->get_header_value("Content-Type"), "image/jpeg") << background << format;
      EXPECT_EQ(res->body.substr(0, 3), "\xff\xd8\xff");
    }
  }
  auto png = PostRaw(jpeg, "&format=png", "image/jpeg", /*json_answer=*/false);
  ASSERT_TRUE(png);
  EXPECT_EQ(png->get_header_value("Content-Type"), "image/png");
  EXPECT_EQ(png->body.substr(0, 4), "\x89PNG");
}

// What a visitor sends is bounded in bytes before anything is kept: spaces
// and punctuation are not written, so megabytes of them beside one character
// passed the 64-character limit and were echoed and cached.
TEST_F(ServiceTest, OptionFieldsAreBoundedInBytes) {
  auto c = service_->Client();
  const std::string jpeg = Photo("chelsea.jpg");
  const auto post = [&](const char* field, const std::string& value) {
    httplib::MultipartFormDataItems items = {{"image", jpeg, "c.jpg", "image/jpeg"},
                                             {"height", "256", "", ""},
                                             {"response", "json", "", ""},
                                             {field, value, "", ""}};
    if (std::string(field) != "text") items.push_back({"text", "明月", "", ""});
    if (std::string(field) != "width") items.push_back({"width", "256", "", ""});
    return c.Post("/v1/inscriptions", items);
  };
  const std::string spaces(200'000, ' ');
  ExpectError(post("text", "明" + spaces), 400, "text is longer than 1024 bytes");
  ExpectError(post("title", spaces + "月"), 400, "title is longer than 1024 bytes");
  ExpectError(post("signature", "\n" + spaces + "人"), 400, "signature is longer than 1024 bytes");
  // A number padded with zeros, a word with spaces: every other option too.
  ExpectError(post("width", std::string(40, '0') + "256"), 400, "width is longer than 32 bytes");
  ExpectError(post("style", "kai" + std::string(5000, ' ')), 400, "style is longer than 32 bytes");
  // Within the bounds it is written (spaces are still breaks).
  EXPECT_EQ(Ok(post("text", "明   月")).value("verse", json::object())["source"], "visitor");
}

// Ids are 128 random bits: neither a neighbour nor the next one can be told
// from one (they were a counter through a fixed mix: one revealed the rest).
TEST_F(ServiceTest, IdsAreRandom128Bits) {
  std::set<std::string> ids;
  std::vector<std::string> list;
  for (int i = 0; i < 4; ++i) {
    const json j = Ok(PostRaw(Photo("chelsea.jpg"), "&width=256&height=256&text=%E6%98%8E"));
    const std::string id = j.value("id", "");
    ASSERT_EQ(id.size(), 32u) << id;
    EXPECT_EQ(id.find_first_not_of("0123456789abcdef"), std::string::npos) << id;
    ids.insert(id);
    list.push_back(id);
  }
  EXPECT_EQ(ids.size(), 4u);
  // Consecutive ids share no more bits than chance (64 of 128 on average).
  for (size_t i = 1; i < list.size(); ++i) {
    int same = 0;
    for (size_t k = 0; k < 32; ++k) {
      const int a = std::stoi(list[i - 1].substr(k, 1), nullptr, 16);
      const int b = std::stoi(list[i].substr(k, 1), nullptr, 16);
      same += 4 - __builtin_popcount(unsigned(a ^ b));
    }
    EXPECT_LT(same, 100) << list[i - 1] << " " << list[i];
  }
}

using danqing::testing::ConnectLoopback;
using danqing::testing::RawExchange;

// httplib applies the payload limit only to a declared Content-Length: a
// chunked body it reads whole, a gzip one it inflates whole (a 1 MB upload of
// zeros took the server to 2.5 GB). Both are refused before the body is read.
TEST_F(ServiceTest, ChunkedOrCompressedUploadsAreRefusedUnread) {
  const int port = service_->server().port();
  const std::string chunked = RawExchange(
      port, "POST /v1/inscriptions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n400\r\n" +
                std::string(1024, 'x') + "\r\n");
  EXPECT_THAT(chunked, ::testing::StartsWith("HTTP/1.1 411")) << chunked.substr(0, 200);
  EXPECT_THAT(chunked, HasSubstr("Content-Length"));
  auto c = service_->Client();
  auto gz = c.Post("/v1/inscriptions", httplib::Headers{{"Content-Encoding", "gzip"}},
                   std::string("\x1f\x8b\x08\x00", 4) + std::string(64, '\0'), "image/jpeg");
  ExpectError(gz, 415, "uncompressed");
  EXPECT_THAT(service_->metrics().Render(),
              HasSubstr("danqing_inscriptions_rejected_total{reason=\"encoding\"}"));
  EXPECT_EQ(PostRaw(Photo("chelsea.jpg"))->status, 200) << "the service still works";
}

// Responses in `answer` (each starts with a status line).
size_t Responses(const std::string& answer) {
  size_t n = 0;
  for (size_t at = answer.find("HTTP/1.1 "); at != std::string::npos; at = answer.find("HTTP/1.1 ", at + 1)) ++n;
  return n;
}

// An upload of unknown length (httplib would read it until the client
// closes) or over the limit (it would read and discard all of it) is refused
// before it is read, and the connection is closed after the answer: the
// unread body is not taken for the next request.
TEST_F(ServiceTest, UploadsOfUnknownOrTooLargeLengthAreRefusedUnread) {
  const int port = service_->server().port();
  const std::string no_length =
      RawExchange(port, "POST /v1/inscriptions HTTP/1.1\r\nHost: x\r\n\r\n" + std::string(4096, '\xff') +
                            "\r\nGET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_THAT(no_length, ::testing::StartsWith("HTTP/1.1 411")) << no_length.substr(0, 300);
  EXPECT_THAT(no_length, HasSubstr("\"error\":\"send the upload with a Content-Length\""));
  EXPECT_EQ(Responses(no_length), 1u) << "the connection must close after the refusal: " << no_length;

  // Only the headers are sent: the answer comes without the body.
  const std::string too_large =
      RawExchange(port, "POST /v1/inscriptions HTTP/1.1\r\nHost: x\r\nContent-Length: 100000000000\r\n\r\n");
  EXPECT_THAT(too_large, ::testing::StartsWith("HTTP/1.1 413")) << too_large.substr(0, 300);
  EXPECT_THAT(too_large, HasSubstr("over the 1.1 MiB limit"));
  EXPECT_EQ(Responses(too_large), 1u);

  // A client that asks first is refused instead of being told to go on.
  const std::string asked = RawExchange(
      port, "POST /v1/inscriptions HTTP/1.1\r\nHost: x\r\nContent-Length: 5000000\r\nExpect: 100-continue\r\n\r\n");
  EXPECT_THAT(asked, ::testing::StartsWith("HTTP/1.1 413")) << asked.substr(0, 300);
  EXPECT_THAT(asked, Not(HasSubstr("100 Continue")));

  // httplib does not read a GET's body: it would be taken for a second
  // request (smuggled past a proxy). Refused, and the connection closed.
  const std::string get_body = RawExchange(
      port, "GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 40\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_THAT(get_body, ::testing::StartsWith("HTTP/1.1 400")) << get_body.substr(0, 300);
  EXPECT_THAT(get_body, HasSubstr("takes no body"));
  EXPECT_EQ(Responses(get_body), 1u) << get_body;

  const std::string bad_length =
      RawExchange(port, "POST /v1/inscriptions HTTP/1.1\r\nHost: x\r\nContent-Length: 12ab\r\n\r\n");
  EXPECT_THAT(bad_length, ::testing::StartsWith("HTTP/1.1 400")) << bad_length.substr(0, 300);
  EXPECT_THAT(service_->metrics().Render(), HasSubstr("danqing_inscriptions_rejected_total{reason=\"too_large\"}"));
  EXPECT_EQ(PostRaw(Photo("chelsea.jpg"))->status, 200) << "the service still works";
}

// Sends `head` then `filler` bytes in pieces while the server takes them (at
// most `limit` bytes), then returns what came back.
std::string Flood(int port, const std::string& head, size_t limit) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  EXPECT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  timeval tv{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::send(fd, head.data(), head.size(), MSG_NOSIGNAL);
  const std::string piece(16 * 1024, 'a');
  for (size_t sent = 0; sent < limit;) {
    const ssize_t n = ::send(fd, piece.data(), piece.size(), MSG_NOSIGNAL);
    if (n <= 0) break;  // the server closed
    sent += static_cast<size_t>(n);
  }
  std::string answer;
  char buf[4096];
  ssize_t n = 0;
  while ((n = ::recv(fd, buf, sizeof buf, 0)) > 0) answer.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return answer;
}

// httplib 0.11 grows a line's buffer until a newline comes: a request line or
// header without one would take the server's memory. Past 64 KiB of request
// line and headers the client gets 431 and the connection is closed.
TEST_F(ServiceTest, OverlongRequestLinesAndHeadersAreCutOff) {
  const int port = service_->server().port();
  const std::string line = Flood(port, "GET /", 8u << 20);
  EXPECT_THAT(line, ::testing::StartsWith("HTTP/1.1 431")) << line.substr(0, 300);
  EXPECT_THAT(line, HasSubstr("too long"));
  const std::string header = Flood(port, "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Long: ", 8u << 20);
  EXPECT_THAT(header, ::testing::StartsWith("HTTP/1.1 431")) << header.substr(0, 300);
  // A bare LF line is refused where it ends (RFC 9112 framing), not read on.
  const std::string bare_lf = Flood(port, "GET /healthz HTTP/1.1\r\nHost: x\r\n\nX-Long: ", 8u << 20);
  EXPECT_THAT(bare_lf, ::testing::StartsWith("HTTP/1.1 400")) << bare_lf.substr(0, 300);
  EXPECT_THAT(bare_lf, HasSubstr("bare LF"));
  // Many short headers count too.
  std::string many = "GET /healthz HTTP/1.1\r\nHost: x\r\n";
  while (many.size() < 80 * 1024) many += "X-A: b\r\n";
  const std::string answer = RawExchange(port, many + "\r\n");
  EXPECT_THAT(answer, ::testing::StartsWith("HTTP/1.1 431")) << answer.substr(0, 300);
  // Headers under the limit are fine.
  auto c = service_->Client();
  auto ok = c.Get("/healthz", httplib::Headers{{"X-Big", std::string(4 * 1024, 'b')}});
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
}

// What httplib answers itself (no route, a malformed request) is JSON like
// every other error, and a header that is not UTF-8 echoed in a message does
// not turn a refusal into a 500.
TEST_F(ServiceTest, EveryErrorIsJson) {
  auto c = service_->Client();
  ExpectError(c.Get("/no/such/thing"), 404, "no such resource: GET /no/such/thing");
  const std::string malformed = RawExchange(service_->server().port(), "GARBAGE\r\n\r\n");
  EXPECT_THAT(malformed, ::testing::StartsWith("HTTP/1.1 400")) << malformed;
  EXPECT_THAT(malformed, HasSubstr("\"error\":\"the request line is not"));
  const std::string not_utf8 =
      RawExchange(service_->server().port(),
                  "POST /v1/inscriptions HTTP/1.1\r\nHost: x\r\nContent-Encoding: "
                  "\xff\xfe\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
  EXPECT_THAT(not_utf8, ::testing::StartsWith("HTTP/1.1 415")) << not_utf8;
}

// httplib sets SO_REUSEPORT by default: a second server on the same port
// would start and take half the connections. It must fail instead.
TEST_F(ServiceTest, ASecondServerCannotTakeTheSamePort) {
  Metrics metrics;
  ServerOptions o = SmallOptions();
  o.host = "127.0.0.1";
  o.port = service_->server().port();
  Server second(o, &service_->pipeline(), &metrics);
  const Status st = second.Start();
  EXPECT_FALSE(st.ok());
  EXPECT_THAT(st.message(), HasSubstr("in use"));
}

// A server stopped at once after Start (a SIGTERM during start-up) stops:
// httplib's stop() alone does nothing before its listener runs.
TEST_F(ServiceTest, StopRightAfterStartReturns) {
  for (int i = 0; i < 20; ++i) {
    Metrics metrics;
    ServerOptions o = SmallOptions();
    o.host = "127.0.0.1";
    o.port = 0;
    o.probe_port = 0;
    Server s(o, &service_->pipeline(), &metrics);
    ASSERT_TRUE(s.Start().ok());
    s.Stop();
  }
}

// The probe port takes no body at all.
// Overlapping renders count once; renders on the CPU are no GPU time; only
// the last window counts, and not the time before the process started.
TEST(ServiceBusyWindowTest, UnionOfRendersOverTheWindow) {
  using std::chrono::milliseconds;
  BusyWindow w(std::chrono::seconds(30));
  const auto base = BusyWindow::Clock::now();
  w.Record(base + milliseconds(1000), base + milliseconds(2000), true);
  w.Record(base + milliseconds(1500), base + milliseconds(3000), true);  // overlaps: 2 s in all
  w.Record(base + milliseconds(4000), base + milliseconds(5000), false);
  w.Record(base + milliseconds(6000), base + milliseconds(6000), true);  // empty: ignored
  EXPECT_NEAR(w.Ratio(base + milliseconds(10000), true), 0.2, 1e-3);
  EXPECT_NEAR(w.Ratio(base + milliseconds(10000), false), 0.3, 1e-3);
  EXPECT_NEAR(w.Ratio(base + milliseconds(2000), true), 0.5, 1e-3);  // renders cut at now
  // 40 s on: the window is [10 s, 40 s]; a render from 35 s to 50 s.
  w.Record(base + milliseconds(35000), base + milliseconds(50000), true);
  EXPECT_NEAR(w.Ratio(base + milliseconds(40000), true), 5.0 / 30, 1e-3);
  EXPECT_NEAR(w.Ratio(base + milliseconds(100000), true), 0.0, 1e-9);
}

TEST(ServiceBusyWindowTest, StageSecondsOnlyGrow) {
  Metrics m;
  m.ObserveStage("decode", 0.25);
  m.ObserveStage("decode", 0.5);
  m.ObserveStage("decode", -1);  // a clock step back: not counted
  EXPECT_DOUBLE_EQ(m.stage_busy.Get("decode"), 0.75);
  EXPECT_THAT(m.Render(), HasSubstr("danqing_stage_seconds_total{stage=\"decode\"} 0.75\n"));
  EXPECT_THAT(m.Render(),
              HasSubstr("danqing_inscription_stage_seconds_count{stage=\"decode\"} 3\n"));
}

// The part after the render (the encode) runs on a finisher thread: with one
// worker, the second job renders while the first job's rest is still running;
// WaitIdle waits for the rests too.
TEST(RenderQueueStagedTest, TheRestLeavesTheRenderWorker) {
  std::mutex mu;
  std::condition_variable cv;
  bool release = false;
  std::atomic<int> rested{0};
  std::promise<void> second_rendered;
  RenderQueue q(1, 4, nullptr);
  const auto far = RenderQueue::Clock::now() + std::chrono::seconds(60);
  ASSERT_EQ(q.SubmitStaged(
                [&]() -> RenderQueue::Rest {
                  return [&] {
                    std::unique_lock<std::mutex> lock(mu);
                    cv.wait(lock, [&] { return release; });
                    ++rested;
                  };
                },
                [] {}, far),
            RenderQueue::Admit::kAccepted);
  ASSERT_EQ(q.SubmitStaged(
                [&]() -> RenderQueue::Rest {
                  second_rendered.set_value();
                  return [&] { ++rested; };
                },
                [] {}, far),
            RenderQueue::Admit::kAccepted);
  ASSERT_EQ(second_rendered.get_future().wait_for(std::chrono::seconds(20)),
            std::future_status::ready)
      << "the worker did not take the next job while the first one's rest ran";
  EXPECT_FALSE(q.WaitIdle(std::chrono::milliseconds(50)));
  EXPECT_GE(q.finishing(), 1u);
  {
    std::lock_guard<std::mutex> lock(mu);
    release = true;
  }
  cv.notify_all();
  EXPECT_TRUE(q.WaitIdle(std::chrono::seconds(20)));
  EXPECT_EQ(rested.load(), 2);
  EXPECT_EQ(q.finishing(), 0u);
}

// The host part of the next job runs while a worker renders: with one
// worker held in its render, the second job is prepared, and a third waits
// (one job prepared ahead per worker); each renders in order once released.
TEST(RenderQueuePreparedTest, TheNextJobIsPreparedWhileOneRenders) {
  std::mutex mu;
  std::condition_variable cv;
  bool release = false;
  std::vector<int> prepared, rendered;  // guarded by mu
  RenderQueue q(1, 4, nullptr);
  const auto far = RenderQueue::Clock::now() + std::chrono::seconds(60);
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(q.SubmitPrepared(
                  [&, i]() -> RenderQueue::Render {
                    {
                      std::lock_guard<std::mutex> lock(mu);
                      prepared.push_back(i);
                    }
                    cv.notify_all();
                    return [&, i]() -> RenderQueue::Rest {
                      std::unique_lock<std::mutex> lock(mu);
                      rendered.push_back(i);
                      cv.notify_all();
                      cv.wait(lock, [&] { return release; });
                      return nullptr;
                    };
                  },
                  [] {}, far),
              RenderQueue::Admit::kAccepted);
  }
  {
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(20), [&] {
      return rendered.size() == 1 && prepared.size() == 2;
    })) << "the second job was not prepared while the first rendered";
    EXPECT_EQ(rendered, std::vector<int>{0});
  }
  // The third waits for room: it is neither prepared nor rendered yet.
  EXPECT_FALSE(q.WaitIdle(std::chrono::milliseconds(100)));
  {
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_EQ(prepared, (std::vector<int>{0, 1}));
    release = true;
  }
  EXPECT_EQ(q.depth(), 2u);  // the prepared one and the waiting one
  cv.notify_all();
  EXPECT_TRUE(q.WaitIdle(std::chrono::seconds(20)));
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(prepared, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(rendered, (std::vector<int>{0, 1, 2}));
}

// A job prepared before its deadline that passes while it waits for the
// worker is expired, not rendered; `expired` runs once.
TEST(RenderQueuePreparedTest, DeadlinePassedAfterPreparingExpiresOnce) {
  std::promise<void> first_rendering, let_go;
  auto let_go_f = let_go.get_future().share();
  std::atomic<int> expired{0}, second_rendered{0}, second_prepared{0};
  RenderQueue q(1, 4, nullptr);
  const auto far = RenderQueue::Clock::now() + std::chrono::seconds(60);
  ASSERT_EQ(q.SubmitPrepared(
                [&]() -> RenderQueue::Render {
                  return [&]() -> RenderQueue::Rest {
                    first_rendering.set_value();
                    let_go_f.wait();
                    return nullptr;
                  };
                },
                [] {}, far),
            RenderQueue::Admit::kAccepted);
  first_rendering.get_future().wait();
  const auto soon = RenderQueue::Clock::now() + std::chrono::milliseconds(200);
  ASSERT_EQ(q.SubmitPrepared(
                [&]() -> RenderQueue::Render {
                  ++second_prepared;
                  return [&]() -> RenderQueue::Rest {
                    ++second_rendered;
                    return nullptr;
                  };
                },
                [&] { ++expired; }, soon),
            RenderQueue::Admit::kAccepted);
  while (second_prepared.load() == 0) std::this_thread::yield();
  std::this_thread::sleep_until(soon + std::chrono::milliseconds(50));
  let_go.set_value();
  EXPECT_TRUE(q.WaitIdle(std::chrono::seconds(20)));
  EXPECT_EQ(second_rendered.load(), 0);
  EXPECT_EQ(expired.load(), 1);
}

// Closing the queue: jobs still waiting are expired, the rests of jobs
// already rendered still run (each answers a request).
TEST(RenderQueueStagedTest, DestructorRunsTheRestsLeft) {
  std::atomic<int> rested{0}, expired{0};
  std::promise<void> first_rendered;
  {
    RenderQueue q(1, 4, nullptr);
    const auto far = RenderQueue::Clock::now() + std::chrono::seconds(60);
    for (int i = 0; i < 3; ++i) {
      ASSERT_EQ(q.SubmitStaged(
                    [&, i]() -> RenderQueue::Rest {
                      if (i == 0) first_rendered.set_value();
                      return [&] {
                        std::this_thread::sleep_for(std::chrono::milliseconds(20));
                        ++rested;
                      };
                    },
                    [&] { ++expired; }, far),
                RenderQueue::Admit::kAccepted);
    }
    first_rendered.get_future().wait();
  }
  EXPECT_GE(rested.load(), 1);
  EXPECT_EQ(rested.load() + expired.load(), 3);
}

// The photo's seed: the same bytes give the same hash; one bit changed
// anywhere (in a whole 8-byte word or in the tail) changes it, in about half
// of its 64 bits (the final mix).
TEST(PhotoHashTest, EveryBitCountsAndIsMixed) {
  std::vector<uint8_t> bytes(1003);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 37 + 11);
  const uint64_t h = PhotoHash(bytes);
  EXPECT_EQ(PhotoHash(bytes), h);
  EXPECT_NE(PhotoHash(std::span<const uint8_t>(bytes).first(1002)), h);
  int flipped_bits = 0, flips = 0;
  for (size_t at : {size_t{0}, size_t{7}, size_t{8}, size_t{500}, size_t{999}, size_t{1002}}) {
    for (int bit = 0; bit < 8; ++bit) {
      bytes[at] ^= static_cast<uint8_t>(1 << bit);
      const uint64_t other = PhotoHash(bytes);
      bytes[at] ^= static_cast<uint8_t>(1 << bit);
      EXPECT_NE(other, h) << at << ":" << bit;
      flipped_bits += __builtin_popcountll(other ^ h);
      ++flips;
    }
  }
  const double mean = static_cast<double>(flipped_bits) / flips;
  EXPECT_GT(mean, 24.0);
  EXPECT_LT(mean, 40.0);
}

// What a request decodes: twice the perceiver's analysis side on the longer
// side, the wash plane (a third of the canvas) for a photo background, never
// more than the photo; the full photo for a perceiver that wants it.
TEST(PipelineDecodeSizeTest, TheLeastEachConsumerNeeds) {
  InscribeOptions landscape;
  landscape.width = 1920;
  landscape.height = 1080;
  DecodeSize d = DecodeSizeFor(2560, 1600, 320, landscape);
  EXPECT_EQ(d.width, 640);
  EXPECT_EQ(d.height, 0);
  d = DecodeSizeFor(1600, 2560, 320, landscape);  // portrait: the height
  EXPECT_EQ(d.width, 0);
  EXPECT_EQ(d.height, 640);
  InscribeOptions photo = landscape;
  photo.background = "photo";
  d = DecodeSizeFor(2560, 1600, 320, photo);
  EXPECT_EQ(d.width, 640);
  EXPECT_EQ(d.height, 360);
  photo.width = 2048;
  photo.height = 2048;
  d = DecodeSizeFor(4000, 3000, 320, photo);
  EXPECT_EQ(d.width, 682);
  EXPECT_EQ(d.height, 682);
  d = DecodeSizeFor(451, 300, 320, landscape);  // smaller than asked: all of it
  EXPECT_EQ(d.width, 451);
  d = DecodeSizeFor(2560, 1600, 0, landscape);
  EXPECT_EQ(d.width, 2560);
  EXPECT_EQ(d.height, 1600);
}

TEST(ServiceProbeTest, ProbePortRefusesBodies) {
  auto r = CreateInscriptionRenderer({});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ServerOptions o = SmallOptions();
  o.probe_port = 0;
  Service svc(r->get(), o);
  const int port = svc.server().probe_port();
  const std::string no_length = RawExchange(port, "POST /healthz HTTP/1.1\r\nHost: x\r\n\r\n" + std::string(4096, 'x'));
  EXPECT_THAT(no_length, ::testing::StartsWith("HTTP/1.1 411")) << no_length.substr(0, 200);
  EXPECT_EQ(Responses(no_length), 1u);
  const std::string with_body =
      RawExchange(port, "GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n0123456789");
  EXPECT_THAT(with_body, ::testing::StartsWith("HTTP/1.1 400")) << with_body.substr(0, 200);
  EXPECT_THAT(with_body, HasSubstr("takes no body"));
  const std::string post_body =
      RawExchange(port, "POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n0123456789");
  EXPECT_THAT(post_body, ::testing::StartsWith("HTTP/1.1 413")) << post_body.substr(0, 200);
  httplib::Client probes("127.0.0.1", port);
  auto ok = probes.Get("/healthz");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
}

// The value of danqing_inscriptions_rejected_total{reason=...} (0 if absent).
double Rejected(const std::string& metrics, const std::string& reason) {
  const std::string key = "danqing_inscriptions_rejected_total{reason=\"" + reason + "\"} ";
  const size_t at = metrics.find(key);
  return at == std::string::npos ? 0 : std::stod(metrics.substr(at + key.size()));
}

// Each refusal is counted once, under its reason; refusals on other routes
// are not inscriptions refused.
TEST_F(ServiceTest, RefusalsAreCountedUnderTheirReason) {
  const std::string jpeg = Photo("chelsea.jpg");
  auto count = [&](const char* reason) { return Rejected(service_->metrics().Render(), reason); };
  double before = count("bad_image");
  ExpectError(PostRaw(jpeg.substr(0, jpeg.size() / 3)), 400, "");  // header fine, pixels cut
  EXPECT_EQ(count("bad_image"), before + 1);
  ExpectError(PostRaw(PngHeaderOnly(640, 480)), 400, "");  // refused by the worker's decode
  EXPECT_EQ(count("bad_image"), before + 2);
  before = count("bad_options");
  ExpectError(PostRaw(jpeg, "&width=abc"), 400, "width");
  EXPECT_EQ(count("bad_options"), before + 1);
  before = count("too_large");
  const double bad_before = count("bad_image");
  ExpectError(PostRaw(jpeg + std::string((1 << 20) + 1000, '\0')), 413, "");  // over 1 MiB, raw
  EXPECT_EQ(count("too_large"), before + 1);
  EXPECT_EQ(count("bad_image"), bad_before);
  before = count("encoding");
  const std::string other =
      RawExchange(service_->server().port(), "POST /nowhere HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_THAT(other, ::testing::StartsWith("HTTP/1.1 411"));
  EXPECT_EQ(count("encoding"), before) << "a refusal on another route counted as an inscription's";
}

// A request httplib could not read as framed is answered 400 and its
// connection closed: what follows is not taken for requests of their own (a
// proxy reusing the connection would hand their answers to other clients).
TEST_F(ServiceTest, AMalformedRequestClosesItsConnection) {
  const int port = service_->server().port();
  const std::string bad_line =
      RawExchange(port,
                  "FOO / HTTP/1.1\r\nContent-Length: 45\r\n\r\nGET /metrics HTTP/1.1\r\nHost: "
                  "x\r\nConnection: close\r\n\r\n");
  EXPECT_THAT(bad_line, ::testing::StartsWith("HTTP/1.1 400")) << bad_line.substr(0, 300);
  EXPECT_EQ(Responses(bad_line), 1u) << bad_line;
  const std::string long_uri =
      RawExchange(port, "GET /" + std::string(9000, 'a') +
                            " HTTP/1.1\r\nHost: x\r\n\r\nGET /readyz HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_THAT(long_uri, ::testing::StartsWith("HTTP/1.1 414")) << long_uri.substr(0, 300);
  EXPECT_EQ(Responses(long_uri), 1u) << long_uri;
  // A well-formed request keeps its connection: two answers on one.
  const std::string two = RawExchange(port,
                                      "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /healthz "
                                      "HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(Responses(two), 2u) << two;
}

// httplib 0.11 answers a Range of any number of parts, building each in
// memory: 20,000 ranges of one image would take 20 GB. Range is ignored.
TEST_F(ServiceTest, RangesAreIgnored) {
  auto c = service_->Client();
  auto whole = c.Get("/");
  ASSERT_TRUE(whole);
  ASSERT_EQ(whole->status, 200);
  std::string ranges = "bytes=0-";
  for (int i = 0; i < 200; ++i) ranges += ",0-";
  for (const std::string& range : {ranges, std::string("bytes=0-9")}) {
    auto got = c.Get("/", httplib::Headers{{"Range", range}});
    ASSERT_TRUE(got);
    EXPECT_EQ(got->status, 200) << range.substr(0, 20);
    EXPECT_EQ(got->body.size(), whole->body.size()) << range.substr(0, 20);
  }
}

// Headers sent a line at a time, each within the read timeout, must still
// all arrive within the header deadline, or the connection is closed.
TEST(ServiceSlowHeadersTest, HeadersTrickledPastTheDeadlineAreCutOff) {
  auto r = CreateInscriptionRenderer({});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ServerOptions o = SmallOptions();
  o.read_timeout = std::chrono::seconds(2);
  o.header_deadline = std::chrono::milliseconds(1000);
  Service svc(r->get(), o);
  const int fd = ConnectLoopback(svc.server().port());
  ASSERT_GE(fd, 0);
  const std::string first = "GET /healthz HTTP/1.1\r\n";
  ASSERT_EQ(::send(fd, first.data(), first.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(first.size()));
  // A header line every 300 ms (inside the 2 s read timeout) for up to 6 s.
  const auto start = std::chrono::steady_clock::now();
  bool closed = false;
  for (int i = 0; i < 20 && !closed; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    const std::string line = "X-Slow-" + std::to_string(i) + ": 1\r\n";
    closed = ::send(fd, line.data(), line.size(), MSG_NOSIGNAL) < 0;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 0) > 0) {
      char buf[256];
      closed = closed || ::recv(fd, buf, sizeof buf, MSG_DONTWAIT) >= 0;  // an answer or the close
    }
  }
  const auto took = std::chrono::steady_clock::now() - start;
  ::close(fd);
  EXPECT_TRUE(closed) << "the server kept reading headers for 6 s";
  EXPECT_LT(took, std::chrono::seconds(6));
  // Others are served.
  httplib::Client c("127.0.0.1", svc.server().port());
  auto ok = c.Get("/healthz");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
}

// --max-canvas allows sides up to 8192, the renderer at most 7680x4320
// pixels: a larger area is refused by the checks that run before the upload
// is queued, decoded and perceived, not by the renderer after all that.
TEST_F(ServiceTest, CanvasAreaOverTheRenderersCapIsRefusedBeforeAnyWork) {
  PipelineLimits limits;
  limits.max_canvas_side = 8192;
  Service svc(renderer_, SmallOptions(), limits);
  InscribeOptions o;
  o.width = 8192;
  o.height = 8192;
  const Status st = svc.pipeline().Validate(o);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("7680x4320"));
  o.width = 7680;
  o.height = 4320;
  EXPECT_TRUE(svc.pipeline().Validate(o).ok());
  o.width = 4320;
  o.height = 7680;
  EXPECT_TRUE(svc.pipeline().Validate(o).ok());
}

// A request httplib refuses before routing (a bad request line) is counted
// but not timed: it has no start time, and timing it from an earlier request
// on that thread (or from boot) put hours into the latency histogram.
TEST(ServiceMetricsTest, RequestsRefusedBeforeRoutingAreNotTimed) {
  auto r = CreateInscriptionRenderer({});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  Service svc(r->get(), SmallOptions());
  const std::string answer = RawExchange(svc.server().port(), "GARBAGE\r\n\r\n");
  EXPECT_THAT(answer, ::testing::StartsWith("HTTP/1.1 400"));
  std::string m;
  for (int i = 0; i < 100 && m.find("route=\"other\",code=\"400\"") == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // logged just after the answer
    m = svc.metrics().Render();
  }
  EXPECT_THAT(m, HasSubstr("route=\"other\",code=\"400\"")) << "counted";
  EXPECT_THAT(m, Not(HasSubstr("danqing_http_request_duration_seconds_count{route=\"other\"}"))) << m;
}

// Uploads that trickle in hold every thread of the main port (four here); the
// probe port, on threads of its own, still answers the kubelet's probes and
// the metrics scrape, so the pod is not restarted under such load.
TEST(ServiceProbeTest, ProbesAreAnsweredWhileSlowUploadsHoldTheMainPort) {
  auto r = CreateInscriptionRenderer({});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ServerOptions o = SmallOptions();
  o.http_threads = 4;
  o.read_timeout = std::chrono::seconds(20);
  o.probe_port = 0;
  Service svc(r->get(), o);
  ASSERT_GT(svc.server().probe_port(), 0);
  std::vector<int> slow;
  for (int i = 0; i < 4; ++i) {
    const int fd = ConnectLoopback(svc.server().port());
    ASSERT_GE(fd, 0);
    const std::string head = "POST /v1/inscriptions HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\nab";
    ASSERT_EQ(::send(fd, head.data(), head.size(), MSG_NOSIGNAL), static_cast<ssize_t>(head.size()));
    slow.push_back(fd);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the four reach the pool
  httplib::Client main_port("127.0.0.1", svc.server().port());
  main_port.set_read_timeout(2, 0);
  main_port.set_connection_timeout(2, 0);
  EXPECT_FALSE(main_port.Get("/healthz")) << "the main port's threads are all held (else this test shows nothing)";
  httplib::Client probes("127.0.0.1", svc.server().probe_port());
  probes.set_read_timeout(2, 0);
  probes.set_connection_timeout(2, 0);
  for (const char* path : {"/healthz", "/readyz", "/metrics"}) {
    auto res = probes.Get(path);
    ASSERT_TRUE(res) << path;
    EXPECT_EQ(res->status, 200) << path;
  }
  for (int fd : slow) ::close(fd);
}

// Forty connections that send nothing, and ten with half a head, on the
// probe port (eight threads, 1 s keep-alive): each held a thread until its
// timeout, and the kubelet's probe (1 s timeout) waited behind them. Now they
// wait holding no thread (issue 31, item 13).
TEST(ServiceProbeTest, ProbesAreAnsweredWhileIdleConnectionsWait) {
  auto r = CreateInscriptionRenderer({});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ServerOptions o = SmallOptions();
  o.probe_port = 0;
  Service svc(r->get(), o);
  std::vector<int> idle;
  for (int i = 0; i < 50; ++i) {
    const int fd = ConnectLoopback(svc.server().probe_port());
    ASSERT_GE(fd, 0);
    if (i >= 40) {
      const std::string half = "GET /healthz HTTP/1.1\r\nHo";
      ASSERT_EQ(::send(fd, half.data(), half.size(), MSG_NOSIGNAL),
                static_cast<ssize_t>(half.size()));
    }
    idle.push_back(fd);
  }
  httplib::Client probes("127.0.0.1", svc.server().probe_port());
  probes.set_read_timeout(1, 0);
  probes.set_connection_timeout(1, 0);
  for (const char* path : {"/healthz", "/readyz", "/healthz"}) {
    auto res = probes.Get(path);
    ASSERT_TRUE(res) << path << " not answered within 1 s";
    EXPECT_EQ(res->status, 200) << path;
  }
  for (int fd : idle) ::close(fd);
}

// An upload trickled a byte at a time, each byte well inside the read
// timeout, is cut off once it falls behind the body's pace (issue 31, item 12).
TEST(ServiceSlowBodyTest, ABodyThatFallsBehindItsPaceIsCutOff) {
  auto r = CreateInscriptionRenderer({});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ServerOptions o = SmallOptions();
  o.read_timeout = std::chrono::seconds(5);
  o.body_deadline = std::chrono::milliseconds(300);
  o.body_min_rate = 1000;
  Service svc(r->get(), o);
  const int fd = ConnectLoopback(svc.server().port());
  ASSERT_GE(fd, 0);
  const std::string head =
      "POST /v1/inscriptions HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n";
  ASSERT_EQ(::send(fd, head.data(), head.size(), MSG_NOSIGNAL), static_cast<ssize_t>(head.size()));
  bool closed = false;
  int sent = 0;
  for (; sent < 30 && !closed; ++sent) {  // a byte every 100 ms, 3 s at most
    closed = ::send(fd, "x", 1, MSG_NOSIGNAL) != 1;
    pollfd p{fd, POLLIN, 0};
    if (!closed && ::poll(&p, 1, 100) > 0) {
      char buf[512];
      closed = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT) >= 0;  // an answer or the close
    }
  }
  ::close(fd);
  EXPECT_TRUE(closed) << "still reading the upload after " << sent << " bytes";
}

// Request desync (issue 31, item 11): a head httplib would frame otherwise
// than a proxy is answered 400 and closed; what followed is not run as a
// request of its own.
TEST_F(ServiceTest, AmbiguousFramingIsRefusedAndClosed) {
  const int port = service_->server().port();
  const std::string next = "GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n";
  const std::string two_lengths = RawExchange(
      port, "POST /v1/inscriptions HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: " +
                std::to_string(3 + next.size()) + "\r\n\r\nabc" + next);
  EXPECT_THAT(two_lengths, ::testing::StartsWith("HTTP/1.1 400")) << two_lengths;
  EXPECT_EQ(Responses(two_lengths), 1u) << two_lengths;
  EXPECT_THAT(two_lengths, HasSubstr("Content-Length"));
  const std::string spaced = RawExchange(
      port, "GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length : " + std::to_string(next.size()) +
                "\r\n\r\n" + next);
  EXPECT_THAT(spaced, ::testing::StartsWith("HTTP/1.1 400")) << spaced;
  EXPECT_EQ(Responses(spaced), 1u) << spaced;
  const std::string no_host = RawExchange(port, "GET /healthz HTTP/1.1\r\n\r\n");
  EXPECT_THAT(no_host, ::testing::StartsWith("HTTP/1.1 400")) << no_host;
  EXPECT_THAT(no_host, HasSubstr("Host"));
}

// Known paths with another method: 405 with Allow, JSON; absolute-form
// targets are routed by their path.
TEST_F(ServiceTest, WrongMethodIs405AndAbsoluteFormIsRouted) {
  const int port = service_->server().port();
  struct Case {
    std::string request;
    std::string allow;
  };
  const std::vector<Case> cases = {
      {"GET /v1/inscriptions HTTP/1.1\r\n", "POST"},
      {"POST /healthz HTTP/1.1\r\nContent-Length: 0\r\n", "GET, HEAD"},
      {"PUT /v1/inscriptions/0123456789abcdef0123456789abcdef/image HTTP/1.1\r\nContent-Length: 0\r\n",
       "GET, HEAD"},
      {"OPTIONS /metrics HTTP/1.1\r\n", "GET, HEAD"},
  };
  for (const Case& c : cases) {
    const std::string answer =
        RawExchange(port, c.request + "Host: x\r\nConnection: close\r\n\r\n");
    EXPECT_THAT(answer, ::testing::StartsWith("HTTP/1.1 405")) << c.request << answer;
    EXPECT_THAT(answer, HasSubstr("Allow: " + c.allow + "\r\n")) << c.request;
    EXPECT_THAT(answer, HasSubstr("\"status\":405")) << c.request;
  }
  const std::string absolute = RawExchange(port,
                                           "GET http://danqing.example/readyz HTTP/1.1\r\nHost: "
                                           "danqing.example\r\nConnection: close\r\n\r\n");
  EXPECT_THAT(absolute, ::testing::StartsWith("HTTP/1.1 200")) << absolute;
  EXPECT_THAT(absolute, HasSubstr("ready"));
}

TEST_F(ServiceTest, SlowClientIsCutOffAndOthersAreServed) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(service_->server().port()));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  const std::string partial =
      "POST /v1/inscriptions HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\nabc";
  ASSERT_EQ(::send(fd, partial.data(), partial.size(), 0), static_cast<ssize_t>(partial.size()));
  // Meanwhile another visitor is served.
  EXPECT_EQ(PostRaw(Photo("chelsea.jpg"))->status, 200);
  // The stalled upload is closed by the server (read timeout), not left open.
  timeval tv{30, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  char buf[512];
  ssize_t n = 0;
  std::string answer;
  while ((n = ::recv(fd, buf, sizeof buf, 0)) > 0) answer.append(buf, static_cast<size_t>(n));
  EXPECT_EQ(n, 0) << "the server should close the stalled connection";
  ::close(fd);
}

TEST_F(ServiceTest, PageHealthAndMetrics) {
  auto c = service_->Client();
  auto page = c.Get("/");
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 200);
  EXPECT_THAT(page->body, HasSubstr("id=\"photo\""));
  EXPECT_EQ(c.Get("/healthz")->status, 200);
  EXPECT_EQ(c.Get("/readyz")->status, 200);
  ASSERT_EQ(PostRaw(Photo("chelsea.jpg"))->status, 200);
  // The request's figures are recorded once its response is written, which
  // may be just after the client has read it: wait for the last of them
  // (the request counter; the durations come before it).
  auto m = c.Get("/metrics");
  for (int i = 0; i < 100 && m &&
                  m->body.find("requests_total{route=\"/v1/inscriptions\",code=\"200\"}") == std::string::npos;
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    m = c.Get("/metrics");
  }
  ASSERT_TRUE(m);
  EXPECT_EQ(m->status, 200);
  EXPECT_THAT(m->body, HasSubstr("danqing_render_backend_info{backend=\"cpu\"} 1"));
  EXPECT_THAT(
      m->body,
      HasSubstr(
          "danqing_http_request_duration_seconds_bucket{route=\"/v1/inscriptions\",le=\"+Inf\"}"));
  EXPECT_THAT(m->body,
              HasSubstr("danqing_http_requests_total{route=\"/v1/inscriptions\",code=\"200\"}"));
  EXPECT_THAT(m->body, HasSubstr("danqing_render_queue_depth 0"));
  EXPECT_THAT(m->body,
              HasSubstr("danqing_inscription_request_duration_seconds_count{outcome=\"ok\"}"));
  EXPECT_THAT(m->body, HasSubstr("# TYPE danqing_renders_in_flight gauge"));
  EXPECT_THAT(m->body, HasSubstr("danqing_inscription_stage_seconds_count{stage=\"render\"}"));
  // Busy seconds per stage, and the busy shares: a CPU render is no GPU time.
  for (const char* stage : {"queue", "decode", "perceive", "verse", "render", "encode"}) {
    EXPECT_THAT(m->body,
                HasSubstr("danqing_stage_seconds_total{stage=\"" + std::string(stage) + "\"} "));
  }
  EXPECT_THAT(m->body, HasSubstr("# TYPE danqing_stage_seconds_total counter"));
  EXPECT_THAT(m->body, HasSubstr("\ndanqing_gpu_busy_ratio 0\n"));
  const size_t at = m->body.find("\ndanqing_render_busy_ratio ");
  ASSERT_NE(at, std::string::npos);
  const double busy = std::stod(m->body.substr(at + 27));
  EXPECT_GT(busy, 0.0);
  EXPECT_LE(busy, 1.0);
  EXPECT_THAT(m->body, HasSubstr("danqing_renders_total{backend=\"cpu\",gpu_fallback=\"false\"} "));
}

// A lost CUDA context fails liveness (the kubelet restarts the pod, the only
// way back to the GPU) but not readiness: renders go on, on the CPU.
TEST(ServiceLoadTest, LostGpuFailsLivenessAndSaysWhy) {
  GatedRenderer gate;
  gate.Release();
  Service svc(&gate, SmallOptions());
  auto c = svc.Client();
  EXPECT_EQ(c.Get("/healthz")->status, 200);
  EXPECT_THAT(c.Get("/metrics")->body, HasSubstr("danqing_render_gpu_lost 0"));
  gate.Lose("StampKernel: cudaErrorIllegalAddress");
  auto h = c.Get("/healthz");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 503);
  EXPECT_THAT(h->body, HasSubstr("cudaErrorIllegalAddress"));
  EXPECT_EQ(c.Get("/readyz")->status, 200);
  EXPECT_THAT(c.Get("/metrics")->body, HasSubstr("danqing_render_gpu_lost 1"));
  auto res = c.Post("/v1/inscriptions?width=256&height=256", Photo("chelsea.jpg"), "image/jpeg");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
}

// The service's backend setting (danqing serve --backend) reaches the renderer.
TEST(ServiceRendererTest, BackendSetting) {
  RendererSettings settings;
  settings.backend = "cpu";
  auto cpu = CreateInscriptionRenderer(settings);
  ASSERT_TRUE(cpu.ok()) << cpu.status().ToString();
  EXPECT_EQ((*cpu)->Backend(), "cpu");
  settings.backend = "tpu";
  auto bad = CreateInscriptionRenderer(settings);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("tpu"), std::string::npos) << bad.status().message();
}

// A render the GPU could not finish: the inscription still succeeds, and both
// its JSON and the metrics say the CPU drew it instead.
TEST(ServiceLoadTest, GpuFallbackIsReportedAndCounted) {
  GatedRenderer gate;
  gate.Report({"cpu", "UNAVAILABLE: cudaMemcpyAsync: cudaErrorDevicesUnavailable"});
  gate.Release();
  Service svc(&gate, SmallOptions());
  auto c = svc.Client();
  auto res = c.Post("/v1/inscriptions?width=256&height=256&response=json", Photo("chelsea.jpg"), "image/jpeg");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  const json j = json::parse(res->body);
  EXPECT_EQ(j["backend"], "cpu");
  EXPECT_EQ(j["gpu_fallback"], true);
  EXPECT_EQ(svc.metrics().renders.Get("backend=\"cpu\",gpu_fallback=\"true\""), 1u);
  EXPECT_EQ(svc.metrics().renders.Get("backend=\"cpu\",gpu_fallback=\"false\""), 0u);
  gate.Report({"cuda", ""});
  res = c.Post("/v1/inscriptions?width=256&height=256&response=json", Photo("chelsea.jpg"), "image/jpeg");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200);
  EXPECT_EQ(json::parse(res->body)["backend"], "cuda");
  EXPECT_EQ(json::parse(res->body)["gpu_fallback"], false);
  EXPECT_EQ(svc.metrics().renders.Get("backend=\"cuda\",gpu_fallback=\"false\""), 1u);
  EXPECT_THAT(svc.metrics().Render(),
              HasSubstr("danqing_renders_total{backend=\"cpu\",gpu_fallback=\"true\"} 1"));
}

// A perceiver that counts its perceptions (the classical one does the work).
class CountingPerceiver final : public perceive::Perceiver {
 public:
  CountingPerceiver() {
    auto p = perceive::CreateCvPerceiver();
    EXPECT_TRUE(p.ok()) << p.status().ToString();
    inner_ = std::move(p).value();
  }
  Result<perceive::Perception> Perceive(const perceive::ImageView& image) override {
    auto r = inner_->Perceive(image);
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++done_;
    }
    cv_.notify_all();
    return r;
  }
  std::string Name() const override { return inner_->Name(); }
  int AnalysisSide() const override { return inner_->AnalysisSide(); }
  bool WaitDone(int n, std::chrono::seconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return done_ >= n; });
  }

 private:
  std::unique_ptr<perceive::Perceiver> inner_;
  std::mutex mu_;
  std::condition_variable cv_;
  int done_ = 0;  // guarded by mu_
};

// Issue 30, overlap: with one worker held in the first request's render, the
// second request is decoded and perceived meanwhile (its host stages do not
// wait for the render), and both are answered once the render goes on.
TEST(ServiceLoadTest, NextRequestIsPerceivedWhileOneRenders) {
  GatedRenderer gate;
  CountingPerceiver perceiver;
  ServerOptions o = SmallOptions();
  o.workers = 1;
  o.queue_capacity = 2;
  Service svc(&gate, o, {}, &perceiver);
  const std::string jpeg = Photo("chelsea.jpg");
  auto post = [&] {
    auto c = svc.Client();
    return c.Post("/v1/inscriptions?width=256&height=256&response=json", jpeg, "image/jpeg");
  };
  auto first = std::async(std::launch::async, post);
  gate.WaitStarted(1);  // the first render holds the only worker
  auto second = std::async(std::launch::async, post);
  EXPECT_TRUE(perceiver.WaitDone(2, std::chrono::seconds(60)))
      << "the second request was not perceived while the first rendered";
  gate.Release();
  auto a = first.get(), b = second.get();
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->status, 200) << a->body;
  EXPECT_EQ(b->status, 200) << b->body;
  // The second one's wait for the worker is its queue time.
  EXPECT_GT(json::parse(b->body)["timings_ms"]["queue"].get<double>(), 0.0);
  EXPECT_THAT(svc.metrics().Render(),
              HasSubstr("danqing_inscription_stage_seconds_count{stage=\"perceive\"} 2\n"));
}

// Overload, deadlines and draining, with a renderer the test holds.
TEST(ServiceLoadTest, FullQueueAnswers429AtOnce) {
  GatedRenderer gate;
  ServerOptions o = SmallOptions();
  o.workers = 1;
  o.queue_capacity = 1;
  Service svc(&gate, o);
  const std::string jpeg = Photo("chelsea.jpg");
  auto post = [&] {
    auto c = svc.Client();
    return c.Post("/v1/inscriptions?width=256&height=256", jpeg, "image/jpeg");
  };
  auto first = std::async(std::launch::async, post);
  gate.WaitStarted(1);  // the worker is busy
  auto second = std::async(std::launch::async, post);
  while (svc.metrics().queue_depth.load() < 1) std::this_thread::yield();  // the queue is full
  auto third = post();
  ASSERT_TRUE(third);
  EXPECT_EQ(third->status, 429);
  EXPECT_FALSE(third->get_header_value("Retry-After").empty());
  EXPECT_EQ(svc.metrics().rejected.Get("reason=\"queue_full\""), 1u);
  gate.Release();
  EXPECT_EQ(first.get()->status, 200);
  EXPECT_EQ(second.get()->status, 200);
}

TEST(ServiceLoadTest, DeadlinePassedIs503) {
  GatedRenderer gate;
  ServerOptions o = SmallOptions();
  o.workers = 1;
  o.deadline = std::chrono::milliseconds(300);
  Service svc(&gate, o);
  auto c = svc.Client();
  auto res = c.Post("/v1/inscriptions?width=256&height=256", Photo("chelsea.jpg"), "image/jpeg");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 503);
  EXPECT_THAT(res->body, HasSubstr("deadline"));
  EXPECT_FALSE(res->get_header_value("Retry-After").empty());
  gate.Release();
}

TEST(ServiceLoadTest, DrainFinishesAcceptedWorkAndRefusesNew) {
  GatedRenderer gate;
  Service svc(&gate, SmallOptions());
  const std::string jpeg = Photo("chelsea.jpg");
  auto in_flight = std::async(std::launch::async, [&] {
    auto c = svc.Client();
    return c.Post("/v1/inscriptions?width=256&height=256", jpeg, "image/jpeg");
  });
  gate.WaitStarted(1);
  auto drained =
      std::async(std::launch::async, [&] { return svc.server().Drain(std::chrono::seconds(60)); });
  while (svc.metrics().draining.load() == 0) std::this_thread::yield();
  auto c = svc.Client();
  EXPECT_EQ(c.Get("/readyz")->status, 503);
  auto refused = c.Post("/v1/inscriptions", jpeg, "image/jpeg");
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 503);
  EXPECT_FALSE(refused->get_header_value("Retry-After").empty());
  gate.Release();
  EXPECT_EQ(in_flight.get()->status, 200);
  EXPECT_TRUE(drained.get());
  EXPECT_EQ(svc.server().cut_off(), 0u);
}

// The drain timeout bounds the drain: when it passes, every accepted
// inscription still unanswered is answered 503 at once (the one drawing and
// the one waiting for a worker), and counted; before, their handlers waited
// on, for the whole request deadline, and Stop() with them.
TEST(ServiceLoadTest, DrainTimeoutCutsOffWhatIsLeftAndSaysSo) {
  GatedRenderer gate;
  ServerOptions o = SmallOptions();
  o.workers = 1;
  o.deadline = std::chrono::seconds(60);
  Service svc(&gate, o);
  const std::string jpeg = Photo("chelsea.jpg");
  const auto post = [&] {
    auto c = svc.Client();
    return c.Post("/v1/inscriptions?width=256&height=256", jpeg, "image/jpeg");
  };
  auto drawing = std::async(std::launch::async, post);
  gate.WaitStarted(1);
  auto waiting = std::async(std::launch::async, post);
  while (svc.metrics().queue_depth.load() < 1) std::this_thread::yield();
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(svc.server().Drain(std::chrono::milliseconds(200)));
  for (auto* f : {&drawing, &waiting}) {
    ASSERT_EQ(f->wait_for(std::chrono::seconds(10)), std::future_status::ready);
    auto res = f->get();
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 503);
    EXPECT_THAT(res->body, HasSubstr("shut down before this inscription was finished"));
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  EXPECT_EQ(svc.server().cut_off(), 2u);
  EXPECT_EQ(svc.metrics().rejected.Get("reason=\"cut_off\""), 2u);
  gate.Release();  // the render still drawing ends; its answer is not sent twice
}

}  // namespace
}  // namespace danqing::service
