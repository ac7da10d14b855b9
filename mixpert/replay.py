"""Whole-call replay, ``@mixpert.jit(replay=True)``: a call on CuPy arrays captured once per
argument signature as one CUDA graph, then replayed with the same bits.

Where a jitted function's GPU work reads nothing back to the host (no ``.get()``, no Python
branch on an array's value, no synchronisation), the host's work of a call (the jit's wrapper,
each site, every CuPy call of the body) can be paid once. The first call of a signature runs
as usual and is then captured (``ReplayedCall``): the arguments' values go into buffers of the
same layout in a memory pool the replay owns, the body runs once on them uncaptured (kernel
builds, the pool's blocks), then once more under stream capture, its sites in the form a
capture takes (``execution.cupy_sites``); the graph is launched once on those inputs and its
outputs and arguments must equal the direct call's bit for bit. A later call of the signature
copies its arguments into the buffers, launches the graph, copies back the arguments the body
writes into, and copies the outputs out to new arrays (or returns views of the caller's own
arguments, where the body returned an argument or a view of one); no host synchronisation.

Where that is safe, a call reads in place instead (``ReplayedCall.reads_in_place``): it points
the graph at the caller's arguments and at new output arrays and launches it, with no copies
(``runtime.cuda.graph_operands``: the addresses in the graph's kernel and memset nodes
rewritten: a driver call a node, host time where the copies took GPU time). That needs a body
that writes into no argument and a result whose arrays are each a whole block the capture
allocated (not an argument, a view of one or an array from before the capture), C- or
F-contiguous and apart from the others, with any scratch that held an output's memory earlier
lying inside it (the pool reuses freed blocks; an address inside an output moves with it, so
every access through one must stay inside). The new outputs come from the current allocator, at
the captured outputs' addresses modulo 256 (as the arguments are, by the signature). The binding
is tried once at the capture: copies of the arguments at new addresses, the replay's own buffers
and outputs and the new outputs poisoned (every byte 0xFF, NaN in floats), one launch pointed at
the copies, which must give the direct call's bits and leave the copies as they were. A graph
that reaches an argument or an output other than through its nodes' parameters (a pointer array
in device memory, an address a kernel reads from another buffer) meets the poison there, and its
signature keeps copying; so does one where ``graph_operands`` finds no binding (copy or host
nodes, an argument found in no node, a memset into an argument) or the driver refuses a rewrite.

A signature is each argument's kind: a CuPy array's shape, dtype, strides, device and address
modulo 256 (cuBLAS picks kernels by alignment); a scalar's type and value (the graph holds it);
with the plan, the default level, the device and the stream. Anything else (NumPy arrays, lists,
objects) is run directly. A capture that fails (a host read, a synchronisation, a cuBLAS call
CuPy makes, an unsupported operation) or replays other bits leaves that signature to the
direct call for good, logged at DEBUG on the "mixpert" logger with the reason. Replayed calls
live in a bounded cache (``runtime.plan_cache``, ``$MIXPERT_PLAN_CACHE``), released by
``mixpert.clear_cache()``.

What the graph fixes at capture: the body's Python runs once, so its side effects (prints,
appends, counters) happen at the capture only; module globals and closures it reads are the
arrays they were then (their contents may change, not the objects).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .execution import cupy_sites
from .execution.state import recording
from .runtime import device, dispatch, plan_cache
from .runtime.precision import get_default_level

if TYPE_CHECKING:
    from .runtime.cuda import graph_operands

log = logging.getLogger("mixpert")
_DEVICE_TO_DEVICE = 3  # cudaMemcpyDeviceToDevice
ALIGNMENT = 256  # address bytes a signature tells apart (cuBLAS and CUB pick kernels by them)
_SCALARS = (int, bool, str, bytes, type(None))  # held by value in a signature
Body = Callable[[tuple[Any, ...]], Any]
_PLANS_KEPT = 16  # plan objects a function's replays remember the levels of
_POISON = 0xFF  # every byte of the buffers a binding's trial must not read: NaN in every float
Allocation = tuple[int, int]  # (address, bytes) of a block a capture allocated


class Replays:
    """The replayed calls of one jitted function (``call``); ``written()`` gives the positions
    of the arguments its body may write into (``MixpertFunction.mutated_arguments``)."""

    def __init__(self, name: str, written: Callable[[], frozenset[int]]) -> None:
        self.name = name
        self._written = written
        self._told: set[str] = set()  # reasons logged once already
        self._plans: dict[int, tuple[object, tuple[tuple[int, str], ...]]] = {}  # _levels

    def call(self, args: tuple[Any, ...], plan: object, body: Body) -> Any:
        """``body(args)``, replayed from its signature's graph where there is one; the first
        call of a signature runs directly and captures it."""
        if recording() or cupy_sites.capturing_now():  # records time each product; no nesting
            return body(args)
        key = self.signature(args, plan)
        if isinstance(key, str):
            self._tell(key)
            return body(args)
        first: list[Any] = []

        def capture() -> ReplayedCall | None:
            saved = _saved(args)  # the values the direct call reads, kept for the capture
            first.append(body(args))
            return self._capture(args, saved, first[0], body)

        replayed = _calls.get(key, capture)
        if first:
            return first[0]
        if replayed is None:  # (cannot be replayed, or the cache is off or full)
            return body(args)
        result = replayed(args)
        return body(args) if result is _RELEASED else result

    def signature(self, args: Sequence[Any], plan: object) -> tuple[Any, ...] | str:
        """The key a call's graph is kept under, or why these arguments are not replayed."""
        cp = device.cupy_module()
        if cp is None:
            return "no GPU"
        here = cp.cuda.runtime.getDevice()
        kinds: list[Any] = []
        for i, x in enumerate(args):
            kind = type(x)
            if kind is cp.ndarray:
                memory = x.data
                if memory.device_id != here:
                    return f"argument {i} is on device {memory.device_id}, not the current one"
                kinds.append((x.shape, x.dtype, x.strides, memory.ptr % ALIGNMENT))
            elif kind in _SCALARS:
                kinds.append((kind, x))
            elif kind is float:
                kinds.append((kind, x.hex()))  # (bits: -0.0 and NaN too)
            elif kind is complex:
                kinds.append((kind, x.real.hex(), x.imag.hex()))
            elif isinstance(x, np.generic):
                kinds.append((kind, x.tobytes()))
            else:
                return f"argument {i} is a {kind.__name__}: replay takes CuPy arrays and scalars"
        written = self._written()
        if written and _written_overlaps(args, written):
            return "an argument the body writes into shares memory with another argument"
        level = get_default_level().name  # (the level of ops the plan leaves out)
        stream = cp.cuda.get_current_stream().ptr
        return (self, self._levels(plan), level, here, stream, *kinds)

    def _levels(self, plan: object) -> tuple[tuple[int, str], ...]:
        """The plan's levels (op index, level name), worked out once per plan object: plans
        are compared by what they say (a plan book may hand out equal plans as new objects)."""
        known = self._plans.get(id(plan))
        if known is None or known[0] is not plan:  # (a new plan, or an id reused)
            levels = getattr(plan, "levels", {})
            known = (plan, tuple(sorted((op, lv.name) for op, lv in levels.items())))
            if len(self._plans) >= _PLANS_KEPT:
                self._plans.clear()
            self._plans[id(plan)] = known
        return known[1]

    def _capture(
        self, args: tuple[Any, ...], saved: dict[int, Any], reference: Any, body: Body
    ) -> ReplayedCall | None:
        try:
            replayed = ReplayedCall(args, saved, reference, body, self._written())
        except Exception as why:  # (the direct call serves the signature: same bits)
            log.debug(
                "%s: calls of this signature run without replay: %s: %s",
                self.name, type(why).__name__, why,
            )  # fmt: skip
            return None
        if replayed.copying is not None:
            log.debug("%s: calls of this signature copy: %s", self.name, replayed.copying)
        return replayed

    def _tell(self, why: str) -> None:
        if why not in self._told and log.isEnabledFor(logging.DEBUG):
            self._told.add(why)
            log.debug("%s: a call runs without replay: %s", self.name, why)


