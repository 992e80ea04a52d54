// danqing::ocr: the PP-OCRv4 pipeline's pure steps (DB boxes, column cutting,
// reading order, CTC decoding, alignment, the dictionary) and the real models
// through ONNX Runtime on typeset text; bad model files and dictionaries.
#include "ocr/ocr.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "ocr/legibility.h"
#include "render/glyph_font.h"

namespace danqing::ocr {
namespace {

namespace fs = std::filesystem;
constexpr char kUKai[] = "/usr/share/fonts/truetype/arphic/ukai.ttc";

TextBox Rect(float x0, float y0, float x1, float y1) {
  TextBox b;
  b.corners = {Point{x0, y0}, Point{x1, y0}, Point{x1, y1}, Point{x0, y1}};
  return b;
}

TEST(CtcGreedyDecode, CollapsesRepeatsDropsBlanksAndMapsTheLastClassToASpace) {
  const std::vector<char32_t> dict = {U'甲', U'乙'};
  const int classes = 4;  // blank, 甲, 乙, space
  const std::vector<int> best = {0, 1, 1, 0, 1, 2, 2, 0, 3};
  std::vector<float> scores(best.size() * classes, 0.01f);
  for (size_t t = 0; t < best.size(); ++t)
    scores[t * classes + static_cast<size_t>(best[t])] = 0.9f;
  float score = 0;
  EXPECT_EQ(CtcGreedyDecode(scores.data(), static_cast<int>(best.size()), classes, dict, &score),
            U"甲甲乙 ");
  EXPECT_FLOAT_EQ(score, 0.9f);
  std::vector<float> blanks(3 * classes, 0.0f);
  for (int t = 0; t < 3; ++t) blanks[static_cast<size_t>(t * classes)] = 1.0f;
  EXPECT_EQ(CtcGreedyDecode(blanks.data(), 3, classes, dict, &score), U"");
  EXPECT_EQ(score, 0.0f);
}

TEST(AlignedMatches, CountsCharactersReadInTheRightOrder) {
  EXPECT_EQ(AlignedMatches(U"白日依山", U"白日依山"), 4);
  EXPECT_EQ(AlignedMatches(U"白日依山", U"丹白日x依山青"), 4);  // insertions cost nothing
  EXPECT_EQ(AlignedMatches(U"白日依山", U"白依山"), 3);
  EXPECT_EQ(AlignedMatches(U"白日依山", U"白月依山"), 3);
  EXPECT_EQ(AlignedMatches(U"白日依山", U"山依日白"), 1);  // out of order: one of them
  EXPECT_EQ(AlignedMatches(U"白日依山尽", U"日白依山尽"), 4);
  EXPECT_EQ(AlignedMatches(U"白日依山", U""), 0);
  EXPECT_EQ(AlignedMatches(U"", U"白日"), 0);
}

TEST(ReadingOrder, ColumnsRightToLeftEachTopToBottom) {
  // Right column split into two boxes (bottom one listed first), then the left column.
  std::vector<TextBox> boxes = {Rect(100, 10, 140, 200), Rect(300, 260, 338, 400),
                                Rect(302, 10, 340, 240)};
  EXPECT_EQ(ReadingOrder(boxes, true), (std::vector<size_t>{2, 1, 0}));
  // Rows: top to bottom, each left to right.
  std::vector<TextBox> rows = {Rect(10, 100, 200, 140), Rect(260, 12, 400, 50),
                               Rect(10, 10, 240, 52)};
  EXPECT_EQ(ReadingOrder(rows, false), (std::vector<size_t>{2, 1, 0}));
}

TEST(BoxesFromProbability, OneBarGivesOneUnclippedVerticalBoxAndWeakRegionsAreDropped) {
  const int w = 100, h = 100;
  std::vector<float> prob(static_cast<size_t>(w * h), 0.0f);
  for (int y = 10; y < 90; ++y)
    for (int x = 10; x < 20; ++x) prob[static_cast<size_t>(y * w + x)] = 0.95f;
  for (int y = 40; y < 60; ++y)  // above the pixel threshold, under the box threshold
    for (int x = 60; x < 80; ++x) prob[static_cast<size_t>(y * w + x)] = 0.45f;
  auto boxes = BoxesFromProbability(prob.data(), w, h, 2.0f, 2.0f);
  ASSERT_EQ(boxes.size(), 1u);
  const TextBox& b = boxes[0];
  EXPECT_TRUE(b.Vertical());
  EXPECT_NEAR(b.score, 0.95f, 0.02f);
  // The contour's rectangle is 9 x 79 map pixels; d = 9*79*1.5 / (2*(9+79)) = 6.06;
  // in the image (x2): (9 + 2d) * 2 wide, (79 + 2d) * 2 tall.
  EXPECT_NEAR(b.Width(), (9 + 2 * 6.06f) * 2, 1.0f);
  EXPECT_NEAR(b.Height(), (79 + 2 * 6.06f) * 2, 1.0f);
  EXPECT_NEAR(b.Centre().x, 29.0f, 1.5f);
  EXPECT_NEAR(b.Centre().y, 99.0f, 1.5f);
  EXPECT_TRUE(BoxesFromProbability(nullptr, w, h, 1, 1).empty());
}

TEST(CropLine, AVerticalColumnIsTurnedCounterClockwiseSoItsTopIsAtTheLeft) {
  image::Image img = image::Image::Filled(200, 200);
  for (int y = 20; y < 40; ++y) {  // a red mark at the top of the column x 50..90, y 20..180
    for (int x = 50; x < 90; ++x) {
      uint8_t* p = img.row(y) + x * 3;
      p[1] = p[2] = 0;
    }
  }
  image::Image line = CropLine(img, Rect(50, 20, 90, 180));
  ASSERT_EQ(line.width, 160);
  ASSERT_EQ(line.height, 40);
  const uint8_t* left = line.row(20) + 5 * 3;
  const uint8_t* right = line.row(20) + 150 * 3;
  EXPECT_EQ(left[1], 0) << "the column's top should be the line's left end";
  EXPECT_EQ(right[1], 255);
  // A wide box stays as it is.
  image::Image row = CropLine(img, Rect(50, 20, 150, 60));
  EXPECT_EQ(row.width, 100);
  EXPECT_EQ(row.height, 40);
}

TEST(ParseDictionary, OneCharacterPerLineAndErrorsNameTheLine) {
  auto ok = ParseDictionary("甲\r\n乙\n'\n");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(*ok, (std::vector<char32_t>{U'甲', U'乙', U'\''}));
  auto two = ParseDictionary("甲\n乙丙\n");
  ASSERT_FALSE(two.ok());
  EXPECT_EQ(two.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(two.status().message().find("line 2"), std::string::npos) << two.status().message();
  auto bad = ParseDictionary("甲\n\xff\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("line 2"), std::string::npos) << bad.status().message();
  EXPECT_FALSE(ParseDictionary("").ok());
  EXPECT_FALSE(ParseDictionary("甲\n\n").ok());  // an empty line is no character
}

class OcrModels : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto o = Ocr::Open();
    ASSERT_TRUE(o.ok()) << o.status().ToString();
    ocr_ = std::move(o).value().release();
  }
  static void TearDownTestSuite() { delete ocr_; }
  static Ocr* ocr_;
};
Ocr* OcrModels::ocr_ = nullptr;

TEST_F(OcrModels, ReadsTypesetColumnsInOrder) {
  EXPECT_EQ(ocr_->dictionary_size(), 6623u);
  auto font = render::GlyphFont::Open(kUKai);
  if (!font.ok()) GTEST_SKIP() << "no UKai: " << font.status().ToString();
  const std::vector<std::u32string> lines = {U"白日依山尽", U"黄河入海流"};
  auto img = TypesetColumns(**font, lines, 800, 600);
  ASSERT_TRUE(img.ok()) << img.status().ToString();
  auto read = ocr_->Read(*img, true);
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  ASSERT_EQ(read->size(), 2u);
  EXPECT_EQ((*read)[0].text, lines[0]);
  EXPECT_EQ((*read)[1].text, lines[1]);
  EXPECT_TRUE((*read)[0].box.Vertical());
  EXPECT_GT((*read)[0].box.Centre().x, (*read)[1].box.Centre().x);
  // A blank page reads as nothing; an empty image is refused.
  auto blank = ocr_->Read(image::Image::Filled(320, 240), true);
  ASSERT_TRUE(blank.ok());
  EXPECT_TRUE(blank->empty());
  EXPECT_EQ(ocr_->Detect(image::Image{}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ocr_->Recognize(image::Image{}).status().code(), StatusCode::kInvalidArgument);
}

class BadModels : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("danqing-ocr-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    const fs::path real = DefaultModelsDir();
    for (const char* f :
         {"ch_PP-OCRv4_det_infer.onnx", "ch_PP-OCRv4_rec_infer.onnx", "ppocr_keys_v1.txt"}) {
      fs::create_symlink(real / f, dir_ / f);
    }
  }
  void TearDown() override { fs::remove_all(dir_); }
  void Replace(const char* name, const std::string& content) {
    fs::remove(dir_ / name);
    std::ofstream(dir_ / name, std::ios::binary) << content;
  }
  Status OpenStatus() {
    OcrConfig c;
    c.models_dir = dir_.string();
    auto o = Ocr::Open(c);
    return o.status();
  }
  fs::path dir_;
};

TEST_F(BadModels, MissingFileIsNotFoundAndNamesIt) {
  fs::remove(dir_ / "ch_PP-OCRv4_rec_infer.onnx");
  Status s = OpenStatus();
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_NE(s.message().find("ch_PP-OCRv4_rec_infer.onnx"), std::string::npos) << s.message();
}

TEST_F(BadModels, CorruptModelIsInvalidArgumentAndNamesIt) {
  Replace("ch_PP-OCRv4_det_infer.onnx", "not an onnx model");
  Status s = OpenStatus();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("ch_PP-OCRv4_det_infer.onnx"), std::string::npos) << s.message();
}

TEST_F(BadModels, DictionaryThatDoesNotMatchTheRecogniserIsRefused) {
  Replace("ppocr_keys_v1.txt", "甲\n乙\n");
  Status s = OpenStatus();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("the dictionary has 2"), std::string::npos) << s.message();
  Replace("ppocr_keys_v1.txt", "甲\n乙丙\n");
  s = OpenStatus();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("ppocr_keys_v1.txt"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("line 2"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace danqing::ocr
