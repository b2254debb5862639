# Benchmarks of the backends: programs, not ctest tests.
#   loom-bench-gemm     sgemm GFLOP/s of backend/cpu (2048^3; --gpt2 for a training step's GEMMs)
#   loom-bench-kernels  the non-GEMM kernels at the shapes of a GPT-2 124M training step
loom_bench(gemm)
loom_bench(kernels)
