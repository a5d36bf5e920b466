"""yunshu 0.1.5: batch_verify_drafts masks every request through the decoder's one grammar constraint.

.peers/yunshu/bin/python mlx_peer_properties/repro/yunshu_batch_grammar.py    (exit 1 while the finding stands)
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

import numpy as np  # noqa: E402

from ncm_verify.peers.yunshu_spec import conditional, decoder, make_drafter, make_target, verify_rows  # noqa: E402

target, drafter = make_target("attention", 271, 7), make_drafter(272, 7)
contexts, drafts = [[1, 1, 5], [4, 4, 1, 5, 5]], [[2, 0, 6, 1], [1, 3, 0]]
logprobs = [[float(conditional(drafter, c + d[:i])[t]) for i, t in enumerate(d)] for c, d in zip(contexts, drafts)]
batched, alone = verify_rows(
    decoder(target, drafter), target, contexts, drafts, logprobs, 0.8, rng_seed=271, record=True,
    response_format="json schema",
)  # fmt: skip
wrong = False
for row, ((b, b_law), (a, a_law)) in enumerate(zip(batched, alone)):
    print(f"request {row}: batch correction law {b_law.round(4).tolist()}, alone {a_law.round(4).tolist()}")
    wrong |= b.accepted_ids != a.accepted_ids or not np.allclose(b_law, a_law, atol=1e-5)
sys.exit(1 if wrong else 0)
