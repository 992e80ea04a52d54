// The writing's routes (issue 28): the write-time plane and background the
// page animates, and the writing as a video, made on request on a render
// worker (counted in the queue's capacity, at most half the workers at once
// so that stills keep flowing), cached with the inscription.
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "common/read_file.h"
#include "http/bounded_server.h"
#include "image/image.h"
#include "image/png16.h"
#include "service/server.h"
#include "video/writing_video.h"

namespace danqing::service {

const video::NvencSupport& Server::Nvenc() {
  std::call_once(nvenc_once_, [this] {
    if (pipeline_->renderer().Backend() != "cuda") {
      nvenc_ = {false, "no CUDA render backend"};
    } else {
      const InscriptionRenderer::Gpu gpu = pipeline_->renderer().RenderGpu();
      nvenc_ = video::GpuNvenc(gpu.name, gpu.major, gpu.minor);
    }
    spdlog::info("video: {}", nvenc_.reason);
  });
  return nvenc_;
}
namespace {

using Clock = std::chrono::steady_clock;

void Fail(httplib::Response& res, int code, const std::string& message) {
  res.status = code;
  res.set_content(nlohmann::json{{"error", message}, {"status", code}}.dump(
                      -1, ' ', false, nlohmann::json::error_handler_t::replace),
                  "application/json");
}

// ?name=V as an int / a number; `def` when absent; nullopt when malformed.
std::optional<double> Number(const httplib::Request& req, const char* name, double def) {
  if (!req.has_param(name)) return def;
  const std::string v = req.get_param_value(name);
  if (v.empty() || v.size() > 16) return std::nullopt;
  char* end = nullptr;
  const double d = std::strtod(v.c_str(), &end);
  if (end != v.c_str() + v.size() || !std::isfinite(d)) return std::nullopt;
  return d;
}

// The MP4 of one inscription's writing, or the error to answer.
Result<std::string> MakeVideo(const std::string& image, const std::string& background_jpeg,
                              const std::string& plane_png, uint32_t end_ms,
                              const video::ClipOptions& clip, const std::atomic<bool>* cancel,
                              video::EncodeResult* info) {
  auto bytes = [](const std::string& s) {
    return std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  };
  auto fin = image::Decode(bytes(image));
  if (!fin.ok())
    return Internal("video: the stored image does not decode: " + fin.status().message());
  auto bg = image::Decode(bytes(background_jpeg));
  if (!bg.ok())
    return Internal("video: the stored background does not decode: " + bg.status().message());
  auto plane = image::DecodePngGrey16(bytes(plane_png));
  if (!plane.ok())
    return Internal("video: the stored write-time plane does not decode: " +
                    plane.status().message());
  const video::WritingFrames frames{&*fin,        &*bg,          plane->v.data(),
                                    plane->width, plane->height, end_ms};
  static std::atomic<uint64_t> counter{0};
  const std::string path =
      (std::filesystem::temp_directory_path() /
       ("danqing-video-" + std::to_string(::getpid()) + "-" + std::to_string(++counter) + ".mp4"))
          .string();
  auto r = video::EncodeWritingMp4(frames, clip, path, cancel, info);
  if (!r.ok()) return r.status();
  *info = *r;
  auto out = ReadRegularFile(path, size_t{1} << 30);
  std::error_code ec;
  std::filesystem::remove(path, ec);
  if (!out.ok() || out->size() != r->bytes)
    return Internal("video: the encoded file could not be read back whole");
  return out;
}

}  // namespace

void Server::WritingRoutes(http::BoundedServer& s) {
  s.Get(R"(/v1/inscriptions/([0-9a-f]{32})/writing)",
        [this](const httplib::Request& req, httplib::Response& res) {
          auto stored = FindOrFetch(req.matches[1]);
          if (!stored) return Fail(res, 404, "no recent inscription with this id");
          if (stored->writing_png.empty()) {
            return Fail(res, 409,
                        "this inscription was made without its writing; POST it with writing=true");
          }
          res.set_header("Cache-Control", "private, max-age=3600");
          res.set_content(stored->writing_png, "image/png");
        });
  s.Get(R"(/v1/inscriptions/([0-9a-f]{32})/background)",
        [this](const httplib::Request& req, httplib::Response& res) {
          auto stored = FindOrFetch(req.matches[1]);
          if (!stored) return Fail(res, 404, "no recent inscription with this id");
          if (stored->background_jpeg.empty()) {
            return Fail(res, 409,
                        "this inscription was made without its writing; POST it with writing=true");
          }
          res.set_header("Cache-Control", "private, max-age=3600");
          res.set_content(stored->background_jpeg, "image/jpeg");
        });
  s.Get(R"(/v1/inscriptions/([0-9a-f]{32})/video)", [this](const httplib::Request& req,
                                                           httplib::Response& res) {
    const std::string id = req.matches[1];
    auto stored = FindOrFetch(id);
    if (!stored) return Fail(res, 404, "no recent inscription with this id");
    if (stored->writing_png.empty() || stored->videos == nullptr) {
      return Fail(res, 409,
                  "this inscription was made without its writing; POST it with writing=true");
    }
    video::ClipOptions clip;
    const auto fps = Number(req, "fps", clip.fps);
    const auto seconds = Number(req, "seconds", clip.seconds);
    if (!fps || *fps != std::floor(*fps) || std::fabs(*fps) > 1e6) {
      metrics_->videos.Add("encoder=\"none\",result=\"bad_request\"");
      return Fail(res, 400, "fps must be a whole number");
    }
    if (!seconds) {
      metrics_->videos.Add("encoder=\"none\",result=\"bad_request\"");
      return Fail(res, 400, "seconds must be a number");
    }
    clip.fps = static_cast<int>(*fps);
    clip.seconds = *seconds;
    // NVENC only after a CUDA render and only on a GPU that has one
    // (video::GpuNvenc: not on the A100 or the Hopper H100/H200).
    clip.prefer_nvenc = stored->backend == "cuda" && Nvenc().present;
    if (stored->backend == "cuda" && !clip.prefer_nvenc) {
      metrics_->video_nvenc_fallbacks.Add("reason=\"no_nvenc\"");
    }
    clip.fail_after_frames = options_.video_fail_after_frames;
    // With the CUDA backend in this process, the frames are composed on the
    // GPU (video/compose.h), on the CPU after a CUDA error (counted below).
    if (pipeline_->renderer().Backend() == "cuda") clip.device_composer = video::MakeCudaComposer;
    if (Status st = video::CheckClipOptions(clip); !st.ok()) {
      metrics_->videos.Add("encoder=\"none\",result=\"bad_request\"");
      return Fail(res, 400, st.message());
    }
    const std::string key = std::to_string(clip.fps) + "/" + std::to_string(clip.seconds);
    std::shared_ptr<const std::string> mp4;
    {
      std::lock_guard<std::mutex> lock(stored->videos->mu);
      auto it = stored->videos->mp4.find(key);
      if (it != stored->videos->mp4.end()) mp4 = it->second;
    }
    if (!mp4) {
      if (draining_)
        return Fail(res, 503, "the service is shutting down; retry on another replica");
      // Videos take at most half the workers, so stills keep flowing.
      const size_t limit = std::max<size_t>(1, queue_->workers() / 2);
      if (videos_in_flight_.fetch_add(1) >= limit) {
        videos_in_flight_.fetch_sub(1);
        metrics_->videos.Add("encoder=\"none\",result=\"busy\"");
        res.set_header("Retry-After", std::to_string(queue_->RetryAfterSeconds()));
        return Fail(res, 429, "too many videos in progress; retry later");
      }
      struct Release {
        std::atomic<size_t>* n;
        ~Release() { n->fetch_sub(1); }
      } release{&videos_in_flight_};
      // The job's state outlives this handler when the deadline passes: the
      // worker sees `cancel` and stops at the next frame.
      struct Job {
        std::mutex mu;
        std::condition_variable cv;
        bool done = false;
        Result<std::string> result = Status(StatusCode::kInternal, "not run");
        video::EncodeResult info;
        std::atomic<bool> cancel{false};
      };
      auto job = std::make_shared<Job>();
      const auto deadline = Clock::now() + 3 * options_.deadline;
      auto finish = [job](Result<std::string> r) {
        {
          std::lock_guard<std::mutex> lock(job->mu);
          job->result = std::move(r);
          job->done = true;
        }
        job->cv.notify_all();
      };
      const auto admit = queue_->Submit(
          [stored, clip, job, finish] {
            video::EncodeResult info;
            auto r = MakeVideo(stored->image, stored->background_jpeg, stored->writing_png,
                               stored->writing_end_ms, clip, &job->cancel, &info);
            job->info = info;
            finish(std::move(r));
          },
          [finish] {
            finish(Status(StatusCode::kDeadlineExceeded, "the deadline passed while waiting"));
          },
          deadline);
      if (admit != RenderQueue::Admit::kAccepted) {
        const bool full = admit == RenderQueue::Admit::kFull;
        metrics_->videos.Add(full ? "encoder=\"none\",result=\"queue_full\""
                                  : "encoder=\"none\",result=\"draining\"");
        res.set_header("Retry-After", std::to_string(full ? queue_->RetryAfterSeconds() : 5));
        return Fail(res, full ? 429 : 503,
                    full ? "too many inscriptions in progress; retry later"
                         : "the service is shutting down");
      }
      std::unique_lock<std::mutex> lock(job->mu);
      if (!job->cv.wait_until(lock, deadline, [&] { return job->done; })) {
        job->cancel = true;  // the worker stops at its next frame and leaves no file
        metrics_->videos.Add("encoder=\"none\",result=\"deadline\"");
        return Fail(res, 503, "the video did not finish within its deadline");
      }
      const video::EncodeResult& info = job->info;
      if (!info.fallback.empty()) metrics_->video_nvenc_fallbacks.Add("reason=\"open_failed\"");
      if (clip.device_composer != nullptr && !info.compose_fallback.empty())
        metrics_->video_compose_fallbacks.Add("composer=\"cuda\"");
      if (!job->result.ok()) {
        const Status& st = job->result.status();
        const std::string enc = info.encoder.empty() ? "none" : info.encoder;
        metrics_->videos.Add("encoder=\"" + enc + "\",result=\"error\"");
        spdlog::error("video for {}: {}", id, st.ToString());
        return Fail(res, st.code() == StatusCode::kDeadlineExceeded ? 503 : 500,
                    "the video failed: " + st.message());
      }
      metrics_->videos.Add("encoder=\"" + info.encoder + "\",result=\"ok\"");
      metrics_->video_seconds.Observe(info.encoder, info.encode_seconds);
      metrics_->video_compose_seconds.Observe(info.composer, info.compose_seconds);
      metrics_->video_bytes.Add("encoder=\"" + info.encoder + "\"", info.bytes);
      mp4 = std::make_shared<const std::string>(std::move(job->result).value());
      std::lock_guard<std::mutex> cache_lock(stored->videos->mu);
      auto& cache = stored->videos->mp4;
      if (cache.size() >= 2) cache.erase(cache.begin());
      cache[key] = mp4;
    } else {
      metrics_->videos.Add("encoder=\"cache\",result=\"ok\"");
    }
    if (req.has_param("download")) {
      res.set_header("Content-Disposition", "attachment; filename=\"danqing-" + id + ".mp4\"");
    }
    // Served from memory in pieces: a client that goes away mid-download
    // ends the provider, and no worker is involved.
    res.set_content_provider(mp4->size(), "video/mp4",
                             [mp4](size_t offset, size_t length, httplib::DataSink& sink) {
                               const size_t n = std::min<size_t>(length, 64 * 1024);
                               return sink.write(mp4->data() + offset, n);
                             });
  });
}

}  // namespace danqing::service
