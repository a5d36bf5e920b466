"""vllm-mlx 0.6.0: with --no-memory-aware-cache or --use-paged-cache, a hit covering the whole prompt re-feeds the
last prompt token onto a cache that already holds it (scheduler.py:2362-2385 guards only the memory-aware names).

.peers/vllm-mlx/bin/python mlx_peer_properties/repro/vllm_mlx_prefix_full_hit.py   (exit 1 while it stands)
"""

import logging
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))
logging.disable(logging.WARNING)

from ncm_verify.peers.prefix_engines import Uncached, attention_model  # noqa: E402
from ncm_verify.peers.vllm_mlx_prefix import VllmMlxPrefix  # noqa: E402

model = attention_model(Path(tempfile.mkdtemp()) / "attention")
uncached = Uncached(model)
standing = False
for mode, prompt in (("legacy", [0, 0]), ("paged", [8, 21, 19, 11, 9, 12, 19, 3])):  # paged: two whole blocks of 4
    engine = VllmMlxPrefix(mode)
    engine.start(model, 3)
    cold, hit = engine.serve([prompt], 3)[0], engine.serve([prompt], 3)[0]
    tokens, logprobs = uncached.greedy(prompt, 3)
    gap = max(abs(a - b) for a, b in zip(hit.logprobs, logprobs))
    print(
        f"{mode:6s} prompt {prompt}: uncached {tokens}  cold {list(cold.tokens)}  hit (reused {hit.reused}) "
        f"{list(hit.tokens)}; log-probabilities off by up to {gap:.3g} nats"
    )
    standing |= list(hit.tokens) != tokens or gap > 1e-4
sys.exit(1 if standing else 0)
