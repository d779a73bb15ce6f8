#include "store/download.h"

#include <fcntl.h>
#include <httplib.h>
#include <openssl/evp.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <thread>

namespace hypura::store {
namespace {

namespace fs = std::filesystem;

struct Url {
  std::string origin;  // scheme://host[:port]
  std::string target;  // /path?query
  std::string host;
};

Result<Url> parse_url(const std::string& url) {
  const size_t scheme_end = url.find("://");
  if (scheme_end == std::string::npos) return invalid_argument("not a URL: " + url);
  const std::string scheme = url.substr(0, scheme_end);
  if (scheme != "http" && scheme != "https") return invalid_argument("not an http(s) URL: " + url);
  const size_t path = url.find('/', scheme_end + 3);
  Url u;
  u.origin = url.substr(0, path);
  u.target = path == std::string::npos ? "/" : url.substr(path);
  u.host = u.origin.substr(scheme_end + 3);
  if (u.host.empty()) return invalid_argument("no host in URL: " + url);
  return u;
}

// A redirect's Location against the URL that sent it.
std::string resolve_location(const Url& from, const std::string& location) {
  if (location.find("://") != std::string::npos) return location;
  if (!location.empty() && location[0] == '/') return from.origin + location;
  const size_t dir = from.target.rfind('/');
  return from.origin + from.target.substr(0, dir + 1) + location;
}

Status http_status_error(int status, const std::string& url, bool has_token) {
  if (status == 401 || status == 403) {
    return invalid_argument(
        "HTTP " + std::to_string(status) + " from " + url +
        ": the repository is gated or private; " +
        (has_token ? "the token in HF_TOKEN has no access to it (accept its terms on the Hub)"
                   : "set HF_TOKEN to a Hugging Face token that has access"));
  }
  if (status == 404) return not_found("HTTP 404 from " + url + ": no such repository or file");
  return io_error("HTTP " + std::to_string(status) + " from " + url);
}

class Sha256 {
 public:
  Sha256() : ctx_(EVP_MD_CTX_new(), EVP_MD_CTX_free) { reset(); }
  void reset() { EVP_DigestInit_ex(ctx_.get(), EVP_sha256(), nullptr); }
  void update(const void* data, size_t n) { EVP_DigestUpdate(ctx_.get(), data, n); }
  std::string hex() {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    EVP_DigestFinal_ex(ctx_.get(), md, &n);
    static constexpr char kHex[] = "0123456789abcdef";
    std::string out;
    for (unsigned int i = 0; i < n; ++i) {
      out += kHex[md[i] >> 4];
      out += kHex[md[i] & 15];
    }
    return out;
  }

 private:
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx_;
};

Status hash_file_into(const std::string& path, Sha256* hash) {
  std::unique_ptr<std::FILE, decltype(&std::fclose)> f(std::fopen(path.c_str(), "rb"),
                                                       &std::fclose);
  if (!f) return io_error("cannot read " + path);
  std::vector<char> buf(1 << 20);
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), f.get())) > 0) hash->update(buf.data(), n);
  return std::ferror(f.get()) ? io_error("cannot read " + path) : Status::ok();
}

// One GET, redirects followed. on_response sees the final response's status and headers and
// returns whether to read its body (into on_data).
struct Exchange {
  int status = 0;
  std::string final_url;
  httplib::Error error = httplib::Error::Success;
};

Exchange get(const std::string& url, const HttpOptions& o, const httplib::Headers& extra,
             const std::function<bool(const httplib::Response&)>& on_response,
             const std::function<bool(const char*, size_t)>& on_data) {
  Exchange ex;
  std::string current = url;
  Result<Url> first = parse_url(url);
  for (int hop = 0; hop < 8; ++hop) {
    Result<Url> u = parse_url(current);
    if (!u.is_ok()) {
      ex.error = httplib::Error::Connection;
      return ex;
    }
    httplib::Client client(u->origin);
    client.set_follow_location(false);
    client.set_connection_timeout(o.timeout_s);
    client.set_read_timeout(o.timeout_s);
    httplib::Headers headers = extra;
    headers.emplace("User-Agent", "hypura");
    // The token goes to the host it was meant for only.
    if (!o.token.empty() && first.is_ok() && u->host == first->host)
      headers.emplace("Authorization", "Bearer " + o.token);
    std::string location;
    bool redirect = false;
    httplib::Result res = client.Get(
        u->target, headers,
        [&](const httplib::Response& r) {
          ex.status = r.status;
          if (r.status >= 300 && r.status < 400 && r.has_header("Location")) {
            redirect = true;
            location = r.get_header_value("Location");
            return false;
          }
          return on_response(r);
        },
        [&](const char* data, size_t n) {
          if (o.cancel != nullptr && o.cancel->load()) return false;
          return on_data(data, n);
        });
    ex.final_url = current;
    if (redirect) {
      current = resolve_location(*u, location);
      continue;
    }
    ex.error = res ? httplib::Error::Success : res.error();
    return ex;
  }
  ex.status = 310;  // too many redirects
  return ex;
}

}  // namespace

