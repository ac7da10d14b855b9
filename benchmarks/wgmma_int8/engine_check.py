"""GPU check of mixpert's wgmma INT8 GEMM (``runtime/cuda/wgmma_gemm.py``; H100 / H200, sm_90):
bit-exactness on awkward shapes, strides, batches, accumulate, out-of-window writes, graph
capture; then timing against torch._int_mm (cuBLASLt's default algorithm).

    python benchmarks/wgmma_int8/engine_check.py [--quick] [--out DIR]
      (JSON: DIR/correctness.json, DIR/timing.json; default ./out)

Needs cupy, cuda-bindings (driver + nvrtc), numpy; torch for the cuBLASLt rows (skipped
without it). The reference is a float64 matmul of the int8 values: exact, since every partial
sum is an integer below depth * 2^14 << 2^53.

Exit status: 0 all correct, 1 a mismatch, 2 a CUDA error, 3 a hang (a launch that does not
finish within --hang-timeout seconds: most likely a barrier deadlock).
"""

import argparse
import json
import os
import sys
import time
import traceback

import cupy as cp

from mixpert.runtime.cuda import hopper, wgmma_gemm

POISON = 0x7F7F7F7F
TIMING_SIZES = [4096, 8192, 16384]

# name, m, n, depth, options (see run_case)
CASES = [
    ("1x1x16", 1, 1, 16, {}),
    ("7x300x48", 7, 300, 48, {}),
    ("129x257x144", 129, 257, 144, {}),
    ("1000x1000x1008", 1000, 1000, 1008, {}),
    ("128x256x128 one tile", 128, 256, 128, {}),
    ("4096^3", 4096, 4096, 4096, {}),
    ("3000x2500x2064", 3000, 2500, 2064, {}),
    ("513x1025x16 depth 16, many tiles", 513, 1025, 16, {}),
    ("256x512x384 tight", 256, 512, 384, {}),
    # accumulate onto random int32 C (wrapping int32 add)
    ("acc 129x257x144", 129, 257, 144, {"accumulate": True}),
    ("acc 1000x1000x1008", 1000, 1000, 1008, {"accumulate": True}),
    ("acc 3000x2500x2064", 3000, 2500, 2064, {"accumulate": True}),
    ("acc 4096^3", 4096, 4096, 4096, {"accumulate": True}),
    # padded operand rows (lda > depth, garbage in the padding), offsets inside buffers,
    # C inside a larger buffer (ldc > n, margins checked)
    (
        "lda+32 off16, ldb+48 off32, ldc+8 off4",
        1000,
        1000,
        1008,
        {"lda_pad": 32, "a_off": 16, "ldb_pad": 48, "b_off": 32, "ldc_pad": 8, "c_off": 4},
    ),
    (
        "acc lda+32 ldb+16, 4096x4096x4000",
        4096,
        4096,
        4000,
        {
            "accumulate": True,
            "lda_pad": 32,
            "a_off": 16,
            "ldb_pad": 16,
            "b_off": 48,
            "ldc_pad": 4,
            "c_off": 8,
        },
    ),
    # ldc odd / C not 8-byte aligned: the scalar store path everywhere
    ("odd ldc, C off 1 elem", 300, 700, 272, {"ldc_pad": 3, "c_off": 1}),
    ("acc odd ldc, C off 1 elem", 129, 257, 144, {"accumulate": True, "ldc_pad": 3, "c_off": 1}),
    # batches: strided operands, one launch
    ("batch 3 300x700x272", 300, 700, 272, {"batch": 3, "stride_pad": 64, "sc_pad": 16}),
    (
        "acc batch 3 300x700x272",
        300,
        700,
        272,
        {"batch": 3, "accumulate": True, "stride_pad": 64, "sc_pad": 16},
    ),
    (
        "batch 3 lda+32 off16 ldc+4",
        1000,
        1000,
        1008,
        {
            "batch": 3,
            "lda_pad": 32,
            "a_off": 16,
            "ldb_pad": 16,
            "b_off": 16,
            "ldc_pad": 4,
            "c_off": 4,
            "stride_pad": 32,
            "sc_pad": 4,
        },
    ),
    (
        "acc batch 5 129x257x144 odd stride_c",
        129,
        257,
        144,
        {"batch": 5, "accumulate": True, "sc_pad": 1},
    ),
    ("batch 4 2048x2048x1024", 2048, 2048, 1024, {"batch": 4}),
]


