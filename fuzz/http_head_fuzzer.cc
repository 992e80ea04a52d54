// Fuzzes http::RequestHeadParser, the request framing check BoundedServer
// runs on every request head before httplib reads it. Oracle beyond "no
// crash, no sanitizer report": fed in pieces of any size the parser reaches
// the same verdict as fed all at once (the server gets bytes as they come);
// a refusal has a status it may answer and a reason; an accepted head ends in
// an empty line, never exceeds the limit, starts with its method and target,
// and has at most one of Content-Length and chunked. What follows a chunked
// head goes to http::ChunkedBodyParser, whole and in pieces: same verdict.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "http/request_head.h"

namespace {

constexpr size_t kMax = 2048;

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "oracle: %s\n", what);
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t piece = data[0] % 16 + 1;  // the first byte picks the split
  const std::string_view bytes(reinterpret_cast<const char*>(data) + 1, size - 1);

  danqing::http::RequestHeadParser whole(kMax);
  const size_t used = whole.Feed(bytes);
  Check(used <= bytes.size(), "used more than it was given");
  Check(whole.done() || whole.failed() || used == bytes.size(), "stopped early without a verdict");

  danqing::http::RequestHeadParser pieces(kMax);
  size_t fed = 0;
  for (size_t at = 0; at < bytes.size() && !pieces.done() && !pieces.failed(); at += piece) {
    fed += pieces.Feed(bytes.substr(at, piece));
  }
  Check(fed == used, "pieces used other bytes than the whole");
  Check(pieces.done() == whole.done() && pieces.failed() == whole.failed(),
        "pieces reached another verdict");
  Check(pieces.error_status() == whole.error_status(), "pieces refused with another status");

  if (whole.failed()) {
    const int s = whole.error_status();
    Check(s == 400 || s == 431 || s == 501 || s == 505, "a status it may not answer");
    Check(!whole.error().empty(), "a refusal without a reason");
    return 0;
  }
  if (!whole.done()) return 0;
  Check(used <= kMax, "a head over the limit accepted");
  const std::string_view head = bytes.substr(whole.skipped(), used - whole.skipped());
  Check(head.size() >= 4 && head.substr(head.size() - 4) == "\r\n\r\n",
        "a head that does not end in an empty line");
  Check(head.substr(0, whole.method().size() + 1 + whole.target().size()) ==
            whole.method() + " " + whole.target(),
        "method and target are not the request line's");
  Check(!(whole.chunked() && whole.content_length()), "both chunked and a Content-Length");
  Check(pieces.method() == whole.method() && pieces.target() == whole.target() &&
            pieces.content_length() == whole.content_length() &&
            pieces.chunked() == whole.chunked(),
        "pieces parsed another head");

  // A chunked body after it: http::ChunkedBodyParser, whole and in pieces.
  if (!whole.chunked()) return 0;
  const std::string_view body = bytes.substr(used);
  danqing::http::ChunkedBodyParser body_whole;
  body_whole.Feed(body);
  danqing::http::ChunkedBodyParser body_pieces;
  for (size_t at = 0; at < body.size() && !body_pieces.done() && !body_pieces.failed();
       at += piece) {
    body_pieces.Feed(body.substr(at, piece));
  }
  Check(body_whole.done() == body_pieces.done() && body_whole.failed() == body_pieces.failed(),
        "a chunked body split in pieces reached another verdict");
  Check(!(body_whole.done() && body_whole.failed()), "a chunked body both done and refused");
  return 0;
}