Result<std::string> http_get_text(const std::string& url, const HttpOptions& o) {
  std::string body;
  const Exchange ex = get(
      url, o, {}, [](const httplib::Response& r) { return r.status == 200; },
      [&](const char* d, size_t n) {
        body.append(d, n);
        return body.size() < (size_t{64} << 20);  // listings are small
      });
  if (ex.status == 200 && ex.error == httplib::Error::Success) return body;
  if (ex.status != 0 && ex.status != 200)
    return http_status_error(ex.status, url, !o.token.empty());
  return io_error("cannot fetch " + url + ": " + httplib::to_string(ex.error));
}

std::string sha256_hex(std::string_view bytes) {
  Sha256 hash;
  hash.update(bytes.data(), bytes.size());
  return hash.hex();
}

Result<std::string> sha256_of_file(const std::string& path) {
  Sha256 hash;
  HYPURA_RETURN_IF_ERROR(hash_file_into(path, &hash));
  return hash.hex();
}

Status download_file(const FileDownload& file, const HttpOptions& o, const ByteProgress& progress) {
  std::error_code ec;
  if (file.size > 0 && fs::exists(file.dest, ec) && fs::file_size(file.dest, ec) == file.size)
    return Status::ok();
  const std::string part = file.dest + ".part";
  Sha256 hash;
  uint64_t have = fs::exists(part, ec) ? fs::file_size(part, ec) : 0;
  if (have > 0 && (file.size == 0 || have > file.size)) have = 0;  // nothing to trust
  if (have > 0) HYPURA_RETURN_IF_ERROR(hash_file_into(part, &hash));
  uint64_t total = file.size;
  int delay_ms = o.retry_delay_ms;
  Status last = Status::ok();
  for (int attempt = 0; attempt < std::max(1, o.attempts); ++attempt) {
    if (attempt > 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
      delay_ms *= 2;
    }
    if (total > 0 && have == total) break;
    std::unique_ptr<std::FILE, decltype(&std::fclose)> out(
        std::fopen(part.c_str(), have > 0 ? "ab" : "wb"), &std::fclose);
    if (!out) return io_error("cannot write " + part);
    httplib::Headers range;
    if (have > 0) range.emplace("Range", "bytes=" + std::to_string(have) + "-");
    bool write_failed = false, bad_range = false;
    const Exchange ex = get(
        file.url, o, range,
        [&](const httplib::Response& r) {
          if (r.status == 200 && have > 0) {  // no ranges here: start over
            have = 0;
            hash.reset();
            out.reset(std::fopen(part.c_str(), "wb"));
            if (!out) return write_failed = true, false;
          }
          if (r.status != 200 && r.status != 206) return false;
          if (r.status == 206 &&
              r.get_header_value("Content-Range").rfind("bytes " + std::to_string(have) + "-", 0) !=
                  0)
            return bad_range = true, false;
          if (total == 0 && r.has_header("Content-Length"))
            total = have + std::stoull(r.get_header_value("Content-Length"));
          return true;
        },
        [&](const char* data, size_t n) {
          if (std::fwrite(data, 1, n, out.get()) != n) return write_failed = true, false;
          hash.update(data, n);
          have += n;
          if (progress) progress(have, total);
          return true;
        });
    if (std::fflush(out.get()) != 0 || write_failed)
      return io_error("cannot write " + part + " (disk full?)");
    if (bad_range) return corrupt(file.url + ": the server answered a different byte range");
    if (o.cancel != nullptr && o.cancel->load())
      return Status(StatusCode::kCancelled, "download cancelled; run the pull again to resume");
    if (ex.status == 416 && total > 0 && have == total) break;  // already complete
    if (ex.status != 0 && ex.status != 200 && ex.status != 206)
      return http_status_error(ex.status, file.url, !o.token.empty());
    if (ex.error == httplib::Error::Success && (total == 0 || have >= total)) {
      if (total == 0) total = have;
      break;
    }
    last =
        io_error("the connection to " + file.url + " dropped at " + std::to_string(have) + " of " +
                 std::to_string(total) + " bytes (" + httplib::to_string(ex.error) + ")");
  }
  if (total == 0 || have != total) {
    return last.is_ok() ? io_error("incomplete download of " + file.url)
                        : Status(last.code(), last.message() + "; run the pull again to resume");
  }
  if (!file.sha256.empty()) {
    const std::string got = hash.hex();
    if (got != file.sha256) {
      fs::remove(part, ec);
      return corrupt(file.url + ": SHA-256 " + got + " is not the expected " + file.sha256 +
                     "; the partial file was deleted, run the pull again");
    }
  }
  // On the disk before its final name: a power loss never leaves a short model file.
  if (const int fd = ::open(part.c_str(), O_RDONLY); fd >= 0) {
    const int synced = ::fsync(fd);
    ::close(fd);
    if (synced != 0) return io_error("cannot sync " + part);
  }
  fs::rename(part, file.dest, ec);
  if (ec) return io_error("cannot rename " + part + ": " + ec.message());
  return Status::ok();
}

}  // namespace hypura::store
