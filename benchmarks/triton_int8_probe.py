"""Issue 45's first question, by measurement: do Triton's TMA descriptors, persistent grid and
warp specialisation (Triton 3.6 on Hopper) lift an INT8 GEMM, and the fused level-IV kernel, past
what the shipped kernels reach? Plain INT8 GEMMs (textbook tiles; persistent with TMA descriptor
loads, with and without warp specialisation) against cuBLASLt's (``torch._int_mm``, TN), then the
fused level IV (8 slice products, 4 INT32 class accumulators, ``combine``'s epilogue) as shipped
(``fused_kernel.fused_int8``) against a persistent TMA form of it, on random packs. Every result
is checked: plain sums equal cuBLASLt's, the fused outputs' bits equal the shipped kernel's.

GPU with Triton and PyTorch (Triton's own launcher, and its allocator for device-side
descriptors); the product itself launches its kernels through CuPy.

    python benchmarks/triton_int8_probe.py [--sizes 4096 8192 16384] [--out DIR]
"""

from __future__ import annotations

import argparse
import functools
import json
from pathlib import Path
from typing import Any

from mixpert.runtime.device import device_name, exit_without_gpu

exit_without_gpu("benchmarks/triton_int8_probe.py")

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from mixpert.bench.gemm import results_folder  # noqa: E402
from mixpert.runtime.cuda.fused_kernel import (  # noqa: E402
    FLT_MAX,
    OVERFLOW_THRESHOLD,
    _pow2,
    _round_to_float,
    _weighted,
    fused_int8,
)
from mixpert.runtime.levels import get_level  # noqa: E402
from mixpert.runtime.packer import pair_exponent  # noqa: E402

DEVICE = "cuda"
SMS = torch.cuda.get_device_properties(0).multi_processor_count
triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device=DEVICE))
W0, STEP = pair_exponent(0), pair_exponent(1) - pair_exponent(0)
# (BM, BN, BK, warps, stages, warp-specialised, flattened loop); those that do not fit fail
CLASSIC = [(128, 256, 128, 8, 3), (128, 128, 128, 8, 4), (256, 128, 128, 8, 3)]
PERSISTENT = [
    (128, 256, 128, 8, 3, False, False), (128, 128, 128, 8, 4, False, True),
    (128, 128, 128, 8, 4, True, False),
]  # fmt: skip
FUSED = [
    (128, 64, 128, 8, 3, False, False), (128, 64, 128, 8, 3, True, False),
    (128, 128, 64, 8, 3, False, False), (128, 128, 128, 8, 2, True, False),
    (64, 128, 128, 4, 3, False, False), (128, 64, 64, 4, 4, False, False),
]  # fmt: skip


@triton.jit
def plain_classic(
    a_ptr,
    b_ptr,
    c_ptr,
    M,
    N,
    K,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
    GROUP_M: tl.constexpr,
):
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(M, BM)
    tiles_n = tl.cdiv(N, BN)
    group = pid // (GROUP_M * tiles_n)
    first_m = group * GROUP_M
    rows_in = tl.minimum(tiles_m - first_m, GROUP_M)
    tm = first_m + (pid % (GROUP_M * tiles_n)) % rows_in
    tn = (pid % (GROUP_M * tiles_n)) // rows_in
    rm = tm * BM + tl.arange(0, BM)
    rn = tn * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    pa = a_ptr + rm[:, None].to(tl.int64) * K + rk[None, :]
    pb = b_ptr + rn[:, None].to(tl.int64) * K + rk[None, :]
    acc = tl.zeros([BM, BN], dtype=tl.int32)
    for _ in range(0, K, BK):
        a = tl.load(pa)
        b = tl.load(pb)
        acc = tl.dot(a, tl.trans(b), acc, out_dtype=tl.int32)
        pa += BK
        pb += BK
    tl.store(c_ptr + rm[:, None].to(tl.int64) * N + rn[None, :], acc)


