// The check of the host-only C++ unit tests (the plans, the winner packing): a failed condition
// is printed with its place and counted in g_failures, and the test goes on to the next one.
#pragma once

#include <cstdio>

inline int g_failures = 0;

#define EXPECT(cond)                                                           \
  do {                                                                         \
    if (!(cond)) {                                                             \
      ++g_failures;                                                            \
      std::printf("FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);              \
    }                                                                          \
  } while (0)
