// The classical perceiver: colour statistics in HSV, Canny edges, k-means
// palette and two cascades (an LBP one for faces, a Haar one for cat faces),
// all on a reduced copy of at most analysis_side pixels a side: the work of a
// perception is bounded by that size, whatever the photo's.
#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <filesystem>
#include <memory>
#include <mutex>
#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>
#include <opencv2/objdetect.hpp>
#include <vector>

#include "common/read_file.h"
#include "perceive/perceiver.h"

namespace danqing::perceive {
namespace {

// OpenCV reports errors by exception; none may leave this module.
template <typename F>
Status Guard(const char* what, F&& f) {
  try {
    f();
    return Status::Ok();
  } catch (const cv::Exception& e) {
    return Internal(std::string(what) + ": " + e.what());
  }
}

constexpr const char* kFaceCascade = "lbpcascade_frontalface.xml";     // in the LBP directory
constexpr const char* kCatCascade = "haarcascade_frontalcatface.xml";  // in the Haar one

Result<cv::CascadeClassifier> LoadCascade(const std::string& dir, const std::string& name);

// The two detectors one perception uses.
struct Cascades {
  cv::CascadeClassifier face, cat;
};

// Debian's opencv-data keeps the LBP cascades beside the Haar ones.
std::string LbpDir(const CvPerceiverOptions& o) {
  if (!o.lbp_cascade_dir.empty()) return o.lbp_cascade_dir;
  std::filesystem::path haar = std::filesystem::path(o.cascade_dir).lexically_normal();
  if (haar.filename().empty()) haar = haar.parent_path();  // "dir/" names dir
  return (haar.parent_path() / "lbpcascades").string();
}

Result<std::unique_ptr<Cascades>> LoadCascades(const CvPerceiverOptions& o) {
  auto face = LoadCascade(LbpDir(o), kFaceCascade);
  if (!face.ok()) return face.status();
  auto cat = LoadCascade(o.cascade_dir, kCatCascade);
  if (!cat.ok()) return cat.status();
  return std::make_unique<Cascades>(Cascades{std::move(face).value(), std::move(cat).value()});
}

class CvPerceiver final : public Perceiver {
 public:
  CvPerceiver(CvPerceiverOptions options, std::unique_ptr<Cascades> first)
      : options_(std::move(options)) {
    free_.push_back(std::move(first));
    // The service already runs one perception per render worker; OpenCV's own
    // thread pool on top would oversubscribe the cores (and its uninstrumented
    // workers are invisible to ThreadSanitizer). Run OpenCV's loops inline.
    cv::setNumThreads(0);
  }

  std::string Name() const override { return "opencv-classic"; }
  int AnalysisSide() const override { return options_.analysis_side; }

  Result<Perception> Perceive(const ImageView& view) override {
    if (view.width <= 0 || view.height <= 0 || view.rgb == nullptr) {
      return InvalidArgument("perceive: empty image");
    }
    if (view.stride < static_cast<size_t>(view.width) * 3) {
      return InvalidArgument("perceive: stride smaller than width * 3");
    }
    Perception p;
    Status st = Guard("perceive", [&] { Analyse(view, &p.features); });
    if (!st.ok()) return st;
    p.themes = ScoreThemes(p.features);
    return p;
  }

