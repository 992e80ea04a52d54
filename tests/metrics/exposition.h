// A small reader of the Prometheus text format for tests: samples with their
// labels, plus the HELP/TYPE lines, so tests check series rather than text.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace danqing::metrics::test {

struct ParsedSample {
  std::string name;
  std::map<std::string, std::string> labels;
  std::string value;
};

struct Exposition {
  std::vector<ParsedSample> samples;
  std::map<std::string, std::string> types;  // name on the TYPE line → type
  std::map<std::string, std::string> helps;
  std::vector<std::string> errors;  // lines that did not parse

  // Samples named `name` whose labels include every pair in `match`.
  std::vector<const ParsedSample*> Find(
      const std::string& name, const std::map<std::string, std::string>& match = {}) const {
    std::vector<const ParsedSample*> out;
    for (const auto& s : samples) {
      if (s.name != name) continue;
      bool ok = true;
      for (const auto& [k, v] : match) {
        auto it = s.labels.find(k);
        if (it == s.labels.end() || it->second != v) ok = false;
      }
      if (ok) out.push_back(&s);
    }
    return out;
  }
  // The value of the single sample matching, or nullopt (none or several).
  std::optional<double> Value(const std::string& name,
                              const std::map<std::string, std::string>& match = {}) const {
    auto f = Find(name, match);
    if (f.size() != 1) return std::nullopt;
    return std::stod(f[0]->value);
  }
};

inline Exposition Parse(std::string_view text) {
  Exposition e;
  while (!text.empty()) {
    size_t nl = text.find('\n');
    std::string line(text.substr(0, nl));
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    if (line.empty()) continue;
    if (line[0] == '#') {
      std::string_view rest(line);
      for (std::string_view kw : {"# TYPE ", "# HELP "}) {
        if (rest.substr(0, kw.size()) == kw) {
          auto body = rest.substr(kw.size());
          size_t sp = body.find(' ');
          std::string name(body.substr(0, sp));
          std::string val(sp == std::string_view::npos ? "" : body.substr(sp + 1));
          (kw == "# TYPE " ? e.types : e.helps)[name] = val;
        }
      }
      continue;
    }
    ParsedSample s;
    size_t i = 0;
    while (i < line.size() && line[i] != '{' && line[i] != ' ') ++i;
    s.name = line.substr(0, i);
    bool bad = s.name.empty();
    if (i < line.size() && line[i] == '{') {
      ++i;
      while (i < line.size() && line[i] != '}') {
        size_t eq = line.find('=', i);
        if (eq == std::string::npos || eq + 1 >= line.size() || line[eq + 1] != '"') {
          bad = true;
          break;
        }
        std::string key = line.substr(i, eq - i);
        std::string val;
        size_t j = eq + 2;
        for (; j < line.size() && line[j] != '"'; ++j) {
          if (line[j] == '\\' && j + 1 < line.size()) {
            ++j;
            val += line[j] == 'n' ? '\n' : line[j];
          } else {
            val += line[j];
          }
        }
        s.labels[key] = val;
        i = j + 1;
        if (i < line.size() && line[i] == ',') ++i;
      }
      ++i;  // '}'
    }
    if (bad || i >= line.size() || line[i] != ' ') {
      e.errors.push_back(line);
      continue;
    }
    s.value = line.substr(i + 1);
    e.samples.push_back(std::move(s));
  }
  return e;
}

}  // namespace danqing::metrics::test