@triton.jit
def _tile(tile_id, tiles_m, tiles_n, GROUP_M: tl.constexpr):
    in_group = GROUP_M * tiles_n
    group = tile_id // in_group
    first_m = group * GROUP_M
    rows_in = tl.minimum(tiles_m - first_m, GROUP_M)
    return first_m + (tile_id % rows_in), (tile_id % in_group) // rows_in


@triton.jit
def plain_tma(
    a_ptr,
    b_ptr,
    c_ptr,
    M,
    N,
    K,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
    GROUP_M: tl.constexpr,
    SMS: tl.constexpr,
    WS: tl.constexpr,
    FLAT: tl.constexpr,
):
    a_d = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1], block_shape=[BM, BK])
    b_d = tl.make_tensor_descriptor(b_ptr, shape=[N, K], strides=[K, 1], block_shape=[BN, BK])
    c_d = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    tiles_m = tl.cdiv(M, BM)
    tiles_n = tl.cdiv(N, BN)
    k_tiles = tl.cdiv(K, BK)
    for tile_id in tl.range(
        tl.program_id(0), tiles_m * tiles_n, SMS, flatten=FLAT, warp_specialize=WS
    ):
        tm, tn = _tile(tile_id, tiles_m, tiles_n, GROUP_M)
        acc = tl.zeros([BM, BN], dtype=tl.int32)
        for ki in range(k_tiles):
            a = a_d.load([tm * BM, ki * BK])
            b = b_d.load([tn * BN, ki * BK])
            acc = tl.dot(a, b.T, acc, out_dtype=tl.int32)
        c_d.store([tm * BM, tn * BN], acc)


@triton.jit
def fused_tma(
    a_ptr,
    b_ptr,
    a_exp,
    b_exp,
    c_ptr,
    m,
    n,
    k_pad,
    k_slack,
    W0: tl.constexpr,
    STEP: tl.constexpr,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
    GROUP_M: tl.constexpr,
    SMS: tl.constexpr,
    WS: tl.constexpr,
    FLAT: tl.constexpr,
):
    """Level IV (3 x 3 slices, pairs i + j <= 3 but (2, 2)), packs (lines, 3 slots, k_pad);
    B's slots reversed (slice j in slot 2 - j)."""
    ld = 3 * k_pad
    a_d = tl.make_tensor_descriptor(a_ptr, shape=[m, ld], strides=[ld, 1], block_shape=[BM, BK])
    b_d = tl.make_tensor_descriptor(b_ptr, shape=[n, ld], strides=[ld, 1], block_shape=[BN, BK])
    tiles_m = tl.cdiv(m, BM)
    tiles_n = tl.cdiv(n, BN)
    k_tiles = tl.cdiv(k_pad, BK)
    for tile_id in tl.range(
        tl.program_id(0), tiles_m * tiles_n, SMS, flatten=FLAT, warp_specialize=WS
    ):
        tm, tn = _tile(tile_id, tiles_m, tiles_n, GROUP_M)
        r0, c0 = tm * BM, tn * BN
        acc0 = tl.zeros([BM, BN], dtype=tl.int32)
        acc1 = tl.zeros([BM, BN], dtype=tl.int32)
        acc2 = tl.zeros([BM, BN], dtype=tl.int32)
        acc3 = tl.zeros([BM, BN], dtype=tl.int32)
        for ki in range(k_tiles):
            k0 = ki * BK
            a0 = a_d.load([r0, k0])
            a1 = a_d.load([r0, k_pad + k0])
            a2 = a_d.load([r0, 2 * k_pad + k0])
            b0 = b_d.load([c0, 2 * k_pad + k0]).T
            b1 = b_d.load([c0, k_pad + k0]).T
            b2 = b_d.load([c0, k0]).T
            acc0 = tl.dot(a0, b0, acc0, out_dtype=tl.int32)
            acc1 = tl.dot(a0, b1, acc1, out_dtype=tl.int32)
            acc1 = tl.dot(a1, b0, acc1, out_dtype=tl.int32)
            acc2 = tl.dot(a0, b2, acc2, out_dtype=tl.int32)
            acc2 = tl.dot(a1, b1, acc2, out_dtype=tl.int32)
            acc2 = tl.dot(a2, b0, acc2, out_dtype=tl.int32)
            acc3 = tl.dot(a1, b2, acc3, out_dtype=tl.int32)
            acc3 = tl.dot(a2, b1, acc3, out_dtype=tl.int32)
        value = tl.zeros([BM, BN], dtype=tl.float64)
        value = _weighted(value, acc3, 3, W0, STEP)
        value = _weighted(value, acc2, 2, W0, STEP)
        value = _weighted(value, acc1, 1, W0, STEP)
        value = _weighted(value, acc0, 0, W0, STEP)
        rows = r0 + tl.arange(0, BM)
        cols = c0 + tl.arange(0, BN)
        row_in, col_in = rows < m, cols < n
        ea = tl.load(a_exp + rows, mask=row_in, other=0)
        eb = tl.load(b_exp + cols, mask=col_in, other=0)
        scale = ea[:, None] + eb[None, :]
        value = value * _pow2(scale)
        out = _round_to_float(value)
        near = tl.abs(value) >= OVERFLOW_THRESHOLD
        within = near & (tl.abs(value) - k_slack * _pow2(scale) < OVERFLOW_THRESHOLD)
        flt_max = tl.where(value < 0, -FLT_MAX, FLT_MAX).to(tl.float32)
        out = tl.where(within, flt_max, out)
        tl.store(
            c_ptr + rows[:, None].to(tl.int64) * n + cols[None, :],
            out,
            mask=row_in[:, None] & col_in[None, :],
        )