 private:
  void Analyse(const ImageView& view, SceneFeatures* f) {
    // cv::Mat over the caller's pixels (read only; OpenCV's API takes non-const).
    cv::Mat full(view.height, view.width, CV_8UC3, const_cast<uint8_t*>(view.rgb), view.stride);
    const double scale = std::min(
        1.0, static_cast<double>(options_.analysis_side) / std::max(view.width, view.height));
    cv::Mat rgb;
    // A panorama strip (over ~640:1) would shrink its short side to 0 pixels,
    // which OpenCV refuses: keep at least one.
    const int small_w = static_cast<int>(std::lround(view.width * scale));
    const int small_h = static_cast<int>(std::lround(view.height * scale));
    if (scale < 1.0 && (small_w < 1 || small_h < 1)) {
      cv::resize(full, rgb, cv::Size(std::max(1, small_w), std::max(1, small_h)), 0, 0, cv::INTER_AREA);
    } else if (scale < 1.0) {
      cv::resize(full, rgb, cv::Size(), scale, scale, cv::INTER_AREA);
    } else {
      rgb = full.clone();
    }
    cv::Mat hsv, gray;
    cv::cvtColor(rgb, hsv, cv::COLOR_RGB2HSV);  // H 0..180, S and V 0..255
    cv::cvtColor(rgb, gray, cv::COLOR_RGB2GRAY);

    const int w = rgb.cols, h = rgb.rows;
    const double n = static_cast<double>(w) * h;
    const int half = h / 2;
    double sum_v = 0, sum_s = 0, sum_warm = 0;
    long sky = 0, water = 0, veg = 0, fresh = 0, snow = 0, sunset = 0, autumn = 0, flower = 0,
         earth = 0, highlights = 0, grass = 0, storm = 0, dark_sky = 0, bottom_earth = 0,
         bottom_dark = 0;
    const int third_rows = std::max(1, h / 3);
    for (int y = 0; y < h; ++y) {
      const auto* hp = hsv.ptr<cv::Vec3b>(y);
      const auto* cp = rgb.ptr<cv::Vec3b>(y);
      const bool top = y < half;
      for (int x = 0; x < w; ++x) {
        const int H = hp[x][0];
        const double S = hp[x][1] / 255.0, V = hp[x][2] / 255.0;
        sum_v += V;
        sum_s += S;
        sum_warm += (cp[x][0] - cp[x][2]) / 255.0;
        const bool blue = H >= 90 && H <= 130 && S > 0.15 && V > 0.35;
        const bool overcast = S < 0.12 && V > 0.75;
        if (top && (blue || overcast)) ++sky;
        if (!top && H >= 80 && H <= 130 && S > 0.2 && V > 0.2) ++water;
        if (H >= 35 && H <= 85 && S > 0.2 && V > 0.15) ++veg;
        if (!top && H >= 30 && H <= 85 && S > 0.2 && V > 0.1) ++grass;
        if (y < third_rows && S < 0.2 && V > 0.12 && V < 0.5) ++storm;
        if (y < third_rows && V < 0.25) ++dark_sky;
        if (!top && V < 0.2) ++bottom_dark;
        if (H >= 30 && H <= 50 && S > 0.3 && V > 0.45) ++fresh;
        if (S < 0.1 && V > 0.85) ++snow;
        const bool red_orange = (H <= 24 || H >= 165) && S > 0.4 && V > 0.4;
        if (top && red_orange) ++sunset;
        if (!top && H >= 5 && H <= 30 && S > 0.45 && V > 0.35) ++autumn;
        // Vivid red, pink, magenta, yellow; violet and mauve petals (asters,
        // scabious) and pink blossom are paler, and no sky or water has their
        // hue.
        if ((((H >= 140 && H <= 175) || H <= 5 || (H >= 20 && H <= 32)) && S > 0.55 && V > 0.5) ||
            (H >= 128 && H < 165 && S > 0.3 && V > 0.35) ||
            ((H >= 165 || H <= 3) && S > 0.25 && V > 0.55))
          ++flower;
        if (H >= 5 && H <= 25 && S > 0.3 && S < 0.85 && V > 0.15 && V < 0.65) {
          ++earth;
          if (!top) ++bottom_earth;
        }
        if (V > 0.9) ++highlights;
      }
    }
    f->brightness = sum_v / n;
    f->saturation = sum_s / n;
    f->warmth = sum_warm / n;
    const double top_n = static_cast<double>(w) * std::max(half, 1);
    const double bottom_n = static_cast<double>(w) * std::max(h - half, 1);
    f->sky = sky / top_n;
    f->water = water / bottom_n;
    f->vegetation = veg / n;
    f->fresh_green = fresh / n;
    f->snow = snow / n;
    f->sunset = sunset / top_n;
    f->autumn = autumn / bottom_n;
    f->flower = flower / n;
    f->earth = earth / n;
    f->highlights = highlights / n;
    f->grass = grass / bottom_n;
    f->storm = storm / (static_cast<double>(w) * third_rows);
    f->dark_sky = dark_sky / (static_cast<double>(w) * third_rows);
    f->bottom_earth = bottom_earth / bottom_n;
    f->bottom_dark = bottom_dark / bottom_n;
    f->night = std::clamp((0.3 - f->brightness) / 0.2, 0.0, 1.0);

    cv::Scalar mean, stddev;
    cv::meanStdDev(gray, mean, stddev);
    f->contrast = stddev[0] / 128.0;

    cv::Mat edges;
    cv::Canny(gray, edges, 80, 180);
    f->edge_density = cv::countNonZero(edges) / n;
    const int third = std::max(1, h / 3);
    f->top_edges = cv::countNonZero(edges.rowRange(0, third)) / (static_cast<double>(w) * third);

    cv::Mat blurred;
    cv::GaussianBlur(gray, blurred, cv::Size(5, 5), 1.5);
    // Water drops (rain, dew): small bright specular dots, much brighter than
    // their blurred surround, and bright in themselves.
    cv::Mat peaks, bright;
    cv::subtract(gray, blurred, peaks);
    cv::threshold(peaks, peaks, 35, 255, cv::THRESH_BINARY);
    cv::threshold(gray, bright, 170, 255, cv::THRESH_BINARY);
    cv::bitwise_and(peaks, bright, peaks);
    f->drops = cv::countNonZero(peaks) / n;
    // Texture low in the frame (grass blades, moss): pixels that differ from
    // their blurred surround, in the bottom half.
    if (h - half > 0) {
      cv::Mat diff;
      cv::absdiff(gray.rowRange(half, h), blurred.rowRange(half, h), diff);
      cv::threshold(diff, diff, 12, 255, cv::THRESH_BINARY);
      f->bottom_texture = cv::countNonZero(diff) / (static_cast<double>(w) * (h - half));
    }
    std::vector<cv::Vec3f> circles;
    const int side = std::min(w, h);
    cv::HoughCircles(blurred, circles, cv::HOUGH_GRADIENT, 1.5, side / 2.0, 150, 70, side / 6,
                     side / 2);
    f->vessels = static_cast<int>(circles.size());

    Palette(rgb, f);
    Detect(gray, f);
  }

