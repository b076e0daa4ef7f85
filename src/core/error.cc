#include "sinew/core/error.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace sinew {

const char* error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::kOk: return "Ok";
    case ErrorCode::kPeerLost: return "PeerLost";
    case ErrorCode::kTimeout: return "Timeout";
    case ErrorCode::kAborted: return "Aborted";
    case ErrorCode::kIoError: return "IoError";
    case ErrorCode::kInvalidArgument: return "InvalidArgument";
    case ErrorCode::kInternal: return "Internal";
  }
  return "Unknown";
}

bool is_recoverable(ErrorCode code) {
  return code == ErrorCode::kPeerLost || code == ErrorCode::kTimeout ||
         code == ErrorCode::kAborted || code == ErrorCode::kIoError;
}

Error::Error(ErrorCode code, const std::string& message)
    : std::runtime_error(message), code_(code) {}

PeerLostError::PeerLostError(const std::string& message, std::vector<int> ranks)
    : RecoverableError(ErrorCode::kPeerLost, message), ranks_(std::move(ranks)) {}
TimeoutError::TimeoutError(const std::string& message, std::vector<int> awaited)
    : RecoverableError(ErrorCode::kTimeout, message), awaited_(std::move(awaited)) {}
AbortedError::AbortedError(const std::string& message)
    : RecoverableError(ErrorCode::kAborted, message) {}
IoError::IoError(const std::string& message) : RecoverableError(ErrorCode::kIoError, message) {}
InvalidArgument::InvalidArgument(const std::string& message)
    : Error(ErrorCode::kInvalidArgument, message) {}
InternalError::InternalError(const std::string& message)
    : Error(ErrorCode::kInternal, message) {}

InvalidArgument InvalidArgument::make(const std::string& argument, const std::string& value,
                                      const std::string& expected) {
  return InvalidArgument(
      fmt::format("invalid argument '{}': got {}, expected {}", argument, value, expected));
}

Status Status::from_current_exception() {
  try {
    throw;
  } catch (const PeerLostError& e) {
    return Status(e.code(), e.what(), e.ranks());
  } catch (const TimeoutError& e) {
    return Status(e.code(), e.what(), e.ranks());
  } catch (const Error& e) {
    return Status(e.code(), e.what());
  } catch (const std::invalid_argument& e) {
    return Status(ErrorCode::kInvalidArgument, e.what());
  } catch (const std::exception& e) {
    return Status(ErrorCode::kInternal, fmt::format("unexpected exception: {}", e.what()));
  } catch (...) {
    return Status(ErrorCode::kInternal, "unknown exception");
  }
}

std::string Status::to_string() const {
  if (is_ok()) return "Ok";
  return fmt::format("{}: {}", error_code_name(code_), message_);
}

void Status::throw_if_error() const {
  if (!is_ok()) throw_error(code_, message_, ranks_);
}

void throw_error(ErrorCode code, const std::string& message, std::vector<int> ranks) {
  switch (code) {
    case ErrorCode::kPeerLost: throw PeerLostError(message, std::move(ranks));
    case ErrorCode::kTimeout: throw TimeoutError(message, std::move(ranks));
    case ErrorCode::kAborted: throw AbortedError(message);
    case ErrorCode::kIoError: throw IoError(message);
    case ErrorCode::kInvalidArgument: throw InvalidArgument(message);
    case ErrorCode::kOk:
    case ErrorCode::kInternal: break;
  }
  throw InternalError(message);
}

}  // namespace sinew
