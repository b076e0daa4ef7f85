// sinew's one error taxonomy. See docs/errors.md.
//
//  - Recoverable run-time failures (PeerLost, Timeout, Aborted, IoError): the
//    operation failed but the process is healthy; the message says what to do
//    next (retry, reconfigure, re-create the group).
//  - User errors (InvalidArgument): a bad argument; the message names the
//    argument, its value and what was expected.
//  - Internal errors: a broken invariant inside sinew (a bug).
//
// Inside progress threads errors travel as `Status` values; the thread that
// waits turns them into exceptions with `Status::throw_if_error()`.
#pragma once

#include <exception>
#include <stdexcept>
#include <string>
#include <vector>

namespace sinew {

enum class ErrorCode {
  kOk = 0,
  kPeerLost,         // recoverable: a peer died or its connection broke
  kTimeout,          // recoverable: a deadline passed
  kAborted,          // recoverable: abort() was called on the group
  kIoError,          // recoverable: an OS or network call failed
  kInvalidArgument,  // user error
  kInternal,         // bug
};

const char* error_code_name(ErrorCode code);
bool is_recoverable(ErrorCode code);

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message);
  ErrorCode code() const noexcept { return code_; }
  bool recoverable() const noexcept { return is_recoverable(code_); }

 private:
  ErrorCode code_;
};

class RecoverableError : public Error {
 public:
  using Error::Error;
};

// A peer process died, hung past its deadline or closed its connection.
class PeerLostError : public RecoverableError {
 public:
  PeerLostError(const std::string& message, std::vector<int> ranks);
  const std::vector<int>& ranks() const noexcept { return ranks_; }

 private:
  std::vector<int> ranks_;
};

class TimeoutError : public RecoverableError {
 public:
  // `awaited`: the peers the operation was still waiting for, when known.
  explicit TimeoutError(const std::string& message, std::vector<int> awaited = {});
  const std::vector<int>& ranks() const noexcept { return awaited_; }

 private:
  std::vector<int> awaited_;
};

class AbortedError : public RecoverableError {
 public:
  explicit AbortedError(const std::string& message);
};

class IoError : public RecoverableError {
 public:
  explicit IoError(const std::string& message);
};

// A user error. Build with InvalidArgument::make(arg, value, expected) so the
// message always names the three.
class InvalidArgument : public Error {
 public:
  explicit InvalidArgument(const std::string& message);
  static InvalidArgument make(const std::string& argument, const std::string& value,
                              const std::string& expected);
};

class InternalError : public Error {
 public:
  explicit InternalError(const std::string& message);
};

// An error as a value: what progress threads record on a work item.
class Status {
 public:
  Status() = default;
  Status(ErrorCode code, std::string message, std::vector<int> ranks = {})
      : code_(code), message_(std::move(message)), ranks_(std::move(ranks)) {}
  static Status ok() { return {}; }
  // Captures the exception currently being handled (call inside catch).
  static Status from_current_exception();

  bool is_ok() const noexcept { return code_ == ErrorCode::kOk; }
  explicit operator bool() const noexcept { return is_ok(); }
  ErrorCode code() const noexcept { return code_; }
  const std::string& message() const noexcept { return message_; }
  const std::vector<int>& ranks() const noexcept { return ranks_; }
  std::string to_string() const;

  // Throws the matching exception type if this is an error.
  void throw_if_error() const;

 private:
  ErrorCode code_ = ErrorCode::kOk;
  std::string message_;
  std::vector<int> ranks_;
};

// Throws the exception type matching `code`.
[[noreturn]] void throw_error(ErrorCode code, const std::string& message,
                              std::vector<int> ranks = {});

}  // namespace sinew