  static void Palette(const cv::Mat& rgb, SceneFeatures* f) {
    // Five colours from 32x32 samples: 0.37 ms against 0.89 from 48x48 (the
    // palette is only reported).
    cv::Mat small;
    cv::resize(rgb, small, cv::Size(32, 32), 0, 0, cv::INTER_AREA);
    cv::Mat samples;
    small.reshape(1, small.rows * small.cols).convertTo(samples, CV_32F);
    constexpr int kColours = 5;
    cv::Mat labels, centers;
    cv::RNG& rng = cv::theRNG();
    rng.state = 0x9e3779b97f4a7c15ULL;  // the palette of a photo is the same every time
    cv::kmeans(samples, kColours, labels,
               cv::TermCriteria(cv::TermCriteria::EPS + cv::TermCriteria::COUNT, 20, 1.0), 2,
               cv::KMEANS_PP_CENTERS, centers);
    std::vector<int> counts(kColours, 0);
    for (int i = 0; i < labels.rows; ++i) ++counts[static_cast<size_t>(labels.at<int>(i))];
    for (int k = 0; k < kColours; ++k) {
      PaletteColor c;
      c.r = cv::saturate_cast<uint8_t>(centers.at<float>(k, 0));
      c.g = cv::saturate_cast<uint8_t>(centers.at<float>(k, 1));
      c.b = cv::saturate_cast<uint8_t>(centers.at<float>(k, 2));
      c.share = counts[static_cast<size_t>(k)] / static_cast<double>(labels.rows);
      f->palette.push_back(c);
    }
    std::sort(f->palette.begin(), f->palette.end(),
              [](const PaletteColor& a, const PaletteColor& b) { return a.share > b.share; });
  }

