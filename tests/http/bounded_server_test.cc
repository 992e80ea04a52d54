// BoundedServer over real sockets on 127.0.0.1 (port 0), and its request head
// parser alone: framing refused as RFC 9112 asks (no request smuggled through
// httplib's lenient parsing), connections that wait holding no thread, bodies
// that must keep pace, 405 with Allow, absolute-form targets.
#include "http/bounded_server.h"

#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "http/request_head.h"
#include "testing/support/loopback.h"

namespace danqing::http {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

using danqing::testing::ConnectLoopback;
using danqing::testing::RawExchange;
using danqing::testing::ReadToClose;
using danqing::testing::SendAll;

size_t Responses(const std::string& answer) {
  size_t n = 0;
  for (size_t at = answer.find("HTTP/1.1 "); at != std::string::npos;
       at = answer.find("HTTP/1.1 ", at + 1))
    ++n;
  return n;
}

// True when the server closed `fd` within `ms` (what it sent first is dropped).
bool ClosedWithin(int fd, int ms) {
  const auto due = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  char buf[4096];
  for (;;) {
    const auto left =
        std::chrono::ceil<std::chrono::milliseconds>(due - std::chrono::steady_clock::now())
            .count();
    pollfd p{fd, POLLIN, 0};
    if (left < 0 || ::poll(&p, 1, static_cast<int>(left)) <= 0) return false;
    const ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) return true;
  }
}