class NotReplayable(Exception):
    """Why a captured call cannot serve its signature."""


_RELEASED = object()  # what a released ReplayedCall returns: the caller runs the body


class ReplayedCall:
    """One signature's call as a CUDA graph on buffers in a pool of its own (module
    docstring). Made from the direct call's ``args`` (as it left them), their values before it
    (``saved``) and its ``reference`` result; raises where the graph cannot serve.
    ``copying`` says why calls copy their arguments (None: they read in place)."""

    def __init__(
        self,
        args: tuple[Any, ...],
        saved: dict[int, Any],
        reference: Any,
        body: Body,
        written: frozenset[int],
    ) -> None:
        cp = device.cupy_module()
        self.stream = cp.cuda.get_current_stream()  # where calls replay it (in the signature)
        self._pool = cp.cuda.MemoryPool()
        self._lock = threading.Lock()  # one caller at a time fills the buffers and replays
        self._graph: Any = None
        self._binding: graph_operands.Binding | None = None  # (None: calls copy)
        self.copying: str | None = "not bound yet"
        self._home: list[int] = []  # the addresses the graph was captured with, in its order
        capture = cp.cuda.Stream(non_blocking=True)  # (the legacy default stream cannot capture)
        self.stream.synchronize()  # the direct call and the saved values, done
        allocated: list[Allocation] = []  # every block the capture allocated
        try:
            with cp.cuda.using_allocator(self._pool.malloc), capture:
                self._inputs = {i: _buffer_like(args[i]) for i in saved}
                on = tuple(self._inputs.get(i, x) for i, x in enumerate(args))
                self._restore(saved, capture)
                with cupy_sites.capturing():  # first-use costs (builds, blocks) uncaptured
                    body(on)
                self._restore(saved, capture)
                recorder = _recording_bodies()  # (its import, if any, before the capture)
                capture.begin_capture()
                try:
                    with (
                        cupy_sites.capturing(),
                        cp.cuda.using_allocator(_noting(self._pool.malloc, allocated)),
                        recorder as bodies,  # (conditional nodes' bodies: to rebind them)
                    ):
                        outputs = body(on)
                except BaseException:
                    _end_quietly(capture)
                    raise
                self._graph = capture.end_capture()
                self._graph.launch(capture)  # on the saved values: the check below
            self._written = sorted(i for i in written if i in self._inputs)
            self._outputs = _Outputs(outputs, self._inputs)
            self._check(args, saved, outputs, reference, capture)
            # per argument: (position, its buffer's lowest address, the span's bytes, the span's
            # offset from the first element): a call's copy is then one driver call
            self._fills = [
                (i, *_span(b), _span(b)[0] - b.data.ptr) for i, b in self._inputs.items()
            ]
            self.copying = self._bind(args, saved, reference, allocated, bodies, capture)
            capture.synchronize()  # (replays go to the caller's stream: the buffers are free)
        except BaseException:
            capture.synchronize()
            self._drop()
            raise
        finally:
            _hand_back_cublas(cp, self.stream)
        self.nbytes = self._pool.total_bytes()  # buffers, outputs and the body's temporaries

    @property
    def reads_in_place(self) -> bool:
        """Whether calls point the graph at their arguments and new outputs (no copies)."""
        return self._binding is not None

    def __call__(self, args: tuple[Any, ...]) -> Any:
        """The call on ``args`` (of the signature), replayed; ``_RELEASED`` once released."""
        copy = device.cupy_module().cuda.runtime.memcpyAsync
        stream = self.stream.ptr
        with self._lock:
            graph = self._graph
            if graph is None:
                return _RELEASED
            if self._binding is not None:  # the graph on the caller's arrays and new outputs
                fresh = self._outputs.fresh()  # (the current allocator's, on the stream)
                bases = [args[i].data.ptr + offset for i, _, _, offset in self._fills]
                bases += [x.data.ptr for x in fresh]
                try:
                    self._binding.point(bases)
                except RuntimeError as error:  # (nodes rewritten before it hold these bases)
                    if not self._unbind(f"the driver refused a rewrite ({error})"):
                        return _RELEASED
                else:
                    graph.launch(self.stream)
                    return self._outputs.result(args, fresh)
            for i, low, size, offset in self._fills:
                copy(low, args[i].data.ptr + offset, size, _DEVICE_TO_DEVICE, stream)
            graph.launch(self.stream)
            for i in self._written:
                _write_back(args[i], self._inputs[i], self.stream)
            return self._outputs.take(args, self.stream)

    def release(self) -> None:
        """Frees the graph and the pool once the stream has run what it queued."""
        with self._lock:
            if self._graph is None:
                return
            self.stream.synchronize()
            self._drop()

    def _drop(self) -> None:
        self._graph = self._binding = None  # (the binding holds the graph too)
        self._inputs, self._fills = {}, []
        self._outputs = None  # type: ignore[assignment]
        self._pool.free_all_blocks()

    def _bind(
        self,
        args: tuple[Any, ...],
        saved: dict[int, Any],
        reference: Any,
        allocated: list[Allocation],
        bodies: dict[int, list[int]],
        stream: Any,
    ) -> str | None:
        """The graph's binding to the arguments and outputs, kept where calls may use it
        (module docstring); else why not."""
        if self._written:
            return "the body may write into an argument"
        if any(_span(b)[1] == 0 for b in self._inputs.values()):
            return "an argument is empty (no node holds its address)"
        why = self._outputs.why_not_fresh(allocated)
        if why is not None:
            return why
        # each argument's buffer as the bytes of its span (what ``find`` takes for a buffer):
        # a call points the graph at the same span of the caller's argument
        spans = [_raw(b) for b in self._inputs.values()]
        from .runtime.cuda import graph_operands  # (at a capture: not at ``import mixpert``)

        binding = graph_operands.find(self._graph, spans, self._outputs.own, bodies)
        if binding is None:
            return "graph_operands finds no binding (module docstring)"
        self._home = [x.data.ptr for x in (*spans, *self._outputs.own)]
        why = self._try(binding, args, saved, reference, stream)
        if why is None:
            self._binding = binding
        return why

    def _try(
        self,
        binding: graph_operands.Binding,
        args: tuple[Any, ...],
        saved: dict[int, Any],
        reference: Any,
        stream: Any,
    ) -> str | None:
        """Why ``binding`` cannot serve calls (None: it can), from one launch pointed at copies
        of the arguments at new addresses and at new outputs, with every buffer it must no
        longer reach poisoned: the replay's own (the arguments' and the outputs', which hold
        this very call's values since the check) and the new outputs (where it fails to write).
        The graph is pointed back at its own buffers, and they get their values back, after it
        (one host synchronisation, at capture only)."""
        cp = device.cupy_module()
        copy = cp.cuda.runtime.memcpyAsync
        with stream:  # (the copies and outputs from the caller's allocator: new addresses)
            copies = {i: _buffer_like(b) for i, b in self._inputs.items()}
            for i, x in copies.items():
                copy(_span(x)[0], saved[i].data.ptr, saved[i].nbytes, _DEVICE_TO_DEVICE,
                     stream.ptr)  # fmt: skip
            fresh = self._outputs.fresh()
            for x in (*self._inputs.values(), *self._outputs.own, *fresh):
                _raw(x)[...] = _POISON
            refused = None
            try:
                binding.point([*(_span(copies[i])[0] for i in self._inputs),
                               *(x.data.ptr for x in fresh)])  # fmt: skip
                self._graph.launch(stream)
            except RuntimeError as error:  # (some nodes may hold the new addresses)
                refused = f"the driver refused the rewritten graph ({error})"
            try:  # (the copy path's launches, and the next trial, start from these)
                binding.point(self._home)
            except RuntimeError as error:
                why = f"the graph cannot be pointed back at its buffers ({error})"
                raise NotReplayable(why) from error
            differs: list[Any] = []
            if refused is None:
                _compare(self._outputs.result(args, fresh), reference, differs, "the result")
                leaves = len(differs)
                differs += [(_raw(copies[i]) != saved[i]).any() for i in self._inputs]
                found = cp.stack(differs).get() if differs else []
            self._restore(saved, stream)
        if refused is not None:
            return refused
        if any(found[:leaves]):
            return ("pointed at copies of the arguments and new outputs, the graph gave other "
                    "bits: it reaches them other than through its nodes' parameters")  # fmt: skip
        if any(found[leaves:]):
            return "pointed at copies of the arguments, the graph wrote into them"
        return None

    def _unbind(self, why: str) -> bool:
        """Calls copy from now on: the graph pointed back at its own buffers (False where even
        that fails: the graph is dropped, and calls run directly)."""
        log.debug("a replayed call's signature copies from now on: %s", why)
        binding, self._binding, self.copying = self._binding, None, why
        try:
            binding.point(self._home)  # type: ignore[union-attr]
        except RuntimeError:
            self.stream.synchronize()  # (launches queued before read the pool's blocks)
            self._drop()
            return False
        return True

    def _restore(self, saved: dict[int, Any], stream: Any) -> None:
        """The buffers back to the arguments' values before the direct call."""
        copy = device.cupy_module().cuda.runtime.memcpyAsync
        for i, buffer in self._inputs.items():
            copy(_span(buffer)[0], saved[i].data.ptr, saved[i].nbytes, _DEVICE_TO_DEVICE,
                 stream.ptr)  # fmt: skip

    def _check(
        self,
        args: tuple[Any, ...],
        saved: dict[int, Any],
        outputs: Any,
        reference: Any,
        stream: Any,
    ) -> None:
        """NotReplayable unless the graph's outputs and arguments are the direct call's, bit
        for bit (one host synchronisation, at capture only)."""
        cp = device.cupy_module()
        differs: list[Any] = []  # device booleans, read at once
        with stream:
            _compare(outputs, reference, differs, "the result")
            for i, buffer in self._inputs.items():
                if i in self._written:  # the direct call's writes, in the caller's array
                    differs.append(_bits_differ(buffer, args[i]))
                else:  # nothing written: the bytes as they came
                    differs.append((_raw(buffer) != saved[i]).any())
            found = cp.stack(differs).get() if differs else []
        for position, different in enumerate(found):
            if different:
                raise NotReplayable(_difference(position, len(found) - len(self._inputs),
                                                list(self._inputs), self._written))  # fmt: skip