  void Detect(const cv::Mat& gray, SceneFeatures* f) {
    cv::Mat eq;
    cv::equalizeHist(gray, eq);
    // The smallest face or cat searched for, from the analysis image's short
    // side: a face from a tenth of it, a cat face from a fifth (a cat that
    // shows the theme fills much of the photo). Most of a cascade's work is
    // at its smallest sizes (the most windows), so these bounds, with the
    // fixed analysis size, bound the detection's time (docs/benchmarks.md,
    // "Perception on a small image").
    const int short_side = std::min(gray.cols, gray.rows);
    const int min_face = std::max(24, short_side / 10);
    const int min_cat = std::max(24, short_side / 5);
    std::vector<cv::Rect> faces, cats;
    std::unique_ptr<Cascades> c = Acquire();
    // Returned however the detection ends (OpenCV throws on its errors).
    struct Return {
      CvPerceiver* self;
      std::unique_ptr<Cascades>& c;
      ~Return() { self->Release(std::move(c)); }
    } give_back{this, c};
    // Faces in scale steps of 20% (the LBP cascade finds the test portrait at
    // 10 or 20%; 20% takes half the time); cats in steps of 10% (5% took
    // twice as long for the same cats; 15% or 20% lost chelsea.jpg's).
    // (Faces are searched at every size on the full copy: the LBP cascade
    // with 5 neighbours lost the portrait's face in 12 of 37 crops when
    // faces above twice the smallest were searched on a reduced copy.)
    c->face.detectMultiScale(eq, faces, 1.2, 5, 0, cv::Size(min_face, min_face));
    // Cat faces only in a photo without a human face: the Haar cat cascade is
    // the larger part of a perception, and with a face in view the themes are
    // the portrait's (ScoreThemes), so a portrait no longer pays for it. What
    // is given up: a cat beside a person is not counted (docs/benchmarks.md,
    // "third steps"). Cats above 58 px (2.4 windows of 24 px) on a reduced
    // copy: at 48 px the close-up cat of chelsea.jpg was lost, at 58 it is
    // found (docs/benchmarks.md, "fourth steps").
    if (faces.empty())
      SearchInTwoBands(c->cat, gray, 1.1, 3, min_cat, std::max(min_cat, 58), &cats);
    f->faces = static_cast<int>(faces.size());
    double area = 0;
    for (const auto& r : faces) area += r.area();
    f->face_area = area / (static_cast<double>(gray.cols) * gray.rows);
    f->cat_faces = static_cast<int>(cats.size());
  }

