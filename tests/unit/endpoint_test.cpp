#include "core/endpoint.hpp"

#include <gtest/gtest.h>

namespace qsp::core {
namespace {

TEST(HostPort, ParsesWhatRedisSentinelsAccepts) {
  struct row {
    const char* text;
    const char* host; // nullptr: refused
    uint16_t port;
  };
  const row rows[] = {
    {"127.0.0.1:26379", "127.0.0.1", 26379},
    {"sentinel-1.internal:26379", "sentinel-1.internal", 26379},
    {"[::1]:26379", "::1", 26379},
    {"h:1", "h", 1},
    {"h:65535", "h", 65535},
    {"h:65536", nullptr, 0},
    {"h:0", nullptr, 0},
    {"h:", nullptr, 0},
    {":26379", nullptr, 0},
    {"h", nullptr, 0},
    {"h:26379x", nullptr, 0},
    {"h:-1", nullptr, 0},
    {"::1:26379", nullptr, 0}, // a bare IPv6 address is ambiguous
    {"[]:26379", nullptr, 0},
    {"[::1:26379", nullptr, 0},
    {"", nullptr, 0},
  };
  for (auto& r : rows) {
    auto got = parse_host_port(r.text);
    if (r.host == nullptr) {
      EXPECT_FALSE(got) << r.text;
      continue;
    }
    ASSERT_TRUE(got) << r.text;
    EXPECT_EQ(got->host, r.host) << r.text;
    EXPECT_EQ(got->port, r.port) << r.text;
  }
}

} // namespace
} // namespace qsp::core
