// The CPU backend's factory, for tests that drive the backend without a context. The library
// reaches it through its registration (cpu_backend.cpp).
#pragma once

#include <memory>

#include "core/backend.hpp"

namespace mtk {

std::unique_ptr<Backend> make_cpu_backend(int device_index);

}  // namespace mtk
