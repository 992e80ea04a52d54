// danqing::verse: the themed corpus of classical poems (data/verse/poems.tsv,
// built by tools/verse/build.js) and the choice of a poem for a photo.
//
// Thread-safety: a Corpus is immutable after Parse/Load and may be shared.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace danqing::verse {

struct Poem {
  int id = 0;
  std::string title;
  std::string author;
  std::vector<std::string> themes;  // strongest first
  std::vector<std::string> lines;   // each with its closing punctuation

  // The lines joined with '\n'.
  std::string Text() const;
};

class Corpus {
 public:
  // Parses the TSV format (see data/verse/README.md). INVALID_ARGUMENT names the
  // line that is malformed; an empty corpus is INVALID_ARGUMENT too.
  static Result<Corpus> Parse(std::string_view content, std::string_view source = "corpus");
  // NOT_FOUND when the file cannot be opened.
  static Result<Corpus> Load(const std::string& path);

  const std::vector<Poem>& poems() const { return poems_; }
  size_t size() const { return poems_.size(); }

 private:
  std::vector<Poem> poems_;
};

}  // namespace danqing::verse