  // Objects from `min_side` up, in two bands. OpenCV steps a cascade's window
  // by 2 pixels of its pyramid level while the window is under twice the
  // cascade's own size and by 1 above that, so above it the windows (most of
  // the work) lie twice as densely, relative to their size, as below. Objects
  // up to `fine_max` are searched on `img` as they always were; larger ones
  // on a copy reduced by fine_max / window, where the search starts at the
  // cascade's own size and so keeps the coarser step of the small sizes
  // (half the windows of a cat search on a 320x200 copy). An object seen in
  // both bands (its size near fine_max) is counted once.
  static void SearchInTwoBands(cv::CascadeClassifier& cascade, const cv::Mat& img, double scale,
                               int min_neighbours, int min_side, int fine_max,
                               std::vector<cv::Rect>* found) {
    cascade.detectMultiScale(img, *found, scale, min_neighbours, 0, cv::Size(min_side, min_side),
                             cv::Size(fine_max, fine_max));
    const cv::Size window = cascade.getOriginalWindowSize();
    const double reduce = static_cast<double>(fine_max) / std::max(1, window.width);
    const int rw = static_cast<int>(std::lround(img.cols / reduce));
    const int rh = static_cast<int>(std::lround(img.rows / reduce));
    if (reduce <= 1.0 || rw < window.width || rh < window.height) return;
    cv::Mat reduced;
    cv::resize(img, reduced, cv::Size(rw, rh), 0, 0, cv::INTER_AREA);
    std::vector<cv::Rect> large;
    cascade.detectMultiScale(reduced, large, scale, min_neighbours, 0, window);
    const double sx = static_cast<double>(img.cols) / rw, sy = static_cast<double>(img.rows) / rh;
    for (const cv::Rect& r : large) {
      const cv::Rect back(static_cast<int>(r.x * sx), static_cast<int>(r.y * sy),
                          static_cast<int>(r.width * sx), static_cast<int>(r.height * sy));
      const cv::Point centre(back.x + back.width / 2, back.y + back.height / 2);
      const bool seen = std::any_of(found->begin(), found->end(), [&](const cv::Rect& s) {
        return s.contains(centre) ||
               back.contains(cv::Point(s.x + s.width / 2, s.y + s.height / 2));
      });
      if (!seen) found->push_back(back);
    }
  }

  // A pair of detectors for this caller alone: CascadeClassifier's
  // detectMultiScale is not documented as thread-safe, and one pair shared
  // under a lock made every render worker wait for the others' detection
  // (the longest part of a perception). Pairs are loaded as concurrent callers
  // need them (one per render worker at most) and kept; if a load fails (the
  // files are gone), the caller waits for a pair another returns.
  std::unique_ptr<Cascades> Acquire() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!free_.empty()) {
        auto c = std::move(free_.back());
        free_.pop_back();
        return c;
      }
    }
    if (auto loaded = LoadCascades(options_); loaded.ok()) return std::move(loaded).value();
    std::unique_lock<std::mutex> lock(mu_);
    returned_.wait(lock, [&] { return !free_.empty(); });
    auto c = std::move(free_.back());
    free_.pop_back();
    return c;
  }
  void Release(std::unique_ptr<Cascades> c) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      free_.push_back(std::move(c));
    }
    returned_.notify_one();
  }

  const CvPerceiverOptions options_;
  std::mutex mu_;
  std::condition_variable returned_;
  std::vector<std::unique_ptr<Cascades>> free_;  // guarded by mu_
};

Result<cv::CascadeClassifier> LoadCascade(const std::string& dir, const std::string& name) {
  const std::string path = (std::filesystem::path(dir) / name).string();
  if (!std::filesystem::exists(path)) {
    return Unavailable("cascade " + path + " not found (Debian package opencv-data)");
  }
  // OpenCV opens the path itself: a FIFO there would block start-up.
  if (Status regular = CheckRegularFile(path); !regular.ok()) {
    return Unavailable("cascade " + path + ": " + regular.message());
  }
  cv::CascadeClassifier c;
  bool loaded = false;
  Status st = Guard("load cascade", [&] { loaded = c.load(path); });
  if (!st.ok()) return st;
  if (!loaded) return Unavailable("cascade " + path + " could not be read");
  return c;
}

}  // namespace

Result<std::unique_ptr<Perceiver>> CreateCvPerceiver(const CvPerceiverOptions& options) {
  auto cascades = LoadCascades(options);
  if (!cascades.ok()) return cascades.status();
  if (options.analysis_side < 32) return InvalidArgument("perceive: analysis_side below 32");
  return std::unique_ptr<Perceiver>(
      std::make_unique<CvPerceiver>(options, std::move(cascades).value()));
}

}  // namespace danqing::perceive
