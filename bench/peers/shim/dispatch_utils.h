// Shim (bench/peers) for vLLM's csrc/dispatch_utils.h: its VLLM_DISPATCH_* macros serve only the
// torch entry points that fetch.py cuts from sampler.cu, so nothing of it is needed.
#pragma once