def _difference(position: int, leaves: int, inputs: list[int], written: list[int]) -> str:
    if position < leaves:
        return "the replayed result differs from the direct call's"
    i = inputs[position - leaves]
    if i in written:
        return f"argument {i} after the replay differs from the direct call's"
    return f"the body writes into argument {i}, which the analysis did not see"


class _Outputs:
    """How a replay builds its result from the graph's outputs: arrays of the graph's own
    memory copied out to new arrays (arrays sharing memory keep sharing it) or, where calls
    read in place, new arrays the graph wrote (``fresh``), an argument buffer or a view of one
    as the caller's argument or the same view of it, scalars as they were; tuples, lists and
    dicts of those."""

    def __init__(self, outputs: Any, inputs: dict[int, Any]) -> None:
        self._inputs = inputs
        self._own: list[Any] = []  # the graph's arrays to copy out
        self._template = self._shape(outputs)
        self._groups = _groups(self._own)

    def _shape(self, value: Any) -> Any:
        cp = device.cupy_module()
        if isinstance(value, cp.ndarray):
            for i, buffer in self._inputs.items():
                if value is buffer:
                    return ("argument", i)
                low, size = _span(buffer)
                if low <= value.data.ptr < low + size:  # a view of the argument
                    offset = value.data.ptr - buffer.data.ptr
                    return ("view", i, offset, value.shape, value.dtype, value.strides)
            self._own.append(value)
            return ("own", len(self._own) - 1)
        if isinstance(value, (tuple, list)):
            return (type(value), [self._shape(v) for v in value])
        if isinstance(value, dict):
            return (dict, {k: self._shape(v) for k, v in value.items()})
        if isinstance(value, (*_SCALARS, float, complex, np.generic)):
            return ("value", value)
        raise NotReplayable(f"the result holds a {type(value).__name__}")

    @property
    def own(self) -> list[Any]:
        """The graph's own output arrays, in the order ``fresh`` and ``result`` take them."""
        return self._own

    def take(self, args: tuple[Any, ...], stream: Any) -> Any:
        """The result of a replay: the outputs copied out on ``stream`` (after its graph)."""
        own: list[Any] = [None] * len(self._own)
        for group in self._groups:
            group.take(own, stream)
        return _build(self._template, args, own)

    def why_not_fresh(self, allocated: list[Allocation]) -> str | None:
        """Why the graph cannot write the result's arrays straight into new ones (None: it
        can). Each must be a block the capture allocated (``allocated``), whole: an address
        inside it is moved to the new array, so every access through one must stay inside it
        (a view of a larger block, or a scratch that held its memory earlier and ran past it,
        would reach past the new array), and memory from before the capture (a global the
        body fills) must stay where the body put it. One array a group, in C or F order, as
        ``_Group`` copies it out."""
        for group in self._groups:
            if len(group.members) > 1 or group.order is None:
                return "the result's arrays share memory, or one is not C- or F-contiguous"
            if group.size == 0:
                return "the result holds an empty array (no node holds its address)"
            low, high = group.low, group.low + group.size
            if (low, group.size) not in allocated:
                return "an array of the result is not a whole block of the capture's"
            for start, size in allocated:
                if start < high and low < start + size and not low <= start <= start + size <= high:
                    return "a scratch shared memory with an array of the result and ran past it"
        return None

    def fresh(self) -> list[Any]:
        """New arrays for the graph's own outputs (where ``why_not_fresh`` said none), from the
        current allocator, each at its output's address modulo ALIGNMENT (cuBLAS picked its
        kernels by it: a block of another allocator's alignment is taken afresh)."""
        cp = device.cupy_module()
        made: list[Any] = [None] * len(self._own)
        for group in self._groups:
            (j, x), = group.members  # fmt: skip
            made[j] = out = cp.empty(x.shape, x.dtype, order=group.order)
            if (out.data.ptr - x.data.ptr) % ALIGNMENT:
                made[j] = _buffer_like(x)
        return made

    def result(self, args: tuple[Any, ...], own: list[Any]) -> Any:
        """The result of a replay whose graph wrote its outputs into ``own`` (``fresh``'s)."""
        return _build(self._template, args, own)


