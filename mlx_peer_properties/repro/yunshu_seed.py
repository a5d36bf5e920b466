"""yunshu 0.1.5: a seeded request decodes different tokens each time (coins and correction sampler unseeded).

.peers/yunshu/bin/python mlx_peer_properties/repro/yunshu_seed.py    (exit 1 while the finding stands)
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

import mlx.core as mx  # noqa: E402

from ncm_verify.peers.yunshu_spec import decoder, make_drafter, make_target  # noqa: E402

target, drafter = make_target("attention", 0, 4), make_drafter(1, 4)
runs = []
for _ in range(4):
    spec = decoder(target, drafter, draft_length=1, rng_seed=None)
    mx.random.seed(0)  # what engine_speculative._run_spec does with a request's seed
    runs.append([int(t) for t in spec.generate(mx.array([[0]]), 8, 1.0)])
print("\n".join(f"seed 0, run {i}: {r}" for i, r in enumerate(runs)))
sys.exit(1 if any(r != runs[0] for r in runs) else 0)
