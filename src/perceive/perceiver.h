// danqing::perceive: what a photo shows, as scores over the themes the verse
// corpus is tagged with (山水, 江河湖海, 月夜, 雪, 春, 夏, 秋, 冬, 花, 人物, 城市,
// 田园, 日出日落, 天空, 禽兽, 茶酒, 远行, 草, 雨露, 风雨).
//
// A Perceiver turns RGB8 pixels into SceneFeatures (palette, brightness, colour
// cues, faces, edges) and ThemeScores. The classical perceiver (CreateCvPerceiver)
// uses OpenCV's imgproc and Haar cascades; a model-based perceiver (an ONNX image
// encoder) can implement the same interface later. How each theme is decided is
// documented in docs/service.md.
//
// Thread-safety: Perceive() may be called from many threads at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace danqing::perceive {

// Borrowed RGB8 pixels, row-major; stride in bytes (>= width * 3).
struct ImageView {
  int width = 0;
  int height = 0;
  const uint8_t* rgb = nullptr;
  size_t stride = 0;
};

struct PaletteColor {
  uint8_t r = 0, g = 0, b = 0;
  double share = 0;  // fraction of pixels nearest to this colour
};

// Measured cues; fractions are of the whole image unless said otherwise.
struct SceneFeatures {
  double brightness = 0;    // mean HSV value, 0..1
  double contrast = 0;      // standard deviation of grey / 128, ~0..1
  double saturation = 0;    // mean HSV saturation, 0..1
  double warmth = 0;        // mean (R - B) / 255, -1..1
  double sky = 0;           // fraction of the top half that is blue sky or bright overcast
  double water = 0;         // fraction of the bottom half that is blue/cyan
  double vegetation = 0;    // green foliage
  double fresh_green = 0;   // light yellow-green (spring foliage)
  double snow = 0;          // bright, unsaturated
  double sunset = 0;        // fraction of the top half in saturated red/orange
  double autumn = 0;        // saturated orange/yellow/red outside the sky
  double flower = 0;        // vivid pink/red/purple/yellow
  double earth = 0;         // warm browns (wood, soil, tea, coffee)
  double night = 0;         // 0..1, how dark the image is overall
  double highlights = 0;    // fraction of very bright pixels (moon, stars, lamps)
  double edge_density = 0;  // fraction of Canny edge pixels
  double top_edges = 0;     // edge fraction in the top third (sky is smooth)
  double grass = 0;         // fraction of the bottom half that is green
  double bottom_texture = 0;  // bottom-half fraction off its 5x5 blur by > 12 grey levels (blades)
  double storm = 0;           // fraction of the top third in dark, unsaturated grey (heavy cloud)
  double drops = 0;           // fraction of pixels that are small bright specular dots
  double dark_sky = 0;        // fraction of the top third that is dark (V < .25): a night sky
  double bottom_earth = 0;    // fraction of the bottom half in bare brown soil (a ploughed field)
  double bottom_dark = 0;   // fraction of the bottom half that is dark (V < .2): land in silhouette
  int vessels = 0;          // large circles (cup, bowl, plate rims) from a Hough transform
  int faces = 0;            // human frontal faces
  double face_area = 0;     // fraction of the image covered by faces
  int cat_faces = 0;        // cat faces; only looked for when faces == 0
  std::vector<PaletteColor> palette;  // dominant colours, largest first
};

struct ThemeScore {
  std::string theme;
  double score = 0;  // 0..1
};

struct Perception {
  SceneFeatures features;
  std::vector<ThemeScore> themes;  // every theme, highest score first
};

// Every theme name a perceiver scores, in a fixed order.
const std::vector<std::string>& AllThemes();

// Theme scores from features: the documented rules, separate so tests and a
// model-based perceiver can reuse them.
std::vector<ThemeScore> ScoreThemes(const SceneFeatures& f);

class Perceiver {
 public:
  virtual ~Perceiver() = default;
  // INVALID_ARGUMENT for an empty view or an inconsistent stride.
  virtual Result<Perception> Perceive(const ImageView& image) = 0;
  // "opencv-classic", "onnx:<model>", ...
  virtual std::string Name() const = 0;
  // The longer side the perceiver reduces an image to before it looks at it:
  // a caller that decodes the photo may hand it an image of about this size
  // (not smaller) instead of the full one. 0: it wants the full image.
  virtual int AnalysisSide() const { return 0; }
};

struct CvPerceiverOptions {
  // Directory with haarcascade_frontalcatface.xml (Debian's opencv-data).
  std::string cascade_dir = "/usr/share/opencv4/haarcascades";
  // Directory with lbpcascade_frontalface.xml; empty: "lbpcascades" beside
  // cascade_dir, as Debian's opencv-data lays them out. LBP for faces: 3-4x
  // faster than the Haar alt2 cascade, the test portraits still found.
  std::string lbp_cascade_dir = {};
  int analysis_side = 320;  // the longer side the photo is reduced to first
};

// UNAVAILABLE when a cascade file is missing or unreadable.
Result<std::unique_ptr<Perceiver>> CreateCvPerceiver(const CvPerceiverOptions& options = {});

}  // namespace danqing::perceive
