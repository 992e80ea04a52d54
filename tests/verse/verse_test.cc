#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <mutex>
#include <set>
#include <thread>

#include "testing/support/fifo.h"
#include "verse/corpus.h"
#include "verse/selector.h"

namespace danqing::verse {
namespace {

constexpr char kSmall[] =
    "# comment\n"
    "1\t江雪\t柳宗元\t江河湖海,雪,山水\t千山鸟飞绝，|万迳人踪灭。|孤舟蓑笠翁，|独钓寒江雪。\n"
    "2\t静夜思\t李白\t月夜,山水\t床前看月光，|疑是地上霜。|举头望山月，|低头思故乡。\n"
    "3\t春晓\t孟浩然\t春,花\t春眠不觉晓，|处处闻啼鸟。|夜来风雨声，|花落知多少。\n";

TEST(CorpusTest, ParsesFields) {
  auto c = Corpus::Parse(kSmall);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_EQ(c->size(), 3u);
  const Poem& p = c->poems()[1];
  EXPECT_EQ(p.id, 2);
  EXPECT_EQ(p.title, "静夜思");
  EXPECT_EQ(p.author, "李白");
  EXPECT_EQ(p.themes, (std::vector<std::string>{"月夜", "山水"}));
  ASSERT_EQ(p.lines.size(), 4u);
  EXPECT_EQ(p.lines[3], "低头思故乡。");
  EXPECT_EQ(p.Text(), "床前看月光，\n疑是地上霜。\n举头望山月，\n低头思故乡。");
}

TEST(CorpusTest, RejectsMalformedLinesWithTheirNumber) {
  auto bad_fields = Corpus::Parse("# x\n1\ta\tb\tc\n", "f.tsv");
  ASSERT_FALSE(bad_fields.ok());
  EXPECT_EQ(bad_fields.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad_fields.status().message().find("f.tsv:2"), std::string::npos);

  auto bad_id = Corpus::Parse("x\tt\ta\t春\tl。\n");
  ASSERT_FALSE(bad_id.ok());
  EXPECT_NE(bad_id.status().message().find("id"), std::string::npos);

  EXPECT_FALSE(Corpus::Parse("1\tt\ta\t春\tl。||m。\n").ok());  // empty verse line
  EXPECT_FALSE(Corpus::Parse("# only comments\n").ok());
  EXPECT_EQ(Corpus::Load("/nonexistent/poems.tsv").status().code(), StatusCode::kNotFound);
}

// `danqing serve --verse-file` loads with SIGTERM blocked: a FIFO is refused
// at once, and the error says which file and why.
TEST(CorpusTest, AFifoIsRefusedWithoutWaitingForAWriter) {
  danqing::testing::FifoGuard fifo(::testing::TempDir() + "/poems.fifo");
  ASSERT_TRUE(fifo.made());
  auto c = Corpus::Load(fifo.path());
  EXPECT_TRUE(fifo.Done()) << "Corpus::Load blocked on the FIFO";
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(c.status().message().find("verse corpus " + fifo.path()), std::string::npos)
      << c.status().message();
  EXPECT_NE(c.status().message().find("a FIFO"), std::string::npos) << c.status().message();
  std::remove(fifo.path().c_str());
}

TEST(CorpusTest, BundledCorpusLoadsAndIsThemed) {
  auto c = Corpus::Load(DANQING_SOURCE_DIR "/data/verse/poems.tsv");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_GE(c->size(), 2000u);
  std::set<std::string> themes;
  for (const auto& p : c->poems()) {
    EXPECT_FALSE(p.themes.empty()) << p.title;
    EXPECT_TRUE(p.lines.size() == 4 || p.lines.size() == 8) << p.title;
    themes.insert(p.themes.begin(), p.themes.end());
  }
  for (const char* t :
       {"山水", "江河湖海", "月夜", "雪", "春", "秋", "花", "人物", "城市", "田园", "日出日落"}) {
    EXPECT_TRUE(themes.count(t)) << t;
  }
}

TEST(SelectorTest, PrefersMatchingThemes) {
  auto c = Corpus::Parse(kSmall);
  ASSERT_TRUE(c.ok());
  VerseSelector s(*c, {.no_repeat_window = 0});
  EXPECT_EQ(s.Choose({{"雪", 0.9}}, 1).title, "江雪");
  EXPECT_EQ(s.Choose({{"月夜", 0.9}, {"雪", 0.1}}, 2).title, "静夜思");
  EXPECT_EQ(s.Choose({{"花", 0.5}}, 3).title, "春晓");
}

TEST(SelectorTest, PrefersQuatrainsAtEqualThemes) {
  auto c = Corpus::Parse(
      "1\t八句\t甲\t花,春\t一二三四五，|一二三四五。|一二三四五，|一二三四五。|"
      "一二三四五，|一二三四五。|一二三四五，|一二三四五。\n"
      "2\t四句\t乙\t花,春\t一二三四五，|一二三四五。|一二三四五，|一二三四五。\n");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  VerseSelector s(*c, {.no_repeat_window = 0, .near_best = 0.99});
  for (uint64_t seed = 0; seed < 20; ++seed) EXPECT_EQ(s.Choose({{"花", 0.8}}, seed).id, 2);
  VerseSelector flat(*c, {.no_repeat_window = 0, .near_best = 0.99, .quatrain_bonus = 1.0});
  std::set<int> seen;
  for (uint64_t seed = 0; seed < 20; ++seed) seen.insert(flat.Choose({{"花", 0.8}}, seed).id);
  EXPECT_EQ(seen.size(), 2u) << "without the bonus both fit equally";
}

TEST(SelectorTest, APoemCarryingMoreOfThePhotosCuesWins) {
  // The photo shows flowers most, grass too: the poem on both beats the poem
  // whose leading theme is flowers alone.
  auto c = Corpus::Parse(
      "1\t独花\t甲\t花\t一二三四五，|一二三四五。|一二三四五，|一二三四五。\n"
      "2\t花草\t乙\t雪,花,草\t一二三四五，|一二三四五。|一二三四五，|一二三四五。\n");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const std::vector<ThemeWeight> photo = {{"花", 0.9}, {"草", 0.6}};
  EXPECT_GT(VerseSelector::Match(c->poems()[1], photo), VerseSelector::Match(c->poems()[0], photo));
  // With the old steep discount (1, 1/2, 1/3) the single-theme poem won.
  const SelectorOptions steep{.rank_discount = 1.0};
  EXPECT_LT(VerseSelector::Match(c->poems()[1], photo, steep),
            VerseSelector::Match(c->poems()[0], photo, steep));
}

TEST(CorpusTest, ShippedCorpusCarriesThePhotoCueThemes) {
  auto c = Corpus::Load(DANQING_SOURCE_DIR "/data/verse/poems.tsv");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  for (const char* theme : {"草", "雨露", "风雨"}) {
    int quatrains = 0;
    for (const auto& p : c->poems()) {
      if (p.lines.size() == 4 &&
          std::find(p.themes.begin(), p.themes.end(), theme) != p.themes.end())
        ++quatrains;
    }
    EXPECT_GE(quatrains, 20) << theme << ": too few quatrains to vary among";
  }
}

TEST(SelectorTest, SameSeedSameChoiceWithoutWindow) {
  auto c = Corpus::Load(DANQING_SOURCE_DIR "/data/verse/poems.tsv");
  ASSERT_TRUE(c.ok());
  VerseSelector s(*c, {.no_repeat_window = 0});
  const std::vector<ThemeWeight> themes = {{"江河湖海", 0.8}, {"山水", 0.5}};
  const int a = s.Choose(themes, 42).id;
  EXPECT_EQ(s.Choose(themes, 42).id, a);
  std::set<int> seen;
  for (uint64_t seed = 0; seed < 50; ++seed) seen.insert(s.Choose(themes, seed).id);
  EXPECT_GT(seen.size(), 5u) << "different photos should get different verses";
}

// Choose scores on numbered themes and sorts only the poems that share one
// with the photo: its best is Match's best (the first in corpus order among
// equals), for cues the corpus has, one it lacks, none, and a negative weight.
TEST(SelectorTest, ChoiceIsMatchsBestInCorpusOrder) {
  auto c = Corpus::Load(DANQING_SOURCE_DIR "/data/verse/poems.tsv");
  ASSERT_TRUE(c.ok());
  const std::vector<std::vector<ThemeWeight>> cases = {
      {{"江河湖海", 0.8}, {"山水", 0.5}},
      {{"雪", 1.0}},
      {{"花", 0.9}, {"春", 0.4}, {"雨露", 0.3}, {"no such theme", 1.0}},
      {},
      {{"秋", -0.5}, {"月夜", 0.2}},
      {{"秋", -0.5}},
  };
  for (const auto& themes : cases) {
    VerseSelector s(*c, {.no_repeat_window = 0, .near_best = 1.0, .max_candidates = 1});
    const Poem* best = nullptr;
    double best_score = 0;
    for (const Poem& p : c->poems()) {
      const double m = VerseSelector::Match(p, themes);
      if (best == nullptr || m > best_score) best = &p, best_score = m;
    }
    EXPECT_EQ(s.Choose(themes, 3).id, best->id) << "themes: " << themes.size();
  }
}

TEST(SelectorTest, NoRepeatWithinWindow) {
  auto c = Corpus::Load(DANQING_SOURCE_DIR "/data/verse/poems.tsv");
  ASSERT_TRUE(c.ok());
  VerseSelector s(*c, {.no_repeat_window = 16});
  std::vector<int> ids;
  for (int i = 0; i < 40; ++i)
    ids.push_back(s.Choose({{"雪", 1.0}}, 7).id);  // same photo again and again
  for (size_t i = 0; i < ids.size(); ++i) {
    for (size_t j = i + 1; j < ids.size() && j < i + 17; ++j) {
      EXPECT_NE(ids[i], ids[j]) << "repeat at " << i << " and " << j;
    }
  }
}

TEST(SelectorTest, WindowLargerThanCorpusStillAnswers) {
  auto c = Corpus::Parse(kSmall);
  ASSERT_TRUE(c.ok());
  VerseSelector s(*c, {.no_repeat_window = 10});
  for (int i = 0; i < 5; ++i) EXPECT_FALSE(s.Choose({{"春", 1.0}}, 1).title.empty());
}

// A shared window in memory, as the Redis one behaves (Record refuses an id
// already among the newest `window`), that can be made to fail or to lose a
// race (another selector recording the same poem between Recent and Record).
class FakeRecentChoices : public RecentChoices {
 public:
  Result<std::vector<int>> Recent(size_t window) override {
    std::lock_guard<std::mutex> lock(mu_);
    ++reads;
    if (down) return Unavailable("fake window down");
    std::vector<int> out(ids_.begin(), ids_.begin() + std::min(window, ids_.size()));
    return out;
  }
  Result<int> Record(const std::vector<int>& poem_ids, size_t window) override {
    std::lock_guard<std::mutex> lock(mu_);
    ++writes;
    if (down) return Unavailable("fake window down");
    if (race_next && !poem_ids.empty()) {  // someone else took the first choice just now
      race_next = false;
      raced_id = poem_ids.front();
      ids_.push_front(raced_id);
    }
    const auto end = ids_.begin() + std::min(window, ids_.size());
    for (size_t i = 0; i < poem_ids.size(); ++i) {
      if (std::find(ids_.begin(), end, poem_ids[i]) != end) continue;
      ids_.push_front(poem_ids[i]);
      while (ids_.size() > window) ids_.pop_back();
      return static_cast<int>(i);
    }
    return -1;
  }
  std::string Name() const override { return "fake"; }
  std::deque<int> ids() {
    std::lock_guard<std::mutex> lock(mu_);
    return ids_;
  }

