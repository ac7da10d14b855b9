"""What mixpert does to a function, for people: ``mixpert.inspect`` (``report``: ops, graph,
levels, IR, LLVM calls, cost) and pictures of the GEMM dependency graph (``graph_picture``: DOT,
PNG). ``mixpert inspect`` prints and draws what these return.
"""

from .report import Inspection, OpRow, inspect

__all__ = ["Inspection", "OpRow", "inspect"]
