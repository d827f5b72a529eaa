// What operators read, in its pure parts: the metrics responder (label
// escaping, the answer to a request line; the daemon's own exposition is
// checked end to end, with promtool, in daemon_test) and the choice of the
// journal as the log's sink.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <string>

#include "log.h"
#include "metrics.h"

TEST_CASE("metrics: label values are escaped, and the responder answers GET and HEAD of /metrics only") {
  CHECK(ptod::label_value("a\\b\"c\nd") == "a\\\\b\\\"c\\nd");
  CHECK(ptod::label_value("peer 10.0.0.2:7000") == "peer 10.0.0.2:7000");
  auto render = [] { return std::string("x 1\n"); };
  CHECK(ptod::metrics_http_reply("GET /metrics HTTP/1.0", render).body == "x 1\n");
  CHECK(ptod::metrics_http_reply("GET /metrics?name[]=x HTTP/1.1", render).status == "200 OK");
  const ptod::HttpReply head = ptod::metrics_http_reply("HEAD /metrics HTTP/1.0", render);
  CHECK((head.status == "200 OK" && head.head_only && head.body == "x 1\n"));
  const ptod::HttpReply post = ptod::metrics_http_reply("POST /metrics HTTP/1.0", render);
  CHECK((post.status == "405 Method Not Allowed" && post.extra_headers == "Allow: GET, HEAD\r\n"));
  CHECK(ptod::metrics_http_reply("GET / HTTP/1.0", render).status == "404 Not Found");
  CHECK(ptod::metrics_http_reply("garbage", render).status == "400 Bad Request");
}

TEST_CASE("logs: 'auto' logs to the journal only when JOURNAL_STREAM names stderr's file") {
  char path[] = "/tmp/ptod-journal-XXXXXX";
  const int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  struct stat st {};
  REQUIRE(fstat(fd, &st) == 0);
  const std::string same = std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino);
  const std::string other = std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino + 1);
  CHECK(ptod::stderr_is_journal(same.c_str(), fd));
  CHECK_FALSE(ptod::stderr_is_journal(other.c_str(), fd));
  CHECK_FALSE(ptod::stderr_is_journal(nullptr, fd));
  CHECK_FALSE(ptod::stderr_is_journal("", fd));
  CHECK_FALSE(ptod::stderr_is_journal("not a stream", fd));
  CHECK_FALSE(ptod::stderr_is_journal((same + "x").c_str(), fd));  // the whole value is DEV:INODE
  CHECK_FALSE(ptod::stderr_is_journal((":" + std::to_string(st.st_ino)).c_str(), fd));
  close(fd);
  unlink(path);
  CHECK(ptod::setup_logging("info", "", "stderr").ok());
}
