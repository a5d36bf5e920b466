"""mlx-lm: a RotatingKVCache with a keep prefix gives other logits in one multi-token pass than one token at a time.

    .venv/bin/python mlx_peer_properties/repro/mlx_lm_keep_ring_chunks.py    (exit 1 while the finding stands)

A tiny llama whose last layer is a ring of 4 entries keeping 2 (the attention-sink ring `--max-kv-size` builds with
keep 4): one-token steps attend to the keep prefix and the newest entries; a pass of several tokens is masked as a
plain sliding window over the buffer, so its later queries never see the keep prefix. The same tokens then give other
logits by how they are chunked (a prefill step size, a speculative verify pass); without a keep prefix they agree.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

import mlx.core as mx  # noqa: E402

from ncm_verify.mlx_lm_real.hybrid_models import HybridSpec, make_hybrid_cache, make_hybrid_model  # noqa: E402

tokens = list(range(1, 11))
worst = {}
for keep in (0, 2):
    spec = HybridSpec("llama", "AS", window=4, keep=keep, seed=3)
    model = make_hybrid_model(spec)
    whole = model(mx.array([tokens]), cache=make_hybrid_cache(model, spec))[0, -1]
    caches = make_hybrid_cache(model, spec)
    for token in tokens:
        stepped = model(mx.array([[token]]), cache=caches)[0, -1]
    worst[keep] = mx.abs(whole - stepped).max().item()
    print(f"keep {keep}: last logits of tokens 1-10, one pass vs one token at a time: max |diff| {worst[keep]:.3g}")
sys.exit(1 if worst[2] > 1e-3 else 0)
