// log(): the logger library code writes to. It goes to stderr, so commands that print
// JSON on stdout (`profile --json`, `inspect --plan --json`) stay parseable whatever the
// default spdlog logger is. The level follows the default logger (HYPURA_LOG in cli/commands.cc).
// Thread-safety: spdlog loggers are thread-safe; creation is guarded by a static.
#pragma once

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <memory>
#include <string>
#include <string_view>

namespace hypura {

inline spdlog::logger& log() {
  static std::shared_ptr<spdlog::logger> logger = [] {
    auto l = spdlog::get("hypura.stderr");
    if (!l) l = spdlog::stderr_color_mt("hypura.stderr");
    l->set_pattern("%^[%l]%$ %v");
    return l;
  }();
  logger->set_level(spdlog::default_logger()->level());
  return *logger;
}

// `text` made safe for one log line: control characters (newlines, ESC and the rest of
// C0, DEL, and C1 written in UTF-8) and bytes that are not UTF-8 become \n, \t, \xNN or
// \u00NN escapes, and backslashes double. Wrap every user-controlled string (request
// paths, model names, error messages quoting input) so that a client cannot forge log
// lines or send escape sequences to an operator's terminal.
std::string log_escape(std::string_view text);

}  // namespace hypura
