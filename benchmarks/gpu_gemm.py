"""GPU GEMM benchmark: every level beside cuBLAS SGEMM and TF32 (same as `mixpert bench`).

python benchmarks/gpu_gemm.py [--quick] [--out DIR]
"""

from mixpert.cli.bench import bench

if __name__ == "__main__":
    bench()
