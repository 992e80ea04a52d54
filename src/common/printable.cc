#include "common/printable.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>

#include "common/utf8.h"

namespace danqing {
namespace {

// Characters that are valid but move, hide or break text in a log line.
bool Disruptive(uint32_t cp) {
  return (cp >= 0x80 && cp <= 0x9F) ||      // C1 controls (NEL among them)
         (cp >= 0x200B && cp <= 0x200F) ||  // zero-width marks, LRM, RLM
         (cp >= 0x2028 && cp <= 0x202E) ||  // line/paragraph separators, bidi embeddings
         (cp >= 0x2066 && cp <= 0x2069) ||  // bidi isolates
         cp == 0xFEFF;                      // byte-order mark
}

// "\xNN" for a byte.
std::string EscapeByte(uint8_t b) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(b));
  return buf;
}

// "\u{XXXX}" for a code point.
std::string EscapeCodePoint(uint32_t cp) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "\\u{%04X}", static_cast<unsigned>(cp));
  return buf;
}

}  // namespace

std::string Printable(std::string_view text, size_t max_bytes) {
  std::string out;
  out.reserve(std::min(text.size(), max_bytes) + 32);
  size_t i = 0;
  while (i < text.size()) {
    const auto c = static_cast<uint8_t>(text[i]);
    std::string piece;
    size_t used = 1;
    if (c == '\\') {
      piece = "\\\\";
    } else if (c == '\n') {
      piece = "\\n";
    } else if (c == '\r') {
      piece = "\\r";
    } else if (c == '\t') {
      piece = "\\t";
    } else if (c >= 0x20 && c < 0x7F) {
      piece.assign(1, static_cast<char>(c));
    } else if (c < 0x80) {
      piece = EscapeByte(c);
    } else {
      char32_t cp = 0;
      used = Utf8SequenceAt(text, i, &cp);
      if (used == 0) {
        used = 1;
        piece = EscapeByte(c);
      } else if (Disruptive(cp)) {
        piece = EscapeCodePoint(cp);
      } else {
        piece.assign(text.substr(i, used));
      }
    }
    if (out.size() + piece.size() > max_bytes) {
      out += "...[" + std::to_string(text.size()) + " bytes in all]";
      return out;
    }
    out += piece;
    i += used;
  }
  return out;
}

}  // namespace danqing