def _build(template: Any, args: tuple[Any, ...], own: list[Any]) -> Any:
    head = template[0]
    if head == "own":
        return own[template[1]]
    if head == "argument":
        return args[template[1]]
    if head == "view":
        _, i, offset, shape, dtype, strides = template
        cp = device.cupy_module()
        return cp.ndarray(shape, dtype, memptr=args[i].data + offset, strides=strides)
    if head == "value":
        return template[1]
    if head is dict:
        return {k: _build(v, args, own) for k, v in template[1].items()}
    return head(_build(v, args, own) for v in template[1])


class _Group:
    """Outputs of the graph's memory that overlap, copied out together: one array as a new
    array of its order, or a span of bytes with each output a view of it."""

    def __init__(self, members: list[tuple[int, Any]]) -> None:
        self.members = members
        spans = [_span(x) for _, x in members]
        self.low = min(low for low, _ in spans)
        self.size = max(low + size for low, size in spans) - self.low
        (_, first), = members[:1]  # fmt: skip
        # one array that is its whole span in C or F order: a new array of that order; any
        # other layout (a reversed or permuted view fills its span too) keeps its strides
        contiguous = first.flags.c_contiguous or first.flags.f_contiguous
        whole = len(members) == 1 and first.nbytes == self.size and contiguous
        self.order = ("C" if first.flags.c_contiguous else "F") if whole else None

    def take(self, own: list[Any], stream: Any) -> None:
        cp = device.cupy_module()
        copy = cp.cuda.runtime.memcpyAsync
        if self.order is not None:
            (j, x), = self.members  # fmt: skip
            own[j] = out = cp.empty(x.shape, x.dtype, order=self.order)
            if self.size:
                copy(out.data.ptr, self.low, self.size, _DEVICE_TO_DEVICE, stream.ptr)
            return
        raw = cp.empty(self.size, dtype=cp.uint8)
        if self.size:
            copy(raw.data.ptr, self.low, self.size, _DEVICE_TO_DEVICE, stream.ptr)
        for j, x in self.members:
            memory = raw.data + (x.data.ptr - self.low)
            own[j] = cp.ndarray(x.shape, x.dtype, memptr=memory, strides=x.strides)


