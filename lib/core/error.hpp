// Errors inside the library are C++ exceptions of one type; `guarded` turns them (and anything
// else thrown) into a status code and the thread-local message at the C ABI boundary.
#pragma once

#include <exception>
#include <new>
#include <sstream>
#include <string>
#include <utility>

#include "metaltopk.h"

namespace mtk {

class Error : public std::exception {
 public:
  Error(mtk_status status, std::string message) : status_(status), message_(std::move(message)) {}
  mtk_status status() const noexcept { return status_; }
  const char* what() const noexcept override { return message_.c_str(); }

 private:
  mtk_status status_;
  std::string message_;
};

// fail(MTK_ERROR_INVALID_ARGUMENT, "k = ", k, " is larger than ...") builds the message from parts.
template <class... Parts>
[[noreturn]] void fail(mtk_status status, const Parts&... parts) {
  std::ostringstream out;
  // A stream swallows its buffer's bad_alloc and stops writing: the caller would get the status
  // with a silently cut message. Out of memory is reported as such instead.
  out.exceptions(std::ios::badbit);
  (out << ... << parts);
  throw Error(status, out.str());
}

void set_last_error(mtk_status status, const char* message) noexcept;
void clear_last_error() noexcept;
const char* last_error() noexcept;

// Runs `body` (returning void) and reports success or the failure; nothing escapes.
template <class Body>
mtk_status guarded(Body&& body) noexcept {
  try {
    clear_last_error();
    body();
    return MTK_SUCCESS;
  } catch (const Error& e) {
    set_last_error(e.status(), e.what());
    return e.status();
  } catch (const std::bad_alloc&) {
    set_last_error(MTK_ERROR_OUT_OF_MEMORY, "host allocation failed");
    return MTK_ERROR_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    set_last_error(MTK_ERROR_INTERNAL, e.what());
    return MTK_ERROR_INTERNAL;
  } catch (...) {
    set_last_error(MTK_ERROR_INTERNAL, "unknown exception inside metaltopk");
    return MTK_ERROR_INTERNAL;
  }
}

}  // namespace mtk
