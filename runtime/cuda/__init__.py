"""The CUDA backend (CuPy, cuBLAS and NVRTC), one module per concept:

- ``backend``: the entry points (``product_at_level``, ``stack_product_at_level``) and the one
  table of products per level kind they go through; the workspace checks; what inspection and
  the dispatcher ask;
- ``sliced``: the INT8 and FP16 slice products (class sums on cuBLAS, combine, bypass; level
  "auto"'s fallback to SGEMM), from the operands' ``packs`` (tops, k-exponents, packers);
- ``iv_blocks``: level IV-blocks (slices in registers, INT8 ``mma.sync``);
- ``fp32_ordered``: level fp32-ordered's kernels and the choice among them;
- ``native``: the native products (SGEMM, TF32, fp64) on cuBLAS;
- ``transfers``: host arrays to the GPU and back through pinned staging buffers (one trip a
  call of NumPy code, a compiled product's operands and result);
- ``tn_gemm``: the TN GEMMs over packed spans (cuBLAS, cuBLASLt, ``wgmma_gemm``, the INT8
  algorithm choice);
- ``fused``: every slice product of a level and the combine in one kernel (Triton's
  ``fused_kernel``; levels T6, IV and V on Hopper ``fused_wgmma``'s);
- ``captured``, ``conditional``: products replayed as one CUDA graph (the plan cache's plans)
  and work run in a graph's conditional nodes; ``auto_fallback``: level "auto"'s float32 GEMM
  after packing and where it is decided (on the GPU, else the host); ``graph_gemm``: CuPy's own
  cuBLAS call made where a graph is being captured;
- shared by them: ``build`` (the two NVRTC modules), ``sources`` (their CUDA C, from the
  ``.cu``/``.cuh`` files of kernels/ behind a prelude of ``#define``s), ``geometry`` (the launch
  geometry compiled into the kernels, the grid limits), ``launch`` (the device's limits, operand
  layouts), ``convert`` (exact elementwise conversions), ``libraries`` (cuBLAS and cuBLASLt
  through ctypes), ``hopper`` (the sm_90a kernels' NVRTC build, load, launch and TMA maps),
  ``graph_operands`` (a captured graph's addresses rewritten to a call's arrays).

Importing this package needs no CuPy, nor do ``geometry``, ``sources``, ``libraries``,
``hopper``, ``wgmma_gemm``, ``fused_wgmma`` and ``graph_operands``; the other modules do.
"""
