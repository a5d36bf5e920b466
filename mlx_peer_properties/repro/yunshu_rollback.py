"""yunshu 0.1.5: a rejected draft stays in a hybrid or sliding-window target's cache (trim_prompt_cache refuses).

.peers/yunshu/bin/python mlx_peer_properties/repro/yunshu_rollback.py    (exit 1 while the finding stands)
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

import mlx.core as mx  # noqa: E402

from ncm_verify.peers.yunshu_spec import generate, make_drafter, make_target, plain  # noqa: E402

wrong = 0
for kind, seed, vocab, prompt, max_tokens, k in (("hybrid", 0, 4, [0], 4, 1), ("sliding-window", 702, 6, [4], 13, 3)):
    target, drafter = make_target(kind, seed, vocab), make_drafter(seed + 1, vocab)
    mx.random.seed(0)
    spec, want = generate(target, drafter, prompt, max_tokens, k), plain(target, prompt, max_tokens)
    print(f"{kind}: speculative {spec}\n{' ' * len(kind)}  plain       {want}")
    wrong += spec != want
sys.exit(1 if wrong else 0)
