// Theme scores from scene features. Each rule is a small weighted sum of cues,
// clamped to 0..1; docs/service.md lists them in words.
#include <algorithm>
#include <cmath>

#include "perceive/perceiver.h"

namespace danqing::perceive {
namespace {

double Clamp01(double v) {
  return std::clamp(v, 0.0, 1.0);
}
// 0 below lo, 1 above hi, linear between.
double Ramp(double v, double lo, double hi) {
  return Clamp01((v - lo) / (hi - lo));
}

}  // namespace

const std::vector<std::string>& AllThemes() {
  static const std::vector<std::string> kThemes = {
      "山水", "江河湖海", "月夜",     "雪",   "春",   "夏",   "秋",   "冬", "花",   "人物",
      "城市", "田园",     "日出日落", "天空", "禽兽", "茶酒", "远行", "草", "雨露", "风雨"};
  return kThemes;
}

std::vector<ThemeScore> ScoreThemes(const SceneFeatures& f) {
  const double people = f.faces > 0 ? Clamp01(0.6 + 0.1 * f.faces + 2.0 * f.face_area) : 0.0;
  const double outdoor = Clamp01(std::max(f.sky, f.vegetation * 1.5) + f.water);
  // Night: a dark photo, or a dark sky with lamps or stars under it (a lit
  // city keeps the mean bright).
  const double night_sky = Ramp(f.dark_sky, 0.4, 0.7) * Ramp(f.highlights, 0.01, 0.03);
  const double dark = std::max(f.night, night_sky);
  // A textured top third is not open sky: warm colour there is a subject
  // (fur, a table), not a sunset.
  const double open_top = 1.0 - Ramp(f.top_edges, 0.05, 0.12);
  // Skin tones look like autumn leaves; with faces in view they are skin.
  const double not_skin = 1.0 - 0.8 * people;
  const double indoor = 1.0 - Ramp(outdoor, 0.1, 0.4);
  const double day = 1.0 - dark;
  // A landscape is a far view: sky above it, or detail across the frame. A
  // frame with neither is a close-up on a blurred ground (a macro of a leaf,
  // a blossom, a drop), whatever its colours.
  const double far_view = std::max(
      Ramp(f.sky, 0.05, 0.25), Ramp(f.top_edges, 0.03, 0.09) * Ramp(f.bottom_texture, 0.03, 0.08));

  std::vector<ThemeScore> s = {
      // Mountains and waters: open sky above green or rocky land; people in
      // the foreground make it a portrait rather than a landscape.
      {"山水", Clamp01(0.6 * Ramp(f.sky, 0.1, 0.5) + 0.6 * Ramp(f.vegetation, 0.05, 0.4) +
                       0.2 * Ramp(f.water, 0.05, 0.3)) *
                   day * far_view * (1.0 - 0.7 * people)},
      {"江河湖海", Clamp01(1.4 * Ramp(f.water, 0.08, 0.45)) * day},
      // Moonlit night: dark overall; bright points (moon, stars, lamps) help.
      {"月夜", Clamp01(0.8 * dark + 0.4 * Ramp(f.highlights, 0.0005, 0.02) * dark)},
      {"雪", Clamp01(1.2 * Ramp(f.snow, 0.15, 0.5) * Ramp(-f.warmth, -0.05, 0.05))},
      {"春",
       Clamp01(0.8 * Ramp(f.fresh_green, 0.05, 0.3) + 0.4 * Ramp(f.flower, 0.02, 0.15)) * day},
      {"夏", Clamp01(0.8 * Ramp(f.vegetation, 0.2, 0.6) * Ramp(f.brightness, 0.35, 0.6) +
                     0.3 * Ramp(f.sky, 0.2, 0.5) * Ramp(f.saturation, 0.3, 0.5)) *
                 day},
      {"秋", Clamp01(1.0 * Ramp(f.autumn, 0.08, 0.35) + 0.2 * Ramp(f.warmth, 0.1, 0.3)) * day *
                 not_skin * (f.vessels > 0 || f.cat_faces > 0 ? 0.3 : 1.0)},
      {"冬", Clamp01(0.8 * Ramp(f.snow, 0.15, 0.5) +
                     0.3 * Ramp(0.2 - f.saturation, 0.0, 0.15) * Ramp(-f.warmth, -0.02, 0.08))},
      // Flowers are blobs of vivid colour: when most of the frame has that
      // colour it is a cast (a magenta night sky, a pink backdrop), not flowers.
      // Amid foliage even a few small vivid blobs are flowers (a meadow).
      {"花", Clamp01(std::max(1.2 * Ramp(f.flower, 0.03, 0.25),
                              Ramp(f.flower, 0.01, 0.06) * Ramp(f.vegetation, 0.3, 0.6))) *
                 (1.0 - Ramp(f.flower, 0.45, 0.8))},
      {"人物", people},
      // City: many edges, few plants, little colour.
      {"城市",
       Clamp01(0.8 * Ramp(f.edge_density, 0.08, 0.2) * (1.0 - Ramp(f.vegetation, 0.05, 0.3)) *
               (1.0 - Ramp(f.saturation, 0.35, 0.6))) *
           (1.0 - 0.6 * people)},
      {"田园", Clamp01(0.6 * Ramp(f.vegetation, 0.15, 0.5) * Ramp(f.sky, 0.05, 0.3) +
                       0.4 * Ramp(f.autumn, 0.05, 0.25) * Ramp(f.sky, 0.05, 0.3) * not_skin +
                       // bare brown soil under a wide smooth sky: a ploughed field
                       // (a jagged skyline makes it a mountain slope)
                       0.6 * Ramp(f.bottom_earth, 0.1, 0.35) * Ramp(f.sky, 0.3, 0.6) *
                           (1.0 - Ramp(f.top_edges, 0.03, 0.1))) *
                   day},
      // Sunrise, sunset: red/orange sky; the whole photo warm, or the glow
      // strong in itself (a sunset over blue water keeps the mean cool).
      // A glow over land in silhouette is one too, however small the glow.
      {"日出日落",
       Clamp01(std::max(1.3 * Ramp(f.sunset, 0.06, 0.35) *
                            std::max(Ramp(f.warmth, 0.0, 0.2), Ramp(f.sunset, 0.1, 0.3)),
                        Ramp(f.sunset, 0.03, 0.12) * Ramp(f.bottom_dark, 0.3, 0.6))) *
           open_top},
      {"天空", Clamp01(1.2 * Ramp(f.sky, 0.2, 0.7)) * day},
      {"禽兽", f.cat_faces > 0 ? 0.9 : 0.0},
      // Tea and wine: a vessel's round rim, or a warm brown still life, indoors.
      {"茶酒", Clamp01((f.vessels > 0 ? 0.8 : 0.0) + 0.6 * Ramp(f.earth, 0.15, 0.5)) * indoor *
                   (1.0 - people) * (f.cat_faces > 0 ? 0.3 : 1.0)},
      // Grass: green low in the frame, and textured there (blades, moss),
      // not a smooth green surface.
      {"草", Clamp01(1.2 * Ramp(f.grass, 0.2, 0.6) * Ramp(f.bottom_texture, 0.03, 0.1))},
      // Rain or dew: small bright specular dots; in the dark they are stars.
      {"雨露", Clamp01(Ramp(f.drops, 0.008, 0.03)) * (1.0 - 0.8 * dark)},
      // Wind and rain: heavy dark grey cloud over the top of the frame.
      {"风雨", Clamp01(1.2 * Ramp(f.storm, 0.35, 0.75)) * (1.0 - 0.7 * dark)},
      // The traveller's theme is the fallback when nothing is clear.
      {"远行", 0.1},
  };
  std::stable_sort(s.begin(), s.end(),
                   [](const ThemeScore& a, const ThemeScore& b) { return a.score > b.score; });
  return s;
}

}  // namespace danqing::perceive
