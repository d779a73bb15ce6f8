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
//           address, any port; the desktop and editor apps' schemes Ollama allows by
//           default (app://, file://, tauri://, vscode-webview://, vscode-file://); or an
//           origin matching an --allow-origin pattern ('*' matches a run of characters:
//           "*" allows any, "https://*.example.com" a domain's sites); or the request's own
//           Host (same origin: the chat page served at / from a LAN address; the Host itself
//           passed its check first). "null" (sandboxed frames, file: pages in most
//           browsers) is refused unless allowed.
// Ollama applies the same idea (its allowed hosts and OLLAMA_ORIGINS). An allowed Origin
// gets CORS headers naming it (cors_headers), so browser front-ends can read the replies.
//
// Thread-safety: pure functions.
#pragma once

#include <array>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace hypura::server {

// The desktop and editor apps' page schemes allowed without --allow-origin (Ollama's
// defaults); `hypura serve --help` lists them from here.
inline constexpr std::array<std::string_view, 5> kAppOriginSchemes = {
    "app://", "file://", "tauri://", "vscode-webview://", "vscode-file://"};

struct HostPolicy {
  std::string bind_host;                     // --host
  std::vector<std::string> allowed_hosts;    // --allow-host (names, or "*")
  std::vector<std::string> allowed_origins;  // --allow-origin (scheme://host[:port], or "*")
};

bool host_allowed(const HostPolicy& policy, std::string_view host_header);
// host_header: the request's Host, for the same-origin rule ("": none).
bool origin_allowed(const HostPolicy& policy, std::string_view origin_header,
                    std::string_view host_header = "");

// Whether `text` matches `pattern`, where '*' stands for any run of characters other than
// '/'; ASCII case is ignored.
bool glob_match(std::string_view pattern, std::string_view text);

// The CORS headers of a response to an allowed Origin (empty when there is none); for a
// preflight (OPTIONS) also the methods and headers a request may use, echoing
// Access-Control-Request-Headers.
std::vector<std::pair<std::string, std::string>> cors_headers(std::string_view origin,
                                                              bool preflight,
                                                              std::string_view request_headers);

}  // namespace hypura::server