def median_ms(call: Any) -> float:
    return triton.testing.do_bench(call, warmup=5, rep=100, return_mode="median")


def attempt(rows: list[dict[str, Any]], row: dict[str, Any], run: Any, check: Any) -> None:
    """Times ``run`` after checking it (``check()`` after one run); a config that does not
    compile or fit is recorded with why."""
    try:
        run()
        row["exact"] = bool(check())
        row["ms"] = median_ms(run)
        row["tops"] = row["ops"] / row["ms"] * 1e-9
    except Exception as error:  # (shared memory, registers, unsupported options)
        row["failed"] = f"{type(error).__name__}: {str(error).splitlines()[0][:160]}"
    rows.append(row)
    shown = f"{row['tops']:6.0f} TOPS exact={row['exact']}" if "tops" in row else row["failed"]
    print(f"  n={row['n']} {row['kernel']:34s} {shown}", flush=True)


def plain(n: int, rows: list[dict[str, Any]]) -> None:
    g = torch.Generator(device=DEVICE).manual_seed(n)
    a = torch.randint(-127, 128, (n, n), dtype=torch.int8, device=DEVICE, generator=g)
    bt = torch.randint(-127, 128, (n, n), dtype=torch.int8, device=DEVICE, generator=g)
    want = torch._int_mm(a, bt.t())
    c = torch.empty((n, n), dtype=torch.int32, device=DEVICE)
    ops = 2.0 * n**3
    base = {"n": n, "ops": ops}
    attempt(rows, {**base, "kernel": "cuBLASLt _int_mm"}, lambda: torch._int_mm(a, bt.t()),
            lambda: True)  # fmt: skip
    for bm, bn, bk, w, s in CLASSIC:
        grid = (triton.cdiv(n, bm) * triton.cdiv(n, bn),)
        run = functools.partial(
            plain_classic[grid], a, bt, c, n, n, n, bm, bn, bk, 8, num_warps=w, num_stages=s
        )
        c.fill_(7)
        attempt(rows, {**base, "kernel": f"classic {bm}x{bn}x{bk} w{w} s{s}"}, run,
                lambda: torch.equal(c, want))  # fmt: skip
    for bm, bn, bk, w, s, ws, flat in PERSISTENT:
        grid = (min(SMS, triton.cdiv(n, bm) * triton.cdiv(n, bn)),)
        run = functools.partial(
            plain_tma[grid],
            a,
            bt,
            c,
            n,
            n,
            n,
            bm,
            bn,
            bk,
            8,
            SMS,
            ws,
            flat,
            num_warps=w,
            num_stages=s,
        )
        c.fill_(7)
        name = f"persistent TMA {bm}x{bn}x{bk} w{w} s{s}" + " ws" * ws
        attempt(rows, {**base, "kernel": name}, run, lambda: torch.equal(c, want))


