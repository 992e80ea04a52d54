// YamlNode: a plain, exception-free copy of a parsed YAML document, and the
// one adapter over yaml-cpp that builds it.
//
// yaml-cpp throws; nothing else in the config module touches it. ParseYaml()
// catches every exception yaml-cpp (or the copy) can raise and turns it into
// an INVALID_ARGUMENT Status that names the source and the 1-based line and
// column of the problem. The copy keeps what the schema code needs: the node
// kind, scalar text, whether a scalar was written plain (unquoted, untagged,
// so YAML 1.1 resolution applies: `true`, `4`, `~`), the position, and map
// entries in document order with duplicates preserved (so they can be
// reported).
//
// Internal to src/config; not part of the module's public API.
//
// Thread-safety: ParseYaml is reentrant; YamlNode is a value.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace danqing::config::internal {

struct YamlEntry;

struct YamlNode {
  enum class Kind { kNull, kScalar, kSequence, kMapping };

  Kind kind = Kind::kNull;
  std::string scalar;              // kScalar: the value after unquoting/unescaping
  bool plain = false;              // kScalar: written without quotes or an explicit tag
  int line = 0;                    // 1-based; 0 when unknown
  int column = 0;                  // 1-based; 0 when unknown
  std::vector<YamlNode> items;     // kSequence
  std::vector<YamlEntry> entries;  // kMapping, in document order

  bool is_null() const { return kind == Kind::kNull; }
  bool is_scalar() const { return kind == Kind::kScalar; }
  bool is_sequence() const { return kind == Kind::kSequence; }
  bool is_mapping() const { return kind == Kind::kMapping; }
};

struct YamlEntry {
  YamlNode key;
  YamlNode value;
};

// Limits that keep hostile input (alias bombs, absurd nesting, long flow
// collections) cheap: each is enforced while parsing, so that no input under
// kMaxYamlBytes makes ParseYaml hold more than a few tens of MB at any time.
inline constexpr std::size_t kMaxYamlBytes = 1 << 20;  // 1 MiB
inline constexpr std::size_t kMaxYamlNodes = 100000;   // after alias expansion
inline constexpr std::size_t kMaxYamlTextBytes = 16 << 20;  // scalars, after alias expansion
inline constexpr int kMaxYamlDepth = 64;
// Counted on the text before yaml-cpp reads it (see ParseYaml): bounds what
// yaml-cpp's scanner holds, which the limits above cannot.
inline constexpr std::size_t kMaxYamlTokens = 100000;

// Parses one YAML (or JSON) document. OK with a kNull root for an empty
// document (nothing but whitespace and comments). INVALID_ARGUMENT for
// malformed YAML ("<source>:<line>:<col>: malformed YAML: <parser message>"),
// more than one document, or input beyond the limits above.
Result<YamlNode> ParseYaml(std::string_view text, std::string_view source);

}  // namespace danqing::config::internal
