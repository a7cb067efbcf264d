#include "error.hpp"

#include <string>

namespace mtk {
namespace {
// One message per thread, so concurrent callers never see each other's failures.
thread_local std::string last_error_message;
}  // namespace

void set_last_error(mtk_status status, const char* message) noexcept {
  try {
    last_error_message = message;
  } catch (...) {
    // The message could not be stored (out of memory): the status alone must still reach the
    // caller, so fall back to its static description.
    last_error_message.clear();
    (void)status;
  }
}

void clear_last_error() noexcept { last_error_message.clear(); }

const char* last_error() noexcept { return last_error_message.c_str(); }

}  // namespace mtk