def _groups(arrays: list[Any]) -> list[_Group]:
    """The arrays in groups of overlapping memory (``_Group``)."""
    order = sorted(range(len(arrays)), key=lambda j: _span(arrays[j])[0])
    groups: list[list[tuple[int, Any]]] = []
    end = -1
    for j in order:
        low, size = _span(arrays[j])
        if groups and low < end:
            groups[-1].append((j, arrays[j]))
            end = max(end, low + size)
        else:
            groups.append([(j, arrays[j])])
            end = low + size
    return [_Group(members) for members in groups]


def _span(x: Any) -> tuple[int, int]:
    """(lowest address, bytes) of the memory an array's elements lie in (gaps included)."""
    if x.size == 0:
        return x.data.ptr, 0
    low = sum(min(0, (n - 1) * s) for n, s in zip(x.shape, x.strides, strict=True))
    high = sum(max(0, (n - 1) * s) for n, s in zip(x.shape, x.strides, strict=True))
    return x.data.ptr + low, high - low + x.itemsize


def _buffer_like(x: Any) -> Any:
    """A new array of ``x``'s shape, dtype and strides, at an address of ``x``'s alignment
    modulo ``ALIGNMENT`` (from the current allocator: the replay's pool)."""
    cp = device.cupy_module()
    low, size = _span(x)
    before = x.data.ptr - low  # bytes of the span below the first element
    memory = cp.cuda.alloc(size + ALIGNMENT)
    start = memory.ptr + before
    shift = (x.data.ptr - start) % ALIGNMENT
    return cp.ndarray(x.shape, x.dtype, memptr=memory + before + shift, strides=x.strides)


