"""mlx-dspark 0.20.3: speculative_generate returns more than max_new_tokens tokens.

.peers/mlx-dspark/bin/python mlx_peer_properties/repro/mlx_dspark_max_tokens.py    (exit 1 while it stands)
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from ncm_verify.peers.mlx_dspark_spec import generate, make_drafter, make_target, plain  # noqa: E402

over = 0
for kind, seed, vocab, block, prompt, max_tokens, cap in (
    ("attention", 18432, 6, 3, [2, 2, 3, 4, 2, 0, 2, 2], 8, 2),
    ("hybrid", 2316, 4, 5, [0, 3, 2], 7, None),
):
    target = make_target(kind, seed, vocab)
    spec = [int(t) for t in generate(target, make_drafter(seed + 1, vocab, block), prompt, max_tokens,
                                     max_draft_tokens=cap).token_ids]  # fmt: skip
    want = plain(target, prompt, max_tokens)
    print(f"{kind}: max_new_tokens={max_tokens}: speculative {spec} ({len(spec)}), plain {want}")
    over += len(spec) != max_tokens
sys.exit(1 if over else 0)
