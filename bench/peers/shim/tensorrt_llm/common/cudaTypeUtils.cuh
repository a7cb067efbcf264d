// Shim (bench/peers): FlashInfer's noAuxTcKernels.cu uses nothing of this TensorRT-LLM header.
#pragma once
