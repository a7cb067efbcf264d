# CUDA backend: compiled into the same library when nvcc exists. (Filled in by the CUDA work.)
