// A Hugging Face Hub on loopback for tests of `hypura pull` and the server's /api/pull: a
// real HTTP server with the Hub's routes and the faults a download meets.
//   GET /api/models/ORG/REPO/tree/main   the listing of files_ (sizes, LFS SHA-256s from
//                                        shas_): repo "missing" 404s, "gated" wants
//                                        "Authorization: Bearer secret", "badhash" lists
//                                        wrong hashes, "huge" lists 2^60-byte files
//   GET /ORG/REPO/resolve/main/PATH      302 to /cdn/PATH (for "gated", on another host
//                                        name, so a token must not follow)
//   GET /cdn/PATH                        the bytes, Range requests answered; while
//                                        drops_left_ > 0, half of what was asked and then
//                                        the connection closes; with slow_ms_ > 0, 64 KiB
//                                        at a time
#pragma once

#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>

#include "store/download.h"

namespace hypura::store::testing {

// n bytes of a GGUF-looking file ("GGUF" then random bytes).
inline std::string gguf_bytes(size_t n, uint32_t seed) {
  std::string s = "GGUF";
  std::mt19937 rng(seed);
  while (s.size() < n) s.push_back(static_cast<char>(rng()));
  return s;
}

class FakeHub {
 public:
  FakeHub() {
    files_["m-Q4_K_M.gguf"] = gguf_bytes(3 << 20, 1);
    files_["m-Q8_0-00001-of-00002.gguf"] = gguf_bytes(1 << 20, 2);
    files_["m-Q8_0-00002-of-00002.gguf"] = std::string(700000, 'x');
    files_["notgguf-Q4_0.gguf"] = std::string(5000, 'y');
    // Listed hashes are the files' own; all set before the server thread starts (its reads
    // need no lock).
    for (const auto& [name, bytes] : files_) shas_[name] = sha256_hex(bytes);
    server_.Get(R"(/api/models/([^/]+)/([^/]+)/tree/main)",
                [this](const auto& q, auto& r) { tree(q, r); });
    server_.Get(R"(/([^/]+)/([^/]+)/resolve/main/(.+))", [this](const auto& q, auto& r) {
      // The CDN is the same server under another host name: the token must not follow.
      const bool other_host = q.matches[2] == "gated";
      r.status = 302;
      r.set_header("Location", std::string(other_host ? "http://localhost:" : "http://127.0.0.1:") +
                                   std::to_string(port_) + "/cdn/" + std::string(q.matches[3]));
      if (q.has_header("Authorization")) ++authorized_;
    });
    server_.Get(R"(/cdn/(.+))", [this](const auto& q, auto& r) { cdn(q, r); });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~FakeHub() {
    server_.stop();
    thread_.join();
  }
  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }

  std::map<std::string, std::string> files_;
  std::map<std::string, std::string> shas_;  // file -> its listed SHA-256
  std::atomic<int> cdn_gets_{0}, range_gets_{0}, drops_left_{0}, authorized_{0};
  std::atomic<int> token_at_cdn_{0};
  std::atomic<int> slow_ms_{0};  // > 0: files served 64 KiB at a time, this many ms apart
  std::string range_seen() {
    std::lock_guard<std::mutex> lock(mu_);
    return range_seen_;
  }

 private:
  std::string range_seen_;  // the last Range header
  std::mutex mu_;

  void tree(const httplib::Request& q, httplib::Response& r) {
    const std::string repo = q.matches[2];
    if (repo == "missing") {
      r.status = 404;
      return;
    }
    if (repo == "gated" && q.get_header_value("Authorization") != "Bearer secret") {
      r.status = 401;
      return;
    }
    nlohmann::json list = nlohmann::json::array();
    list.push_back({{"type", "file"}, {"path", "README.md"}, {"size", 10}});
    list.push_back({{"type", "directory"}, {"path", "sub"}, {"size", 0}});
    for (const auto& [name, bytes] : files_) {
      uint64_t size = bytes.size();
      if (repo == "huge") size = uint64_t{1} << 60;
      std::string sha = shas_.at(name);
      if (repo == "badhash") sha = std::string(64, '0');
      list.push_back({{"type", "file"},
                      {"path", name},
                      {"size", size},
                      {"lfs", {{"oid", sha}, {"size", size}, {"pointerSize", 130}}}});
    }
    r.set_content(list.dump(), "application/json");
  }

  void cdn(const httplib::Request& q, httplib::Response& r) {
    ++cdn_gets_;
    if (q.has_header("Authorization")) ++token_at_cdn_;
    const std::string name = q.matches[1];
    const auto file = files_.find(name);
    if (file == files_.end()) {
      r.status = 404;
      return;
    }
    const std::string& bytes = file->second;
    size_t from = 0;
    if (q.has_header("Range")) {  // httplib answers the range (206, Content-Range) itself
      ++range_gets_;
      const std::string range = q.get_header_value("Range");  // bytes=N-
      std::lock_guard<std::mutex> lock(mu_);
      range_seen_ = range;
      from = std::stoull(range.substr(6));
    }
    if (drops_left_ > 0) {  // half of what was asked, then the connection closes
      --drops_left_;
      const size_t stop = from + (bytes.size() - from) / 2;
      r.set_content_provider(bytes.size(), "application/octet-stream",
                             [&bytes, stop](size_t offset, size_t, httplib::DataSink& sink) {
                               if (offset >= stop) return false;
                               sink.write(bytes.data() + offset, stop - offset);
                               return true;
                             });
      return;
    }
    if (slow_ms_ > 0) {  // a slow link: a kill or a drop lands mid-file
      r.set_content_provider(bytes.size(), "application/octet-stream",
                             [this, &bytes](size_t offset, size_t, httplib::DataSink& sink) {
                               std::this_thread::sleep_for(std::chrono::milliseconds(slow_ms_));
                               const size_t n = std::min<size_t>(64 << 10, bytes.size() - offset);
                               return sink.write(bytes.data() + offset, n);
                             });
      return;
    }
    r.set_content(bytes, "application/octet-stream");
  }

  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
};

}  // namespace hypura::store::testing
