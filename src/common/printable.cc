#include "common/printable.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>

namespace danqing {
namespace {

// The length of the valid, shortest-form UTF-8 sequence at s[i] and its code
// point; 0 when s[i] does not start one.
size_t DecodeUtf8(std::string_view s, size_t i, uint32_t* cp) {
  const auto b = [&](size_t k) { return static_cast<uint8_t>(s[i + k]); };
  const uint8_t lead = b(0);
  size_t len = 0;
  uint32_t min = 0;
  if (lead >= 0xC2 && lead <= 0xDF) {
    len = 2, min = 0x80, *cp = lead & 0x1Fu;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    len = 3, min = 0x800, *cp = lead & 0x0Fu;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    len = 4, min = 0x10000, *cp = lead & 0x07u;
  } else {
    return 0;
  }
  if (i + len > s.size()) return 0;
  for (size_t k = 1; k < len; ++k) {
    if ((b(k) & 0xC0u) != 0x80u) return 0;
    *cp = (*cp << 6) | (b(k) & 0x3Fu);
  }
  if (*cp < min || *cp > 0x10FFFF || (*cp >= 0xD800 && *cp <= 0xDFFF)) return 0;
  return len;
}

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
      uint32_t cp = 0;
      used = DecodeUtf8(text, i, &cp);
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
