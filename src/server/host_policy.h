// Which Host and Origin headers `hypura serve` answers (issue 14: DNS rebinding and
// cross-site requests). Without these checks any web page could make a visitor's browser
// POST to /api/generate (a "simple" cross-origin request needs no preflight), and a page
// whose name is rebound to 127.0.0.1 could read the replies.
//
//   Host:   an IP literal (a rebinding attack needs a name it controls), "localhost" or a
//           name under ".localhost", the --host address, or a name given with --allow-host
//           ("*" allows any). Absent (HTTP/1.0): allowed.
//   Origin: absent (not a browser, or a same-origin GET): allowed. Otherwise http(s) on a
//           loopback host (localhost, *.localhost, 127.0.0.0/8, [::1]) or on the --host
//           address, any port; or an exact origin given with --allow-origin ("*": any).
//           "null" (sandboxed frames, file: pages) is refused unless allowed.
// Ollama applies the same idea (its allowed hosts and OLLAMA_ORIGINS).
//
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace hypura::server {

struct HostPolicy {
  std::string bind_host;                     // --host
  std::vector<std::string> allowed_hosts;    // --allow-host (names, or "*")
  std::vector<std::string> allowed_origins;  // --allow-origin (scheme://host[:port], or "*")
};

bool host_allowed(const HostPolicy& policy, std::string_view host_header);
bool origin_allowed(const HostPolicy& policy, std::string_view origin_header);

}  // namespace hypura::server
