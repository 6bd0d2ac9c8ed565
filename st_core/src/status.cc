#include "status.h"

#include <cerrno>
#include <cstring>

namespace st {

std::string Status::ToString() const {
  const char* prefix = "";
  switch (code_) {
    case Code::kOk:
      return "OK";
    case Code::kNotFound:
      prefix = "Not found: ";
      break;
    case Code::kCorruption:
      prefix = "Corruption: ";
      break;
    case Code::kInvalidArgument:
      prefix = "Invalid argument: ";
      break;
    case Code::kIOError:
      prefix = "IO error: ";
      break;
    case Code::kNoSpace:
      prefix = "No space: ";
      break;
    case Code::kAlreadyExists:
      prefix = "Already exists: ";
      break;
    case Code::kUnavailable:
      prefix = "Unavailable: ";
      break;
  }
  return prefix + message_;
}

Status PosixError(std::string_view context, int err) {
  std::string msg(context);
  msg += ": ";
  msg += std::strerror(err);
  switch (err) {
    case ENOENT:
      return Status::NotFound(msg);
    case ENOSPC:
    case EDQUOT:
      return Status::NoSpace(msg);
    case EEXIST:
      return Status::AlreadyExists(msg);
    default:
      return Status::IOError(msg);
  }
}

}  // namespace st
