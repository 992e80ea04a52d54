#include "ocr/ocr.h"

#include <onnxruntime_c_api.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <numeric>
#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>
#include <sstream>

#include "common/utf8.h"

namespace danqing::ocr {

namespace {

constexpr char kDetModel[] = "ch_PP-OCRv4_det_infer.onnx";
constexpr char kRecModel[] = "ch_PP-OCRv4_rec_infer.onnx";
constexpr char kDictionary[] = "ppocr_keys_v1.txt";
constexpr int kRecHeight = 48;
constexpr int kRecMinWidth = 320;  // PaddleOCR's rec_image_shape [3, 48, 320]

float Dist(const Point& a, const Point& b) {
  return std::hypot(a.x - b.x, a.y - b.y);
}

// PaddleOCR's get_mini_boxes: the rectangle's corners as top-left, top-right,
// bottom-right, bottom-left.
std::array<Point, 4> OrderCorners(const cv::RotatedRect& r) {
  cv::Point2f p[4];
  r.points(p);
  std::sort(p, p + 4, [](const cv::Point2f& a, const cv::Point2f& b) { return a.x < b.x; });
  cv::Point2f tl = p[0], bl = p[1], tr = p[2], br = p[3];
  if (p[1].y < p[0].y) std::swap(tl, bl);
  if (p[3].y < p[2].y) {
    tr = p[3];
    br = p[2];
  }
  return {Point{tl.x, tl.y}, Point{tr.x, tr.y}, Point{br.x, br.y}, Point{bl.x, bl.y}};
}

float BoxScore(const cv::Mat& prob, const std::array<Point, 4>& c) {
  const int w = prob.cols, h = prob.rows;
  float minx = c[0].x, maxx = c[0].x, miny = c[0].y, maxy = c[0].y;
  for (const Point& p : c) {
    minx = std::min(minx, p.x);
    maxx = std::max(maxx, p.x);
    miny = std::min(miny, p.y);
    maxy = std::max(maxy, p.y);
  }
  const int x0 = std::clamp(static_cast<int>(std::floor(minx)), 0, w - 1);
  const int x1 = std::clamp(static_cast<int>(std::ceil(maxx)), 0, w - 1);
  const int y0 = std::clamp(static_cast<int>(std::floor(miny)), 0, h - 1);
  const int y1 = std::clamp(static_cast<int>(std::ceil(maxy)), 0, h - 1);
  cv::Mat mask = cv::Mat::zeros(y1 - y0 + 1, x1 - x0 + 1, CV_8UC1);
  std::vector<cv::Point> poly;
  for (const Point& p : c) {
    poly.emplace_back(static_cast<int>(std::lround(p.x)) - x0,
                      static_cast<int>(std::lround(p.y)) - y0);
  }
  cv::fillPoly(mask, std::vector<std::vector<cv::Point>>{poly}, cv::Scalar(1));
  return static_cast<float>(cv::mean(prob(cv::Rect(x0, y0, x1 - x0 + 1, y1 - y0 + 1)), mask)[0]);
}

// RGB -> BGR float planes (NCHW), value = (v / 255 - mean[c]) / std[c].
void ToPlanes(const cv::Mat& rgb, const float mean[3], const float stddev[3], float* out) {
  const size_t plane = static_cast<size_t>(rgb.rows) * static_cast<size_t>(rgb.cols);
  for (int y = 0; y < rgb.rows; ++y) {
    const uint8_t* row = rgb.ptr<uint8_t>(y);
    for (int x = 0; x < rgb.cols; ++x) {
      const size_t i =
          static_cast<size_t>(y) * static_cast<size_t>(rgb.cols) + static_cast<size_t>(x);
      for (int c = 0; c < 3; ++c) {
        const float v = row[x * 3 + (2 - c)] / 255.0f;  // channel 0 is blue
        out[static_cast<size_t>(c) * plane + i] = (v - mean[c]) / stddev[c];
      }
    }
  }
}

cv::Mat AsMat(const image::Image& img) {
  // OpenCV does not write through this header; the const_cast only satisfies its constructor.
  return cv::Mat(img.height, img.width, CV_8UC3, const_cast<uint8_t*>(img.rgb.data()));
}

image::Image FromMat(const cv::Mat& m) {
  image::Image out;
  out.width = m.cols;
  out.height = m.rows;
  out.rgb.resize(static_cast<size_t>(m.cols) * static_cast<size_t>(m.rows) * 3);
  for (int y = 0; y < m.rows; ++y) std::copy_n(m.ptr<uint8_t>(y), m.cols * 3, out.row(y));
  return out;
}

}  // namespace

float TextBox::Width() const {
  return std::max(Dist(corners[0], corners[1]), Dist(corners[3], corners[2]));
}
float TextBox::Height() const {
  return std::max(Dist(corners[0], corners[3]), Dist(corners[1], corners[2]));
}
Point TextBox::Centre() const {
  Point c;
  for (const Point& p : corners) {
    c.x += p.x / 4;
    c.y += p.y / 4;
  }
  return c;
}

std::string DefaultModelsDir() {
  if (const char* env = std::getenv("DANQING_OCR_MODELS"); env != nullptr && *env != '\0')
    return env;
#ifdef DANQING_OCR_MODELS_DIR
  return DANQING_OCR_MODELS_DIR;
#else
  return "";
#endif
}

std::vector<TextBox> BoxesFromProbability(const float* prob, int w, int h, float sx, float sy,
                                          const DbParams& params) {
  std::vector<TextBox> boxes;
  if (prob == nullptr || w <= 0 || h <= 0) return boxes;
  cv::Mat pm(h, w, CV_32FC1, const_cast<float*>(prob));
  cv::Mat bitmap = pm > params.threshold;  // 255 where text
  std::vector<std::vector<cv::Point>> contours;
  cv::findContours(bitmap, contours, cv::RETR_LIST, cv::CHAIN_APPROX_SIMPLE);
  const size_t n =
      std::min(contours.size(), static_cast<size_t>(std::max(0, params.max_candidates)));
  for (size_t i = 0; i < n; ++i) {
    if (contours[i].size() < 3) continue;
    cv::RotatedRect r = cv::minAreaRect(contours[i]);
    if (std::min(r.size.width, r.size.height) < params.min_side) continue;
    const float score = BoxScore(pm, OrderCorners(r));
    if (score < params.box_threshold) continue;
    // Unclip: offsetting a w x h rectangle by d gives (w + 2d) x (h + 2d)
    // once the rounded corners are boxed again.
    const float area = r.size.width * r.size.height;
    const float perimeter = 2 * (r.size.width + r.size.height);
    const float d = area * params.unclip_ratio / perimeter;
    r.size.width += 2 * d;
    r.size.height += 2 * d;
    if (std::min(r.size.width, r.size.height) < params.min_side + 2) continue;
    TextBox box;
    box.corners = OrderCorners(r);
    for (Point& p : box.corners) {
      p.x = std::clamp(p.x * sx, 0.0f, w * sx);
      p.y = std::clamp(p.y * sy, 0.0f, h * sy);
    }
    box.score = score;
    boxes.push_back(box);
  }
  return boxes;
}

image::Image CropLine(const image::Image& rgb, const TextBox& box) {
  const int cw = std::max(1, static_cast<int>(box.Width()));
  const int ch = std::max(1, static_cast<int>(box.Height()));
  cv::Point2f src[4], dst[4];
  for (int i = 0; i < 4; ++i)
    src[i] =
        cv::Point2f(box.corners[static_cast<size_t>(i)].x, box.corners[static_cast<size_t>(i)].y);
  dst[0] = {0, 0};
  dst[1] = {static_cast<float>(cw), 0};
  dst[2] = {static_cast<float>(cw), static_cast<float>(ch)};
  dst[3] = {0, static_cast<float>(ch)};
  cv::Mat m = cv::getPerspectiveTransform(src, dst);
  cv::Mat out;
  cv::warpPerspective(AsMat(rgb), out, m, cv::Size(cw, ch), cv::INTER_CUBIC, cv::BORDER_REPLICATE);
  if (box.Vertical()) cv::rotate(out, out, cv::ROTATE_90_COUNTERCLOCKWISE);
  return FromMat(out);
}

std::vector<size_t> ReadingOrder(const std::vector<TextBox>& boxes, bool vertical) {
  struct Extent {
    float lo, hi, along;  // across the reading direction's lines, and along them
  };
  std::vector<Extent> e;
  for (const TextBox& b : boxes) {
    float lo = 1e30f, hi = -1e30f;
    for (const Point& p : b.corners) {
      const float v = vertical ? p.x : p.y;
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
    const Point c = b.Centre();
    e.push_back({lo, hi, vertical ? c.y : c.x});
  }
  std::vector<size_t> idx(boxes.size());
  std::iota(idx.begin(), idx.end(), 0);
  // Lines (columns or rows) by their centre: right to left, or top to bottom.
  std::sort(idx.begin(), idx.end(), [&](size_t a, size_t b) {
    const float ca = (e[a].lo + e[a].hi) / 2, cb = (e[b].lo + e[b].hi) / 2;
    return vertical ? ca > cb : ca < cb;
  });
  std::vector<std::vector<size_t>> groups;
  for (size_t i : idx) {
    bool placed = false;
    if (!groups.empty()) {
      auto& g = groups.back();
      const Extent& a = e[g.front()];
      const Extent& b = e[i];
      const float overlap = std::min(a.hi, b.hi) - std::max(a.lo, b.lo);
      const float narrow = std::min(a.hi - a.lo, b.hi - b.lo);
      if (overlap >= 0.5f * narrow) {
        g.push_back(i);
        placed = true;
      }
    }
    if (!placed) groups.push_back({i});
  }
  std::vector<size_t> order;
  for (auto& g : groups) {
    std::stable_sort(g.begin(), g.end(),
                     [&](size_t a, size_t b) { return e[a].along < e[b].along; });
    order.insert(order.end(), g.begin(), g.end());
  }
  return order;
}

std::u32string CtcGreedyDecode(const float* scores, int steps, int classes,
                               const std::vector<char32_t>& dictionary, float* score) {
  std::u32string out;
  double sum = 0;
  int kept = 0;
  int prev = -1;
  for (int t = 0; t < steps; ++t) {
    const float* row = scores + static_cast<size_t>(t) * static_cast<size_t>(classes);
    const int best = static_cast<int>(std::max_element(row, row + classes) - row);
    if (best != 0 && best != prev) {
      const size_t k = static_cast<size_t>(best - 1);
      out.push_back(k < dictionary.size() ? dictionary[k] : U' ');
      sum += row[best];
      ++kept;
    }
    prev = best;
  }
  if (score != nullptr) *score = kept > 0 ? static_cast<float>(sum / kept) : 0.0f;
  return out;
}

Result<std::vector<char32_t>> ParseDictionary(std::string_view text) {
  std::vector<char32_t> dict;
  size_t line = 0;
  while (!text.empty()) {
    ++line;
    const size_t nl = text.find('\n');
    std::string_view l = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
    auto cps = DecodeUtf8(l);
    if (!cps.ok()) {
      return InvalidArgument("dictionary line " + std::to_string(line) + ": " +
                             cps.status().message());
    }
    if (cps->size() != 1) {
      return InvalidArgument("dictionary line " + std::to_string(line) + ": " +
                             std::to_string(cps->size()) + " characters, expected one");
    }
    dict.push_back((*cps)[0]);
  }
  if (dict.empty()) return InvalidArgument("dictionary: empty");
  return dict;
}

int AlignedMatches(std::u32string_view written, std::u32string_view read) {
  // Minimum edit distance; among the alignments that reach it, the most matches.
  struct Cell {
    int cost = 0, matches = 0;
    bool operator<(const Cell& o) const {
      return cost != o.cost ? cost < o.cost : matches > o.matches;
    }
  };
  const size_t n = written.size(), m = read.size();
  std::vector<Cell> d((n + 1) * (m + 1));
  auto at = [&](size_t i, size_t j) -> Cell& { return d[i * (m + 1) + j]; };
  for (size_t i = 0; i <= n; ++i) at(i, 0) = {static_cast<int>(i), 0};
  for (size_t j = 0; j <= m; ++j) at(0, j) = {static_cast<int>(j), 0};
  for (size_t i = 1; i <= n; ++i) {
    for (size_t j = 1; j <= m; ++j) {
      const Cell& diag = at(i - 1, j - 1);
      const bool same = written[i - 1] == read[j - 1];
      Cell best{diag.cost + (same ? 0 : 1), diag.matches + (same ? 1 : 0)};
      best = std::min(best, Cell{at(i - 1, j).cost + 1, at(i - 1, j).matches});
      best = std::min(best, Cell{at(i, j - 1).cost + 1, at(i, j - 1).matches});
      at(i, j) = best;
    }
  }
  return at(n, m).matches;
}

// --- ONNX Runtime ---

struct Ocr::Impl {
  const OrtApi* api = nullptr;
  OrtEnv* env = nullptr;
  OrtSession* det = nullptr;
  OrtSession* rec = nullptr;
  OrtMemoryInfo* mem = nullptr;
  std::string det_in, det_out, rec_in, rec_out;
  std::vector<char32_t> dictionary;
  int det_limit_side = 960;

  ~Impl() {
    if (api == nullptr) return;
    if (mem != nullptr) api->ReleaseMemoryInfo(mem);
    if (det != nullptr) api->ReleaseSession(det);
    if (rec != nullptr) api->ReleaseSession(rec);
  }

  // OK, or INTERNAL with ONNX Runtime's message ("<what>: <message>").
  Status Check(OrtStatus* s, const std::string& what) const {
    if (s == nullptr) return Status::Ok();
    std::string msg = what + ": " + api->GetErrorMessage(s);
    const OrtErrorCode code = api->GetErrorCode(s);
    api->ReleaseStatus(s);
    if (code == ORT_NO_SUCHFILE) return NotFound(msg);
    if (code == ORT_INVALID_PROTOBUF || code == ORT_INVALID_GRAPH || code == ORT_INVALID_ARGUMENT) {
      return InvalidArgument(msg);
    }
    return Internal(msg);
  }

  Result<std::string> IoName(OrtSession* s, bool input, const std::string& model) const {
    OrtAllocator* alloc = nullptr;
    if (Status st = Check(api->GetAllocatorWithDefaultOptions(&alloc), "ONNX Runtime allocator");
        !st.ok())
      return st;
    char* name = nullptr;
    OrtStatus* os = input ? api->SessionGetInputName(s, 0, alloc, &name)
                          : api->SessionGetOutputName(s, 0, alloc, &name);
    if (Status st = Check(os, model + ": input/output name"); !st.ok()) return st;
    std::string out(name);
    if (OrtStatus* freed = api->AllocatorFree(alloc, name); freed != nullptr)
      api->ReleaseStatus(freed);
    return out;
  }

  // Runs `s` on one float tensor; the output's data and shape.
  Status RunOne(OrtSession* s, const std::string& in_name, const std::string& out_name,
                std::vector<float>& input, const std::vector<int64_t>& shape,
                std::vector<float>* out, std::vector<int64_t>* out_shape, const char* what) const {
    OrtValue* in = nullptr;
    if (Status st = Check(api->CreateTensorWithDataAsOrtValue(
                              mem, input.data(), input.size() * sizeof(float), shape.data(),
                              shape.size(), ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT, &in),
                          std::string(what) + ": input tensor");
        !st.ok()) {
      return st;
    }
    const char* in_names[] = {in_name.c_str()};
    const char* out_names[] = {out_name.c_str()};
    OrtValue* result = nullptr;
    Status st = Check(api->Run(s, nullptr, in_names, &in, 1, out_names, 1, &result),
                      std::string(what) + ": run");
    api->ReleaseValue(in);
    if (!st.ok()) return st;
    OrtTensorTypeAndShapeInfo* info = nullptr;
    st = Check(api->GetTensorTypeAndShape(result, &info), std::string(what) + ": output shape");
    size_t dims = 0;
    if (st.ok())
      st = Check(api->GetDimensionsCount(info, &dims), std::string(what) + ": output rank");
    if (st.ok()) {
      out_shape->assign(dims, 0);
      st = Check(api->GetDimensions(info, out_shape->data(), dims),
                 std::string(what) + ": output dims");
    }
    if (info != nullptr) api->ReleaseTensorTypeAndShapeInfo(info);
    float* data = nullptr;
    if (st.ok())
      st = Check(api->GetTensorMutableData(result, reinterpret_cast<void**>(&data)),
                 std::string(what) + ": output data");
    if (st.ok()) {
      size_t count = 1;
      for (int64_t v : *out_shape) count *= static_cast<size_t>(std::max<int64_t>(v, 0));
      out->assign(data, data + count);
    }
    api->ReleaseValue(result);
    return st;
  }
};

Ocr::Ocr() = default;
Ocr::~Ocr() = default;

size_t Ocr::dictionary_size() const {
  return impl_->dictionary.size();
}

Result<std::unique_ptr<Ocr>> Ocr::Open(const OcrConfig& config) {
  const std::string dir = config.models_dir.empty() ? DefaultModelsDir() : config.models_dir;
  if (dir.empty()) return NotFound("OCR models: no directory configured (set DANQING_OCR_MODELS)");
  namespace fs = std::filesystem;
  for (const char* f : {kDetModel, kRecModel, kDictionary}) {
    std::error_code ec;
    if (!fs::is_regular_file(fs::path(dir) / f, ec))
      return NotFound("OCR models: " + (fs::path(dir) / f).string() + ": no such file");
  }
  std::unique_ptr<Ocr> ocr(new Ocr());
  ocr->impl_ = std::make_unique<Impl>();
  Impl& im = *ocr->impl_;
  im.det_limit_side = std::max(32, config.det_limit_side);
  {
    std::ifstream in(fs::path(dir) / kDictionary, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    auto dict = ParseDictionary(ss.str());
    if (!dict.ok()) return dict.status().WithContext(std::string("OCR ") + kDictionary);
    im.dictionary = std::move(dict).value();
  }
  im.api = OrtGetApiBase()->GetApi(ORT_API_VERSION);
  if (im.api == nullptr)
    return Unavailable("ONNX Runtime: the library does not offer API version " +
                       std::to_string(ORT_API_VERSION));
  // One environment for the process: ONNX Runtime shares it (never released).
  static std::once_flag once;
  static OrtEnv* env = nullptr;
  static OrtStatus* env_status = nullptr;
  const OrtApi* api = im.api;
  std::call_once(
      once, [api] { env_status = api->CreateEnv(ORT_LOGGING_LEVEL_ERROR, "danqing-ocr", &env); });
  if (env == nullptr) {
    return Internal(std::string("ONNX Runtime: CreateEnv failed: ") +
                    (env_status != nullptr ? api->GetErrorMessage(env_status) : "?"));
  }
  im.env = env;
  OrtSessionOptions* opts = nullptr;
  if (Status st = im.Check(api->CreateSessionOptions(&opts), "ONNX Runtime session options");
      !st.ok())
    return st;
  Status st =
      im.Check(api->SetIntraOpNumThreads(opts, std::max(1, config.threads)), "intra-op threads");
  if (st.ok()) st = im.Check(api->SetInterOpNumThreads(opts, 1), "inter-op threads");
  if (st.ok())
    st =
        im.Check(api->SetSessionGraphOptimizationLevel(opts, ORT_ENABLE_ALL), "graph optimisation");
  if (st.ok())
    st = im.Check(api->CreateSession(env, (fs::path(dir) / kDetModel).c_str(), opts, &im.det),
                  std::string("OCR detector ") + kDetModel);
  if (st.ok())
    st = im.Check(api->CreateSession(env, (fs::path(dir) / kRecModel).c_str(), opts, &im.rec),
                  std::string("OCR recogniser ") + kRecModel);
  api->ReleaseSessionOptions(opts);
  if (!st.ok()) return st;
  if (st = im.Check(api->CreateCpuMemoryInfo(OrtArenaAllocator, OrtMemTypeDefault, &im.mem),
                    "CPU memory info");
      !st.ok())
    return st;
  auto name = im.IoName(im.det, true, kDetModel);
  if (!name.ok()) return name.status();
  im.det_in = *name;
  if (name = im.IoName(im.det, false, kDetModel); !name.ok()) return name.status();
  im.det_out = *name;
  if (name = im.IoName(im.rec, true, kRecModel); !name.ok()) return name.status();
  im.rec_in = *name;
  if (name = im.IoName(im.rec, false, kRecModel); !name.ok()) return name.status();
  im.rec_out = *name;
  // The recogniser's classes: blank, the dictionary, a space.
  image::Image probe = image::Image::Filled(96, kRecHeight);
  auto line = ocr->Recognize(probe);
  if (!line.ok()) return line.status().WithContext("OCR recogniser probe");
  return ocr;
}

Result<std::vector<TextBox>> Ocr::Detect(const image::Image& rgb) const {
  if (rgb.empty()) return InvalidArgument("OCR detect: empty image");
  const Impl& im = *impl_;
  const int longer = std::max(rgb.width, rgb.height);
  const float ratio = longer > im.det_limit_side
                          ? static_cast<float>(im.det_limit_side) / static_cast<float>(longer)
                          : 1.0f;
  auto round32 = [](float v) {
    return std::max(32, static_cast<int>(std::lround(v / 32.0f)) * 32);
  };
  const int rw = round32(static_cast<float>(rgb.width) * ratio);
  const int rh = round32(static_cast<float>(rgb.height) * ratio);
  cv::Mat resized;
  cv::resize(AsMat(rgb), resized, cv::Size(rw, rh), 0, 0, cv::INTER_LINEAR);
  static const float kMean[3] = {0.485f, 0.456f, 0.406f};
  static const float kStd[3] = {0.229f, 0.224f, 0.225f};
  std::vector<float> input(static_cast<size_t>(rw) * static_cast<size_t>(rh) * 3);
  ToPlanes(resized, kMean, kStd, input.data());
  std::vector<float> out;
  std::vector<int64_t> shape;
  if (Status st = im.RunOne(im.det, im.det_in, im.det_out, input, {1, 3, rh, rw}, &out, &shape,
                            "OCR detector");
      !st.ok())
    return st;
  if (shape.size() != 4 || shape[2] != rh || shape[3] != rw)
    return Internal("OCR detector: unexpected output shape");
  return BoxesFromProbability(out.data(), rw, rh,
                              static_cast<float>(rgb.width) / static_cast<float>(rw),
                              static_cast<float>(rgb.height) / static_cast<float>(rh));
}

Result<TextLine> Ocr::Recognize(const image::Image& line) const {
  if (line.empty()) return InvalidArgument("OCR recognise: empty image");
  const Impl& im = *impl_;
  const float aspect = static_cast<float>(line.width) / static_cast<float>(line.height);
  const int img_w = std::max(kRecMinWidth, static_cast<int>(kRecHeight * aspect));
  const int rw = std::clamp(static_cast<int>(std::ceil(kRecHeight * aspect)), 1, img_w);
  cv::Mat resized;
  cv::resize(AsMat(line), resized, cv::Size(rw, kRecHeight), 0, 0, cv::INTER_LINEAR);
  static const float kHalf[3] = {0.5f, 0.5f, 0.5f};
  std::vector<float> planes(static_cast<size_t>(rw) * kRecHeight * 3);
  ToPlanes(resized, kHalf, kHalf, planes.data());
  // Padded with zeros to img_w on the right, as PaddleOCR pads.
  std::vector<float> input(static_cast<size_t>(img_w) * kRecHeight * 3, 0.0f);
  for (size_t c = 0; c < 3; ++c) {
    for (size_t y = 0; y < kRecHeight; ++y) {
      std::copy_n(planes.data() + (c * kRecHeight + y) * static_cast<size_t>(rw), rw,
                  input.data() + (c * kRecHeight + y) * static_cast<size_t>(img_w));
    }
  }
  std::vector<float> out;
  std::vector<int64_t> shape;
  if (Status st = im.RunOne(im.rec, im.rec_in, im.rec_out, input, {1, 3, kRecHeight, img_w}, &out,
                            &shape, "OCR recogniser");
      !st.ok())
    return st;
  if (shape.size() != 3 || shape[0] != 1) return Internal("OCR recogniser: unexpected output rank");
  const int64_t classes = shape[2];
  if (classes != static_cast<int64_t>(im.dictionary.size()) + 2 &&
      classes != static_cast<int64_t>(im.dictionary.size()) + 1) {
    return InvalidArgument("OCR recogniser: " + std::to_string(classes) +
                           " classes, the dictionary has " + std::to_string(im.dictionary.size()) +
                           " characters (expected it + blank + space)");
  }
  TextLine tl;
  tl.text = CtcGreedyDecode(out.data(), static_cast<int>(shape[1]), static_cast<int>(classes),
                            im.dictionary, &tl.score);
  return tl;
}

Result<std::vector<TextLine>> Ocr::Read(const image::Image& rgb, bool vertical) const {
  auto boxes = Detect(rgb);
  if (!boxes.ok()) return boxes.status();
  std::vector<TextLine> lines;
  for (size_t i : ReadingOrder(*boxes, vertical)) {
    image::Image crop = CropLine(rgb, (*boxes)[i]);
    auto line = Recognize(crop);
    if (!line.ok()) return line.status();
    line->box = (*boxes)[i];
    lines.push_back(std::move(line).value());
  }
  return lines;
}

}  // namespace danqing::ocr
