#!/usr/bin/env python3
"""GPU check of a level's wgmma kernel (runtime/cuda/fused_wgmma.py; H100 / H200, sm_90) against
the shipped Triton kernel (mixpert.runtime.cuda.fused.product with a Triton tile) on the same
packs, bit for bit, then kernel timing of both.

    PYTHONPATH=/path/to/mixpert-repo python check_gpu.py [--level IV] [--out fused_gpu.json]
        [--quick] (timing without n = 16384)  [--skip-timing]  [--hang-timeout 60]
    ... check_gpu.py --variant V_k128 [--quick]

--variant checks a build of a level's kernel that is not routed (fused_wgmma.VARIANTS, e.g.
V_k128: level V on 128-byte k-blocks, a ring of 2 stages where V's has 4) the same way: its
bits against Triton's kernel, the oracle and its level's own kernel, then all three timed side
by side (the k-block a level's kernel is built with is chosen that way).

Packs are built the way the runtime builds them (sliced._packs / int8_product_stack: tops,
k-exponents, pack_a, pack_b). Both kernels write into NaN-poisoned outputs with a poisoned
margin after them; a case passes when every output has the same float32 bits and the margin is
untouched. Where the output is small enough, a third opinion: combine.combine (numpy, the
CPU oracle) on class sums from the packs (float64 matmuls of the digits: exact).

Exit status: 0 all correct, 1 a mismatch, 2 a CUDA error, 3 a hang (a launch that does not
finish within --hang-timeout seconds: most likely a barrier deadlock).
"""

import argparse
import json
import os
import sys
import time
import traceback

import cupy as cp  # noqa: E402
import numpy as np  # noqa: E402

from mixpert.runtime.combine import combine, overflow_slack  # noqa: E402
from mixpert.runtime.cuda import fused, fused_wgmma, hopper  # noqa: E402
from mixpert.runtime.cuda.packs import (  # noqa: E402
    A_SIDE,
    a_tops,
    b_tops,
    exponents_from_tops,
    pack_a,
    pack_b,
    pack_int8,
    pack_int8_columns,
    packable_b,
    unit_inner,
)
from mixpert.runtime.levels import LEVELS  # noqa: E402

LEVEL = LEVELS["IV"]  # (--level, or the level of --variant)
VARIANT = None  # the fused_wgmma.Form of --variant; None: the level's own kernel
POISON = 0x7FBADBAD  # a NaN no kernel writes
MARGIN = 61  # poisoned float32 after C
ORACLE_MAX_OUTPUTS = 1 << 22  # combine() on the host up to this many outputs
TIMING_SIZES = [2048, 4096, 8192, 16384]
FLT_MAX = float(np.finfo(np.float32).max)

# name, (count, m, n, k), data kind
CASES = [
    ("1x1x16", (1, 1, 1, 16), "normal"),
    ("7x300x48", (1, 7, 300, 48), "normal"),
    ("129x257x144", (1, 129, 257, 144), "normal"),
    ("1000x1000x1008", (1, 1000, 1000, 1008), "normal"),
    ("2048^3", (1, 2048, 2048, 2048), "normal"),
    ("4096^3", (1, 4096, 4096, 4096), "normal"),
    ("3000x2500x2064", (1, 3000, 2500, 2064), "normal"),
    ("stack 3 x 300x700x272", (3, 300, 700, 272), "normal"),
    ("stack 2 x 129x257x144 (odd n)", (2, 129, 257, 144), "normal"),
    ("phi=0.5 1000x1000x1008", (1, 1000, 1000, 1008), "phi"),
    ("phi=0.5 2048^3", (1, 2048, 2048, 2048), "phi"),
    ("wide 2^+-60 1000x1000x1008", (1, 1000, 1000, 1008), "wide"),
    ("wide 2^+-60 3000x2500x2064", (1, 3000, 2500, 2064), "wide"),
    ("wide stack 3 x 300x700x272", (3, 300, 700, 272), "wide"),
    ("huge rows (saturation) 129x257x144", (1, 129, 257, 144), "huge"),
    ("huge rows (saturation) 1000x1000x1008", (1, 1000, 1000, 1008), "huge"),
    ("tiny rows (subnormal) 129x257x144", (1, 129, 257, 144), "tiny"),
    ("tiny rows (subnormal) 1000x1000x1008", (1, 1000, 1000, 1008), "tiny"),
]


class Hang(Exception):
    pass


