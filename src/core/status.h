// Status / Result<T>: the error currency at every boundary (loaders, parsers, API).
// A failed Status carries a human message that names the file, key or tensor and
// what was expected vs what was found. Invariants that only a bug can break use
// BRASS_CHECK, which aborts with file:line (library code never calls exit()).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>
#include <variant>

#include <fmt/format.h>

namespace brass {

class [[nodiscard]] Status {
 public:
  Status() = default;  // ok
  static Status ok() { return Status(); }
  static Status error(std::string msg) { return Status(std::move(msg), true); }
  template <class... Args>
  static Status errorf(fmt::format_string<Args...> f, Args&&... args) {
    return error(fmt::format(f, std::forward<Args>(args)...));
  }

  bool is_ok() const { return !failed_; }
  explicit operator bool() const { return !failed_; }
  const std::string& message() const { return msg_; }

  // Prefix context ("model.gguf: " + msg) while an error travels up.
  Status with_context(const std::string& ctx) const {
    return failed_ ? Status(ctx + ": " + msg_, true) : *this;
  }

 private:
  Status(std::string msg, bool failed) : msg_(std::move(msg)), failed_(failed) {}
  std::string msg_;
  bool failed_ = false;
};

template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}            // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {      // NOLINT
    if (std::get<Status>(v_).is_ok()) {
      std::fprintf(stderr, "brass: Result constructed from an ok Status\n");
      std::abort();
    }
  }

  bool is_ok() const { return std::holds_alternative<T>(v_); }
  explicit operator bool() const { return is_ok(); }
  Status status() const { return is_ok() ? Status::ok() : std::get<Status>(v_); }

  T& value() & { return check(), std::get<T>(v_); }
  const T& value() const& { return check(), std::get<T>(v_); }
  T&& value() && { return check(), std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }

 private:
  void check() const {
    if (!is_ok()) {
      std::fprintf(stderr, "brass: value() on error Result: %s\n",
                   std::get<Status>(v_).message().c_str());
      std::abort();
    }
  }
  std::variant<T, Status> v_;
};

}  // namespace brass

#define BRASS_CONCAT_INNER(a, b) a##b
#define BRASS_CONCAT(a, b) BRASS_CONCAT_INNER(a, b)

// Return the Status if it failed.
#define BRASS_TRY(expr)                                   \
  do {                                                    \
    ::brass::Status brass_try_status_ = (expr);           \
    if (!brass_try_status_.is_ok()) return brass_try_status_; \
  } while (0)

// `BRASS_ASSIGN_OR_RETURN(auto x, make_x());`
#define BRASS_ASSIGN_OR_RETURN(lhs, expr) \
  BRASS_ASSIGN_OR_RETURN_IMPL(BRASS_CONCAT(brass_res_, __LINE__), lhs, expr)
#define BRASS_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                \
  if (!tmp.is_ok()) return tmp.status();            \
  lhs = std::move(tmp).value()

// Invariant that only a bug can break: abort with file:line.
#define BRASS_CHECK(cond)                                                        \
  do {                                                                           \
    if (!(cond)) {                                                               \
      std::fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                              \
    }                                                                            \
  } while (0)

#define BRASS_CHECK_MSG(cond, ...)                                              \
  do {                                                                          \
    if (!(cond)) {                                                              \
      std::fprintf(stderr, "%s:%d: check failed: %s: %s\n", __FILE__, __LINE__, \
                   #cond, fmt::format(__VA_ARGS__).c_str());                    \
      std::abort();                                                             \
    }                                                                           \
  } while (0)
