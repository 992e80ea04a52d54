// Soak of the Danqing service (issue 10): `danqing serve` as a process under
// sustained load from several clients for N minutes, one request in four a
// bad upload (zero bytes, text, a truncated JPEG, a PNG header claiming
// 100000x100000 pixels, an oversized body). Prints a report; exits non-zero
// when the server crashed or reported a sanitizer error, a bad upload got
// anything but a 4xx, a good one got anything but 200/429/503, or resident
// memory or descriptors grew.
//
// Usage: service_soak [--minutes M] [--binary PATH] [--clients N]
#include <httplib.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench/soak/proc_stat.h"
#include "testing/support/fake_node.h"

namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;
using danqing::soak::KeepPeak;
using danqing::soak::ProcStat;
using danqing::soak::Sample;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

int PortFromLog(const std::string& log) {
  const auto at = log.find("http://127.0.0.1:");
  return at == std::string::npos ? 0 : std::atoi(log.c_str() + at + 17);
}

struct Upload {
  std::string name;
  std::string body;
  bool bad;
};

std::vector<Upload> Uploads() {
  std::vector<Upload> u;
  const std::string dir = std::string(DANQING_SOURCE_DIR) + "/tests/data/photos/";
  for (const char* f : {"astronaut.jpg", "coffee.jpg", "chelsea.jpg"}) u.push_back({f, ReadFile(dir + f), false});
  const std::string jpg = u[0].body;
  u.push_back({"zero bytes", "", true});
  u.push_back({"text", "this is not an image at all", true});
  u.push_back({"truncated jpeg", jpg.substr(0, jpg.size() / 3), true});
  // A PNG signature and IHDR claiming 100000 x 100000: refused from the header.
  std::string png("\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\x01\x86\xa0\0\x01\x86\xa0\x08\x02\0\0\0\0\0\0\0", 33);
  u.push_back({"decompression bomb header", png, true});
  u.push_back({"oversized body", std::string(11u << 20, 'x'), true});
  return u;
}

}  // namespace

int main(int argc, char** argv) {
  double minutes = 10;
  int clients = 4;
  std::string binary = std::string(DANQING_BINARY_DIR) + "/cmd/danqing/danqing";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--minutes") minutes = std::atof(argv[i + 1]);
    if (a == "--binary") binary = argv[i + 1];
    if (a == "--clients") clients = std::atoi(argv[i + 1]);
  }
  const auto duration = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(minutes * 60));
  danqing::testing::ChildProcess server({binary, "serve", "--host", "127.0.0.1", "--port", "0", "--deadline-ms",
                                         "20000"});
  int port = 0;
  for (int i = 0; i < 200 && port == 0; ++i) {
    std::this_thread::sleep_for(100ms);
    port = PortFromLog(server.Output());
  }
  if (port == 0) {
    std::fprintf(stderr, "server did not start:\n%s\n", server.Output().c_str());
    return 1;
  }
  const auto uploads = Uploads();
  // Warm up (first renders map the stroke data and fonts) before the start sample.
  {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(60, 0);
    for (int i = 0; i < 3; ++i) c.Post("/v1/inscriptions?width=800&height=600", uploads[0].body, "image/jpeg");
  }
  ProcStat start;  // sampled once the load has run a while (allocator arenas, caches warm)
  ProcStat peak;

  std::mutex mu;
  std::map<std::string, long> counts;
  std::atomic<bool> stop{false};
  auto client = [&](unsigned seed) {
    std::mt19937 rng(seed);
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(60, 0);
    c.set_write_timeout(60, 0);
    while (!stop) {
      const bool bad = rng() % 4 == 0;
      const Upload& u = bad ? uploads[3 + rng() % (uploads.size() - 3)] : uploads[rng() % 3];
      auto r = c.Post("/v1/inscriptions?width=800&height=600", u.body, "application/octet-stream");
      std::string key;
      if (!r) {
        key = (bad ? "bad upload (" + u.name + "): " : "photo: ") + "no response (" + httplib::to_string(r.error()) + ")";
        // An oversized body may be cut off by the server before it is all sent.
        if (!bad || u.name != "oversized body") key = "UNEXPECTED " + key;
      } else if (bad) {
        key = "bad upload (" + u.name + "): HTTP " + std::to_string(r->status);
        if (r->status < 400 || r->status >= 500) key = "UNEXPECTED " + key;
      } else {
        key = "photo: HTTP " + std::to_string(r->status);
        if (r->status != 200 && r->status != 429 && r->status != 503) key = "UNEXPECTED " + key;
        if (r->status == 429) std::this_thread::sleep_for(200ms);  // honour Retry-After, roughly
      }
      std::lock_guard lock(mu);
      ++counts[key];
    }
  };
  std::vector<std::thread> threads;
  for (int i = 0; i < clients; ++i) threads.emplace_back(client, 100u + static_cast<unsigned>(i));
  const auto t0 = Clock::now();
  const auto warm = std::min<Clock::duration>(60s, duration / 5);
  bool started = false;
  while (Clock::now() - t0 < duration) {
    std::this_thread::sleep_for(500ms);
    const ProcStat s = Sample(server.pid());
    if (!started && Clock::now() - t0 >= warm) {
      start = s;
      started = true;
    }
    KeepPeak(peak, s);
  }
  stop = true;
  for (auto& t : threads) t.join();
  std::this_thread::sleep_for(2s);
  const ProcStat end = Sample(server.pid());
  const bool alive = ::kill(server.pid(), 0) == 0;
  server.Signal(SIGTERM);
  const int rc = server.Wait(60'000);
  const std::string out = server.Output();
  const bool sanitizer = out.find("Sanitizer") != std::string::npos || out.find("runtime error:") != std::string::npos;

  long unexpected = 0, ok = 0;
  std::printf("== service soak: %.1f minutes, %d clients, binary %s\n", minutes, clients, binary.c_str());
  for (const auto& [k, v] : counts) {
    std::printf("  %-72s %ld\n", k.c_str(), v);
    if (k.rfind("UNEXPECTED", 0) == 0) unexpected += v;
    if (k == "photo: HTTP 200") ok = v;
  }
  std::printf("  inscriptions rendered: %ld\n", ok);
  std::printf("  (start = after %.0f s of load)\n", std::chrono::duration<double>(warm).count());
  danqing::soak::PrintProcStats("server", start, end, peak);
  std::printf("  server alive at the end: %s; exit code after SIGTERM: %d; sanitizer report: %s\n",
              alive ? "yes" : "NO", rc, sanitizer ? "YES" : "none");
  // Start = after the warm-up under load; end = after the load stopped.
  const bool fds_flat = end.fds <= start.fds + 2;
  const bool rss_flat = end.rss_kib <= start.rss_kib + std::max<long>(16 * 1024, start.rss_kib / 10);
  const bool clean = alive && rc == 0 && !sanitizer && unexpected == 0 && fds_flat && rss_flat && ok > 0;
  std::printf("  verdict: %s\n", clean ? "CLEAN" : "PROBLEMS (see above)");
  if (!clean && sanitizer) std::fprintf(stderr, "%s\n", out.c_str());
  return clean ? 0 : 1;
}
