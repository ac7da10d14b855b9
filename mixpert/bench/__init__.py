"""Benchmarks, their reports and plots (``mixpert bench``, ``mixpert levels``); not needed to
run mixpert.

- ``gemm``: every level beside cuBLAS SGEMM and TF32 on square and double-k products, the
  measuring helpers the other benchmarks and ``benchmarks/`` scripts share, ``results_folder``;
- ``batched``, ``skinny``: the shape families (stacks of products; memory-bound shapes);
- ``gemm_report``, ``family_report``, ``plot_style``: tables, Markdown, plots and files;
- ``levels``: one product at every level, error and time (``mixpert levels``).

Every writer takes its output folder as an argument: nothing here writes relative to the working
directory (the CLI chooses the folder, see ``mixpert bench --help``).
"""
