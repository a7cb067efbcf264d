// Reads a caller's versioned parameter struct (the rule is in metaltopk.h's opening comment) into
// the struct this library was compiled with. Every parameter struct of the ABI declares one
// VersionedLayout and reads its argument with one call to read_versioned_params, so all of them
// accept older callers and reject unknown newer members the same way.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <type_traits>

#include "error.hpp"
#include "metaltopk.h"

namespace mtk {

// No parameter struct comes near this: a larger struct_size is an uninitialised field, and the
// caller's memory past the mandatory members is not read to look for a zero tail.
constexpr size_t kMaxParamsStructSize = 1024;

template <class Params>
struct VersionedLayout {
  const char* type_name;   // "mtk_router_params", for messages
  const char* init_macro;  // "MTK_ROUTER_PARAMS_INIT", which sets struct_size
  size_t mandatory_bytes;  // struct_size and the members without a default
  Params defaults;         // the INIT macro's struct: this library's size and every default
};

// The caller's struct with the members past its struct_size taken from the defaults, and
// struct_size set to this library's size.
template <class Params>
Params read_versioned_params(const Params* given, const char* argument,
                             const VersionedLayout<Params>& layout) {
  static_assert(std::is_standard_layout_v<Params> && std::is_trivially_copyable_v<Params>,
                "parameter structs are plain C structs");
  static_assert(offsetof(Params, struct_size) == 0, "struct_size is the first member");
  if (given == nullptr) fail(MTK_ERROR_INVALID_ARGUMENT, argument, " is NULL");
  // Bytes, not members: an older caller's object may be smaller than Params.
  const auto* bytes = reinterpret_cast<const unsigned char*>(given);
  size_t size;
  std::memcpy(&size, bytes, sizeof size);
  constexpr size_t known = sizeof(Params);
  const auto reject = [&](const auto&... why) {
    fail(MTK_ERROR_INVALID_ARGUMENT, argument, ".struct_size = ", size, " ", why...,
         " (this library's ", layout.type_name, " has ", known, " bytes)");
  };
  if (size == 0) reject("was never set: initialise the struct with ", layout.init_macro);
  if (size < layout.mandatory_bytes) {
    reject("cannot hold the ", layout.mandatory_bytes, " bytes of ", layout.type_name,
           "'s mandatory members");
  }
  if (size % alignof(Params) != 0) {
    reject("is not a multiple of ", alignof(Params), ", the alignment of ", layout.type_name);
  }
  if (size > kMaxParamsStructSize) {
    reject("exceeds ", kMaxParamsStructSize, " bytes: no ", layout.type_name, " is that large");
  }
  for (size_t b = known; b < size; ++b) {
    if (bytes[b] != 0) {
      reject("is larger than the ", layout.type_name, " this library (metaltopk ",
             MTK_VERSION_MAJOR, ".", MTK_VERSION_MINOR, ".", MTK_VERSION_PATCH,
             ") knows, and its byte ", b,
             " is not zero: it sets a member this library does not have");
    }
  }
  Params params = layout.defaults;
  std::memcpy(&params, bytes, std::min(size, known));
  params.struct_size = known;
  return params;
}

}  // namespace mtk
