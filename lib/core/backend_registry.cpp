// The backends this build has: each registered itself (BackendRegistration, backend.hpp) while
// the library loaded, so what is compiled in is what registered.
#include <array>

#include "abi_enums.hpp"
#include "context.hpp"
#include "error.hpp"

namespace mtk {

namespace {

struct Entry {
  BackendRegistration::Factory make = nullptr;
  BackendRegistration::Availability available = nullptr;
  int default_rank = 0;
};

// Filled by the registrations of static initialisation, read-only afterwards. A function-local
// static, so that it exists before the first registration whatever the order of initialisation.
std::array<Entry, kBackendKinds>& registry() {
  static std::array<Entry, kBackendKinds> entries;
  return entries;
}

const Entry* registered(mtk_backend backend) {
  if (backend <= MTK_BACKEND_DEFAULT || backend >= kBackendKinds) return nullptr;
  const Entry& entry = registry()[backend];
  return entry.make != nullptr ? &entry : nullptr;
}

}  // namespace

BackendRegistration::BackendRegistration(mtk_backend kind, int default_rank, Factory make,
                                         Availability available) {
  registry()[kind] = Entry{make, available, default_rank};
}

bool backend_compiled(mtk_backend backend) {
  return backend == MTK_BACKEND_DEFAULT || registered(backend) != nullptr;
}

bool backend_available(mtk_backend backend) {
  if (backend == MTK_BACKEND_DEFAULT) return true;
  const Entry* entry = registered(backend);
  return entry != nullptr && entry->available();
}

mtk_backend resolve_default_backend() {
  mtk_backend best = MTK_BACKEND_DEFAULT;
  int best_rank = 0;
  for (int kind = MTK_BACKEND_DEFAULT + 1; kind < kBackendKinds; ++kind) {
    const Entry* entry = registered(static_cast<mtk_backend>(kind));
    if (entry != nullptr && entry->default_rank > best_rank && entry->available()) {
      best = static_cast<mtk_backend>(kind);
      best_rank = entry->default_rank;
    }
  }
  if (best == MTK_BACKEND_DEFAULT) fail(MTK_ERROR_BACKEND_UNAVAILABLE, "no backend is available");
  return best;
}

std::unique_ptr<Backend> create_backend(mtk_backend backend, int device_index) {
  if (backend == MTK_BACKEND_DEFAULT) backend = resolve_default_backend();
  if (device_index < 0) {
    fail(MTK_ERROR_INVALID_ARGUMENT, "device_index = ", device_index, " is negative");
  }
  const Entry* entry = registered(backend);
  if (entry == nullptr) {
    const char* name = mtk_backend_name(backend);
    if (name == nullptr) {
      fail(MTK_ERROR_INVALID_ARGUMENT, "backend = ", static_cast<int>(backend),
           " is not a known mtk_backend");
    }
    fail(MTK_ERROR_BACKEND_UNAVAILABLE, "backend '", name, "' is not compiled into this library");
  }
  return entry->make(device_index);
}

}  // namespace mtk
