# openblas_gemm: the MLP's GEMMs on OpenBLAS through numpy (what the PyTorch DDP peer multiplies
# with here), one thread, in gemm_bench's order and format, so the two libraries compare shape by shape.
import argparse
import time

import numpy as np


def step_gemms(batch, widths=(784, 1024, 1024, 10)):
    """(role, m, k, n, a transposed, b transposed) of one MLP step, as Linear issues them."""
    gemms = [("forward x W^T", batch, widths[i], widths[i + 1], False, True) for i in range(len(widths) - 1)]
    for i in reversed(range(len(widths) - 1)):
        gemms.append(("weight dz^T x", widths[i + 1], batch, widths[i], True, False))
        if i > 0:
            gemms.append(("input dz W", batch, widths[i + 1], widths[i], False, False))
    return gemms


def seconds_per_call(body, min_seconds):
    for _ in range(3):
        body()
    calls, start = 0, time.perf_counter()
    while True:
        body()
        calls += 1
        elapsed = time.perf_counter() - start
        if elapsed >= min_seconds:
            return elapsed / calls


def main():
    parser = argparse.ArgumentParser(description="the MLP's GEMMs on OpenBLAS through numpy, one thread")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--min-seconds", type=float, default=0.3)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    print(f"OpenBLAS through numpy {np.__version__}, fp32, MLP 784-1024-1024-10 batch {args.batch}")
    print(f"{'GEMM':<14} {'M':>6} {'K':>6} {'N':>6} {'ms':>12} {'GFLOP/s/core':>14}")
    total_s = total_flops = 0.0
    for role, m, k, n, ta, tb in step_gemms(args.batch):
        # Stored as tower stores them; a transposed operand is a transposed view, never a copy.
        a = rng.random((k, m) if ta else (m, k), dtype=np.float32)
        b = rng.random((n, k) if tb else (k, n), dtype=np.float32)
        a, b = (a.T if ta else a), (b.T if tb else b)
        c = np.empty((m, n), dtype=np.float32)
        s = seconds_per_call(lambda: np.matmul(a, b, out=c), args.min_seconds)
        flops = 2.0 * m * k * n
        total_s += s
        total_flops += flops
        print(f"{role:<14} {m:>6} {k:>6} {n:>6} {1e3 * s:>12.3f} {flops / s / 1e9:>14.1f}")
    print(f"\n{'':<38} {'ms/step':>10} {'GFLOP/s/core':>14}")
    label = "the step's GEMMs alone, back to back"
    print(f"{label:<38} {1e3 * total_s:>10.3f} {total_flops / total_s / 1e9:>14.1f}")


if __name__ == "__main__":
    main()
