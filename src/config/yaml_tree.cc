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

// Thrown inside the copy when a limit is exceeded or a merge key's value is
// not mappings; caught in ParseYaml.
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

class Copier {
 public:
  YamlNode Copy(const YAML::Node& in, int depth) {
    if (++nodes_ > kMaxYamlNodes) {
      throw CopyError{"document has more than " + std::to_string(kMaxYamlNodes) +
                          " nodes (after expanding aliases)",
                      in.Mark()};
    }
    if (depth > kMaxYamlDepth) {
      throw CopyError{"nesting deeper than " + std::to_string(kMaxYamlDepth) + " levels",
                      in.Mark()};
    }
    YamlNode out;
    const YAML::Mark mark = in.Mark();
    if (mark.line >= 0) {
      out.line = mark.line + 1;
      out.column = mark.column + 1;
    }
    switch (in.Type()) {
      case YAML::NodeType::Undefined:
      case YAML::NodeType::Null: out.kind = YamlNode::Kind::kNull; break;
      case YAML::NodeType::Scalar:
        out.kind = YamlNode::Kind::kScalar;
        // Aliases share one node in yaml-cpp but are copied here: a long
        // scalar named many times would otherwise take gigabytes.
        text_bytes_ += in.Scalar().size();
        if (text_bytes_ > kMaxYamlTextBytes) {
          throw CopyError{"document has more than " + std::to_string(kMaxYamlTextBytes) +
                              " bytes of text (after expanding aliases)",
                          in.Mark()};
        }
        out.scalar = in.Scalar();
        // yaml-cpp tags plain scalars "?" and quoted ones "!"; anything else
        // is an explicit tag, which we treat like quoting (a string).
        out.plain = in.Tag() == "?";
        break;
      case YAML::NodeType::Sequence:
        out.kind = YamlNode::Kind::kSequence;
        out.items.reserve(in.size());
        for (const YAML::Node& item : in) out.items.push_back(Copy(item, depth + 1));
        break;
      case YAML::NodeType::Map: {
        out.kind = YamlNode::Kind::kMapping;
        out.entries.reserve(in.size());
        std::optional<YamlEntry> merge;  // the `<<` entry
        std::size_t before_merge = 0;    // entries written before it
        for (auto it = in.begin(); it != in.end(); ++it) {
          YamlEntry entry{Copy(it->first, depth + 1), Copy(it->second, depth + 1)};
          if (IsMergeKey(it->first)) {
            if (merge) {
              throw CopyError{
                  "a second merge key (<<) in one mapping; merge several mappings with "
                  "<<: [*a, *b]",
                  MarkOf(entry.key)};
            }
            merge = std::move(entry);
            before_merge = out.entries.size();
            continue;
          }
          // A null value (`key:`) has its mark at the next token, often on a
          // later line; point at the key instead.
          if (entry.value.is_null()) {
            entry.value.line = entry.key.line;
            entry.value.column = entry.key.column;
          }
          out.entries.push_back(std::move(entry));
        }
        if (merge) Merge(std::move(*merge), before_merge, out);
        break;
      }
    }
    return out;
  }

 private:
  // YAML 1.1's merge key: `<<` plain or tagged !!merge (a quoted one is an
  // ordinary key), as Go's YAML decoder, and so NVIDIA's parser, reads it.
  static bool IsMergeKey(const YAML::Node& key) {
    return key.IsScalar() && key.Scalar() == "<<" &&
           (key.Tag() == "?" || key.Tag() == "tag:yaml.org,2002:merge");
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

  std::size_t nodes_ = 0;
  std::size_t text_bytes_ = 0;
};

// Debian's yaml-cpp 0.7 LoadAll() loops forever, adding a null document per
// turn until memory runs out, when a document starts with a token its parser
// does not consume (e.g. `{"a": 1}, "b"`: the stray ',' after a flow mapping).
// Upstream fixed it in yaml-cpp PR #1319 (after 0.8.0). Found by
// fuzz/config_fuzzer. This pass walks the documents with a handler that
// builds nothing and reports the first document that starts where the
// previous one did, i.e. made no progress; LoadAll() runs only after it.
class DocumentStarts : public YAML::EventHandler {
 public:
  YAML::Mark start;
  void OnDocumentStart(const YAML::Mark& mark) override { start = mark; }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
};

// Throws YAML::ParserException where LoadAll() would not return.
void CheckDocumentsAdvance(const std::string& text) {
  std::istringstream in(text);
  YAML::Parser parser(in);
  DocumentStarts handler;
  int previous = -1;
  while (parser.HandleNextDocument(handler)) {
    if (handler.start.pos == previous) {
      throw YAML::ParserException(handler.start, "unexpected token at the start of a document");
    }
    previous = handler.start.pos;
  }
}

}  // namespace

Result<YamlNode> ParseYaml(std::string_view text, std::string_view source) {
  if (text.size() > kMaxYamlBytes) {
    return InvalidArgument(std::string(source) + ": file is larger than " +
                           std::to_string(kMaxYamlBytes) + " bytes");
  }
  try {
    // Empty documents (a stray `---`) are skipped; more than one non-empty
    // document is an error.
    std::vector<YAML::Node> docs;
    CheckDocumentsAdvance(std::string(text));
    for (YAML::Node& doc : YAML::LoadAll(std::string(text))) {
      if (!doc.IsNull()) docs.push_back(std::move(doc));
    }
    if (docs.empty()) return YamlNode{};
    if (docs.size() > 1) {
      return InvalidArgument(Location(source, docs[1].Mark()) +
                             ": more than one YAML document; a config file holds one");
    }
    Copier copier;
    return copier.Copy(docs[0], 0);
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
