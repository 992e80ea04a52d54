#include "http/request_head.h"

#include <algorithm>
#include <cctype>
#include <vector>

namespace danqing::http {
namespace {

// RFC 9110 section 5.6.2.
bool IsTchar(unsigned char c) {
  if (std::isalnum(c)) return true;
  switch (c) {
    case '!':
    case '#':
    case '$':
    case '%':
    case '&':
    case '\'':
    case '*':
    case '+':
    case '-':
    case '.':
    case '^':
    case '_':
    case '`':
    case '|':
    case '~': return true;
    default: return false;
  }
}

bool IsToken(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(),
                                   [](char c) { return IsTchar(static_cast<unsigned char>(c)); });
}

bool IsSpaceOrTab(char c) {
  return c == ' ' || c == '\t';
}

// A control character, HTAB excepted (RFC 9110 section 5.5).
bool IsControl(unsigned char c) {
  return (c < 0x20 && c != '\t') || c == 0x7f;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && IsSpaceOrTab(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsSpaceOrTab(s.back())) s.remove_suffix(1);
  return s;
}

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

// A field name as it may be named in an answer: a token, at most 40 bytes.
std::string Named(std::string_view name) {
  if (!IsToken(name)) return "a header field";
  return "the header field '" + std::string(name.substr(0, 40)) + "'";
}

}  // namespace

size_t RequestHeadParser::Feed(std::string_view data) {
  size_t used = 0;
  while (used < data.size() && (state_ == State::kRequestLine || state_ == State::kFields)) {
    // Up to the next LF, at most to the limit.
    const size_t room = max_bytes_ - std::min(max_bytes_, bytes_);
    const std::string_view rest = data.substr(used);
    const size_t lf = rest.find('\n');
    const size_t take = std::min(lf == std::string_view::npos ? rest.size() : lf + 1, room + 1);
    line_.append(rest.data(), std::min(take, room));
    bytes_ += take;
    used += take;
    if (bytes_ > max_bytes_) {
      Fail(431, "the request line and headers are too long");
      break;
    }
    if (!line_.empty() && line_.back() == '\n') Line();
  }
  return used;
}

void RequestHeadParser::Fail(int status, std::string why) {
  state_ = State::kFailed;
  error_status_ = status;
  error_ = std::move(why);
  line_.clear();
}

void RequestHeadParser::Line() {
  std::string line = std::move(line_);
  line_.clear();
  if (line.size() < 2 || line[line.size() - 2] != '\r') {
    return Fail(400, "a line of the request ends in a bare LF, not CR LF");
  }
  const std::string_view content(line.data(), line.size() - 2);
  if (content.find('\r') != std::string_view::npos)
    return Fail(400, "a bare CR inside a line of the request");
  if (state_ == State::kRequestLine) {
    if (content.empty()) {  // an empty line before the request line
      skipped_ += line.size();
      return;
    }
    return RequestLine(content);
  }
  if (content.empty()) return End();
  Field(content);
}

void RequestHeadParser::RequestLine(std::string_view line) {
  const size_t sp1 = line.find(' ');
  const size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos)
    return Fail(400, "the request line is not 'method target HTTP-version'");
  const std::string_view method = line.substr(0, sp1);
  const std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  const std::string_view version = line.substr(sp2 + 1);
  if (!IsToken(method)) return Fail(400, "the request's method is not a token");
  if (target.empty() || std::any_of(target.begin(), target.end(), [](char c) {
        return c == ' ' || IsControl(static_cast<unsigned char>(c)) || c == '\t';
      })) {
    return Fail(400, "the request target is empty or has whitespace or a control character");
  }
  if (version == "HTTP/1.1") {
    http11_ = true;
  } else if (version != "HTTP/1.0") {
    const bool well_formed = version.size() == 8 && version.substr(0, 5) == "HTTP/" &&
                             std::isdigit(static_cast<unsigned char>(version[5])) &&
                             version[6] == '.' &&
                             std::isdigit(static_cast<unsigned char>(version[7]));
    return well_formed ? Fail(505, "only HTTP versions 1.0 and 1.1 are served")
                       : Fail(400, "the request line is not 'method target HTTP-version'");
  }
  method_ = method;
  target_ = target;
  state_ = State::kFields;
}

