// The yaml-cpp adapter: the only file of the config module that includes
// yaml-cpp, and the only place its exceptions are caught.
//
// Thread-safety: reentrant; yaml-cpp keeps no global state we depend on.
#include "config/yaml_tree.h"

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <exception>
#include <new>
#include <optional>
#include <sstream>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace danqing::config::internal {
namespace {

// Thrown by the tree builder when a limit is exceeded or a merge key's value
// is not mappings; caught in ParseYaml.
struct CopyError {
  std::string message;
  YAML::Mark mark;
};

std::string Location(std::string_view source, const YAML::Mark& mark) {
  std::string out(source);
  if (mark.line >= 0) {
    out += ':' + std::to_string(mark.line + 1) + ':' + std::to_string(mark.column + 1);
  }
  return out;
}

// Refuses text that would make yaml-cpp's scanner hold more than a bounded
// number of tokens, before it reads any of it. The scanner queues every
// token from a potential simple key to where the key is settled: the whole
// of a flow collection that could be a mapping key (`{...}` written as the
// document, `[[[[...` at any place), so no parser event arrives before it
// has scanned all of it. A 1 MiB JSON list peaked at ~160 MB that way, a
// 1 MiB run of `[` at ~250 MB, whatever the tree builder then refuses.
//
// yaml-cpp cannot be asked how many tokens it holds, so the text is counted
// instead: every token but a plain scalar starts with an indicator
// character, and a plain scalar starts a line or follows an indicator (or
// the name after an anchor, alias or tag, hence those count twice), so the
// tokens are at most a small multiple of the count. Words do not count;
// indicators in comments and quoted scalars do, which keeps the count an
// over-estimate and a config of ordinary size (a few hundred) far below the
// limit. Measured at the limit, the worst shape (a JSON list of 100000
// scalars) peaks at ~35 MB.
void CheckTokenCount(std::string_view text) {
  constexpr std::string_view kIndicators = "[]{},:?-|>'\"%&*!";
  std::size_t tokens = 0;
  bool line_start = true;  // nothing but indentation read on this line yet
  YAML::Mark mark;
  mark.pos = mark.line = mark.column = 0;
  for (const char c : text) {
    if (c == '\n' || c == '\r') {  // "\r\n" is one line break, as for yaml-cpp
      line_start = true;
      if (c == '\n') ++mark.line;
      mark.column = 0;
      ++mark.pos;
      continue;
    }
    const bool indicator = kIndicators.find(c) != std::string_view::npos;
    if (indicator) tokens += c == '&' || c == '*' || c == '!' ? 2 : 1;
    if (line_start && c != ' ' && c != '\t') {
      line_start = false;
      if (!indicator && c != '#') ++tokens;  // a plain scalar may start here
    }
    if (tokens > kMaxYamlTokens) {
      throw CopyError{"more than " + std::to_string(kMaxYamlTokens) +
                          " YAML tokens ([ ] { } , : - and the like); a config file has a few "
                          "hundred",
                      mark};
    }
    ++mark.pos;
    ++mark.column;
  }
}

// Builds the YamlNode tree from yaml-cpp's parser events, enforcing the
// limits as each event arrives: yaml-cpp's own node graph (LoadAll) costs
// ~600 bytes a node and was built in full before any limit could be checked,
// so a 1 MiB list of `- 1` lines peaked at ~150 MB and a 1 MiB JSON list at
// ~260 MB. Here nothing beyond kMaxYamlNodes nodes (about 130 bytes each,
// counting every alias expansion and every anchor's saved copy) and
// kMaxYamlTextBytes of text is ever held, and parsing stops at the first
// event past a limit.
//
// Also guards against Debian's yaml-cpp 0.7 looping forever, adding a null
// document per turn until memory runs out, when a document starts with a
// token its parser does not consume (e.g. `{"a": 1}, "b"`: the stray ','
// after a flow mapping); upstream fixed it in yaml-cpp PR #1319 (after
// 0.8.0); found by fuzz/config_fuzzer. A document that starts where the
// previous one did made no progress and is an error.
class TreeBuilder : public YAML::EventHandler {
 public:
  // The first document whose root is not null; nullopt when none is.
  std::optional<YamlNode> TakeRoot() { return std::move(root_); }

