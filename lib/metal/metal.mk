# Metal and MPSGraph backends: built on macOS; checked on Linux by `make test-metal`.
