"""``graph_operands`` against a stand-in CUDA driver (on any machine): which parameters of which
nodes it finds holding the plan's buffers, what it rewrites them to, and every case where it
refuses to rebind a graph (the caller then copies). The real driver: the GPU tests of
``test_captured_products``."""

from __future__ import annotations

import ctypes
from types import SimpleNamespace
from typing import Any

import pytest

from mixpert.runtime.cuda import graph_operands

A, B, C, SCRATCH = 0x7F00_0000_0000, 0x7F00_0010_0000, 0x7F00_0020_0000, 0x7F00_0030_0000
SIZE = 4096  # bytes of each plan buffer
CONTEXT = 77
KERNEL, MEMCPY, MEMSET, EMPTY, CONDITIONAL = 0, 1, 2, 5, 13


def pointer(address: int) -> bytes:
    return address.to_bytes(8, "little")


def kernel(*params: bytes, describable: bool = True) -> dict[str, Any]:
    return {"type": KERNEL, "params": list(params), "describable": describable}


class Driver:
    """The driver calls ``graph_operands`` makes, on a graph of ``nodes`` (node i has handle
    i + 1; a kernel node's function handle is its node's), recording what it is told to set.
    ``graphs``: which nodes each graph holds (default: all of them, in GRAPH); ``refused``:
    nodes whose rewrite the driver refuses."""

    def __init__(
        self,
        nodes: list[dict[str, Any]],
        graphs: dict[int, list[int]] | None = None,
        refused: frozenset[int] = frozenset(),
    ):
        self.nodes, self.refused = nodes, refused
        self.version = 13000
        self.graphs = graphs or {GRAPH.graph: list(range(1, len(nodes) + 1))}
        self.kernels_set: dict[int, list[bytes]] = {}
        self.memsets_set: dict[int, tuple[int, int]] = {}
        self.sets: list[int] = []  # the nodes rewritten, call by call
        self.current: int | None = None
        self._kept: list[Any] = []

    def cuGraphGetNodes(self, graph: Any, nodes: Any, count: Any) -> int:
        held = self.graphs[graph.value]
        count._obj.value = len(held)
        if nodes is not None:
            for i, node in enumerate(held):
                nodes[i] = node
        return 0

    def cuGraphNodeGetType(self, node: Any, kind: Any) -> int:
        kind._obj.value = self.nodes[node.value - 1]["type"]
        return 0

    def cuGraphKernelNodeGetParams_v2(self, node: Any, params: Any) -> int:
        values = [ctypes.create_string_buffer(p, len(p)) for p in self._spec(node)["params"]]
        array = (ctypes.c_void_p * max(1, len(values)))(*map(ctypes.addressof, values))
        self._kept += [values, array]
        params._obj.func = node.value
        params._obj.kernelParams = ctypes.cast(array, ctypes.POINTER(ctypes.c_void_p))
        return 0

    def cuFuncGetParamInfo(self, func: Any, index: int, offset: Any, size: Any) -> int:
        spec = self._spec(func)
        if not spec["describable"]:
            return 400  # CUDA_ERROR_INVALID_HANDLE
        if index >= len(spec["params"]):
            return 1  # CUDA_ERROR_INVALID_VALUE: past the last parameter
        size._obj.value = len(spec["params"][index])
        return 0

    cuKernelGetParamInfo = cuFuncGetParamInfo

    def cuGraphMemsetNodeGetParams(self, node: Any, params: Any) -> int:
        spec = self._spec(node)
        params._obj.dst, params._obj.elementSize = spec["dst"], spec.get("element", 4)
        params._obj.width, params._obj.height = spec.get("width", 16), spec.get("height", 1)
        params._obj.pitch = spec.get("pitch", 0)
        return 0

    def cuCtxGetCurrent(self, context: Any) -> int:
        context._obj.value = CONTEXT
        return 0

    def cuDriverGetVersion(self, version: Any) -> int:
        version._obj.value = self.version
        return 0

    def cuCtxSetCurrent(self, context: Any) -> int:
        self.current = context.value
        return 0

    def cuGraphExecKernelNodeSetParams_v2(self, executable: Any, node: Any, params: Any) -> int:
        self.sets.append(node.value)
        if node.value in self.refused:
            return 1  # CUDA_ERROR_INVALID_VALUE
        sizes = [len(p) for p in self._spec(node)["params"]]
        values = [ctypes.string_at(params.kernelParams[i], n) for i, n in enumerate(sizes)]
        self.kernels_set[node.value] = values
        return 0

    def cuGraphExecMemsetNodeSetParams(self, executable: Any, node: Any, p: Any, c: Any) -> int:
        self.sets.append(node.value)
        self.memsets_set[node.value] = (p.dst, c.value)
        return 0

    def _spec(self, handle: Any) -> dict[str, Any]:
        return self.nodes[(handle.value if hasattr(handle, "value") else handle) - 1]