void RequestHeadParser::Field(std::string_view line) {
  if (IsSpaceOrTab(line.front())) {
    return Fail(400, "a header line starts with whitespace (obsolete line folding)");
  }
  const size_t colon = line.find(':');
  if (colon == std::string_view::npos) return Fail(400, "a header line has no colon");
  const std::string_view name = line.substr(0, colon);
  if (!IsToken(name)) {
    const size_t ws = name.find_first_of(" \t");
    if (ws != std::string_view::npos && Trim(name.substr(ws)).empty()) {
      return Fail(400, "whitespace between " + Named(name.substr(0, ws)) + " and its colon");
    }
    return Fail(400, "a header field's name is empty or not a token");
  }
  const std::string_view value = Trim(line.substr(colon + 1));
  if (std::any_of(value.begin(), value.end(),
                  [](char c) { return IsControl(static_cast<unsigned char>(c)); })) {
    return Fail(400, Named(name) + " has a control character");
  }
  if (EqualsIgnoreCase(name, "Content-Length")) {
    if (value.empty() || value.size() > 18 ||
        !std::all_of(value.begin(), value.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      return Fail(400, "Content-Length is not a number of bytes");
    }
    uint64_t n = 0;
    for (char c : value) n = n * 10 + static_cast<uint64_t>(c - '0');
    if (content_length_ && *content_length_ != n)
      return Fail(400, "two Content-Length fields differ");
    content_length_ = n;
  } else if (EqualsIgnoreCase(name, "Transfer-Encoding")) {
    if (!transfer_encoding_.empty()) transfer_encoding_ += ',';
    transfer_encoding_ += value;
    ++transfer_encoding_fields_;
  } else if (EqualsIgnoreCase(name, "Host")) {
    if (++hosts_ > 1) return Fail(400, "more than one Host field");
  }
}

void RequestHeadParser::End() {
  if (http11_ && hosts_ == 0)
    return Fail(400, "a request of HTTP version 1.1 without a Host field");
  if (transfer_encoding_fields_ > 0) {
    if (content_length_) return Fail(400, "both Content-Length and Transfer-Encoding");
    if (!http11_) return Fail(400, "Transfer-Encoding in an HTTP/1.0 request");
    std::vector<std::string_view> codings;
    std::string_view rest = transfer_encoding_;
    for (size_t comma; (comma = rest.find(',')) != std::string_view::npos;
         rest.remove_prefix(comma + 1)) {
      codings.push_back(Trim(rest.substr(0, comma)));
    }
    codings.push_back(Trim(rest));
    if (!EqualsIgnoreCase(codings.back(), "chunked")) {
      return Fail(400, "Transfer-Encoding does not end in chunked: the body's length is unknown");
    }
    if (codings.size() > 1)
      return Fail(501, "no Transfer-Encoding but a single chunked is implemented");
    chunked_ = true;
  }
  state_ = State::kDone;
}

bool ChunkedBodyParser::Feed(std::string_view data) {
  for (size_t i = 0; i < data.size() && state_ != State::kDone && state_ != State::kFailed; ++i) {
    const char c = data[i];
    const auto uc = static_cast<unsigned char>(c);
    switch (state_) {
      case State::kSize:
        if (std::isxdigit(uc) && digits_ < 15) {
          ++digits_;
          size_ = size_ * 16 +
                  static_cast<uint64_t>(std::isdigit(uc) ? c - '0' : std::tolower(uc) - 'a' + 10);
        } else if (digits_ > 0 && IsSpaceOrTab(c)) {
          state_ = State::kSizeEnd;
        } else if (digits_ > 0 && c == ';') {
          state_ = State::kExt;
        } else if (digits_ > 0 && c == '\r') {
          state_ = State::kSizeLf;
        } else {
          state_ = State::kFailed;
        }
        break;
      case State::kSizeEnd:
        if (c == ';')
          state_ = State::kExt;
        else if (c == '\r')
          state_ = State::kSizeLf;
        else if (!IsSpaceOrTab(c))
          state_ = State::kFailed;
        break;
      case State::kExt:
        if (c == '\r')
          state_ = State::kSizeLf;
        else if (IsControl(uc))
          state_ = State::kFailed;
        break;
      case State::kSizeLf:
        if (c != '\n')
          state_ = State::kFailed;
        else
          state_ = size_ == 0 ? State::kTrailerStart : State::kData;
        break;
      case State::kData: {
        const uint64_t take = std::min<uint64_t>(size_, data.size() - i);
        size_ -= take;
        i += static_cast<size_t>(take) - 1;
        if (size_ == 0) state_ = State::kDataCr;
        break;
      }
      case State::kDataCr: state_ = c == '\r' ? State::kDataLf : State::kFailed; break;
      case State::kDataLf:
        state_ = c == '\n' ? State::kSize : State::kFailed;
        digits_ = 0;
        size_ = 0;
        break;
      case State::kTrailerStart:
        if (c == '\r')
          state_ = State::kFinalLf;
        else
          state_ = IsControl(uc) || IsSpaceOrTab(c) ? State::kFailed : State::kTrailer;
        break;
      case State::kTrailer:
        if (c == '\r')
          state_ = State::kTrailerLf;
        else if (IsControl(uc))
          state_ = State::kFailed;
        break;
      case State::kTrailerLf: state_ = c == '\n' ? State::kTrailerStart : State::kFailed; break;
      case State::kFinalLf: state_ = c == '\n' ? State::kDone : State::kFailed; break;
      case State::kDone:
      case State::kFailed: break;
    }
  }
  return state_ != State::kFailed;
}

}  // namespace danqing::http
