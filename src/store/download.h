// HTTP downloads of model files: resumable, verified, with progress.
//
// A file downloads into DEST.part; an interrupted download (a dropped connection, a killed
// process) resumes from the part's length with an HTTP Range request, and a dropped
// connection is retried (resuming) up to HttpOptions::attempts times. The bytes are hashed
// as they arrive (a resumed part is hashed first) and the SHA-256, when known, must match:
// a mismatch deletes the part and says so. Only a complete, verified file is renamed to
// DEST. Redirects are followed (the Hub sends downloads to its CDN); the bearer token goes
// to the first host only, never to another one a redirect names.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "common/status.h"

namespace hypura::store {

struct HttpOptions {
  std::string token;  // bearer token (HF_TOKEN) for gated repositories; never logged
  int attempts = 5;   // tries of one file, each resuming where the last stopped
  int timeout_s = 30;
  int retry_delay_ms = 1000;                  // before the second try; doubled each time after
  const std::atomic<bool>* cancel = nullptr;  // set: stop at the next chunk (kCancelled)
};

// GET of a small text (an API listing). Errors name the URL and, for 401/403, the token.
Result<std::string> http_get_text(const std::string& url, const HttpOptions& options);

// done of total bytes so far (total: the expected size, 0 when unknown).
using ByteProgress = std::function<void(uint64_t done, uint64_t total)>;

struct FileDownload {
  std::string url;
  std::string dest;    // the final path; DEST.part while downloading
  uint64_t size = 0;   // expected bytes (0: unknown, taken from the response)
  std::string sha256;  // lower-case hex; "" when the source gives none
};

// Downloads (or resumes) one file as described above. A DEST that already exists with the
// expected size is kept as it is.
Status download_file(const FileDownload& file, const HttpOptions& options,
                     const ByteProgress& progress);

// SHA-256 of a file's bytes, lower-case hex.
Result<std::string> sha256_of_file(const std::string& path);
// SHA-256 of bytes in memory, lower-case hex.
std::string sha256_hex(std::string_view bytes);

}  // namespace hypura::store
