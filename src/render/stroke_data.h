// StrokeData: the characters' strokes in writing order, from the strokes.bin
// file that tools/strokes/build_strokes.js builds out of hanzi-writer-data
// (Arphic Public License; the licence text ships next to the file).
//
// Each stroke is its median polyline in hanzi-writer's 1024 box, converted here
// to screen orientation (y down: screen_y = 900 - y), with the stroke's
// half-width at each median point as measured from the stroke's outline.
//
// The file is mmap'd read-only and never modified; Lookup() only reads it.
// Thread-safety: immutable after Open(); safe to share across threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace danqing::render {

struct MedianPoint {
  float x = 0, y = 0;   // 1024 box, y down
  float half_width = 0; // in box units; 0 where the median point left the outline
};

struct Stroke {
  std::vector<MedianPoint> points;
};

struct CharStrokes {
  std::vector<Stroke> strokes;
};

class StrokeData {
 public:
  // Maps the file. Errors: NotFound (no file), InvalidArgument (not a strokes
  // file, or truncated/corrupt index).
  static Result<std::unique_ptr<StrokeData>> Open(const std::string& path);
  ~StrokeData();
  StrokeData(const StrokeData&) = delete;
  StrokeData& operator=(const StrokeData&) = delete;

  bool Has(char32_t c) const;
  // False when the character is absent or its record is corrupt.
  bool Lookup(char32_t c, CharStrokes* out) const;
  size_t size() const { return count_; }
  size_t file_bytes() const { return bytes_; }

 private:
  StrokeData() = default;
  const uint8_t* Find(char32_t c) const;

  const uint8_t* base_ = nullptr;
  size_t bytes_ = 0;
  size_t count_ = 0;
};

}  // namespace danqing::render
