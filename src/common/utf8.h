// Strict UTF-8: shortest-form sequences of code points up to U+10FFFF, no
// surrogates. One decoder for every place that reads client text (the
// service's form fields, the renderer's inscription, log escaping).
//
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "common/status.h"

namespace danqing {

// The length (1..4) of the valid UTF-8 sequence starting at s[i], with its
// code point in *cp; 0 when s[i] does not start one (a stray continuation
// byte, an overlong form, a surrogate, past U+10FFFF, or cut short).
// Requires i < s.size().
size_t Utf8SequenceAt(std::string_view s, size_t i, char32_t* cp);

// The code points of `s`; INVALID_ARGUMENT "not valid UTF-8 (at byte N)" at
// the first byte that does not start a valid sequence, for the caller to say
// which field it was.
Result<std::u32string> DecodeUtf8(std::string_view s);

// The UTF-8 of valid code points (as DecodeUtf8 gives them).
std::string EncodeUtf8(std::u32string_view cps);

}  // namespace danqing
