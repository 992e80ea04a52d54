// The bytes come from .incbin (GNU as). DANQING_ASSETS_HASH, the files' SHA-256
// from configure time, is part of this file's compile line so that ccache and
// Ninja rebuild it when a file changes (CMake re-configures on a change).
#include "service/assets.h"

#ifndef DANQING_INDEX_HTML
#error "DANQING_INDEX_HTML and DANQING_POEMS_TSV must name the files (see CMakeLists.txt)"
#endif

// NOLINTBEGIN
__asm__(
    ".pushsection .rodata\n"
    ".balign 16\n"
    "danqing_index_html_begin:\n"
    ".incbin \"" DANQING_INDEX_HTML
    "\"\n"
    "danqing_index_html_end:\n"
    ".balign 16\n"
    "danqing_poems_begin:\n"
    ".incbin \"" DANQING_POEMS_TSV
    "\"\n"
    "danqing_poems_end:\n"
    ".popsection\n");
// NOLINTEND

extern "C" const char danqing_index_html_begin[], danqing_index_html_end[];
extern "C" const char danqing_poems_begin[], danqing_poems_end[];

namespace danqing::service {

std::string_view IndexHtml() {
  return {danqing_index_html_begin,
          static_cast<size_t>(danqing_index_html_end - danqing_index_html_begin)};
}

std::string_view BundledPoems() {
  return {danqing_poems_begin, static_cast<size_t>(danqing_poems_end - danqing_poems_begin)};
}

}  // namespace danqing::service