  bool down = false, race_next = false;
  int raced_id = -1, reads = 0, writes = 0;

 private:
  std::mutex mu_;
  std::deque<int> ids_;  // newest first
};

// Two selectors (two replicas) on one window: neither repeats a poem the
// other chose within it, though each alone would choose the same poems (the
// same photos, the same seeds).
TEST(SharedWindowTest, TwoSelectorsDoNotRepeatEachOthersChoices) {
  auto c = Corpus::Load(DANQING_SOURCE_DIR "/data/verse/poems.tsv");
  ASSERT_TRUE(c.ok());
  auto shared = std::make_shared<FakeRecentChoices>();
  VerseSelector a(*c, {.no_repeat_window = 16}, shared), b(*c, {.no_repeat_window = 16}, shared);
  std::vector<int> ids;
  for (int i = 0; i < 40; ++i) ids.push_back((i % 2 ? b : a).Choose({{"雪", 1.0}}, 7).id);
  for (size_t i = 0; i < ids.size(); ++i) {
    for (size_t j = i + 1; j < ids.size() && j < i + 17; ++j) {
      EXPECT_NE(ids[i], ids[j]) << "repeat at " << i << " and " << j;
    }
  }
  EXPECT_EQ(shared->ids().size(), 16u) << "the window is bounded";
  EXPECT_EQ(shared->ids().front(), ids.back()) << "newest first";
  EXPECT_EQ(a.shared_fallbacks() + b.shared_fallbacks(), 0u);

  // Without the shared window the two repeat each other at once.
  VerseSelector alone_a(*c, {.no_repeat_window = 16}), alone_b(*c, {.no_repeat_window = 16});
  EXPECT_EQ(alone_a.Choose({{"雪", 1.0}}, 7).id, alone_b.Choose({{"雪", 1.0}}, 7).id);
}

TEST(SharedWindowTest, APoemTakenMeanwhileByAnotherSelectorIsNotChosen) {
  auto c = Corpus::Load(DANQING_SOURCE_DIR "/data/verse/poems.tsv");
  ASSERT_TRUE(c.ok());
  auto shared = std::make_shared<FakeRecentChoices>();
  VerseSelector s(*c, {.no_repeat_window = 16}, shared);
  shared->race_next = true;
  const int id = s.Choose({{"雪", 1.0}}, 7).id;
  ASSERT_GE(shared->raced_id, 0);
  EXPECT_NE(id, shared->raced_id);
  EXPECT_EQ(shared->ids().front(), id);
  EXPECT_EQ(shared->writes, 1) << "the next candidate in the same round trip";
  EXPECT_EQ(shared->reads, 1);
}

TEST(SharedWindowTest, ALostWindowFallsBackToTheLocalOneAndIsTriedAgain) {
  auto c = Corpus::Load(DANQING_SOURCE_DIR "/data/verse/poems.tsv");
  ASSERT_TRUE(c.ok());
  auto shared = std::make_shared<FakeRecentChoices>();
  VerseSelector s(*c, {.no_repeat_window = 16, .shared_retry = std::chrono::milliseconds(1000)},
                  shared);
  std::vector<int> ids;
  for (int i = 0; i < 4; ++i) ids.push_back(s.Choose({{"雪", 1.0}}, 7).id);
  shared->down = true;
  // Every choice still answers, on the local window (which holds the shared
  // choices too: no repeat across the change).
  for (int i = 0; i < 8; ++i) ids.push_back(s.Choose({{"雪", 1.0}}, 7).id);
  EXPECT_EQ(std::set<int>(ids.begin(), ids.end()).size(), ids.size()) << "no repeat";
  EXPECT_EQ(s.shared_fallbacks(), 8u);
  EXPECT_EQ(shared->reads, 5) << "tried once, then left alone until shared_retry";
  shared->down = false;
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  const int next = s.Choose({{"雪", 1.0}}, 7).id;
  EXPECT_EQ(shared->ids().front(), next) << "the shared window is used again";
  EXPECT_EQ(s.shared_fallbacks(), 8u);
}

}  // namespace
}  // namespace danqing::verse
