#include "render/glyph_skeleton.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <numeric>

#include "render/glyph_font.h"

namespace danqing::render {

namespace {

struct Px {
  int x = 0, y = 0;
};
struct Vec {
  float x = 0, y = 0;
};

// Neighbours in clockwise order from north: P2..P9 of Zhang-Suen.
constexpr int kDx[8] = {0, 1, 1, 1, 0, -1, -1, -1};
constexpr int kDy[8] = {-1, -1, 0, 1, 1, 1, 0, -1};

class Grid {
 public:
  Grid(int w, int h) : w_(w), h_(h), v_(static_cast<size_t>(w) * static_cast<size_t>(h), 0) {}
  int w() const { return w_; }
  int h() const { return h_; }
  bool In(int x, int y) const { return x >= 0 && y >= 0 && x < w_ && y < h_; }
  int Get(int x, int y) const { return In(x, y) ? v_[Index(x, y)] : 0; }
  void Set(int x, int y, int v) { v_[Index(x, y)] = v; }
  size_t Index(int x, int y) const {
    return static_cast<size_t>(y) * static_cast<size_t>(w_) + static_cast<size_t>(x);
  }

 private:
  int w_, h_;
  std::vector<int> v_;
};

// 1-D squared distance transform (Felzenszwalb & Huttenlocher 2012).
void Edt1d(const std::vector<float>& f, std::vector<float>* d) {
  const int n = static_cast<int>(f.size());
  std::vector<int> v(static_cast<size_t>(n));
  std::vector<float> z(static_cast<size_t>(n) + 1);
  int k = 0;
  v[0] = 0;
  z[0] = -std::numeric_limits<float>::infinity();
  z[1] = std::numeric_limits<float>::infinity();
  auto fi = [&](int i) { return f[static_cast<size_t>(i)]; };
  for (int q = 1; q < n; ++q) {
    float s;
    while (true) {
      const int p = v[static_cast<size_t>(k)];
      s = ((fi(q) + static_cast<float>(q * q)) - (fi(p) + static_cast<float>(p * p))) /
          static_cast<float>(2 * q - 2 * p);
      if (s <= z[static_cast<size_t>(k)] && k > 0) {
        --k;
      } else {
        break;
      }
    }
    if (s <= z[static_cast<size_t>(k)]) {  // k == 0 and still dominated
      v[0] = q;
      z[1] = std::numeric_limits<float>::infinity();
      continue;
    }
    ++k;
    v[static_cast<size_t>(k)] = q;
    z[static_cast<size_t>(k)] = s;
    z[static_cast<size_t>(k) + 1] = std::numeric_limits<float>::infinity();
  }
  k = 0;
  d->resize(static_cast<size_t>(n));
  for (int q = 0; q < n; ++q) {
    while (z[static_cast<size_t>(k) + 1] < static_cast<float>(q)) ++k;
    const int p = v[static_cast<size_t>(k)];
    (*d)[static_cast<size_t>(q)] = static_cast<float>((q - p) * (q - p)) + fi(p);
  }
}

// Euclidean distance from each ink pixel to the nearest background pixel
// (outside the raster counts as background).
std::vector<float> DistanceToBackground(const std::vector<uint8_t>& mask, int res) {
  const int n = res + 2;  // a background border
  const float inf = 1e12f;
  std::vector<float> g(static_cast<size_t>(n) * static_cast<size_t>(n), 0.0f);
  for (int y = 0; y < res; ++y)
    for (int x = 0; x < res; ++x)
      if (mask[static_cast<size_t>(y * res + x)] != 0)
        g[static_cast<size_t>((y + 1) * n + x + 1)] = inf;
  std::vector<float> f(static_cast<size_t>(n)), d;
  for (int x = 0; x < n; ++x) {
    for (int y = 0; y < n; ++y) f[static_cast<size_t>(y)] = g[static_cast<size_t>(y * n + x)];
    Edt1d(f, &d);
    for (int y = 0; y < n; ++y) g[static_cast<size_t>(y * n + x)] = d[static_cast<size_t>(y)];
  }
  for (int y = 0; y < n; ++y) {
    std::copy_n(g.begin() + y * n, n, f.begin());
    Edt1d(f, &d);
    std::copy_n(d.begin(), n, g.begin() + y * n);
  }
  std::vector<float> out(static_cast<size_t>(res) * static_cast<size_t>(res));
  for (int y = 0; y < res; ++y)
    for (int x = 0; x < res; ++x)
      out[static_cast<size_t>(y * res + x)] =
          std::sqrt(g[static_cast<size_t>((y + 1) * n + x + 1)]);
  return out;
}

// Drops 8-connected ink components smaller than min_pixels.
void DropSpecks(std::vector<uint8_t>* mask, int res, int min_pixels) {
  std::vector<int> label(mask->size(), 0);
  std::vector<Px> stack, comp;
  for (int y = 0; y < res; ++y) {
    for (int x = 0; x < res; ++x) {
      const size_t i = static_cast<size_t>(y * res + x);
      if ((*mask)[i] == 0 || label[i] != 0) continue;
      comp.clear();
      stack = {{x, y}};
      label[i] = 1;
      while (!stack.empty()) {
        Px p = stack.back();
        stack.pop_back();
        comp.push_back(p);
        for (int k = 0; k < 8; ++k) {
          const int nx = p.x + kDx[k], ny = p.y + kDy[k];
          if (nx < 0 || ny < 0 || nx >= res || ny >= res) continue;
          const size_t j = static_cast<size_t>(ny * res + nx);
          if ((*mask)[j] != 0 && label[j] == 0) {
            label[j] = 1;
            stack.push_back({nx, ny});
          }
        }
      }
      if (static_cast<int>(comp.size()) < min_pixels) {
        for (const Px& p : comp) (*mask)[static_cast<size_t>(p.y * res + p.x)] = 0;
      }
    }
  }
}

// Zhang-Suen thinning, in place (1 = ink).
void ZhangSuen(Grid* g) {
  std::vector<Px> del;
  bool changed = true;
  while (changed) {
    changed = false;
    for (int pass = 0; pass < 2; ++pass) {
      del.clear();
      for (int y = 0; y < g->h(); ++y) {
        for (int x = 0; x < g->w(); ++x) {
          if (g->Get(x, y) == 0) continue;
          int p[8];
          int b = 0;
          for (int k = 0; k < 8; ++k) {
            p[k] = g->Get(x + kDx[k], y + kDy[k]) != 0 ? 1 : 0;
            b += p[k];
          }
          if (b < 2 || b > 6) continue;
          int a = 0;
          for (int k = 0; k < 8; ++k) a += (p[k] == 0 && p[(k + 1) % 8] == 1) ? 1 : 0;
          if (a != 1) continue;
          // p[0]=N p[2]=E p[4]=S p[6]=W
          if (pass == 0) {
            if (p[0] * p[2] * p[4] != 0 || p[2] * p[4] * p[6] != 0) continue;
          } else {
            if (p[0] * p[2] * p[6] != 0 || p[0] * p[4] * p[6] != 0) continue;
          }
          del.push_back({x, y});
        }
      }
      for (const Px& q : del) g->Set(q.x, q.y, 0);
      if (!del.empty()) changed = true;
    }
  }
}

int Neighbours(const Grid& g, int x, int y) {
  int n = 0;
  for (int k = 0; k < 8; ++k) n += g.Get(x + kDx[k], y + kDy[k]) != 0 ? 1 : 0;
  return n;
}

// An edge of the skeleton graph: pixels from node a to node b (exclusive).
struct Edge {
  int a = -1, b = -1;
  std::vector<Px> px;
  bool removed = false;
};

struct Node {
  std::vector<Px> px;
  Vec centre;
  bool junction = false;
  bool isolated = false;                  // a lone skeleton pixel (a dot)
  std::vector<std::pair<int, int>> ends;  // (edge, 0 = its a end, 1 = its b end)
};

float Dot(Vec a, Vec b) {
  return a.x * b.x + a.y * b.y;
}
Vec Normalised(Vec v) {
  const float l = std::hypot(v.x, v.y);
  return l > 0 ? Vec{v.x / l, v.y / l} : Vec{0, 0};
}

// Direction leaving node `n` along edge e (from its end `end`).
Vec Leaving(const Node& n, const Edge& e, int end, int reach) {
  if (e.px.empty()) return {0, 0};
  const size_t k = std::min(e.px.size() - 1, static_cast<size_t>(std::max(1, reach)));
  const Px p = end == 0 ? e.px[k] : e.px[e.px.size() - 1 - k];
  return Normalised({static_cast<float>(p.x) - n.centre.x, static_cast<float>(p.y) - n.centre.y});
}

struct PathPoint {
  float x, y, r;  // pixels
};

float PerpDistance(const PathPoint& p, const PathPoint& a, const PathPoint& b) {
  const float dx = b.x - a.x, dy = b.y - a.y;
  const float l = std::hypot(dx, dy);
  if (l == 0) return std::hypot(p.x - a.x, p.y - a.y);
  return std::fabs(dy * (p.x - a.x) - dx * (p.y - a.y)) / l;
}

void DouglasPeucker(const std::vector<PathPoint>& in, size_t lo, size_t hi, float eps,
                    std::vector<bool>* keep) {
  if (hi <= lo + 1) return;
  float best = -1;
  size_t at = lo;
  for (size_t i = lo + 1; i < hi; ++i) {
    // Width changes count as distance too, so a swelling stroke keeps its points.
    const float t = static_cast<float>(i - lo) / static_cast<float>(hi - lo);
    const float dr = std::fabs(in[i].r - (in[lo].r + t * (in[hi].r - in[lo].r)));
    const float d = std::max(PerpDistance(in[i], in[lo], in[hi]), dr);
    if (d > best) {
      best = d;
      at = i;
    }
  }
  if (best > eps) {
    (*keep)[at] = true;
    DouglasPeucker(in, lo, at, eps, keep);
    DouglasPeucker(in, at, hi, eps, keep);
  }
}

}  // namespace

bool CentredGlyphCoverage(const GlyphFont& font, char32_t c, int res, std::vector<uint8_t>* out) {
  std::vector<uint8_t> cov;
  if (!font.RasterizeBox(c, res, &cov)) return false;
  int x0 = res, y0 = res, x1 = -1, y1 = -1;
  for (int y = 0; y < res; ++y) {
    for (int x = 0; x < res; ++x) {
      if (cov[static_cast<size_t>(y * res + x)] < 64) continue;
      x0 = std::min(x0, x);
      x1 = std::max(x1, x);
      y0 = std::min(y0, y);
      y1 = std::max(y1, y);
    }
  }
  if (x1 < 0) return false;
  const int dx = (res - 1 - x1 - x0) / 2, dy = (res - 1 - y1 - y0) / 2;
  out->assign(cov.size(), 0);
  for (int y = 0; y < res; ++y) {
    const int ty = y + dy;
    if (ty < 0 || ty >= res) continue;
    for (int x = 0; x < res; ++x) {
      const int tx = x + dx;
      if (tx < 0 || tx >= res) continue;
      (*out)[static_cast<size_t>(ty * res + tx)] = cov[static_cast<size_t>(y * res + x)];
    }
  }
  return true;
}

std::vector<uint8_t> Threshold(const std::vector<uint8_t>& coverage, uint8_t threshold) {
  std::vector<uint8_t> m(coverage.size());
  for (size_t i = 0; i < coverage.size(); ++i) m[i] = coverage[i] >= threshold ? 1 : 0;
  return m;
}

CharStrokes SkeletonStrokes(const std::vector<uint8_t>& coverage, int res,
                            const SkeletonParams& params) {
  CharStrokes out;
  if (res <= 2 || coverage.size() != static_cast<size_t>(res) * static_cast<size_t>(res))
    return out;
  std::vector<uint8_t> mask = Threshold(coverage, params.threshold);
  DropSpecks(&mask, res, params.min_component);
  const std::vector<float> dist = DistanceToBackground(mask, res);
  auto radius = [&](float x, float y) {
    const int ix = std::clamp(static_cast<int>(std::lround(x)), 0, res - 1);
    const int iy = std::clamp(static_cast<int>(std::lround(y)), 0, res - 1);
    return dist[static_cast<size_t>(iy * res + ix)];
  };
  Grid sk(res, res);
  for (int y = 0; y < res; ++y)
    for (int x = 0; x < res; ++x) sk.Set(x, y, mask[static_cast<size_t>(y * res + x)]);
  ZhangSuen(&sk);

  // Nodes: end points (one neighbour), isolated pixels, and clusters of
  // junction pixels (three or more neighbours).
  Grid node_of(res, res);  // node index + 1
  std::vector<Node> nodes;
  for (int y = 0; y < res; ++y) {
    for (int x = 0; x < res; ++x) {
      if (sk.Get(x, y) == 0 || node_of.Get(x, y) != 0) continue;
      const int nb = Neighbours(sk, x, y);
      if (nb == 2) continue;
      Node n;
      n.junction = nb >= 3;
      n.isolated = nb == 0;
      std::vector<Px> stack = {{x, y}};
      node_of.Set(x, y, static_cast<int>(nodes.size()) + 1);
      while (!stack.empty()) {
        Px p = stack.back();
        stack.pop_back();
        n.px.push_back(p);
        if (!n.junction) continue;
        for (int k = 0; k < 8; ++k) {
          const int qx = p.x + kDx[k], qy = p.y + kDy[k];
          if (sk.Get(qx, qy) != 0 && node_of.Get(qx, qy) == 0 && Neighbours(sk, qx, qy) >= 3) {
            node_of.Set(qx, qy, static_cast<int>(nodes.size()) + 1);
            stack.push_back({qx, qy});
          }
        }
      }
      for (const Px& p : n.px) {
        n.centre.x += static_cast<float>(p.x) / static_cast<float>(n.px.size());
        n.centre.y += static_cast<float>(p.y) / static_cast<float>(n.px.size());
      }
      nodes.push_back(std::move(n));
    }
  }
  // Edges: walk from each node along chain pixels to the next node.
  Grid used(res, res);
  std::vector<Edge> edges;
  for (size_t ni = 0; ni < nodes.size(); ++ni) {
    for (const Px start : std::vector<Px>(nodes[ni].px)) {
      for (int k = 0; k < 8; ++k) {
        int x = start.x + kDx[k], y = start.y + kDy[k];
        if (sk.Get(x, y) == 0 || node_of.Get(x, y) != 0 || used.Get(x, y) != 0) continue;
        Edge e;
        e.a = static_cast<int>(ni);
        Px prev = start;
        while (true) {
          e.px.push_back({x, y});
          used.Set(x, y, 1);
          int nx = -1, ny = -1, node_hit = 0;
          // Prefer stepping into a node (other than the start pixel), then 4-neighbours.
          for (int pass = 0; pass < 2 && nx < 0; ++pass) {
            for (int kk = 0; kk < 8; ++kk) {
              const int qx = x + kDx[kk], qy = y + kDy[kk];
              if (sk.Get(qx, qy) == 0 || (qx == prev.x && qy == prev.y)) continue;
              const int nid = node_of.Get(qx, qy);
              if (pass == 0 && nid != 0 && !(nid == e.a + 1 && e.px.size() == 1)) {
                nx = qx, ny = qy, node_hit = nid;
                break;
              }
              if (pass == 1 && nid == 0 && used.Get(qx, qy) == 0) {
                if (nx < 0 || (kk % 2 == 0)) nx = qx, ny = qy;
              }
            }
          }
          if (node_hit != 0) {
            e.b = node_hit - 1;
            break;
          }
          if (nx < 0) {  // ran into used pixels (a chain closing on itself)
            e.b = e.a;
            break;
          }
          prev = {x, y};
          x = nx;
          y = ny;
        }
        edges.push_back(std::move(e));
      }
    }
  }
  // Closed loops with no node (口 drawn as a ring): cut at their top-left pixel.
  for (int y = 0; y < res; ++y) {
    for (int x = 0; x < res; ++x) {
      if (sk.Get(x, y) == 0 || node_of.Get(x, y) != 0 || used.Get(x, y) != 0) continue;
      Node n;
      n.px = {{x, y}};
      n.centre = {static_cast<float>(x), static_cast<float>(y)};
      nodes.push_back(n);
      const int id = static_cast<int>(nodes.size()) - 1;
      node_of.Set(x, y, id + 1);
      Edge e;
      e.a = e.b = id;
      Px cur = {x, y};
      while (true) {
        int nx = -1, ny = -1;
        for (int k = 0; k < 8; ++k) {
          const int qx = cur.x + kDx[k], qy = cur.y + kDy[k];
          if (sk.Get(qx, qy) != 0 && node_of.Get(qx, qy) == 0 && used.Get(qx, qy) == 0) {
            nx = qx, ny = qy;
            break;
          }
        }
        if (nx < 0) break;
        used.Set(nx, ny, 1);
        e.px.push_back({nx, ny});
        cur = {nx, ny};
      }
      if (!e.px.empty()) edges.push_back(std::move(e));
    }
  }
  auto attach = [&]() {
    for (Node& n : nodes) n.ends.clear();
    for (size_t i = 0; i < edges.size(); ++i) {
      if (edges[i].removed) continue;
      nodes[static_cast<size_t>(edges[i].a)].ends.push_back({static_cast<int>(i), 0});
      nodes[static_cast<size_t>(edges[i].b)].ends.push_back({static_cast<int>(i), 1});
    }
  };
  // Tiny loops at a junction (thinning leaves a 2 x 2 block as a ring).
  for (Edge& e : edges) {
    if (e.a != e.b) continue;
    const Node& n = nodes[static_cast<size_t>(e.a)];
    if (static_cast<float>(e.px.size()) < std::max(8.0f, 2 * radius(n.centre.x, n.centre.y)))
      e.removed = true;
  }
  attach();
  // Spurs: an edge from an end point to a junction, shorter than the stroke's
  // half-width there.
  for (Edge& e : edges) {
    const Node& na = nodes[static_cast<size_t>(e.a)];
    const Node& nb = nodes[static_cast<size_t>(e.b)];
    const bool a_end = !na.junction && na.ends.size() == 1,
               b_end = !nb.junction && nb.ends.size() == 1;
    if (a_end == b_end) continue;
    const Node& j = a_end ? nb : na;
    if (j.ends.size() < 3) continue;
    const float r = radius(j.centre.x, j.centre.y);
    if (static_cast<float>(e.px.size()) < params.spur_factor * r + 2) e.removed = true;
  }
  attach();
  // Pair the edge ends at each junction that continue each other.
  using Link = std::array<std::pair<int, int>, 2>;
  std::vector<Link> link(edges.size(), Link{std::pair{-1, -1}, std::pair{-1, -1}});
  for (const Node& n : nodes) {
    if (n.ends.size() < 2) continue;
    const int reach = static_cast<int>(std::lround(std::max(3.0f, radius(n.centre.x, n.centre.y))));
    if (n.ends.size() == 2) {
      auto [e0, s0] = n.ends[0];
      auto [e1, s1] = n.ends[1];
      if (e0 == e1) continue;  // a loop's own two ends
      link[static_cast<size_t>(e0)][static_cast<size_t>(s0)] = {e1, s1};
      link[static_cast<size_t>(e1)][static_cast<size_t>(s1)] = {e0, s0};
      continue;
    }
    struct Cand {
      float straight;
      size_t i, j;
    };
    std::vector<Cand> cands;
    for (size_t i = 0; i < n.ends.size(); ++i) {
      for (size_t j = i + 1; j < n.ends.size(); ++j) {
        const auto [ei, si] = n.ends[i];
        const auto [ej, sj] = n.ends[j];
        if (ei == ej) continue;
        const Vec di = Leaving(n, edges[static_cast<size_t>(ei)], si, reach);
        const Vec dj = Leaving(n, edges[static_cast<size_t>(ej)], sj, reach);
        const float straight = -Dot(di, dj);  // 1: opposite directions, a straight pass
        if (straight > 0.7071f) cands.push_back({straight, i, j});
      }
    }
    std::sort(cands.begin(), cands.end(),
              [](const Cand& a, const Cand& b) { return a.straight > b.straight; });
    std::vector<bool> taken(n.ends.size(), false);
    for (const Cand& c : cands) {
      if (taken[c.i] || taken[c.j]) continue;
      taken[c.i] = taken[c.j] = true;
      const auto [ei, si] = n.ends[c.i];
      const auto [ej, sj] = n.ends[c.j];
      link[static_cast<size_t>(ei)][static_cast<size_t>(si)] = {ej, sj};
      link[static_cast<size_t>(ej)][static_cast<size_t>(sj)] = {ei, si};
    }
  }
  // Chains of linked edges become paths (pixels, junction centres between).
  std::vector<bool> done(edges.size(), false);
  std::vector<std::vector<PathPoint>> paths;
  std::vector<std::vector<int>> path_edges;
  auto walk = [&](int e0, int enter_end) {
    std::vector<PathPoint> pts;
    std::vector<int> es;
    int e = e0, enter = enter_end;
    {
      const Node& n = nodes[static_cast<size_t>(enter == 0 ? edges[static_cast<size_t>(e)].a
                                                           : edges[static_cast<size_t>(e)].b)];
      pts.push_back({n.centre.x, n.centre.y, radius(n.centre.x, n.centre.y)});
    }
    while (e >= 0 && !done[static_cast<size_t>(e)]) {
      done[static_cast<size_t>(e)] = true;
      es.push_back(e);
      const Edge& ed = edges[static_cast<size_t>(e)];
      if (enter == 0) {
        for (const Px& p : ed.px)
          pts.push_back({static_cast<float>(p.x), static_cast<float>(p.y), 0});
      } else {
        for (auto it = ed.px.rbegin(); it != ed.px.rend(); ++it)
          pts.push_back({static_cast<float>(it->x), static_cast<float>(it->y), 0});
      }
      const int exit_end = 1 - enter;
      const Node& n = nodes[static_cast<size_t>(exit_end == 0 ? ed.a : ed.b)];
      pts.push_back({n.centre.x, n.centre.y, 0});
      auto [ne, nend] = link[static_cast<size_t>(e)][static_cast<size_t>(exit_end)];
      e = ne;
      enter = nend;
    }
    for (PathPoint& p : pts) p.r = radius(p.x, p.y);
    paths.push_back(std::move(pts));
    path_edges.push_back(std::move(es));
  };
  for (size_t i = 0; i < edges.size(); ++i) {
    if (edges[i].removed || done[i]) continue;
    for (int end = 0; end < 2; ++end) {
      if (!done[i] && link[i][static_cast<size_t>(end)].first < 0) walk(static_cast<int>(i), end);
    }
  }
  for (size_t i = 0; i < edges.size(); ++i) {
    if (!edges[i].removed && !done[i]) walk(static_cast<int>(i), 0);  // cycles of links
  }
  // Isolated dots (a node with no edge): one point.
  for (const Node& n : nodes) {
    if (n.isolated) {
      paths.push_back({{n.centre.x, n.centre.y, radius(n.centre.x, n.centre.y)}});
      path_edges.emplace_back();
    }
  }
  // Orient: mostly horizontal paths left to right, others top to bottom.
  struct Ordered {
    std::vector<PathPoint> pts;
    std::vector<int> edges;
    bool horizontal;
  };
  std::vector<Ordered> ord;
  for (size_t i = 0; i < paths.size(); ++i) {
    auto& p = paths[i];
    const float dx = p.back().x - p.front().x, dy = p.back().y - p.front().y;
    const bool horizontal = std::fabs(dx) > 2 * std::fabs(dy);
    if (horizontal ? dx < 0 : dy < 0) std::reverse(p.begin(), p.end());
    ord.push_back({std::move(p), std::move(path_edges[i]), horizontal});
  }
  // Top to bottom (bands of 1/16 of the box), then left to right.
  const float band = static_cast<float>(res) / 16.0f;
  std::stable_sort(ord.begin(), ord.end(), [&](const Ordered& a, const Ordered& b) {
    const int ba = static_cast<int>(a.pts.front().y / band),
              bb = static_cast<int>(b.pts.front().y / band);
    if (ba != bb) return ba < bb;
    return a.pts.front().x < b.pts.front().x;
  });
  // A horizontal path goes before a non-horizontal one it crosses (they share
  // a junction both pass through).
  auto nodes_of = [&](const Ordered& o) {
    std::vector<int> ns;
    for (size_t k = 1; k < o.edges.size(); ++k) {  // interior junctions: between consecutive edges
      const Edge& prev = edges[static_cast<size_t>(o.edges[k - 1])];
      const Edge& cur = edges[static_cast<size_t>(o.edges[k])];
      for (int a : {prev.a, prev.b})
        for (int b : {cur.a, cur.b})
          if (a == b) ns.push_back(a);
    }
    return ns;
  };
  for (size_t i = 0; i < ord.size(); ++i) {
    if (!ord[i].horizontal) continue;
    const std::vector<int> hn = nodes_of(ord[i]);
    for (size_t j = 0; j < i; ++j) {
      if (ord[j].horizontal) continue;
      const std::vector<int> vn = nodes_of(ord[j]);
      const bool cross = std::any_of(hn.begin(), hn.end(), [&](int n) {
        return std::find(vn.begin(), vn.end(), n) != vn.end();
      });
      if (cross) {
        std::rotate(ord.begin() + static_cast<ptrdiff_t>(j),
                    ord.begin() + static_cast<ptrdiff_t>(i),
                    ord.begin() + static_cast<ptrdiff_t>(i) + 1);
        break;
      }
    }
  }
  // Simplify and convert to the 1024 box.
  const float scale = 1024.0f / static_cast<float>(res);
  for (const Ordered& o : ord) {
    std::vector<bool> keep(o.pts.size(), false);
    keep.front() = keep.back() = true;
    DouglasPeucker(o.pts, 0, o.pts.size() - 1, 0.75f, &keep);
    std::vector<PathPoint> kept;
    for (size_t k = 0; k < o.pts.size(); ++k)
      if (keep[k]) kept.push_back(o.pts[k]);
    while (kept.size() > 255) {  // the file's u8 point count
      std::vector<PathPoint> half;
      for (size_t k = 0; k < kept.size(); k += 2) half.push_back(kept[k]);
      if (half.back().x != kept.back().x || half.back().y != kept.back().y)
        half.push_back(kept.back());
      kept = std::move(half);
    }
    Stroke s;
    for (const PathPoint& p : kept) {
      // The distance is to the nearest background pixel's centre: the edge is half a pixel nearer.
      s.points.push_back(
          {(p.x + 0.5f) * scale, (p.y + 0.5f) * scale, std::max(0.5f, p.r - 0.5f) * scale});
    }
    out.strokes.push_back(std::move(s));
    if (out.strokes.size() == 255) break;  // the file's u8 stroke count
  }
  return out;
}

std::vector<uint8_t> RasterizeStrokes(const CharStrokes& strokes, int res) {
  std::vector<uint8_t> m(static_cast<size_t>(res) * static_cast<size_t>(res), 0);
  const float s = static_cast<float>(res) / 1024.0f;
  auto capsule = [&](const MedianPoint& a, const MedianPoint& b) {
    const float ax = a.x * s - 0.5f, ay = a.y * s - 0.5f, bx = b.x * s - 0.5f, by = b.y * s - 0.5f;
    const float ra = a.half_width * s, rb = b.half_width * s;
    const float rmax = std::max(ra, rb);
    const int x0 = std::max(0, static_cast<int>(std::floor(std::min(ax, bx) - rmax)));
    const int x1 = std::min(res - 1, static_cast<int>(std::ceil(std::max(ax, bx) + rmax)));
    const int y0 = std::max(0, static_cast<int>(std::floor(std::min(ay, by) - rmax)));
    const int y1 = std::min(res - 1, static_cast<int>(std::ceil(std::max(ay, by) + rmax)));
    const float dx = bx - ax, dy = by - ay, l2 = dx * dx + dy * dy;
    for (int y = y0; y <= y1; ++y) {
      for (int x = x0; x <= x1; ++x) {
        float t = l2 > 0
                      ? ((static_cast<float>(x) - ax) * dx + (static_cast<float>(y) - ay) * dy) / l2
                      : 0;
        t = std::clamp(t, 0.0f, 1.0f);
        const float px = ax + t * dx - static_cast<float>(x),
                    py = ay + t * dy - static_cast<float>(y);
        const float r = ra + t * (rb - ra);
        if (px * px + py * py <= r * r) m[static_cast<size_t>(y * res + x)] = 1;
      }
    }
  };
  for (const Stroke& st : strokes.strokes) {
    if (st.points.size() == 1) capsule(st.points[0], st.points[0]);
    for (size_t k = 1; k < st.points.size(); ++k) capsule(st.points[k - 1], st.points[k]);
  }
  return m;
}

double MaskIoU(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  size_t inter = 0, uni = 0;
  const size_t n = std::min(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    const bool x = a[i] != 0, y = b[i] != 0;
    inter += (x && y) ? 1 : 0;
    uni += (x || y) ? 1 : 0;
  }
  for (size_t i = n; i < a.size(); ++i) uni += a[i] != 0 ? 1 : 0;
  for (size_t i = n; i < b.size(); ++i) uni += b[i] != 0 ? 1 : 0;
  return uni == 0 ? 1.0 : static_cast<double>(inter) / static_cast<double>(uni);
}

std::vector<uint8_t> FitToSquare(const std::vector<uint8_t>& m, int res, int out) {
  std::vector<uint8_t> o(static_cast<size_t>(out) * static_cast<size_t>(out), 0);
  if (res <= 0 || out <= 0 || m.size() != static_cast<size_t>(res) * static_cast<size_t>(res))
    return o;
  int x0 = res, y0 = res, x1 = -1, y1 = -1;
  for (int y = 0; y < res; ++y) {
    for (int x = 0; x < res; ++x) {
      if (m[static_cast<size_t>(y * res + x)] == 0) continue;
      x0 = std::min(x0, x);
      x1 = std::max(x1, x);
      y0 = std::min(y0, y);
      y1 = std::max(y1, y);
    }
  }
  if (x1 < 0) return o;
  const float bw = static_cast<float>(x1 - x0 + 1), bh = static_cast<float>(y1 - y0 + 1);
  const float k = static_cast<float>(out) / std::max(bw, bh);
  const float ox = 0.5f * (static_cast<float>(out) - bw * k),
              oy = 0.5f * (static_cast<float>(out) - bh * k);
  for (int y = 0; y < out; ++y) {
    for (int x = 0; x < out; ++x) {
      const int sx = x0 + static_cast<int>(std::floor((static_cast<float>(x) + 0.5f - ox) / k));
      const int sy = y0 + static_cast<int>(std::floor((static_cast<float>(y) + 0.5f - oy) / k));
      if (sx < x0 || sx > x1 || sy < y0 || sy > y1) continue;
      o[static_cast<size_t>(y * out + x)] = m[static_cast<size_t>(sy * res + sx)] != 0 ? 1 : 0;
    }
  }
  return o;
}

void JoinTouchingPaths(CharStrokes* ch) {
  std::vector<Stroke> out;
  for (auto& st : ch->strokes) {
    if (st.points.empty()) continue;
    if (!out.empty()) {
      const MedianPoint& a = out.back().points.back();
      const MedianPoint& b = st.points.front();
      const float gap = std::hypot(a.x - b.x, a.y - b.y);
      if (gap < 0.9f * (a.half_width + b.half_width) + 6.0f) {
        out.back().points.insert(out.back().points.end(), st.points.begin(), st.points.end());
        continue;
      }
    }
    out.push_back(std::move(st));
  }
  ch->strokes = std::move(out);
}

}  // namespace danqing::render
