import subprocess, sys, threading, time
import cupy as cp
from mixpert.benchmark import median_seconds
from mixpert.runtime import cuda

samples = []
stop = False


def sampler():
    while not stop:
        out = subprocess.run(
            [
                "nvidia-smi",
                "--query-gpu=clocks.sm,power.draw,temperature.gpu",
                "--format=csv,noheader,nounits",
            ],
            capture_output=True,
            text=True,
        ).stdout.strip()
        samples.append(out)
        time.sleep(0.2)


t = threading.Thread(target=sampler)
t.start()
for n in (8192, 12288, 16384):
    rng = cp.random.default_rng(0)
    for kind in ("random", "constant"):
        x = (
            rng.standard_normal((n, n), dtype=cp.float32)
            if kind == "random"
            else cp.full((n, n), 0.37, cp.float32)
        )
        a = cuda.pack_int8(x, 1, False)
        b = cuda.pack_int8(x, 1, True)
        out = cp.empty((n, n), dtype=cp.int32)
        samples.append(f"--- {n} {kind}")
        ms = median_seconds(lambda: cuda.gemm_tn(a, 0, b, 0, a.k_pad, out), 2.0 * n**3) * 1e3
        print(f"n={n} {kind}: {ms:.3f} ms {2 * n**3 / ms / 1e9:.0f} TOPS", flush=True)
    # split m into 4 row blocks
    x = rng.standard_normal((n, n), dtype=cp.float32)
    a = cuda.pack_int8(x, 1, False)
    b = cuda.pack_int8(x, 1, True)
    out = cp.empty((n, n), dtype=cp.int32)

    def split():
        q = n // 4
        for i in range(4):
            sub = cuda.PackedOperand.__new__(cuda.PackedOperand)
            sub.data = a.data[i * q : (i + 1) * q]
            sub.k_pad = a.k_pad
            sub.slots = 1
            cuda.gemm_tn(sub, 0, b, 0, a.k_pad, out[i * q : (i + 1) * q])

    ms = median_seconds(split, 2.0 * n**3) * 1e3
    print(f"n={n} random m-split x4: {ms:.3f} ms {2 * n**3 / ms / 1e9:.0f} TOPS", flush=True)
    del a, b, out, x
    cp.get_default_memory_pool().free_all_blocks()
stop = True
t.join()
print("\n".join(samples))