  void OnDocumentStart(const YAML::Mark& mark) override {
    if (started_ && mark.pos == previous_start_) {
      throw YAML::ParserException(mark, "unexpected token at the start of a document");
    }
    started_ = true;
    previous_start_ = mark.pos;
    anchors_.clear();  // anchors are per document
  }
  void OnDocumentEnd() override {}

  void OnNull(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    Add(Start(YamlNode::Kind::kNull, mark), anchor, false);
  }

  void OnScalar(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t anchor,
                const std::string& value) override {
    YamlNode node = Start(YamlNode::Kind::kScalar, mark);
    CountText(value.size(), mark);
    node.scalar = value;
    // yaml-cpp tags plain scalars "?" and quoted ones "!"; anything else is
    // an explicit tag, which we treat like quoting (a string).
    node.plain = tag == "?";
    // YAML 1.1's merge key: `<<` plain or tagged !!merge (a quoted one is an
    // ordinary key), as Go's YAML decoder, and so NVIDIA's parser, reads it.
    const bool merge_key = value == "<<" && (tag == "?" || tag == "tag:yaml.org,2002:merge");
    Add(std::move(node), anchor, merge_key);
  }

  void OnAlias(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    if (anchor >= anchors_.size() || !anchors_[anchor]) {
      // yaml-cpp names an anchor as its collection starts: an alias inside
      // the node it names would make the document infinite.
      throw CopyError{"an alias (*) inside the node its anchor names", mark};
    }
    const Anchored& target = *anchors_[anchor];
    // Counted before anything is copied: aliases are where a small file
    // becomes a large document.
    Charge(target.size, mark);
    CountText(target.text, mark);
    if (Depth() + target.height > kMaxYamlDepth) throw DepthError(mark);
    Add(YamlNode(target.node), kNoAnchor, target.merge_key);
  }

  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                       YAML::EmitterStyle::value) override {
    Push(Start(YamlNode::Kind::kSequence, mark), anchor);
  }
  void OnSequenceEnd() override { Close(); }

  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                  YAML::EmitterStyle::value) override {
    Push(Start(YamlNode::Kind::kMapping, mark), anchor);
  }
  void OnMapEnd() override {
    Open& map = open_.back();
    if (map.merge) Merge(std::move(*map.merge), map.before_merge, map.node);
    Close();
  }

 private:
  static constexpr YAML::anchor_t kNoAnchor = YAML::NullAnchor;

  // A collection being built.
  struct Open {
    YamlNode node;
    YAML::anchor_t anchor = kNoAnchor;
    std::optional<YamlNode> key;  // mappings: the key waiting for its value
    bool key_is_merge = false;
    std::optional<YamlEntry> merge;  // mappings: the `<<` entry
    std::size_t before_merge = 0;    // entries written before it
  };
  // A completed node an anchor names, with what copying it costs.
  struct Anchored {
    YamlNode node;
    bool merge_key = false;
    std::size_t size = 0;  // nodes
    std::size_t text = 0;  // scalar bytes
    int height = 0;        // levels below the node
  };

  int Depth() const { return static_cast<int>(open_.size()); }

  static CopyError DepthError(const YAML::Mark& mark) {
    return CopyError{"nesting deeper than " + std::to_string(kMaxYamlDepth) + " levels", mark};
  }

  // Counts `nodes` more nodes; throws past the limit.
  void Charge(std::size_t nodes, const YAML::Mark& mark) {
    nodes_ += nodes;
    if (nodes_ > kMaxYamlNodes) {
      throw CopyError{"document has more than " + std::to_string(kMaxYamlNodes) +
                          " nodes (after expanding aliases)",
                      mark};
    }
  }

  void CountText(std::size_t bytes, const YAML::Mark& mark) {
    text_bytes_ += bytes;
    if (text_bytes_ > kMaxYamlTextBytes) {
      throw CopyError{"document has more than " + std::to_string(kMaxYamlTextBytes) +
                          " bytes of text (after expanding aliases)",
                      mark};
    }
  }

  // A new node at the current depth, counted and checked.
  YamlNode Start(YamlNode::Kind kind, const YAML::Mark& mark) {
    Charge(1, mark);
    if (Depth() > kMaxYamlDepth) throw DepthError(mark);
    // A second document with content: refused before it is built.
    if (open_.empty() && kind != YamlNode::Kind::kNull && root_) {
      throw CopyError{"more than one YAML document; a config file holds one", mark};
    }
    YamlNode node;
    node.kind = kind;
    if (mark.line >= 0) {
      node.line = mark.line + 1;
      node.column = mark.column + 1;
    }
    return node;
  }

  void Push(YamlNode node, YAML::anchor_t anchor) {
    Open open;
    open.node = std::move(node);
    open.anchor = anchor;
    open_.push_back(std::move(open));
  }

  void Close() {
    Open done = std::move(open_.back());
    open_.pop_back();
    Add(std::move(done.node), done.anchor, false);
  }

  // Places a completed node in its parent (or as the document's root).
  void Add(YamlNode node, YAML::anchor_t anchor, bool merge_key) {
    if (anchor != kNoAnchor) Remember(anchor, node, merge_key);
    if (open_.empty()) {
      if (!node.is_null()) root_ = std::move(node);
      return;
    }
    Open& parent = open_.back();
    if (parent.node.is_sequence()) {
      parent.node.items.push_back(std::move(node));
      return;
    }
    if (!parent.key) {
      parent.key = std::move(node);
      parent.key_is_merge = merge_key;
      return;
    }
    YamlEntry entry{std::move(*parent.key), std::move(node)};
    parent.key.reset();
    if (parent.key_is_merge) {
      if (parent.merge) {
        throw CopyError{
            "a second merge key (<<) in one mapping; merge several mappings with <<: [*a, *b]",
            MarkOf(entry.key)};
      }
      parent.merge = std::move(entry);
      parent.before_merge = parent.node.entries.size();
      return;
    }
    // A null value (`key:`) has its mark at the next token, often on a later
    // line; point at the key instead.
    if (entry.value.is_null()) {
      entry.value.line = entry.key.line;
      entry.value.column = entry.key.column;
    }
    parent.node.entries.push_back(std::move(entry));
  }

  // Saves a copy of an anchored node for its aliases; the copy counts
  // towards the limits like any other node.
  void Remember(YAML::anchor_t anchor, const YamlNode& node, bool merge_key) {
    Anchored a;
    Measure(node, 0, a);
    const YAML::Mark mark = MarkOf(node);
    Charge(a.size, mark);
    CountText(a.text, mark);
    a.node = node;
    a.merge_key = merge_key;
    if (anchor >= anchors_.size()) anchors_.resize(anchor + 1);
    anchors_[anchor] = std::move(a);
  }

  static void Measure(const YamlNode& node, int depth, Anchored& out) {
    ++out.size;
    out.text += node.scalar.size();
    out.height = std::max(out.height, depth);
    for (const YamlNode& item : node.items) Measure(item, depth + 1, out);
    for (const YamlEntry& entry : node.entries) {
      Measure(entry.key, depth + 1, out);
      Measure(entry.value, depth + 1, out);
    }
  }

  static YAML::Mark MarkOf(const YamlNode& node) {
    YAML::Mark mark;
    mark.line = node.line - 1;
    mark.column = node.column - 1;
    return mark;
  }

  // Adds to `into` the entries of the mapping, or of each mapping of the
  // sequence, that the `<<` entry holds, leaving out keys `into` has already:
  // the mapping's own keys written after `<<` win, then the earlier of
  // several mappings, as for YAML 1.1 and Go's decoder alike. Refused, so
  // that a file cannot mean one thing here and another to NVIDIA's parser:
  // a key written before `<<` that the merge sets too (Go's decoder lets the
  // merge overwrite it, YAML 1.1 keeps it), and a key set twice in one merged
  // mapping (Go takes the last).
  static void Merge(YamlEntry merge, std::size_t before_merge, YamlNode& into) {
    const auto is_mapping = [](const YamlNode& m) { return m.is_mapping(); };
    // `<<: []` merges nothing, as in Go.
    if (!merge.value.is_mapping() &&
        !(merge.value.is_sequence() &&
          std::all_of(merge.value.items.begin(), merge.value.items.end(), is_mapping))) {
      throw CopyError{"a merge key (<<) takes a mapping or a sequence of mappings",
                      MarkOf(merge.key)};
    }
    std::vector<YamlNode> maps;
    if (merge.value.is_mapping()) {
      maps.push_back(std::move(merge.value));
    } else {
      maps = std::move(merge.value.items);
    }
    // Maps, not a scan per entry: a hostile file may merge many keys.
    std::unordered_map<std::string, std::size_t> present;  // key -> its entry
    for (std::size_t i = 0; i < into.entries.size(); ++i) {
      if (into.entries[i].key.is_scalar()) present.emplace(into.entries[i].key.scalar, i);
    }
    for (YamlNode& map : maps) {
      std::unordered_set<std::string> seen;
      for (YamlEntry& entry : map.entries) {
        if (entry.key.is_scalar()) {
          if (!seen.insert(entry.key.scalar).second) {
            throw CopyError{entry.key.scalar + ": set twice in a mapping merged with <<",
                            MarkOf(entry.key)};
          }
          const auto [at, added] = present.emplace(entry.key.scalar, into.entries.size());
          if (!added) {
            if (at->second < before_merge) {
              const YamlNode& own = into.entries[at->second].key;
              throw CopyError{own.scalar +
                                  ": set before the merge key (<<) and by the merged mapping "
                                  "too; NVIDIA's parser would take the merged value, YAML 1.1 this "
                                  "one: write `<<` first to keep this one",
                              MarkOf(own)};
            }
            continue;
          }
        }
        into.entries.push_back(std::move(entry));
      }
    }
  }

  std::vector<Open> open_;                        // at most kMaxYamlDepth + 1
  std::vector<std::optional<Anchored>> anchors_;  // by yaml-cpp's anchor number
  std::optional<YamlNode> root_;
  std::size_t nodes_ = 0;
  std::size_t text_bytes_ = 0;
  bool started_ = false;
  int previous_start_ = -1;
};

}  // namespace

Result<YamlNode> ParseYaml(std::string_view text, std::string_view source) {
  if (text.size() > kMaxYamlBytes) {
    return InvalidArgument(std::string(source) + ": file is larger than " +
                           std::to_string(kMaxYamlBytes) + " bytes");
  }
  try {
    CheckTokenCount(text);
    // Empty documents (a stray `---`) are skipped; more than one non-empty
    // document is an error.
    std::istringstream in{std::string(text)};
    YAML::Parser parser(in);
    TreeBuilder builder;
    while (parser.HandleNextDocument(builder)) {
    }
    return builder.TakeRoot().value_or(YamlNode{});
  } catch (const CopyError& e) {
    return InvalidArgument(Location(source, e.mark) + ": " + e.message);
  } catch (const YAML::Exception& e) {
    return InvalidArgument(Location(source, e.mark) + ": malformed YAML: " + e.msg);
  } catch (const std::bad_alloc&) {
    return InvalidArgument(std::string(source) + ": out of memory while parsing YAML");
  } catch (const std::exception& e) {
    return InvalidArgument(std::string(source) + ": malformed YAML: " + e.what());
  } catch (...) {
    return Internal(std::string(source) + ": unexpected exception while parsing YAML");
  }
}

}  // namespace danqing::config::internal