def fused(n: int, rows: list[dict[str, Any]]) -> None:
    level = get_level("IV")
    assert (level.a_slices, level.b_slices, len(level.pairs)) == (3, 3, 8)
    g = torch.Generator(device=DEVICE).manual_seed(n + 1)
    a_pack = torch.randint(-127, 128, (n, 3, n), dtype=torch.int8, device=DEVICE, generator=g)
    b_pack = torch.randint(-127, 128, (n, 3, n), dtype=torch.int8, device=DEVICE, generator=g)
    a_exp = torch.randint(-20, 20, (n,), dtype=torch.int32, device=DEVICE, generator=g)
    b_exp = torch.randint(-20, 20, (n,), dtype=torch.int32, device=DEVICE, generator=g)
    want, out = (torch.empty((n, n), dtype=torch.float32, device=DEVICE) for _ in range(2))
    slack = 3.0 * n
    base = {"n": n, "ops": 8 * 2.0 * n**3}
    grid = (triton.cdiv(n, 128) * triton.cdiv(n, 64), 1)
    shipped = functools.partial(
        fused_int8[grid],
        a_pack,
        b_pack,
        a_exp,
        b_exp,
        want,
        n,
        n,
        n,
        3 * n,
        3 * n,
        slack,
        3,
        3,
        3,
        3,
        W0,
        STEP,
        128,
        64,
        128,
        8,
        num_warps=8,
        num_stages=3,
    )
    attempt(rows, {**base, "kernel": "fused IV as shipped 128x64x128"}, shipped, lambda: True)
    for bm, bn, bk, w, s, ws, flat in FUSED:
        grid = (min(SMS, triton.cdiv(n, bm) * triton.cdiv(n, bn)),)
        run = functools.partial(
            fused_tma[grid],
            a_pack,
            b_pack,
            a_exp,
            b_exp,
            out,
            n,
            n,
            n,
            slack,
            W0,
            STEP,
            bm,
            bn,
            bk,
            8,
            SMS,
            ws,
            flat,
            num_warps=w,
            num_stages=s,
        )
        out.fill_(float("nan"))
        name = f"fused IV persistent TMA {bm}x{bn}x{bk} w{w} s{s}" + " ws" * ws
        attempt(rows, {**base, "kernel": name}, run,
                lambda: torch.equal(out.view(torch.int32), want.view(torch.int32)))  # fmt: skip


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| n | kernel | TOPS | checked |", "|---|---|---|---|"]
    for r in rows:
        tops = f"{r['tops']:.0f}" if "tops" in r else f"failed: {r['failed']}"
        lines.append(f"| {r['n']} | {r['kernel']} | {tops} | {r.get('exact', '-')} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[4096, 8192, 16384])
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    rows: list[dict[str, Any]] = []
    for n in args.sizes:
        plain(n, rows)
        fused(n, rows)
        torch.cuda.empty_cache()
    folder = results_folder(device_name(), args.out or Path(__file__).parent / "results")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "triton-int8-probe.json").write_text(json.dumps(rows, indent=1))
    (folder / "triton-int8-probe.md").write_text(
        f"# Triton INT8 kernels on {device_name()} (issue 45's probe)\n\n{table(rows)}\n"
    )
    print(table(rows))


if __name__ == "__main__":
    main()
