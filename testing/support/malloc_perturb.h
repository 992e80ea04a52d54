// Filling new heap allocations with a chosen byte, to catch code that reads
// memory it never wrote (image::PixelBuffer is not zeroed): a result that
// changes with the fill byte depends on uninitialised memory.
//
// glibc honours mallopt(M_PERTURB) (and MALLOC_PERTURB_ in a child's
// environment) for allocations over its tcache limit (1032 bytes); smaller
// ones are not filled. ASan's allocator ignores both and takes
// ASAN_OPTIONS=malloc_fill_byte instead; TSan's fills nothing.
#pragma once

#include <malloc.h>

#include <cstdlib>
#include <string>

namespace danqing::testing_support {

// Sets this process's fill byte (0: off). False, and off, when the allocator
// does not fill (a sanitizer's): the caller should skip, saying so.
inline bool SetMallocPerturb(int byte) {
  if (mallopt(M_PERTURB, byte) != 1) return false;
  if (byte == 0) return true;
  auto* probe = static_cast<volatile unsigned char*>(std::malloc(4096));
  // glibc fills a new allocation with byte ^ 0xff (and a freed one with byte).
  const bool filled = probe != nullptr && probe[2048] == ((byte ^ 0xff) & 0xff);
  std::free(const_cast<unsigned char*>(probe));
  if (!filled) mallopt(M_PERTURB, 0);
  return filled;
}

// Environment assignments for a shell command line that make a child process
// fill its allocations with `byte`, under glibc's allocator or ASan's.
inline std::string MallocFillEnv(int byte) {
  const std::string b = std::to_string(byte);
  return "MALLOC_PERTURB_=" + b + " ASAN_OPTIONS=\"${ASAN_OPTIONS:+$ASAN_OPTIONS:}malloc_fill_byte=" + b +
         ":max_malloc_fill_size=2147483647\"";
}

// Whether this binary was built with TSan, whose allocator fills nothing.
constexpr bool kThreadSanitizer =
#if defined(__SANITIZE_THREAD__)
    true;
#else
    false;
#endif

}  // namespace danqing::testing_support
