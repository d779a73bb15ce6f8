// Status and Result<T>: how fallible operations on untrusted input report failure.
//
// Errors come in three tiers (see docs/ARCHITECTURE.md): untrusted input (GGUF files,
// HTTP bodies, flags) returns a Status whose message says what went wrong and where;
// broken invariants assert; fatal environment errors abort with file and line.
// The per-token path neither throws nor allocates, so it never builds a Status.
#pragma once

#include <cassert>
#include <string>
#include <utility>
#include <variant>

namespace hypura {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,    // bad flag, bad request, bad value
  kCorrupt,            // malformed or hostile file contents
  kNotFound,           // missing file, tensor, key
  kUnsupported,        // valid but not handled here (architecture, type, version)
  kIoError,            // the OS refused or a read failed
  kResourceExhausted,  // over a memory budget, queue full
  kCancelled,
  kInternal,
};

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok() { return Status(); }
  bool is_ok() const { return code_ == StatusCode::kOk; }
  explicit operator bool() const { return is_ok(); }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // Returns a copy whose message is prefixed with `context: `.
  Status with_context(const std::string& context) const {
    if (is_ok()) return *this;
    return Status(code_, context + ": " + message_);
  }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status invalid_argument(std::string m) {
  return {StatusCode::kInvalidArgument, std::move(m)};
}
inline Status corrupt(std::string m) {
  return {StatusCode::kCorrupt, std::move(m)};
}
inline Status not_found(std::string m) {
  return {StatusCode::kNotFound, std::move(m)};
}
inline Status unsupported(std::string m) {
  return {StatusCode::kUnsupported, std::move(m)};
}
inline Status io_error(std::string m) {
  return {StatusCode::kIoError, std::move(m)};
}
inline Status resource_exhausted(std::string m) {
  return {StatusCode::kResourceExhausted, std::move(m)};
}

// A value or the Status that explains why there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT(implicit)
  Result(Status status) : v_(std::move(status)) {
    assert(!std::get<Status>(v_).is_ok());
  }  // NOLINT

  bool is_ok() const { return std::holds_alternative<T>(v_); }
  explicit operator bool() const { return is_ok(); }
  const Status& status() const {
    static const Status kOk;
    return is_ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & {
    assert(is_ok());
    return std::get<T>(v_);
  }
  const T& value() const& {
    assert(is_ok());
    return std::get<T>(v_);
  }
  T&& value() && {
    assert(is_ok());
    return std::get<T>(std::move(v_));
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace hypura

// Propagates a failed Status from an expression returning Status.
#define HYPURA_RETURN_IF_ERROR(expr) \
  do {                               \
    ::hypura::Status _st = (expr);   \
    if (!_st.is_ok()) return _st;    \
  } while (0)

#define HYPURA_CONCAT_INNER(a, b) a##b
#define HYPURA_CONCAT(a, b) HYPURA_CONCAT_INNER(a, b)
// HYPURA_ASSIGN_OR_RETURN(auto x, expr): unwraps a Result or returns its Status.
#define HYPURA_ASSIGN_OR_RETURN(lhs, expr) \
  HYPURA_ASSIGN_OR_RETURN_IMPL(HYPURA_CONCAT(_res_, __LINE__), lhs, expr)
#define HYPURA_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.is_ok()) return tmp.status();             \
  lhs = std::move(tmp).value()