GRAPH = SimpleNamespace(graph=1, graphExec=2)
BODY = 9  # a conditional node's body graph
BUFFERS = [SimpleNamespace(data=SimpleNamespace(ptr=x), nbytes=SIZE) for x in (A, B, C)]


def bound(monkeypatch: pytest.MonkeyPatch, nodes: list[dict[str, Any]]):
    driver = Driver(nodes)
    monkeypatch.setattr(graph_operands, "_driver", lambda: driver)
    return driver, graph_operands.find(GRAPH, BUFFERS[:2], BUFFERS[2])


def test_every_address_in_a_buffer_is_found_and_rewritten(monkeypatch) -> None:
    struct = bytes(8) + pointer(C + 16)  # a 16-byte parameter holding C's address at byte 8
    nodes = [
        kernel(pointer(A + 64), (5).to_bytes(4, "little"), struct),
        kernel(pointer(B)),
        {"type": MEMSET, "dst": C, "width": SIZE // 4},  # all of C, no further
        {"type": EMPTY},
        kernel(pointer(SCRATCH), pointer(A + SIZE)),  # the plan's own scratch; past A's end
    ]
    driver, binding = bound(monkeypatch, nodes)
    assert binding is not None
    a2, b2, c2 = 0x1000_0000, 0x2000_0000, 0x3000_0000
    binding.point((a2, b2, c2))
    assert driver.current == CONTEXT
    assert driver.kernels_set == {
        1: [pointer(a2 + 64), (5).to_bytes(4, "little"), bytes(8) + pointer(c2 + 16)],
        2: [pointer(b2)],
    }
    assert driver.memsets_set == {3: (c2, CONTEXT)}
    binding.point((A, B, C))  # and back: every node whose addresses moved is rewritten
    assert driver.kernels_set[1][0] == pointer(A + 64) and driver.memsets_set[3][0] == C


def test_only_nodes_whose_addresses_moved_are_rewritten(monkeypatch) -> None:
    """A call at the addresses of the last one costs no rewrite; a new output rewrites the
    nodes holding it alone; a refused rewrite leaves its node to be rewritten next call."""
    nodes = [
        kernel(pointer(A), pointer(B)),
        kernel(pointer(C)),
        {"type": MEMSET, "dst": C, "width": SIZE // 4},
    ]
    driver, binding = bound(monkeypatch, nodes)
    assert binding is not None
    assert driver.sets == [1, 2, 3]  # (find's trial, at the captured addresses: forced)
    a2, b2, c2 = 0x1000_0000, 0x2000_0000, 0x3000_0000
    driver.sets.clear()
    binding.point((a2, b2, c2))
    driver.current = None
    binding.point((a2, b2, c2))
    assert driver.sets == [1, 2, 3]
    assert driver.current is None  # (nothing moved: not even the context is set)
    binding.point((a2, b2, c2 + 256))
    assert driver.sets == [1, 2, 3, 2, 3]
    assert driver.kernels_set[2] == [pointer(c2 + 256)] and driver.memsets_set[3][0] == c2 + 256
    driver.refused = frozenset({1})
    with pytest.raises(RuntimeError):
        binding.point((A, b2, c2 + 256))
    driver.refused = frozenset()
    driver.sets.clear()
    binding.point((A, b2, c2 + 256))  # (the same addresses: the refused node rewritten again)
    assert driver.sets == [1] and driver.kernels_set[1] == [pointer(A), pointer(b2)]


def test_a_call_at_the_last_calls_addresses_asks_no_node(monkeypatch) -> None:
    """The bases of the call before, given again, are compared whole: no node's words are read
    (the host's cost of a loop over one product), until a call moves one."""
    nodes = [kernel(pointer(A), pointer(B)), kernel(pointer(C))]
    driver, binding = bound(monkeypatch, nodes)
    asked = []
    moved = graph_operands._KernelNode.moved
    monkeypatch.setattr(
        graph_operands._KernelNode,
        "moved",
        lambda node, bases: asked.append(1) or moved(node, bases),
    )
    driver.sets.clear()
    for _ in range(3):
        binding.point([A, B, C])  # (find left the graph at the captured addresses)
    assert asked == [] and driver.sets == []
    binding.point([A, B, C + 64])
    assert len(asked) == 2 and driver.sets == [2]
    binding.point([A, B, C + 64])
    assert len(asked) == 2 and driver.sets == [2]


@pytest.mark.parametrize(
    "nodes, why",
    [
        ([kernel(pointer(A), pointer(B), pointer(C)), {"type": MEMCPY}], "a copy node"),
        ([kernel(pointer(A), pointer(C))], "B found nowhere"),
        (
            [kernel(pointer(A), pointer(B), pointer(C)), kernel(pointer(C), describable=False)],
            "a kernel whose parameters the driver cannot describe",
        ),  # fmt: skip
        ([{"type": 13}, kernel(pointer(A), pointer(B), pointer(C))], "a conditional node"),
        (
            [kernel(pointer(A), pointer(B), pointer(C)), {"type": MEMSET, "dst": B + 8}],
            "a memset into an operand (the caller's array, once rebound)",
        ),  # fmt: skip
        (
            [kernel(pointer(A), pointer(B)), {"type": MEMSET, "dst": C, "width": SIZE // 4 + 1}],
            "a memset from the output's start past its end (a scratch where the output lies)",
        ),  # fmt: skip
        (
            [
                kernel(pointer(A), pointer(B)),
                {"type": MEMSET, "dst": C + 64, "width": 64, "height": 16, "pitch": 256},
            ],
            "a 2-D memset whose last row ends past the output",
        ),
    ],
)
def test_graphs_it_cannot_rebind_are_refused(monkeypatch, nodes, why) -> None:
    assert bound(monkeypatch, nodes)[1] is None, why


def test_conditional_bodies_given_are_rebound_too(monkeypatch) -> None:
    """ "auto"'s graph: the level's work, then an IF node whose body (a float32 GEMM) reads
    both operands and writes the output."""
    nodes = [
        kernel(pointer(A), pointer(B), pointer(C)),
        {"type": CONDITIONAL},
        kernel(pointer(A + 8), pointer(B), pointer(C)),  # in the body
    ]
    graphs = {GRAPH.graph: [1, 2], BODY: [3]}
    driver = Driver(nodes, graphs)
    monkeypatch.setattr(graph_operands, "_driver", lambda: driver)
    binding = graph_operands.find(GRAPH, BUFFERS[:2], BUFFERS[2], {GRAPH.graph: [BODY]})
    assert binding is not None
    binding.point((0x1000_0000, 0x2000_0000, 0x3000_0000))
    assert driver.kernels_set[3] == [
        pointer(0x1000_0008),
        pointer(0x2000_0000),
        pointer(0x3000_0000),
    ]
    assert driver.kernels_set[1][0] == pointer(0x1000_0000)
    # its bodies not given, a driver older than 13.0, or a body node it will not rewrite: copies
    assert graph_operands.find(GRAPH, BUFFERS[:2], BUFFERS[2]) is None
    driver.version = 12080
    assert graph_operands.find(GRAPH, BUFFERS[:2], BUFFERS[2], {GRAPH.graph: [BODY]}) is None
    refusing = Driver(nodes, graphs, refused=frozenset({3}))
    monkeypatch.setattr(graph_operands, "_driver", lambda: refusing)
    assert graph_operands.find(GRAPH, BUFFERS[:2], BUFFERS[2], {GRAPH.graph: [BODY]}) is None


def test_several_outputs_are_found_and_rewritten_after_the_operands(monkeypatch) -> None:
    """Whole-call replay's graphs may give several arrays: each is an output, found in some
    node, its memsets kept inside it."""
    d = 0x7F00_0040_0000
    second = SimpleNamespace(data=SimpleNamespace(ptr=d), nbytes=SIZE)
    nodes = [
        kernel(pointer(A), pointer(B), pointer(C)),
        kernel(pointer(d + 8)),
        {"type": MEMSET, "dst": d, "width": SIZE // 4},
    ]
    driver = Driver(nodes)
    monkeypatch.setattr(graph_operands, "_driver", lambda: driver)
    binding = graph_operands.find(GRAPH, BUFFERS[:2], (BUFFERS[2], second))
    assert binding is not None
    binding.point((0x1000_0000, 0x2000_0000, 0x3000_0000, 0x4000_0000))
    assert driver.kernels_set == {
        1: [pointer(0x1000_0000), pointer(0x2000_0000), pointer(0x3000_0000)],
        2: [pointer(0x4000_0008)],
    }
    assert driver.memsets_set == {3: (0x4000_0000, CONTEXT)}
    assert graph_operands.find(GRAPH, BUFFERS[:2], [BUFFERS[2]]) is not None  # (d: scratch)
    nowhere = SimpleNamespace(data=SimpleNamespace(ptr=SCRATCH), nbytes=SIZE)
    assert graph_operands.find(GRAPH, BUFFERS[:2], (BUFFERS[2], second, nowhere)) is None
    driver.nodes[2]["width"] = SIZE // 4 + 1  # a memset from the second's start past its end
    assert graph_operands.find(GRAPH, BUFFERS[:2], (BUFFERS[2], second)) is None


def test_without_the_driver_calls_or_a_template_graph_nothing_is_rebound(monkeypatch) -> None:
    monkeypatch.setattr(graph_operands, "_driver", lambda: None)
    assert graph_operands.find(GRAPH, BUFFERS[:2], BUFFERS[2]) is None
    monkeypatch.setattr(graph_operands, "_driver", lambda: Driver([]))
    no_template = SimpleNamespace(graph=0, graphExec=2)
    assert graph_operands.find(no_template, BUFFERS[:2], BUFFERS[2]) is None