def _noting(malloc: Callable[[int], Any], allocated: list[Allocation]) -> Callable[[int], Any]:
    """``malloc`` noting the address and size of each block it gives in ``allocated``."""

    def noted(size: int) -> Any:
        memory = malloc(size)
        allocated.append((memory.ptr, size))
        return memory

    return noted


def _recording_bodies() -> contextlib.AbstractContextManager[dict[int, list[int]]]:
    """The bodies of the conditional nodes the capture adds ("auto"'s fallback decided on the
    GPU), recorded for ``graph_operands.find`` (``conditional.recording_bodies``); none where
    the module cannot load (no CuPy: it adds no nodes either)."""
    try:
        from .runtime.cuda import conditional
    except ImportError:
        return contextlib.nullcontext({})
    return conditional.recording_bodies()


def _saved(args: Sequence[Any]) -> dict[int, Any]:
    """Position -> the bytes of each CuPy array argument's span, copied now (on the current
    stream, before the direct call)."""
    cp = device.cupy_module()
    if cp is None:
        return {}
    saved = {}
    copy, stream = cp.cuda.runtime.memcpyAsync, cp.cuda.get_current_stream().ptr
    for i, x in enumerate(args):
        if type(x) is cp.ndarray:
            low, size = _span(x)
            saved[i] = bytes_ = cp.empty(size, dtype=cp.uint8)
            if size:
                copy(bytes_.data.ptr, low, size, _DEVICE_TO_DEVICE, stream)
    return saved


