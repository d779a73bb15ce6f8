#include "common/log.h"

#include <gtest/gtest.h>

namespace hypura {
namespace {

// Issue 14: a model name holding a newline and escape sequences wrote forged log lines.
TEST(LogEscape, ControlCharactersCannotForgeLines) {
  EXPECT_EQ(log_escape("model \"x\n[info] 127.0.0.1 \"GET /admin\" 200\""),
            "model \"x\\n[info] 127.0.0.1 \"GET /admin\" 200\"");
  EXPECT_EQ(log_escape("\x1b[2J\r\t\x7f\x01"), "\\x1b[2J\\r\\t\\x7f\\x01");
  EXPECT_EQ(log_escape("a\\nb"), "a\\\\nb");  // a literal backslash-n stays distinguishable
  EXPECT_EQ(log_escape("\xc2\x9b"
                       "31m"),
            "\\u009b31m");                          // C1 CSI in UTF-8
  EXPECT_EQ(log_escape("\xff\xc3"), "\\xff\\xc3");  // not UTF-8
}

TEST(LogEscape, PrintableTextIsUnchanged) {
  const std::string text =
      "GET /api/chat \xc3\xa9t\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x99\x82 ~";
  EXPECT_EQ(log_escape(text), text);
  EXPECT_EQ(log_escape(""), "");
}

}  // namespace
}  // namespace hypura
