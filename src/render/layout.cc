#include "render/layout.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace danqing::render {
namespace {

constexpr float kTitleScale = 0.78f;
constexpr float kSigScale = 0.5f;
constexpr float kPitch = 1.28f;  // run pitch across, in cells

struct Group {
  const std::vector<std::vector<char32_t>>* lines;
  float scale;
  Role role;
};

int Runs(const std::vector<char32_t>& line, int cap) {
  return cap <= 0 ? 1 << 20 : static_cast<int>((line.size() + static_cast<size_t>(cap) - 1) / static_cast<size_t>(cap));
}

// The cross extent needed with cell size s along a main axis of length main_len.
float CrossNeeded(const std::vector<Group>& groups, float s, float main_len) {
  float cross = 0;
  bool any = false;
  for (const auto& g : groups) {
    float cs = s * g.scale;
    int cap = static_cast<int>(std::floor(main_len / cs));
    if (cap < 1) return 1e30f;
    int runs = 0;
    for (const auto& l : *g.lines) runs += std::max(1, Runs(l, cap));
    if (runs == 0) continue;
    if (any) cross += 0.25f * s;
    cross += static_cast<float>(runs) * cs * kPitch;
    any = true;
  }
  return cross;
}

}  // namespace

Result<LayoutResult> Layout(const LayoutInput& in, const Region& region, const Region& fallback,
                            float min_cell) {
  std::vector<std::vector<char32_t>> title_lines, sig_lines, body;
  if (!in.title.empty()) title_lines.push_back(in.title);
  if (!in.signature.empty()) sig_lines.push_back(in.signature);
  for (const auto& l : in.lines) {
    if (!l.empty()) body.push_back(l);
  }
  std::vector<Group> groups;
  if (!title_lines.empty()) groups.push_back({&title_lines, kTitleScale, Role::kTitle});
  if (!body.empty()) groups.push_back({&body, 1.0f, Role::kPoem});
  if (!sig_lines.empty()) groups.push_back({&sig_lines, kSigScale, Role::kSignature});

  LayoutResult res;
  // Find the largest cell that fits; the region first, then the fallback; the
  // poem's lines as columns first, then as one flowing text.
  std::vector<std::vector<char32_t>> flowing(1);
  for (const auto& l : body) flowing[0].insert(flowing[0].end(), l.begin(), l.end());
  // The largest cell that fits a region (0: none down to min_cell).
  auto best_cell = [&](const Region& r) {
    float main_len = in.vertical ? r.y1 - r.y0 : r.x1 - r.x0;
    float cross_len = in.vertical ? r.x1 - r.x0 : r.y1 - r.y0;
    float hi = std::min(main_len / 4.0f, cross_len / 1.5f);
    for (float cand = hi; cand >= min_cell; cand *= 0.97f) {
      if (CrossNeeded(groups, cand, main_len) <= cross_len) return cand;
    }
    return 0.0f;
  };
  // The preferred region unless the whole canvas allows much larger characters;
  // the poem's lines as columns first, then as one flowing text.
  Region chosen{};
  float s = 0;
  for (int flow = 0; flow < 2 && s == 0; ++flow) {
    if (flow == 1) {
      if (body.empty()) break;
      for (auto& g : groups) {
        if (g.role == Role::kPoem) g.lines = &flowing;
      }
    }
    float sr = best_cell(region), sf = best_cell(fallback);
    if (sr > 0 && sr >= 0.7f * sf) {
      s = sr;
      chosen = region;
    } else if (sf > 0) {
      s = sf;
      chosen = fallback;
    }
  }
  if (s == 0) {
    return InvalidArgument("the text does not fit the canvas (even with " + std::to_string(static_cast<int>(min_cell)) +
                           " px characters); use a larger canvas or less text");
  }
  // Placed at the largest size that fits; smaller while the seal finds no room
  // (the last run full and no room for a run beside it, where it would be
  // stamped over the last characters).
  const float main_len = in.vertical ? chosen.y1 - chosen.y0 : chosen.x1 - chosen.x0;
  const float cross_len = in.vertical ? chosen.x1 - chosen.x0 : chosen.y1 - chosen.y0;
  const float main_end = in.vertical ? chosen.y1 : chosen.x1;
  float seal = 0, main_pos = 0, seal_cross = 0, cross_used = 0;
  for (;;) {
    res.cells.clear();
    res.body_size = s;
    cross_used = CrossNeeded(groups, s, main_len);
    // Longest run along the main axis, to centre the block.
    float main_used = 0;
    for (const auto& g : groups) {
      float cs = s * g.scale;
      int cap = static_cast<int>(std::floor(main_len / cs));
      for (const auto& l : *g.lines) {
        float len = static_cast<float>(std::min<size_t>(l.size(), static_cast<size_t>(cap))) * cs;
        if (g.role == Role::kSignature) len += 0.6f * s + 0.9f * s;  // indent and seal
        main_used = std::max(main_used, std::min(main_len, len));
      }
    }
    const float main0 = (in.vertical ? chosen.y0 : chosen.x0) + 0.5f * (main_len - main_used);
    float cross = 0.5f * (cross_len - cross_used);  // from the cross start
    int run = 0;
    bool any = false;
    float last_main_end = main0, last_cross_mid = 0, last_cs = s;
    for (const auto& g : groups) {
      float cs = s * g.scale;
      int cap = static_cast<int>(std::floor(main_len / cs));
      if (any) cross += 0.25f * s;
      any = true;
      float indent = g.role == Role::kSignature ? std::min(0.6f * s, main_len - static_cast<float>(cap) * cs) : 0.0f;
      indent = std::max(0.0f, indent);
      for (const auto& l : *g.lines) {
        for (size_t i = 0; i < l.size(); i += static_cast<size_t>(cap)) {
          float cross_mid = cross + 0.5f * cs * kPitch;
          size_t n = std::min(l.size() - i, static_cast<size_t>(cap));
          float m = main0 + indent;
          if (g.role == Role::kTitle) {
            m = main0 + 0.5f * (main_used - static_cast<float>(n) * cs) * 0.0f;
          }
          if (static_cast<float>(n) * cs + indent > main_len) m = main0;
          for (size_t k = 0; k < n; ++k) {
            Cell c;
            c.c = l[i + k];
            c.role = g.role;
            c.size = cs;
            c.run = run;
            c.line_start = i + k == 0;
            float along = m + (static_cast<float>(k) + 0.5f) * cs;
            if (in.vertical) {
              c.cx = chosen.x1 - cross_mid;
              c.cy = along;
            } else {
              c.cx = along;
              c.cy = chosen.y0 + cross_mid;
            }
            res.cells.push_back(c);
          }
          last_main_end = m + static_cast<float>(n) * cs;
          last_cross_mid = cross_mid;
          last_cs = cs;
          cross += cs * kPitch;
          ++run;
        }
      }
    }
    // Seal: after the last character written, along the main axis; where that
    // run is full, at the end of a new run beside it (inside `fallback`).
    seal = std::max(6.0f, std::min(0.72f * s, 1.6f * last_cs + 0.2f * s));
    main_pos = last_main_end + 0.3f * s;
    seal_cross = last_cross_mid;
    if (main_pos + seal > main_end) {
      main_pos = std::max(in.vertical ? chosen.y0 : chosen.x0, main_end - seal);
      float next_mid = last_cross_mid + 0.5f * last_cs * kPitch + 0.2f * s + 0.5f * seal;
      // The new run's far edge, in canvas coordinates, must stay inside `fallback`.
      bool fits = in.vertical ? chosen.x1 - next_mid - 0.5f * seal >= fallback.x0
                              : chosen.y0 + next_mid + 0.5f * seal <= fallback.y1;
      if (fits) seal_cross = next_mid;
    }
    const bool seal_over_text = seal_cross == last_cross_mid && main_pos < last_main_end - 0.05f * s;
    if (!seal_over_text || s * 0.97f < min_cell) break;
    s *= 0.97f;
  }
  if (in.vertical) {
    res.seal_x = chosen.x1 - seal_cross - 0.5f * seal;
    res.seal_y = main_pos;
  } else {
    res.seal_x = main_pos;
    res.seal_y = chosen.y0 + seal_cross - 0.5f * seal;
  }
  res.seal_size = seal;
  res.block = chosen;
  if (in.vertical) {
    res.block.x0 = chosen.x1 - 0.5f * (cross_len - cross_used) - cross_used;
    res.block.x1 = chosen.x1 - 0.5f * (cross_len - cross_used);
  } else {
    res.block.y0 = chosen.y0 + 0.5f * (cross_len - cross_used);
    res.block.y1 = res.block.y0 + cross_used;
  }
  return res;
}

}  // namespace danqing::render