def _raw(x: Any) -> Any:
    """The bytes of an array's span, as a uint8 array over the same memory."""
    cp = device.cupy_module()
    low, size = _span(x)
    return cp.ndarray((size,), cp.uint8, memptr=x.data + (low - x.data.ptr))


def _write_back(x: Any, buffer: Any, stream: Any) -> None:
    """The replay's writes into an argument's buffer, into the caller's argument: one copy of
    the bytes where the array is contiguous, else element by element (its gaps are other
    arrays' memory)."""
    if x.flags.c_contiguous or x.flags.f_contiguous:
        device.cupy_module().cuda.runtime.memcpyAsync(
            x.data.ptr, buffer.data.ptr, x.nbytes, _DEVICE_TO_DEVICE, stream.ptr
        )
    else:
        with stream:
            x[...] = buffer


def _written_overlaps(args: Sequence[Any], written: frozenset[int]) -> bool:
    """Whether an argument the body writes into shares memory with another array argument
    (bounds only): buffers of their own would part them."""
    cp = device.cupy_module()
    arrays = [(i, _span(x)) for i, x in enumerate(args) if type(x) is cp.ndarray]
    for i, (low, size) in arrays:
        if i not in written:
            continue
        for j, (other, other_size) in arrays:
            if j != i and low < other + other_size and other < low + size:
                return True
    return False


