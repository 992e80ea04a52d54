// RequestHeadParser: checks the framing of an HTTP/1.x request's head (its
// request line and header fields, up to the empty line) as the bytes arrive,
// before httplib reads them.
//
// Why: httplib 0.11 parses heads leniently in ways that frame a request
// differently from a proxy in front of it (request smuggling): of two
// differing Content-Length fields it takes the first; "Content-Length : 5"
// (whitespace before the colon) is a field it does not know, so the body is
// read as the next request; a line that ends in a bare LF, or continues the
// one before (obs-fold), is skipped; values are percent-decoded
// ("Content-Length: %35" is 5). RFC 9112 makes each of these a 400 followed by
// closing the connection, which BoundedServer does with what this parser
// reports.
//
// What it refuses (status, then why):
//   400  a line not ending in CR LF, a CR inside a line, a control character
//        in the request line or a field value; a request line that is not
//        "token SP target SP HTTP/1.x"; a field line that starts with
//        whitespace (obs-fold), has no colon, or whose name is not a token
//        (whitespace before the colon included); a Content-Length that is not
//        digits (at most 18), or two that differ; Transfer-Encoding with
//        Content-Length, in an HTTP/1.0 request, or whose last coding is not
//        chunked; an HTTP/1.1 request without Host, or with two;
//   501  a Transfer-Encoding other than a single "chunked" (httplib decodes
//        no other coding);
//   505  an HTTP version other than 1.0 and 1.1;
//   431  a head longer than the limit.
// Empty lines before the request line are skipped (RFC 9112 section 2.2);
// `skipped()` says how many bytes.
//
// Pure: no I/O; what it keeps (the current line, the method, the target, the
// codings) is bounded by the limit. Not thread-safe: one per connection, used
// by one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace danqing::http {

class RequestHeadParser {
 public:
  explicit RequestHeadParser(size_t max_bytes) : max_bytes_(max_bytes) {}

  // Reads `data`, the next bytes of the connection, up to and including the
  // empty line that ends the head; returns how many bytes it used (the rest
  // belong to the body or to the next request). Once done() or failed(),
  // uses nothing more.
  size_t Feed(std::string_view data);

  bool done() const { return state_ == State::kDone; }
  bool failed() const { return state_ == State::kFailed; }
  // After failed(): the status to answer and why (names no more of the
  // request than a field's name, itself a token).
  int error_status() const { return error_status_; }
  const std::string& error() const { return error_; }

  // Bytes used so far (the skipped empty lines included); 0 while nothing
  // of this request has come.
  size_t bytes() const { return bytes_; }
  // Bytes of empty lines before the request line.
  size_t skipped() const { return skipped_; }

  // After done(): the request's method and target, and how its body is framed.
  const std::string& method() const { return method_; }
  const std::string& target() const { return target_; }
  std::optional<uint64_t> content_length() const { return content_length_; }
  bool chunked() const { return chunked_; }

  // Ready for the next request on the connection.
  void Reset() { *this = RequestHeadParser(max_bytes_); }

 private:
  enum class State { kRequestLine, kFields, kDone, kFailed };
  void Line();
  void RequestLine(std::string_view line);
  void Field(std::string_view line);
  void End();
  void Fail(int status, std::string why);

  size_t max_bytes_;
  State state_ = State::kRequestLine;
  std::string line_;  // the current line so far, with its terminator
  size_t bytes_ = 0;
  size_t skipped_ = 0;
  int error_status_ = 0;
  std::string error_;
  std::string method_;
  std::string target_;
  bool http11_ = false;
  std::optional<uint64_t> content_length_;
  std::string transfer_encoding_;  // every Transfer-Encoding field, comma-joined
  int transfer_encoding_fields_ = 0;
  int hosts_ = 0;
  bool chunked_ = false;
};

// ChunkedBodyParser: checks a chunked body's framing (RFC 9112 section 7.1)
// as httplib reads it. httplib 0.11 reads a chunk size with strtoul, so
// "0x5", "-5" or "5garbage" are sizes to it and not to a proxy in front; a
// chunk not followed by CR LF ends its body early. Such a body is refused
// (the read fails, httplib answers 400, the connection is closed).
//
// Accepts: 1*HEXDIG (at most 15), optional whitespace and ";" extensions
// (no control characters), CR LF, the data, CR LF; after the last chunk
// ("0"), trailer lines and an empty line. Pure; one per body; not
// thread-safe.
class ChunkedBodyParser {
 public:
  // Reads the next bytes of the body; false once they break the framing.
  // Bytes after the body's end are not looked at (done() is true).
  bool Feed(std::string_view data);
  bool done() const { return state_ == State::kDone; }
  bool failed() const { return state_ == State::kFailed; }

 private:
  enum class State {
    kSize,
    kSizeEnd,  // whitespace after the size
    kExt,
    kSizeLf,
    kData,
    kDataCr,
    kDataLf,
    kTrailerStart,
    kTrailer,
    kTrailerLf,
    kFinalLf,
    kDone,
    kFailed
  };
  State state_ = State::kSize;
  int digits_ = 0;
  uint64_t size_ = 0;  // of the current chunk; in kData, what is left of it
};

}  // namespace danqing::http
