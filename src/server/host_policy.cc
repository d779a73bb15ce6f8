#include "server/host_policy.h"

#include <arpa/inet.h>

#include <algorithm>
#include <array>
#include <cctype>

namespace hypura::server {
namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  return out;
}

// Whether `list` holds `item`, ignoring case.
bool contains(const std::vector<std::string>& list, const std::string& item) {
  return std::any_of(list.begin(), list.end(),
                     [&](const std::string& e) { return lower(e) == item; });
}

// The host part of "host", "host:port", "[v6]" or "[v6]:port", lower case, brackets
// and a trailing dot removed. An unbracketed address with several colons is an IPv6
// literal without a port.
std::string host_part(std::string_view authority) {
  std::string_view host = authority;
  if (!host.empty() && host.front() == '[') {
    const size_t close = host.find(']');
    host = close == std::string_view::npos ? host.substr(1) : host.substr(1, close - 1);
  } else if (const size_t colon = host.find(':');
             colon != std::string_view::npos &&
             host.find(':', colon + 1) == std::string_view::npos) {
    host = host.substr(0, colon);
  }
  if (!host.empty() && host.back() == '.') host.remove_suffix(1);
  return lower(host);
}

bool is_ip_literal(const std::string& host, bool* loopback) {
  std::array<unsigned char, 16> addr{};
  if (inet_pton(AF_INET, host.c_str(), addr.data()) == 1) {
    *loopback = addr[0] == 127;
    return true;
  }
  if (inet_pton(AF_INET6, host.c_str(), addr.data()) == 1) {
    static constexpr std::array<unsigned char, 16> kV6Loopback{0, 0, 0, 0, 0, 0, 0, 0,
                                                               0, 0, 0, 0, 0, 0, 0, 1};
    *loopback = addr == kV6Loopback;
    return true;
  }
  return false;
}

bool is_localhost_name(const std::string& host) {
  constexpr std::string_view kSuffix = ".localhost";
  return host == "localhost" ||
         (host.size() > kSuffix.size() &&
          host.compare(host.size() - kSuffix.size(), kSuffix.size(), kSuffix) == 0);
}

bool is_bind_host(const HostPolicy& policy, const std::string& host) {
  const std::string bind = host_part(policy.bind_host);
  return !bind.empty() && bind != "0.0.0.0" && bind != "::" && host == bind;
}

}  // namespace

bool host_allowed(const HostPolicy& policy, std::string_view host_header) {
  if (host_header.empty() || contains(policy.allowed_hosts, "*")) return true;
  const std::string host = host_part(host_header);
  bool loopback = false;
  return is_ip_literal(host, &loopback) || is_localhost_name(host) || is_bind_host(policy, host) ||
         contains(policy.allowed_hosts, host);
}

bool glob_match(std::string_view pattern, std::string_view text) {
  // Greedy matching with one backtrack point (the last '*'), so a match costs at most
  // |pattern| x |text| steps. A '*' never spans a '/'.
  size_t p = 0, t = 0, star = std::string_view::npos, resume = 0;
  const auto eq = [](char a, char b) {
    return std::tolower(static_cast<unsigned char>(a)) ==
           std::tolower(static_cast<unsigned char>(b));
  };
  while (t < text.size()) {
    if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      resume = t;
    } else if (p < pattern.size() && eq(pattern[p], text[t])) {
      ++p;
      ++t;
    } else if (star != std::string_view::npos && text[resume] != '/') {
      p = star + 1;
      t = ++resume;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

std::vector<std::pair<std::string, std::string>> cors_headers(std::string_view origin,
                                                              bool preflight,
                                                              std::string_view request_headers) {
  std::vector<std::pair<std::string, std::string>> h;
  if (origin.empty()) return h;
  h.emplace_back("Access-Control-Allow-Origin", std::string(origin));
  h.emplace_back("Vary", "Origin");
  if (preflight) {
    h.emplace_back("Access-Control-Allow-Methods", "GET, POST, PUT, PATCH, DELETE, HEAD, OPTIONS");
    // What the Ollama and OpenAI browser clients send (authorization, x-stainless-*, ...).
    h.emplace_back("Access-Control-Allow-Headers",
                   request_headers.empty()
                       ? std::string("Authorization, Content-Type, User-Agent, Accept, "
                                     "X-Requested-With")
                       : std::string(request_headers));
    h.emplace_back("Access-Control-Max-Age", "43200");
  }
  return h;
}

bool origin_allowed(const HostPolicy& policy, std::string_view origin_header,
                    std::string_view host_header) {
  const std::string origin = lower(origin_header);
  if (origin.empty()) return true;
  const std::string host = lower(host_header);
  if (!host.empty() && (origin == "http://" + host || origin == "https://" + host)) return true;
  for (const std::string& pattern : policy.allowed_origins) {
    if (pattern == "*" || glob_match(pattern, origin)) return true;
  }
  // Desktop and editor apps (Ollama's defaults): their pages have these schemes.
  for (std::string_view scheme : kAppOriginSchemes) {
    if (origin.starts_with(scheme)) return true;
  }
  size_t authority = 0;
  if (origin.rfind("http://", 0) == 0) {
    authority = 7;
  } else if (origin.rfind("https://", 0) == 0) {
    authority = 8;
  } else {
    return false;  // "null", browser extensions' schemes: only by --allow-origin
  }
  const std::string origin_host = host_part(std::string_view(origin).substr(authority));
  bool loopback = false;
  return (is_ip_literal(origin_host, &loopback) && loopback) || is_localhost_name(origin_host) ||
         is_bind_host(policy, origin_host);
}

}  // namespace hypura::server