def _compare(value: Any, reference: Any, differs: list[Any], where: str) -> None:
    """Device booleans, one per array, true where ``value`` and ``reference`` differ in a bit;
    NotReplayable where their structure or host values differ."""
    cp = device.cupy_module()
    if isinstance(value, cp.ndarray):
        same_kind = isinstance(reference, cp.ndarray) and reference.dtype == value.dtype
        if not same_kind or reference.shape != value.shape:
            raise NotReplayable(f"{where} is not the direct call's kind of array")
        differs.append(_bits_differ(value, reference))
    elif isinstance(value, (tuple, list, dict)):
        if type(reference) is not type(value) or len(reference) != len(value):
            raise NotReplayable(f"{where} is not the direct call's kind of container")
        if isinstance(value, dict):
            if value.keys() != reference.keys():
                raise NotReplayable(f"{where} has other keys than the direct call's")
            for key in value:
                _compare(value[key], reference[key], differs, where)
        else:
            for v, r in zip(value, reference, strict=True):
                _compare(v, r, differs, where)
    elif type(value) is not type(reference) or _host_bits(value) != _host_bits(reference):
        raise NotReplayable(f"{where} holds a host value other than the direct call's")


def _host_bits(value: Any) -> Any:
    if isinstance(value, float):
        return value.hex()
    if isinstance(value, np.generic):
        return value.tobytes()
    return value


def _bits_differ(x: Any, y: Any) -> Any:
    """A device boolean: whether two arrays of one shape and dtype differ in any bit."""
    cp = device.cupy_module()
    unsigned = _UNSIGNED.get(x.dtype.itemsize)
    if unsigned is None:  # (wider items: compared byte by byte)
        x, y = cp.ascontiguousarray(x).view(cp.uint8), cp.ascontiguousarray(y).view(cp.uint8)
    else:
        x, y = x.view(unsigned), y.view(unsigned)
    return (x != y).any()


_UNSIGNED = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def _hand_back_cublas(cp: Any, stream: Any) -> None:
    """CuPy's cuBLAS handle set back on the caller's ``stream``: the body's products left it on
    the capture stream, gone once the plan is made (``captured.handing_back_cublas`` says why)."""
    if not stream.is_capturing():  # (CuPy's cuBLAS calls refuse a capturing stream)
        cp.cuda.cublas.setStream(cp.cuda.device.get_cublas_handle(), stream.ptr)


def _end_quietly(stream: Any) -> None:
    """Ends a capture the body broke off (the graph, if any, is dropped)."""
    with contextlib.suppress(Exception):  # (an invalidated capture ends with an error)
        stream.end_capture()


# Every function's replayed calls: bounded (entries and bytes, least recently used out)
_calls = plan_cache.PlanCache()


def clear() -> None:
    """Releases every replayed call (``mixpert.clear_cache``)."""
    _calls.clear()


dispatch.on_clear_cache(clear)
