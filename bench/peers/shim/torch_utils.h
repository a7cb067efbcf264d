// Shim (bench/peers) for vLLM's csrc/torch_utils.h: the kernels and launchers the harness calls
// need only STD_TORCH_CHECK from it.
#pragma once
#include <cuda_runtime.h>
#include <torch/headeronly/util/Exception.h>
