// ManyScanJpeg: a grey progressive JPEG of `scans` scans (at most 127), for
// the tests of the decoder's bound on scans (image_test, service_test).
#pragma once

#include <jpeglib.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace danqing::testing {

// The DC, then each AC coefficient alone, first its high bits and then
// (from scan 65 on) its low-bit refinement: a valid script that any libjpeg
// accepts. Cut short, the script still sends every bit: the coefficients
// whose refinement is cut are sent whole (Al 0) instead.
inline std::vector<uint8_t> ManyScanJpeg(int w, int h, int scans) {
  std::vector<jpeg_scan_info> script;
  script.push_back({1, {0, 0, 0, 0}, 0, 0, 0, 0});
  for (int k = 1; k <= 63; ++k) script.push_back({1, {0, 0, 0, 0}, k, k, 0, 1});
  for (int k = 1; k <= 63; ++k) script.push_back({1, {0, 0, 0, 0}, k, k, 1, 0});
  for (size_t i = size_t(std::max(scans, 64)); i < script.size(); ++i) script[i - 63].Al = 0;
  script.resize(size_t(std::min<size_t>(size_t(scans), script.size())));
  std::vector<uint8_t> px(size_t(w) * size_t(h));
  for (size_t i = 0; i < px.size(); ++i) px[i] = uint8_t(i * 31 % 251);
  jpeg_compress_struct c;
  jpeg_error_mgr err;
  c.err = jpeg_std_error(&err);
  jpeg_create_compress(&c);
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&c, &buf, &size);
  c.image_width = JDIMENSION(w);
  c.image_height = JDIMENSION(h);
  c.input_components = 1;
  c.in_color_space = JCS_GRAYSCALE;
  jpeg_set_defaults(&c);
  c.scan_info = script.data();
  c.num_scans = int(script.size());
  jpeg_start_compress(&c, TRUE);
  while (c.next_scanline < c.image_height) {
    JSAMPROW row = px.data() + size_t(c.next_scanline) * size_t(w);
    jpeg_write_scanlines(&c, &row, 1);
  }
  jpeg_finish_compress(&c);
  jpeg_destroy_compress(&c);
  std::vector<uint8_t> out(buf, buf + size);
  std::free(buf);
  return out;
}

}  // namespace danqing::testing
