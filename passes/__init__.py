"""mixpert.passes: compiler passes over Numba IR and LLVM IR, and the GEMM dependency graph."""
