// Objective-C object ownership and exceptions for the Metal glue, under manual retain/release on
// every platform (Debian's GNUstep runtime has no ARC), so every +1 reference is held by exactly
// one ObjcRef. Included only by .mm files.
#pragma once

#import <Foundation/Foundation.h>

#include <string>
#include <utility>

#include "core/error.hpp"

namespace mtk {
namespace metal {

// One strong reference to an Objective-C object; copies retain, destruction releases.
template <class T>
class ObjcRef {
 public:
  ObjcRef() = default;
  // Takes over a +1 reference (from alloc/new/copy or a NS_RETURNS_RETAINED function).
  static ObjcRef adopt(T object) {
    ObjcRef ref;
    ref.object_ = object;
    return ref;
  }
  // Adds a reference to an object owned elsewhere (for example an autoreleased one).
  static ObjcRef retain(T object) { return adopt(object ? (T)[object retain] : object); }

  ObjcRef(const ObjcRef& other) : object_(other.object_ ? (T)[other.object_ retain] : other.object_) {}
  ObjcRef(ObjcRef&& other) noexcept : object_(other.object_) { other.object_ = nil; }
  ObjcRef& operator=(ObjcRef other) noexcept {
    std::swap(object_, other.object_);
    return *this;
  }
  ~ObjcRef() {
    if (object_) [object_ release];
  }

  T get() const { return object_; }
  explicit operator bool() const { return object_ != nil; }

 private:
  T object_ = nil;
};

// Runs `body` (which may throw mtk::Error) inside an autorelease pool, and turns an Objective-C
// exception into MTK_ERROR_DEVICE. The mtk::Error is thrown after the @try block has been left,
// so no C++ exception is raised from inside an @catch handler.
template <class Body>
void objc_call(const char* what, Body&& body) {
  std::string objc_failure;
  @try {
    @autoreleasepool {
      body();
    }
  } @catch (NSException* exception) {
    NSString* reason = [exception reason];
    objc_failure = reason ? [reason UTF8String] : "unknown Objective-C exception";
  }
  if (!objc_failure.empty()) fail(MTK_ERROR_DEVICE, what, ": ", objc_failure);
}

// The text of an NSError, or a fallback when there is none.
std::string describe(NSError* error);

}  // namespace metal
}  // namespace mtk
