// Files compiled into the binary, so `danqing serve` needs nothing next to it:
// the upload page (web/index.html) and the verse corpus (data/verse/poems.tsv).
#pragma once

#include <string_view>

namespace danqing::service {

std::string_view IndexHtml();
std::string_view BundledPoems();

}  // namespace danqing::service
