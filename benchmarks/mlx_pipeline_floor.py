"""The least MLX pipeline an exact chain correction needs at B = 32, beside the MLX floor `make bench` uses.

Without a fused gather-and-reduce kernel (MLX offers custom kernels on Metal and CUDA, not on
its CPU backend), correcting one emission row per sequence takes at least: two row gathers
(copies), one residual pass, and the block sums of the residual and of p (the zero-mass
fallback). This times that bare pipeline, with no search, masking or acceptance, against a
sum over the same step bytes in 32-entry blocks (MLX's fastest reduction here). Each group
size runs in a fresh process: glibc's adaptive mmap threshold makes a process's earlier large
allocations decide whether later ones fault in fresh pages (3-5x slower here).

    .venv/bin/python benchmarks/mlx_pipeline_floor.py
"""

from __future__ import annotations

import subprocess
import sys
import time

import mlx.core as mx
import numpy as np

BATCH, ROWS, VOCAB, BLOCK = 32, 5, 128_256, 32


def median_ms(function, calls: int = 60) -> float:
    for _ in range(5):
        function()
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return float(np.median(times)) * 1e3


def make_bare_pipeline(group: int):
    """Row gathers, residual and both block sums, `group` sequences at a time (the step groups them too)."""

    def pipeline(target, draft, rows):
        sums = []
        for first in range(0, BATCH, group):
            part = slice(first, first + group)
            offsets = mx.arange(group) * ROWS + rows[part]
            p = mx.take(target[part].reshape(-1, VOCAB), offsets, axis=0)
            q = mx.take(draft[part].reshape(-1, VOCAB), offsets - mx.arange(group), axis=0)
            residual = mx.maximum(p - q, 0.0).reshape(group, -1, BLOCK)
            sums += [residual.sum(axis=-1), p.reshape(group, -1, BLOCK).sum(axis=-1)]
        return sums

    return mx.compile(pipeline)


def measure(group: int) -> None:
    keys = mx.random.split(mx.random.key(0), 2)
    target = mx.softmax(mx.random.normal((BATCH, ROWS, VOCAB), key=keys[0]), axis=-1)
    draft = mx.softmax(mx.random.normal((BATCH, ROWS - 1, VOCAB), key=keys[1]), axis=-1)
    rows = mx.array(np.random.default_rng(0).integers(0, ROWS - 1, BATCH).astype(np.int32))
    blocks = mx.ones((BATCH * 2 * VOCAB // BLOCK, BLOCK))  # the step's bytes: one p and one q row per sequence
    mx.eval(target, draft, rows, blocks)
    pipeline = make_bare_pipeline(group)
    took = median_ms(lambda: mx.eval(pipeline(target, draft, rows)))
    floor = median_ms(lambda: mx.eval(blocks.sum(axis=-1)))
    print(
        f"groups of {group:2d}: bare pipeline {took:.2f} ms, MLX floor (32-entry block sums) {floor:.2f} ms: "
        f"{took / floor:.2f}x  ({mx.default_device()}, MLX {mx.__version__})",
        flush=True,
    )


def main() -> None:
    if len(sys.argv) > 1:
        measure(int(sys.argv[1]))
        return
    for group in (2, 4, 8, 16):
        subprocess.run([sys.executable, __file__, str(group)], check=True)


if __name__ == "__main__":
    main()