class Hang(Exception):
    pass


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--out", default="./out", help="folder for the JSON (default ./out)")
    ap.add_argument("--quick", action="store_true", help="timing without n = 16384")
    ap.add_argument("--skip-timing", action="store_true")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--hang-timeout", type=float, default=60.0)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)

    dev = cp.cuda.Device()
    print(
        f"device {dev.id}: {cp.cuda.runtime.getDeviceProperties(dev.id)['name'].decode()}, "
        f"sm_{dev.compute_capability}"
    )
    rs = cp.random.RandomState(args.seed)
    correctness, timing = [], []
    status = 0
    current = "setup"

    def dump() -> None:
        with open(os.path.join(args.out, "correctness.json"), "w") as f:
            json.dump(correctness, f, indent=1)
        with open(os.path.join(args.out, "timing.json"), "w") as f:
            json.dump(timing, f, indent=1)

    def wait(what: str, stream=None) -> None:
        """Waits with a watchdog, so a deadlocked kernel is reported, not hung on."""
        ev = cp.cuda.Event(disable_timing=True)
        ev.record(stream)
        t0 = time.time()
        while not ev.done:  # raises on a kernel fault
            if time.time() - t0 > args.hang_timeout:
                raise Hang(f"{what}: no completion after {args.hang_timeout:.0f} s")
            time.sleep(0.0005)

    def rand_i8(size: int) -> cp.ndarray:
        return rs.randint(-128, 128, size=size, dtype=cp.int32).astype(cp.int8)

    try:
        t0 = time.time()
        ok_avail = wgmma_gemm.available()
        print(f"wgmma_gemm.available() = {ok_avail} (build + load {time.time() - t0:.2f} s)")
        if not ok_avail:
            # raises with the reason
            hopper.kernel(wgmma_gemm.SOURCE, wgmma_gemm.KERNEL, wgmma_gemm.SMEM_BYTES, dev.id)
            sys.exit("error: wgmma_gemm not available on this device")

        # ------------------------------------------------------------ correctness
        print("\n== correctness (bit-exact vs float64 matmul; C poisoned; margins checked) ==")

        def run_case(
            name,
            m,
            n,
            depth,
            batch=1,
            accumulate=False,
            lda_pad=0,
            a_off=0,
            ldb_pad=0,
            b_off=0,
            ldc_pad=0,
            c_off=0,
            stride_pad=0,
            sc_pad=0,
        ):
            lda, ldb, ldc = depth + lda_pad, depth + ldb_pad, n + ldc_pad
            sa = m * lda + stride_pad if batch > 1 else 0  # bytes
            sb = n * ldb + stride_pad if batch > 1 else 0
            sc = m * ldc + sc_pad if batch > 1 else 0  # elements
            a_buf = rand_i8(a_off + (batch - 1) * sa + m * lda + 64)
            b_buf = rand_i8(b_off + (batch - 1) * sb + n * ldb + 64)
            strided = cp.lib.stride_tricks.as_strided
            A = strided(a_buf[a_off:], (batch, m, depth), (sa, lda, 1))
            B = strided(b_buf[b_off:], (batch, n, depth), (sb, ldb, 1))
            ref = cp.stack(
                [A[t].astype(cp.float64) @ B[t].astype(cp.float64).T for t in range(batch)]
            ).astype(cp.int64)
            margin = 37
            c_buf = cp.full(c_off + (batch - 1) * sc + m * ldc + margin, POISON, dtype=cp.int32)
            C = strided(c_buf[c_off:], (batch, m, n), (sc * 4, ldc * 4, 4))
            if accumulate:
                c0 = rs.randint(-(2**31), 2**31, size=(batch, m, n), dtype=cp.int64)
                C[...] = c0.astype(cp.int32)
                want = ((c0 + ref + 2**31) % 2**32 - 2**31).astype(cp.int32)
            else:
                want = ref.astype(cp.int32)
            cp.cuda.get_current_stream().synchronize()
            wgmma_gemm.gemm(
                m,
                n,
                depth,
                a_buf.data.ptr + a_off,
                lda,
                b_buf.data.ptr + b_off,
                ldb,
                c_buf.data.ptr + 4 * c_off,
                ldc,
                accumulate,
                batch,
                sa,
                sb,
                sc,
            )
            wait(name)
            got = C.copy()
            bad = got != want
            nbad = int(bad.sum())
            inside = cp.zeros(c_buf.size, dtype=cp.bool_)
            strided(inside[c_off:], (batch, m, n), (sc, ldc, 1))[...] = True
            outside_written = int((c_buf[~inside] != POISON).sum())
            detail = ""
            if nbad:
                t, i, j = (int(x) for x in cp.argwhere(bad)[0])
                unwritten = int((got == POISON).sum())
                rows = cp.unique(cp.argwhere(bad.any(axis=2))[:, 1] % 128)[:16].tolist()
                cols = cp.unique(cp.argwhere(bad.any(axis=1))[:, 1] % 256)[:16].tolist()
                detail = (
                    f"first mismatch batch {t} row {i} col {j}: got {int(got[t, i, j])}, "
                    f"want {int(want[t, i, j])}; {unwritten} still poison; bad rows mod 128 "
                    f"{rows}; bad cols mod 256 {cols}"
                )
            if outside_written:
                detail += f" {outside_written} elements outside the window were written"
            ok = nbad == 0 and outside_written == 0
            return ok, nbad, outside_written, detail

        for name, m, n, depth, opts in CASES:
            current = f"correctness {name}"
            ok, nbad, outside, detail = run_case(name, m, n, depth, **opts)
            print(
                f"{'PASS' if ok else 'FAIL'}  {name:<42} m={m:5d} n={n:5d} depth={depth:5d} "
                f"mismatches={nbad} outside={outside}"
            )
            if detail:
                print("      " + detail)
            correctness.append(
                {
                    "case": name,
                    "m": m,
                    "n": n,
                    "depth": depth,
                    **opts,
                    "ok": ok,
                    "mismatches": nbad,
                    "outside_written": outside,
                    "detail": detail,
                }
            )
            status |= 0 if ok else 1
            cp.get_default_memory_pool().free_all_blocks()
        dump()

        # ------------------------------------------------------------ argument checks
        current = "argument validation"
        base = cp.zeros(1 << 16, dtype=cp.int8)
        cbuf = cp.zeros(1 << 14, dtype=cp.int32)
        p, q = base.data.ptr, cbuf.data.ptr
        good = dict(
            m=64,
            n=64,
            depth=64,
            a_ptr=p,
            lda=64,
            b_ptr=p,
            ldb=64,
            c_ptr=q,
            ldc=64,
            accumulate=False,
        )
        bad_calls = [
            ("lda % 16", {"lda": 72}),
            ("lda < depth", {"lda": 48}),
            ("depth % 16", {"depth": 40}),
            ("a_ptr % 16", {"a_ptr": p + 8}),
            ("b_ptr % 16", {"b_ptr": p + 4}),
            ("ldc < n", {"ldc": 63}),
            ("c_ptr % 4", {"c_ptr": q + 2}),
            ("m = 0", {"m": 0}),
            ("batch 2, stride_a 0", {"batch": 2, "stride_b": 4096, "stride_c": 4096}),
            (
                "batch 2, stride_c overlap",
                {"batch": 2, "stride_a": 4096, "stride_b": 4096, "stride_c": 100},
            ),
        ]
        refused = []
        for what, change in bad_calls:
            try:
                wgmma_gemm.gemm(**{**good, **change})
                refused.append(False)
                print(f"FAIL  argument check: {what} was not refused")
            except ValueError as e:
                refused.append(True)
                print(f"PASS  argument check: {what}: {e}")
        ok = all(refused)
        correctness.append({"case": "argument validation", "ok": ok})
        status |= 0 if ok else 1

        # ------------------------------------------------------------ graph capture
        current = "graph capture"
        m, n, depth = 1000, 700, 272
        a, b = rand_i8(m * depth), rand_i8(n * depth)
        ref = (
            a.reshape(m, depth).astype(cp.float64) @ b.reshape(n, depth).astype(cp.float64).T
        ).astype(cp.int32)
        c = cp.full((m, n), POISON, dtype=cp.int32)
        cp.cuda.get_current_stream().synchronize()
        stream = cp.cuda.Stream(non_blocking=True)
        try:
            with stream:
                stream.begin_capture()
                wgmma_gemm.gemm(
                    m, n, depth, a.data.ptr, depth, b.data.ptr, depth, c.data.ptr, n, False
                )
                wgmma_gemm.gemm(
                    m, n, depth, a.data.ptr, depth, b.data.ptr, depth, c.data.ptr, n, True
                )
                graph = stream.end_capture()
            captured_untouched = bool((c == POISON).all())
            graph.launch(stream)
            wait("graph replay", stream)
            ok = captured_untouched and bool((c == 2 * ref).all())
            note = "" if captured_untouched else ": C written during capture"
            print(f"{'PASS' if ok else 'FAIL'}  graph capture (gemm, gemm accumulate){note}")
        except (AttributeError, NotImplementedError) as e:  # a CuPy without stream capture
            ok = True
            print(f"SKIP  graph capture: {e}")
        correctness.append({"case": "graph capture", "ok": ok})
        status |= 0 if ok else 1
        dump()

        # ------------------------------------------------------------ timing
        if not args.skip_timing:
            current = "timing setup"
            try:
                import torch
            except ImportError:
                torch = None
                print("torch not found: no cuBLASLt rows")
            sizes = [s for s in TIMING_SIZES if not (args.quick and s > 8192)]
            print("\n== timing: best of 5 x 10 launches after 3 warm-up launches ==")

            def bench_cupy(fn, what):
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

            def bench_torch(fn, what):
                for _ in range(3):
                    fn()
                torch.cuda.synchronize()
                best = float("inf")
                for _ in range(5):
                    start = torch.cuda.Event(enable_timing=True)
                    end = torch.cuda.Event(enable_timing=True)
                    start.record()
                    for _ in range(10):
                        fn()
                    end.record()
                    end.synchronize()
                    best = min(best, start.elapsed_time(end) / 10)
                return best

            def row(s, kernel, ms, ok):
                timing.append(
                    {
                        "n": s,
                        "kernel": kernel,
                        "ms": ms,
                        "tops": 2.0 * s * s * s / (ms * 1e-3) / 1e12,
                        "ok": ok,
                    }
                )

            for s in sizes:
                current = f"timing n={s}"
                a, b = rand_i8(s * s).reshape(s, s), rand_i8(s * s).reshape(s, s)
                c = cp.full((s, s), POISON, dtype=cp.int32)
                ref = None
                if torch is not None:
                    ta, tb = torch.from_dlpack(a), torch.from_dlpack(b)
                    cp.cuda.Device().synchronize()
                    ref = torch._int_mm(ta, tb.t())
                    torch.cuda.synchronize()

                def same(x, ref=ref, a=a, b=b):
                    if ref is not None:
                        return bool(torch.equal(torch.from_dlpack(x), ref))
                    # no torch: a 512-row band against float64
                    band = (a[:512].astype(cp.float64) @ b.astype(cp.float64).T).astype(cp.int32)
                    return bool((x[:512] == band).all())

                def new(acc=False, s=s, a=a, b=b, c=c):
                    wgmma_gemm.gemm(s, s, s, a.data.ptr, s, b.data.ptr, s, c.data.ptr, s, acc)

                current = f"timing n={s} (wgmma_gemm)"
                ms = bench_cupy(new, current)
                row(s, "wgmma_gemm", ms, same(c))
                current = f"timing n={s} (wgmma_gemm accumulate)"
                ms = bench_cupy(lambda: new(True), current)
                row(s, "wgmma_gemm accumulate=1", ms, True)  # (C grows: not checked)
                if torch is not None:
                    current = f"timing n={s} (torch._int_mm)"
                    cp.cuda.Device().synchronize()
                    ms = bench_torch(lambda ta=ta, tb=tb: torch._int_mm(ta, tb.t()), current)
                    row(s, "torch._int_mm (cuBLASLt)", ms, True)
                    del ta, tb, ref
                    torch.cuda.empty_cache()
                status |= 0 if all(r["ok"] for r in timing) else 1
                del a, b, c
                cp.get_default_memory_pool().free_all_blocks()
                dump()

            print(f"\n{'n':>6}  {'kernel':<26} {'ms':>9} {'TOPS':>8}  ok")
            for r in timing:
                print(f"{r['n']:>6}  {r['kernel']:<26} {r['ms']:9.3f} {r['tops']:8.1f}  {r['ok']}")
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
    print(f"\nJSON written to {os.path.abspath(args.out)}/correctness.json and timing.json")
    print("ALL CORRECT" if status == 0 else "SOME CHECKS FAILED")
    sys.exit(status)


if __name__ == "__main__":
    main()
