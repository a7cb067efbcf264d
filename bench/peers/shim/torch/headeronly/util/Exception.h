// Shim (bench/peers): torch's STD_TORCH_CHECK for the peer sources the harness compiles. A
// failed check prints where and aborts (the harness never passes arguments the peers reject).
#pragma once
#include <cstdio>
#include <cstdlib>

#define STD_TORCH_CHECK(cond, ...)                                                   \
  do {                                                                               \
    if (!(cond)) {                                                                   \
      std::fprintf(stderr, "peer check failed: %s at %s:%d\n", #cond, __FILE__,      \
                   __LINE__);                                                        \
      std::abort();                                                                  \
    }                                                                                \
  } while (0)