def make_data(rs, kind, count, m, n, k):
    """Float32 stacks a (count, m, k), b (count, k, n) of the given kind."""
    a = rs.standard_normal((count, m, k), dtype=cp.float32)
    b = rs.standard_normal((count, k, n), dtype=cp.float32)
    if kind == "phi":  # rows of A and columns of B scaled by exp(N(0, 0.5^2))
        a *= cp.exp(rs.normal(0.0, 0.5, (count, m, 1))).astype(cp.float32)
        b *= cp.exp(rs.normal(0.0, 0.5, (count, 1, n))).astype(cp.float32)
    elif kind == "wide":  # ... by 2^uniform(-60, 60)
        a *= cp.exp2(rs.uniform(-60, 60, (count, m, 1))).astype(cp.float32)
        b *= cp.exp2(rs.uniform(-60, 60, (count, 1, n))).astype(cp.float32)
    elif kind == "huge":  # rows near FLT_MAX: saturation to +-FLT_MAX, overflow to inf
        a[:, 0, :] = 0
        a[:, 0, 0] = FLT_MAX  # row 0 x col 1 = FLT_MAX exactly (sliced: 2^128, saturates)
        a[:, 1, :] = FLT_MAX * cp.where(rs.random_sample(k) < 0.5, -1, 1) * (
            0.5 + 0.5 * rs.random_sample(k))  # fmt: skip
        a[:, 2, :] = np.float32(1.5 * 2.0**127)
        a[:, 3, :] = -FLT_MAX
        a[:, 4, :] *= np.float32(2.0**100)
        b[:, :, 0] = 1.0
        b[:, :, 1] = 0
        b[:, 0, 1] = 1.0
        b[:, :, 2] = np.float32(1.0 / k)
        b[:, :, 3] = np.float32(-1.0 / k)
        b[:, :, 4] *= np.float32(2.0**27)
        if m > 6 and k > 4:  # a NaN and an Inf line (flagged: both kernels still write them)
            a[:, 5, 3] = np.inf
            a[:, 6, 1] = np.nan
    elif kind == "tiny":  # products in float32's subnormal range
        rows, cols = min(m, 16), min(n, 16)
        a[:, :rows, :] *= np.float32(2.0**-100)
        b[:, :, :cols] *= np.float32(2.0**-40)
        a[:, rows : 2 * rows, :] *= np.float32(2.0**-126)
    return a, b


def build_packs(a, b):
    """Both packs as the runtime builds them: sliced._packs for one pair,
    sliced.int8_product_stack for a stack."""
    count, m, k = a.shape
    if count == 1:
        a_rows, b_lines = unit_inner(a[0]), packable_b(b[0])
        a_top, b_top = a_tops(a_rows), b_tops(b_lines)
        kexp = exponents_from_tops(a_top.k, b_top.k)[0]
        return pack_a(a_rows, kexp, LEVEL, a_top), pack_b(b_lines, kexp, LEVEL, b_top)
    a, b = cp.ascontiguousarray(a), cp.ascontiguousarray(b)
    a_top, b_top = a_tops(a), b_tops(b)
    kexp = exponents_from_tops(a_top.k, b_top.k)
    wide = LEVEL.bypass_wide
    a_pack = pack_int8(
        a.reshape(count * m, k), kexp, A_SIDE, LEVEL.a_slices, False, wide, count, a_top
    )
    b_pack = pack_int8_columns(b, kexp, LEVEL.b_slices, True, wide, b_top)
    return a_pack, b_pack


def poisoned(count, m, n):
    """(buffer, C view): C (count, m, n) float32 at the buffer's start, MARGIN after it."""
    buf = cp.full(count * m * n + MARGIN, POISON, dtype=cp.uint32).view(cp.float32)
    return buf, buf[: count * m * n].reshape(count, m, n)


