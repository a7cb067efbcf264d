// Prints the kernel source embedded in the library, so `make test-metal` can type-check the
// exact single-file text the Mac compiles at run time.
#include <cstdio>

namespace mtk {
extern const char kMetalTopkSource[];
}

int main() {
  std::fputs(mtk::kMetalTopkSource, stdout);
  return 0;
}
