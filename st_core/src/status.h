// Status: the result of an operation that can fail (leveldb style).
//
// Errors are values. No exception crosses a module boundary; functions that
// can fail return a Status and write their results through pointers.
#ifndef ST_CORE_STATUS_H_
#define ST_CORE_STATUS_H_

#include <string>
#include <string_view>

namespace st {

class Status {
 public:
  enum class Code : unsigned char {
    kOk = 0,
    kNotFound,
    kCorruption,
    kInvalidArgument,
    kIOError,
    kNoSpace,
    kAlreadyExists,
    kUnavailable,
  };

  Status() = default;

  static Status OK() { return Status(); }
  static Status NotFound(std::string_view msg) { return Status(Code::kNotFound, msg); }
  static Status Corruption(std::string_view msg) { return Status(Code::kCorruption, msg); }
  static Status InvalidArgument(std::string_view msg) {
    return Status(Code::kInvalidArgument, msg);
  }
  static Status IOError(std::string_view msg) { return Status(Code::kIOError, msg); }
  static Status NoSpace(std::string_view msg) { return Status(Code::kNoSpace, msg); }
  static Status AlreadyExists(std::string_view msg) { return Status(Code::kAlreadyExists, msg); }
  static Status Unavailable(std::string_view msg) { return Status(Code::kUnavailable, msg); }

  bool ok() const { return code_ == Code::kOk; }
  bool IsNotFound() const { return code_ == Code::kNotFound; }
  bool IsCorruption() const { return code_ == Code::kCorruption; }
  bool IsInvalidArgument() const { return code_ == Code::kInvalidArgument; }
  bool IsIOError() const { return code_ == Code::kIOError; }
  bool IsNoSpace() const { return code_ == Code::kNoSpace; }
  bool IsAlreadyExists() const { return code_ == Code::kAlreadyExists; }
  bool IsUnavailable() const { return code_ == Code::kUnavailable; }

  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  // "IO error: open /x: No such file or directory"
  std::string ToString() const;

 private:
  Status(Code code, std::string_view msg) : code_(code), message_(msg) {}

  Code code_ = Code::kOk;
  std::string message_;
};

// Maps an errno value to a Status: ENOENT -> NotFound, ENOSPC/EDQUOT ->
// NoSpace, EEXIST -> AlreadyExists, anything else -> IOError. The message is
// "<context>: <strerror>".
Status PosixError(std::string_view context, int err);

}  // namespace st

#endif  // ST_CORE_STATUS_H_