// A BoundedServer on 127.0.0.1 with a few routes, listening on its own thread.
class TestServer {
 public:
  explicit TestServer(int threads = 2, std::function<void(BoundedServer&)> configure = nullptr) {
    s_.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
    s_.set_keep_alive_timeout(30);
    s_.set_read_timeout(std::chrono::seconds(5));
    s_.Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
      res.set_content("ok\n", "text/plain");
    });
    s_.Get(R"(/items/(\d+))", [](const httplib::Request& req, httplib::Response& res) {
      res.set_content(std::string(req.matches[1]), "text/plain");
    });
    s_.Post("/echo", [](const httplib::Request& req, httplib::Response& res) {
      res.set_content(std::to_string(req.body.size()), "text/plain");
    });
    if (configure) configure(s_);
    port_ = BindEveryAddress(s_, "127.0.0.1", 0);
    EXPECT_GT(port_, 0);
    thread_ = std::thread([this] { s_.listen_after_bind(); });
    for (int i = 0; i < 5000 && !s_.is_running(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~TestServer() { Stop(); }
  void Stop() {
    if (!thread_.joinable()) return;
    s_.stop();
    thread_.join();
  }
  int port() const { return port_; }
  BoundedServer& server() { return s_; }
  // Waits (at most 5 s) until `n` connections wait in the poller.
  bool WaitIdle(size_t n) {
    for (int i = 0; i < 5000 && s_.idle_connections() != n; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return s_.idle_connections() == n;
  }

 private:
  BoundedServer s_;
  int port_ = 0;
  std::thread thread_;
};

// --- Framing (issue 31, item 11) ---

const std::string kNext =
    "GET /items/99 HTTP/1.1\r\nHost: x\r\n\r\n";  // smuggled, must not be answered

TEST(BoundedServerFramingTest, DifferingContentLengthsAreRefusedAndTheRestIsNotARequest) {
  TestServer t;
  const std::string answer = RawExchange(
      t.port(), "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: " +
                    std::to_string(5 + kNext.size()) + "\r\n\r\nhello" + kNext);
  EXPECT_THAT(answer, StartsWith("HTTP/1.1 400")) << answer;
  EXPECT_THAT(answer, HasSubstr("Content-Length"));
  EXPECT_EQ(Responses(answer), 1u) << answer;
}

TEST(BoundedServerFramingTest, WhitespaceBeforeTheColonIsRefusedAndTheBodyIsNotARequest) {
  TestServer t;
  const std::string answer =
      RawExchange(t.port(), "GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length : " +
                                std::to_string(kNext.size()) + "\r\n\r\n" + kNext);
  EXPECT_THAT(answer, StartsWith("HTTP/1.1 400")) << answer;
  EXPECT_THAT(answer,
              HasSubstr("whitespace between the header field 'Content-Length' and its colon"));
  EXPECT_EQ(Responses(answer), 1u) << answer;
}

// Each sibling: answered `status` and closed, the request after it unanswered.
TEST(BoundedServerFramingTest, MalformedHeadsAreRefusedAndClosed) {
  TestServer t;
  struct Case {
    const char* what;
    std::string head;
    int status;
  };
  const std::vector<Case> cases = {
      {"obs-fold", "GET /healthz HTTP/1.1\r\nHost: x\r\nX-A: 1\r\n Content-Length: 36\r\n\r\n",
       400},
      {"bare LF", "GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 36\n\r\n", 400},
      {"bare CR", "GET /healthz HTTP/1.1\r\nHost: x\r\nX-A: 1\rContent-Length: 36\r\n\r\n", 400},
      {"tab before colon", "GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length\t: 36\r\n\r\n", 400},
      {"percent-encoded length",
       "GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: %33%36\r\n\r\n", 400},
      {"signed length", "GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: +36\r\n\r\n", 400},
      {"length list", "GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 36, 36\r\n\r\n", 400},
      {"length and chunked",
       "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: "
       "chunked\r\n\r\n0\r\n\r\n",
       400},
      {"identity coding", "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: identity\r\n\r\n",
       400},
      {"other codings",
       "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501},
      {"chunked in 1.0", "POST /echo HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400},
      {"no Host", "GET /healthz HTTP/1.1\r\n\r\n", 400},
      {"two Hosts", "GET /healthz HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n", 400},
      {"control character", "GET /healthz HTTP/1.1\r\nHost: x\r\nX-A: a\x01z\r\n\r\n", 400},
      {"no colon", "GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length 36\r\n\r\n", 400},
      {"HTTP/2.0", "GET /healthz HTTP/2.0\r\nHost: x\r\n\r\n", 505},
      {"NUL in target", std::string("GET /heal\0thz HTTP/1.1\r\nHost: x\r\n\r\n", 35), 400},
  };
  for (const Case& c : cases) {
    const std::string answer = RawExchange(t.port(), c.head + kNext);
    EXPECT_THAT(answer, StartsWith("HTTP/1.1 " + std::to_string(c.status)))
        << c.what << ": " << answer;
    EXPECT_THAT(answer, HasSubstr("Connection: close")) << c.what;
    EXPECT_EQ(Responses(answer), 1u) << c.what << ": " << answer;
  }
  // Well-formed ones keep their connection: two answers on one.
  const std::string two = RawExchange(
      t.port(),
      "\r\nGET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nContent-Length: 0\r\n\r\n"
      "GET /items/2 HTTP/1.0\r\n\r\n");
  EXPECT_EQ(Responses(two), 2u) << two;
}

// httplib reads no body for a GET: one declared there was parsed as the next
// request. The connection is closed after the answer instead.
TEST(BoundedServerFramingTest, AnUnreadBodyIsNotTheNextRequest) {
  TestServer t;
  for (const std::string& framing :
       {"Content-Length: " + std::to_string(kNext.size()) + "\r\n\r\n" + kNext,
        "Transfer-Encoding: chunked\r\n\r\n" + kNext}) {
    const std::string answer =
        RawExchange(t.port(), "GET /healthz HTTP/1.1\r\nHost: x\r\n" + framing);
    EXPECT_THAT(answer, StartsWith("HTTP/1.1 200")) << answer;
    EXPECT_EQ(Responses(answer), 1u) << framing << answer;
  }
}

// httplib reads a chunk size with strtoul and ends a body early when a chunk
// is not followed by CR LF: such bodies are refused (400) and closed.
TEST(BoundedServerFramingTest, ChunkedBodiesAreFramedStrictly) {
  TestServer t;
  const std::string head = "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n";
  for (const std::string& body :
       {std::string("0x5\r\nhello\r\n0\r\n\r\n"), std::string("5garbage\r\nhello\r\n0\r\n\r\n"),
        std::string("-5\r\nhello\r\n0\r\n\r\n"), std::string("5\nhello\r\n0\r\n\r\n"),
        std::string("5\r\nhelloXX0\r\n\r\n"), std::string("5 x\r\nhello\r\n0\r\n\r\n")}) {
    const std::string answer = RawExchange(t.port(), head + body + kNext);
    EXPECT_THAT(answer, StartsWith("HTTP/1.1 400")) << body << answer;
    EXPECT_EQ(Responses(answer), 1u) << body << answer;
  }
  // Well-framed, with an extension and whitespace: read, and the connection kept.
  const std::string ok =
      RawExchange(t.port(), head + "5 ;a=b\r\nhello\r\nA\r\n0123456789\r\n0\r\n\r\n" +
                                "GET /items/99 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_THAT(ok, StartsWith("HTTP/1.1 200")) << ok;
  EXPECT_THAT(ok, HasSubstr("\r\n\r\n15HTTP/1.1 200")) << ok;
  EXPECT_EQ(Responses(ok), 2u) << ok;
}

TEST(BoundedServerFramingTest, RefusedHeadsAreLogged) {
  std::atomic<int> logged{0};
  TestServer t(2, [&](BoundedServer& s) {
    s.set_logger([&](const httplib::Request& req, const httplib::Response& res) {
      if (res.status == 400 && req.path == "/healthz") ++logged;
    });
  });
  RawExchange(t.port(), "GET /healthz HTTP/1.1\r\n\r\n");
  EXPECT_EQ(logged.load(), 1);
}

TEST(RequestHeadParserTest, FedByteByByteOrWholeTheSame) {
  const std::string head =
      "\r\nPOST /a?b=c HTTP/1.1\r\nHost: h\r\nContent-Length: 12\r\ncontent-length: "
      "12\r\n\r\nbody...";
  RequestHeadParser whole(1024);
  const size_t used = whole.Feed(head);
  ASSERT_TRUE(whole.done()) << whole.error();
  EXPECT_EQ(used, head.find("body"));
  EXPECT_EQ(whole.skipped(), 2u);
  EXPECT_EQ(whole.method(), "POST");
  EXPECT_EQ(whole.target(), "/a?b=c");
  EXPECT_EQ(whole.content_length(), 12u);
  EXPECT_FALSE(whole.chunked());
  RequestHeadParser bytes(1024);
  size_t fed = 0;
  for (size_t i = 0; i < head.size() && !bytes.done(); ++i) fed += bytes.Feed(head.substr(i, 1));
  EXPECT_TRUE(bytes.done());
  EXPECT_EQ(fed, used);
  EXPECT_EQ(bytes.Feed("more"), 0u);
}

TEST(RequestHeadParserTest, ChunkedAndLimits) {
  RequestHeadParser p(1024);
  p.Feed("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding:  Chunked \r\n\r\n");
  ASSERT_TRUE(p.done()) << p.error();
  EXPECT_TRUE(p.chunked());
  EXPECT_FALSE(p.content_length());
  RequestHeadParser small(32);
  small.Feed("GET /" + std::string(100, 'a'));
  EXPECT_TRUE(small.failed());
  EXPECT_EQ(small.error_status(), 431);
  RequestHeadParser exact(24);
  exact.Feed("GET / HTTP/1.0\r\nA: b\r\n\r\n");
  EXPECT_TRUE(exact.done()) << exact.error();
  RequestHeadParser huge(1024);
  huge.Feed("GET / HTTP/1.1\r\nHost: h\r\nContent-Length: 1234567890123456789\r\n\r\n");
  EXPECT_EQ(huge.error_status(), 400);
}

// --- Minor items: Host, absolute form, 405 ---

TEST(BoundedServerRoutingTest, AbsoluteFormTargetsAreRoutedByTheirPath) {
  TestServer t;
  const std::string answer =
      RawExchange(t.port(),
                  "GET http://example.org:8080/items/7?x=1 HTTP/1.1\r\nHost: example.org\r\n"
                  "Connection: close\r\n\r\n");
  EXPECT_THAT(answer, StartsWith("HTTP/1.1 200")) << answer;
  EXPECT_THAT(answer, ::testing::EndsWith("\r\n\r\n7"));
  const std::string root = RawExchange(t.port(),
                                       "GET HTTPS://example.org HTTP/1.1\r\nHost: example.org\r\n"
                                       "Connection: close\r\n\r\n");
  EXPECT_THAT(root, StartsWith("HTTP/1.1 404")) << root;  // "/": no handler here
}

TEST(BoundedServerRoutingTest, AKnownPathWithAnotherMethodIs405WithAllow) {
  TestServer t;
  struct Case {
    std::string request;
    std::string allow;
  };
  const std::vector<Case> cases = {
      {"POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n", "GET, HEAD"},
      {"DELETE /items/3 HTTP/1.1\r\nHost: x\r\n", "GET, HEAD"},
      {"GET /echo HTTP/1.1\r\nHost: x\r\n", "POST"},
      {"OPTIONS /echo HTTP/1.1\r\nHost: x\r\n", "POST"},
  };
  for (const Case& c : cases) {
    const std::string answer = RawExchange(t.port(), c.request + "Connection: close\r\n\r\n");
    EXPECT_THAT(answer, StartsWith("HTTP/1.1 405")) << c.request << answer;
    EXPECT_THAT(answer, HasSubstr("Allow: " + c.allow + "\r\n")) << c.request << answer;
  }
  EXPECT_THAT(
      RawExchange(t.port(), "GET /nowhere HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"),
      StartsWith("HTTP/1.1 404"));
  EXPECT_THAT(
      RawExchange(t.port(), "HEAD /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"),
      StartsWith("HTTP/1.1 200"));
  // A body it did not read closes the connection: it is not the next request.
  const std::string body =
      RawExchange(t.port(), "PUT /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: " +
                                std::to_string(kNext.size()) + "\r\n\r\n" + kNext);
  EXPECT_THAT(body, StartsWith("HTTP/1.1 405")) << body;
  EXPECT_EQ(Responses(body), 1u) << body;
}

// --- Waiting connections hold no thread (items 7 and 13) ---

// Two threads; twenty idle connections and five with half a head, which
// httplib alone would let hold both threads for the 30 s keep-alive or the
// header deadline: a probe with a 1 s timeout is answered.
TEST(BoundedServerIdleTest, WaitingConnectionsHoldNoThread) {
  TestServer t(2);
  std::vector<int> fds;
  for (int i = 0; i < 25; ++i) {
    const int fd = ConnectLoopback(t.port());
    ASSERT_GE(fd, 0);
    if (i >= 20) {
      ASSERT_TRUE(SendAll(fd, "GET /healthz HTTP/1.1\r\nHo"));
    }
    fds.push_back(fd);
  }
  EXPECT_TRUE(t.WaitIdle(25)) << t.server().idle_connections();
  httplib::Client probe("127.0.0.1", t.port());
  probe.set_connection_timeout(1, 0);
  probe.set_read_timeout(1, 0);
  for (int i = 0; i < 3; ++i) {
    auto res = probe.Get("/healthz");
    ASSERT_TRUE(res) << "probe " << i << " not answered within 1 s";
    EXPECT_EQ(res->status, 200);
  }
  // A half head completed later is served.
  ASSERT_TRUE(SendAll(fds[20], "st: x\r\nConnection: close\r\n\r\n"));
  EXPECT_THAT(ReadToClose(fds[20]), StartsWith("HTTP/1.1 200"));
  for (int fd : fds) ::close(fd);
}

// A refused request's connection lingers (its unread bytes dropped for 2 s
// so the client gets the answer): ten clients that keep such connections
// open held the two threads for 2 s each. Lingering holds no thread now.
TEST(BoundedServerIdleTest, RefusedConnectionsLingerWithoutAThread) {
  TestServer t(2);
  std::vector<int> fds;
  for (int i = 0; i < 10; ++i) {
    const int fd = ConnectLoopback(t.port());
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(SendAll(fd, "GET /healthz HTTP/1.1\r\n\r\n"));  // no Host: 400
    fds.push_back(fd);
  }
  EXPECT_TRUE(t.WaitIdle(10)) << t.server().idle_connections();
  httplib::Client probe("127.0.0.1", t.port());
  probe.set_connection_timeout(1, 0);
  probe.set_read_timeout(1, 0);
  auto res = probe.Get("/healthz");
  ASSERT_TRUE(res) << "not answered within 1 s";
  EXPECT_EQ(res->status, 200);
  // Each got its answer, then the close.
  for (int fd : fds) {
    EXPECT_THAT(ReadToClose(fd), StartsWith("HTTP/1.1 400"));
    ::close(fd);
  }
}

// Keep-alive connections go back and forth between the pool and the poller
// between requests: eight clients, fifteen requests each, on two threads, all
// answered (under TSan, the hand-off is checked for races).
TEST(BoundedServerIdleTest, KeepAliveClientsMoveBetweenPoolAndPoller) {
  TestServer t(2);
  std::atomic<int> ok{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < 8; ++c) {
    clients.emplace_back([&, c] {
      httplib::Client client("127.0.0.1", t.port());
      client.set_keep_alive(true);
      client.set_read_timeout(5, 0);
      for (int i = 0; i < 15; ++i) {
        auto res =
            (i + c) % 3 == 0
                ? client.Post("/echo", std::string(static_cast<size_t>(i) * 100, 'z'), "text/plain")
                : client.Get("/items/" + std::to_string(i));
        if (res && res->status == 200) ++ok;
      }
    });
  }
  for (auto& th : clients) th.join();
  EXPECT_EQ(ok.load(), 8 * 15);
}

TEST(BoundedServerIdleTest, StopClosesWaitingConnections) {
  TestServer t(2);
  std::vector<int> fds;
  for (int i = 0; i < 5; ++i) fds.push_back(ConnectLoopback(t.port()));
  ASSERT_TRUE(SendAll(fds[0], "GET / HTTP/1.1\r\n"));
  ASSERT_TRUE(t.WaitIdle(5));
  t.Stop();
  for (int fd : fds) {
    EXPECT_TRUE(ClosedWithin(fd, 2000));
    ::close(fd);
  }
  EXPECT_EQ(t.server().idle_connections(), 0u);
}

TEST(BoundedServerIdleTest, PastTheMaxTheLongestWaitingIsClosed) {
  TestServer t(2, [](BoundedServer& s) { s.set_max_idle_connections(4); });
  std::vector<int> fds;
  for (int i = 0; i < 4; ++i) {
    fds.push_back(ConnectLoopback(t.port()));
    ASSERT_TRUE(t.WaitIdle(fds.size()));
  }
  for (int i = 0; i < 2; ++i) {
    fds.push_back(ConnectLoopback(t.port()));
    EXPECT_TRUE(ClosedWithin(fds[static_cast<size_t>(i)], 5000)) << i;
  }
  for (size_t i = 2; i < fds.size(); ++i) {
    pollfd p{fds[i], POLLIN, 0};
    EXPECT_EQ(::poll(&p, 1, 0), 0) << i << " closed";
  }
  EXPECT_EQ(t.server().idle_connections(), 4u);
  for (int fd : fds) ::close(fd);
}

TEST(BoundedServerIdleTest, KeepAliveEndsAfterItsTimeout) {
  TestServer t(2, [](BoundedServer& s) { s.set_keep_alive_timeout(1); });
  const int fd = ConnectLoopback(t.port());
  ASSERT_TRUE(SendAll(fd, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"));
  const auto start = std::chrono::steady_clock::now();
  const std::string answer = ReadToClose(fd);
  EXPECT_EQ(Responses(answer), 1u);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  ::close(fd);
}

// --- Bodies keep pace (item 12) ---

TEST(BoundedServerBodyTest, ATrickledBodyIsCutOff) {
  TestServer t(2,
               [](BoundedServer& s) { s.set_body_deadline(std::chrono::milliseconds(300), 1000); });
  const int fd = ConnectLoopback(t.port());
  ASSERT_TRUE(SendAll(fd, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n"));
  // A byte every 100 ms, each well inside the 5 s read timeout.
  bool closed = false;
  int sent = 0;
  for (; sent < 30 && !closed; ++sent) {
    closed = !SendAll(fd, "x") || ClosedWithin(fd, 100);
  }
  EXPECT_TRUE(closed) << "still reading the body after " << sent << " bytes";
  ::close(fd);
  // A body at pace is read.
  const std::string ok = RawExchange(
      t.port(),
      "POST /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 5000\r\n\r\n" +
          std::string(5000, 'y'));
  EXPECT_THAT(ok, StartsWith("HTTP/1.1 200")) << ok;
  EXPECT_THAT(ok, ::testing::EndsWith("5000"));
}

}  // namespace
}  // namespace danqing::http