def oracle(a_pack, b_pack, count, m, n):
    """combine.combine on exact class sums from the packs' digits (float64 matmul: every
    partial sum is an integer below 2^53)."""
    k_pad = a_pack.k_pad
    slots = b_pack.slots
    out = []
    for z in range(count):
        A = a_pack.data[z * m : (z + 1) * m].astype(cp.float64)
        B = b_pack.data[z * n : (z + 1) * n].astype(cp.float64)
        sums = {}
        for i, j in LEVEL.pairs:
            s = A[:, i, :] @ B[:, slots - 1 - j, :].T
            sums[i + j] = sums[i + j] + s if (i + j) in sums else s
        host = {g: cp.asnumpy(v) for g, v in sums.items()}
        ea = cp.asnumpy(a_pack.exponents[z * m : (z + 1) * m])
        eb = cp.asnumpy(b_pack.exponents[z * n : (z + 1) * n])
        out.append(combine(host, ea, eb, k_pad * overflow_slack(LEVEL)))
    return np.stack(out).astype(np.float32).view(np.uint32)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--level", default="IV", choices=sorted(fused_wgmma.FORMS))
    ap.add_argument("--variant", choices=sorted(fused_wgmma.VARIANTS),
                    help="check and time this build of a level's kernel (not routed) beside "
                         "the level's own and Triton's (overrides --level)")  # fmt: skip
    ap.add_argument("--out", default="fused_gpu.json", help="JSON results file")
    ap.add_argument("--quick", action="store_true", help="timing without n = 16384")
    ap.add_argument("--skip-timing", action="store_true")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--hang-timeout", type=float, default=60.0)
    args = ap.parse_args()
    global LEVEL, VARIANT
    if args.variant:
        VARIANT = fused_wgmma.VARIANTS[args.variant]
        LEVEL = LEVELS[fused_wgmma.level_of(VARIANT)]
    else:
        LEVEL = LEVELS[args.level]
    own = fused_wgmma.form(LEVEL)  # the level's kernel
    form = own if VARIANT is None else VARIANT  # the kernel checked

    dev = cp.cuda.Device()
    name = cp.cuda.runtime.getDeviceProperties(dev.id)["name"].decode()
    print(f"device {dev.id}: {name}, sm_{dev.compute_capability}")
    rs = cp.random.RandomState(args.seed)
    results = {
        "device": name, "level": LEVEL.name, "kernel": form.kernel, "k_block": form.k_block,
        "stages": form.stages, "smem": form.smem, "correctness": [], "timing": [],
    }  # fmt: skip
    status = 0
    current = "setup"

    def dump() -> None:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)

    def wait(what: str) -> None:
        """Waits with a watchdog, so a deadlocked kernel is reported, not hung on."""
        ev = cp.cuda.Event(disable_timing=True)
        ev.record()
        t0 = time.time()
        while not ev.done:  # raises on a kernel fault
            if time.time() - t0 > args.hang_timeout:
                raise Hang(f"{what}: no completion after {args.hang_timeout:.0f} s")
            time.sleep(0.0005)

    try:
        t0 = time.time()
        ok_avail = fused_wgmma.available(LEVEL) and (
            VARIANT is None
            or hopper.available(fused_wgmma.SOURCE, form.kernel, form.smem, form.defines)
        )
        print(f"{form.kernel} available: {ok_avail} (build + load {time.time() - t0:.2f} s); "
              f"k-block {form.k_block} B, {form.stages} stages, {form.smem:,} B smem")  # fmt: skip
        if not ok_avail:  # (the build or load raises with the reason)
            hopper.kernel(fused_wgmma.SOURCE, form.kernel, form.smem, dev.id, form.defines)
            sys.exit(f"error: {form.kernel} not available on this device")

        # ------------------------------------------------------------ correctness
        print(f"\n== correctness: {form.kernel} vs Triton fused.product, same packs, bits ==")
        for case_name, (count, m, n, k), kind in CASES:
            current = f"correctness {case_name}"
            a, b = make_data(rs, kind, count, m, n, k)
            a_pack, b_pack = build_packs(a, b)
            del a, b
            ref_buf, ref = poisoned(count, m, n)
            new_buf, new = poisoned(count, m, n)
            wait(current + " (packs)")
            fused.product(a_pack, b_pack, LEVEL, ref, fused.TILE)  # (a tile: Triton's)
            wait(current + " (Triton)")
            fused_wgmma.product(a_pack, b_pack, LEVEL, new, VARIANT)
            wait(current + " (wgmma)")
            own_note, own_bad = "", 0
            if VARIANT is not None:  # the level's own kernel on the same packs: the same bits
                own_buf, own_c = poisoned(count, m, n)
                fused_wgmma.product(a_pack, b_pack, LEVEL, own_c)
                wait(current + f" ({own.kernel})")
                own_bad = int((own_buf.view(cp.uint32) != new_buf.view(cp.uint32)).sum())
                own_note = f" vs {own.kernel}={own_bad}"
                del own_buf, own_c
            rb, nb = ref.view(cp.uint32), new.view(cp.uint32)
            bad = rb != nb
            nbad = int(bad.sum())
            unwritten = int((nb == POISON).sum())
            ref_unwritten = int((rb == POISON).sum())
            margin_hit = int((new_buf.view(cp.uint32)[count * m * n :] != POISON).sum())
            detail = ""
            if nbad:
                z, i, j = (int(x) for x in cp.argwhere(bad)[0])
                rows = cp.unique(cp.argwhere(bad.any(axis=2))[:, 1] % 128)[:16].tolist()
                cols = cp.unique(cp.argwhere(bad.any(axis=1))[:, 1] % 64)[:16].tolist()
                detail = (f"first mismatch pair {z} row {i} col {j}: got {float(new[z, i, j])!r} "
                          f"({int(nb[z, i, j]):#010x}), Triton {float(ref[z, i, j])!r} "
                          f"({int(rb[z, i, j]):#010x}); {unwritten} still poison; bad rows mod "
                          f"128 {rows}; bad cols mod 64 {cols}")  # fmt: skip
            if margin_hit:
                detail += f" {margin_hit} margin elements written"
            oracle_note = "-"
            if count * m * n <= ORACLE_MAX_OUTPUTS:
                want = oracle(a_pack, b_pack, count, m, n)
                odiff = int((cp.asnumpy(nb) != want).sum())
                tdiff = int((cp.asnumpy(rb) != want).sum())
                oracle_note = f"oracle: ours {odiff} / Triton {tdiff} differ"
            f = ref[~cp.isnan(ref)]
            kinds = (f"FLT_MAX {int((cp.abs(f) == FLT_MAX).sum())}, inf {int(cp.isinf(f).sum())}, "
                     f"subnormal {int(((f != 0) & (cp.abs(f) < 2.0**-126)).sum())}, "
                     f"NaN {int(cp.isnan(ref).sum())}")  # fmt: skip
            ok = nbad == 0 and margin_hit == 0 and unwritten == 0 and own_bad == 0
            print(
                f"{'PASS' if ok else 'FAIL'}  {case_name:<40} mismatches={nbad}{own_note} "
                f"[{kinds}] [{oracle_note}]"
            )
            if ref_unwritten:
                print(f"      note: Triton left {ref_unwritten} outputs unwritten (poison)")
            if detail:
                print("      " + detail)
            results["correctness"].append({
                "case": case_name, "count": count, "m": m, "n": n, "k": k, "kind": kind,
                "ok": ok, "mismatches": nbad, "unwritten": unwritten, "margin_written": margin_hit,
                "values": kinds, "oracle": oracle_note, "detail": detail,
                "own_kernel_mismatches": own_bad,
            })  # fmt: skip
            status |= 0 if ok else 1
            del a_pack, b_pack, ref_buf, ref, new_buf, new, rb, nb, bad
            cp.get_default_memory_pool().free_all_blocks()
            dump()

        # ------------------------------------------------------------ argument checks
        current = "argument validation"
        a, b = make_data(rs, "normal", 1, 64, 64, 64)
        a_pack, b_pack = build_packs(a, b)
        _, c = poisoned(1, 64, 64)
        refused = []
        checks = [
            ("level III", lambda: fused_wgmma.product(a_pack, b_pack, LEVELS["III"], c)),
            ("c float64", lambda: fused_wgmma.product(a_pack, b_pack, LEVEL, c.astype(cp.float64))),
            ("c 2-D", lambda: fused_wgmma.product(a_pack, b_pack, LEVEL, c[0])),
        ]
        if VARIANT is not None:  # a variant serves its level's pairs only
            checks.append(("variant at level III", lambda: fused_wgmma.product(
                a_pack, b_pack, LEVELS["III"], c, VARIANT)))  # fmt: skip
        for what, call in checks:
            try:
                call()
                refused.append(False)
                print(f"FAIL  argument check: {what} was not refused")
            except ValueError as e:
                refused.append(True)
                print(f"PASS  argument check: {what}: {e}")
        results["correctness"].append({"case": "argument validation", "ok": all(refused)})
        status |= 0 if all(refused) else 1
        wait(current)
        dump()

        # ------------------------------------------------------------ timing
        if not args.skip_timing:
            sizes = [s for s in TIMING_SIZES if not (args.quick and s > 8192)]
            print("\n== timing (kernels only, packs prebuilt): best of 5 x 10 after 3 warm-ups ==")

            def bench(fn, what):
                for _ in range(3):
                    fn()
                wait(what)
                best = float("inf")
                start, end = cp.cuda.Event(), cp.cuda.Event()
                for _ in range(5):
                    start.record()
                    for _ in range(10):
                        fn()
                    end.record()
                    wait(what)
                    best = min(best, cp.cuda.get_elapsed_time(start, end) / 10)
                return best

            for s in sizes:
                current = f"timing n={s} (packs)"
                a, b = make_data(rs, "normal", 1, s, s, s)
                a_pack, b_pack = build_packs(a, b)
                del a, b
                cp.get_default_memory_pool().free_all_blocks()
                _, ref = poisoned(1, s, s)
                _, new = poisoned(1, s, s)
                row = {"n": s}
                runs = [
                    ("triton", lambda *x: fused.product(*x, fused.TILE), ref),
                    ("wgmma", fused_wgmma.product, new),  # the level's own kernel
                ]
                if VARIANT is not None:
                    _, var = poisoned(1, s, s)
                    runs.append(("variant", lambda *x: fused_wgmma.product(*x, VARIANT), var))
                for label, fn, c in runs:
                    current = f"timing n={s} ({label})"
                    ms = bench(lambda fn=fn, c=c, a=a_pack, b=b_pack: fn(a, b, LEVEL, c), current)
                    row[f"{label}_ms"] = ms
                    row[f"{label}_tops"] = 2.0 * len(LEVEL.pairs) * s**3 / (ms * 1e-3) / 1e12
                row["same_bits"] = bool((ref.view(cp.uint32) == new.view(cp.uint32)).all())
                variant_note = ""
                if VARIANT is not None:
                    row["same_bits"] &= bool((var.view(cp.uint32) == new.view(cp.uint32)).all())
                    variant_note = (f"   {form.kernel} {row['variant_ms']:8.3f} ms "
                                    f"{row['variant_tops']:7.1f} TOPS")  # fmt: skip
                    del var
                status |= 0 if row["same_bits"] else 1
                results["timing"].append(row)
                print(f"n={s:6d}  Triton {row['triton_ms']:8.3f} ms {row['triton_tops']:7.1f} TOPS"
                      f"   {own.kernel} {row['wgmma_ms']:8.3f} ms {row['wgmma_tops']:7.1f} TOPS"
                      f"{variant_note}   same bits: {row['same_bits']}")  # fmt: skip
                del a_pack, b_pack, ref, new
                cp.get_default_memory_pool().free_all_blocks()
                dump()

            wide = VARIANT is not None
            print(
                f"\n{'n':>6}  {'Triton ms':>10} {'TOPS':>7}  {'wgmma ms':>11} {'TOPS':>7}  "
                f"{'speed-up':>8}"
                + (f"  {'variant ms':>11} {'TOPS':>7}  {'vs wgmma':>8}" if wide else "")
                + "  bits"
            )
            for r in results["timing"]:
                print(
                    f"{r['n']:>6}  {r['triton_ms']:10.3f} {r['triton_tops']:7.1f}  "
                    f"{r['wgmma_ms']:11.3f} {r['wgmma_tops']:7.1f}  "
                    f"{r['triton_ms'] / r['wgmma_ms']:8.2f}"
                    + (f"  {r['variant_ms']:11.3f} {r['variant_tops']:7.1f}  "
                       f"{r['wgmma_ms'] / r['variant_ms']:8.2f}" if wide else "")
                    + f"  {r['same_bits']}"
                )  # fmt: skip
            if wide:
                print(f"(wgmma: {own.kernel}, {own.stages} stages of {own.k_block} B k-blocks; "
                      f"variant: {form.kernel}, {form.stages} stages of {form.k_block} B; "
                      f"vs wgmma > 1: the variant is faster)")  # fmt: skip
            pairs = len(LEVEL.pairs)
            print(f"(TOPS count level {LEVEL.name}'s {pairs} products: 2 * {pairs} * m * n * k)")
    except Hang as e:
        dump()
        print(f"\nHANG during {current}: {e}", flush=True)
        os._exit(3)  # the GPU is still busy: do not let teardown wait on it
    except (RuntimeError, cp.cuda.runtime.CUDARuntimeError, cp.cuda.driver.CUDADriverError) as e:
        dump()
        traceback.print_exc()
        print(
            f"\nCUDA ERROR during {current}: {e}\n(the context is unusable after a fault)",
            flush=True,
        )
        os._exit(2)

    dump()
    print(f"\nJSON written to {os.path.abspath(args.out)}")
    print("ALL CORRECT" if status == 0 else "SOME CHECKS FAILED")
    sys.exit(status)


if __name__ == "__main__":
    main()
