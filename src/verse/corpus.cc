#include "verse/corpus.h"

#include <charconv>

#include "common/read_file.h"

namespace danqing::verse {
namespace {

std::vector<std::string_view> Split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (true) {
    const size_t pos = s.find(sep, start);
    out.push_back(
        s.substr(start, pos == std::string_view::npos ? std::string_view::npos : pos - start));
    if (pos == std::string_view::npos) break;
    start = pos + 1;
  }
  return out;
}

}  // namespace

std::string Poem::Text() const {
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i) out += '\n';
    out += lines[i];
  }
  return out;
}

Result<Corpus> Corpus::Parse(std::string_view content, std::string_view source) {
  Corpus c;
  size_t line_no = 0;
  for (std::string_view line : Split(content, '\n')) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || line.front() == '#') continue;
    const auto where = [&] { return std::string(source) + ":" + std::to_string(line_no) + ": "; };
    const auto fields = Split(line, '\t');
    if (fields.size() != 5) {
      return InvalidArgument(where() + "expected 5 tab-separated fields, found " +
                             std::to_string(fields.size()));
    }
    Poem p;
    auto [ptr, ec] = std::from_chars(fields[0].data(), fields[0].data() + fields[0].size(), p.id);
    if (ec != std::errc() || ptr != fields[0].data() + fields[0].size() || p.id <= 0) {
      return InvalidArgument(where() + "id '" + std::string(fields[0]) +
                             "' is not a positive integer");
    }
    p.title = fields[1];
    p.author = fields[2];
    for (auto t : Split(fields[3], ',')) {
      if (!t.empty()) p.themes.emplace_back(t);
    }
    for (auto l : Split(fields[4], '|')) {
      if (l.empty()) return InvalidArgument(where() + "empty verse line");
      p.lines.emplace_back(l);
    }
    if (p.title.empty() || p.author.empty())
      return InvalidArgument(where() + "empty title or author");
    c.poems_.push_back(std::move(p));
  }
  if (c.poems_.empty()) return InvalidArgument(std::string(source) + ": no poems");
  return c;
}

Result<Corpus> Corpus::Load(const std::string& path) {
  auto text = ReadRegularFile(path, kMaxTextFileBytes);
  if (!text.ok()) return text.status().WithContext("verse corpus " + path);
  return Parse(*text, path);
}

}  // namespace danqing::verse
