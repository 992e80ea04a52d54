// Seeded random numbers for the renderer: SplitMix64, so a seed gives the same
// image on every machine and thread count.
#pragma once

#include <cstdint>

namespace danqing::render {

inline uint64_t Mix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

inline float Hash01(uint32_t v) {
  return static_cast<float>(Mix64(v) >> 40) * (1.0f / 16777216.0f);
}

class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  Rng(uint64_t seed, uint64_t stream) : state_(Mix64(seed ^ Mix64(stream))) {}
  uint64_t Next() { return Mix64(state_++); }
  float Uniform() { return static_cast<float>(Next() >> 40) * (1.0f / 16777216.0f); }  // [0,1)
  float Range(float a, float b) { return a + (b - a) * Uniform(); }
  float Signed() { return Uniform() * 2.0f - 1.0f; }  // [-1,1)
  int Int(int n) { return static_cast<int>(Next() % static_cast<uint64_t>(n)); }

 private:
  uint64_t state_;
};

}  // namespace danqing::render
