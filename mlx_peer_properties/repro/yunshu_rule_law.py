"""yunshu 0.1.5: verify_draft's sampled rule does not emit the target's law (no residual; untempered ratio).

.peers/yunshu/bin/python mlx_peer_properties/repro/yunshu_rule_law.py    (exit 1 while the finding stands)
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

import numpy as np  # noqa: E402

from ncm_verify.peers.yunshu_spec import conditional, decoder, make_drafter, make_target, round_law  # noqa: E402

target, drafter, context = make_target("attention", 0, 4), make_drafter(1, 4), [0]
draft_logprobs = np.array(conditional(drafter, context), dtype=np.float64)
p = np.exp(np.array(conditional(target, context), dtype=np.float64))
worst = 0.0
for name, draft_temperature, law_of_draft in (
    ("draft at temperature 1 (the default)", 1.0, np.exp(draft_logprobs) / np.exp(draft_logprobs).sum()),
    ("greedy draft (the batched engine's)", 0.0, np.eye(4)[draft_logprobs.argmax()]),
):
    spec = decoder(target, drafter, draft_length=1, draft_temperature=draft_temperature)
    law = round_law(spec, target, context, draft_logprobs, law_of_draft, 1.0)
    tv = 0.5 * float(np.abs(law - p / p.sum()).sum())
    worst = max(worst, tv)
    print(f"{name}: emitted law {law.round(4).tolist()}, target p {(p / p.sum()).round(4).tolist()}, TV {tv:.3g}")
sys.exit(1 if worst > 1e-5 else 0)
