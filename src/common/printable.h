// Printable: a client-supplied string made safe to put in a log line or an
// error message.
//
// Anything a peer sends (device IDs in kubelet RPCs, a remote server's error
// text) may be megabytes long, hold a newline that forges a log line, or hold
// bytes that are not UTF-8. Every such string goes through Printable before it
// reaches spdlog or a Status / grpc::Status message:
//   * printable ASCII passes, except '\' which becomes "\\";
//   * \n, \r, \t become "\n", "\r", "\t"; other C0 controls and DEL "\xNN";
//   * valid UTF-8 passes, except the characters that move or hide text (C1
//     controls, line and paragraph separators, bidirectional overrides and
//     isolates, zero-width marks, the byte-order mark): "\u{XXXX}";
//   * a byte that does not start a valid, shortest-form UTF-8 sequence: "\xNN";
//   * at most `max_bytes` of escaped text are kept, cut between characters;
//     what was cut is said with "...[N bytes in all]" (N: the input's length).
//
// Thread-safety: a pure function.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace danqing {

// The default bound: longer than any device ID, UUID or resource name the
// agent knows, short enough that a log line stays one screen line.
inline constexpr size_t kPrintableDefaultMax = 256;

std::string Printable(std::string_view text, size_t max_bytes = kPrintableDefaultMax);

}  // namespace danqing
