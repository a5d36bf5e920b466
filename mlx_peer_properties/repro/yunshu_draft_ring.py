"""yunshu 0.1.5: a sliding-window draft model's cache is restored by offset only, its overwritten ring kept.

.peers/yunshu/bin/python mlx_peer_properties/repro/yunshu_draft_ring.py    (exit 1 while the finding stands)
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

import copy  # noqa: E402

import mlx.core as mx  # noqa: E402
import numpy as np  # noqa: E402

from ncm_verify.peers.yunshu_spec import decoder, draft_caches_at_rounds, make_target  # noqa: E402

target, drafter = make_target("attention", 13661, 6), make_target("sliding-window", 10723, 6)
prompt = [2, 5, 4, 0]
spec = decoder(target, drafter, 2)
rounds = draft_caches_at_rounds(spec, drafter)
mx.random.seed(0)
tokens = prompt + [int(t) for t in spec.generate(mx.array([prompt]), 7, 0.0)]
worst = 0.0
for held, cache in rounds:
    probe = drafter(mx.array([[tokens[held]]]), cache=copy.deepcopy(cache))[0, -1]
    want = drafter(mx.array([tokens[: held + 1]]))[0, -1]
    error = float(np.abs(np.array(probe - mx.logsumexp(probe)) - np.array(want - mx.logsumexp(want))).max())
    print(f"round start, draft cache holding {held} tokens: off an uncached pass by {error:.3g} nats")
    worst = max(worst, error)
sys.exit(1 if worst > 1e-4 else 0)
