"""mlx-vlm 0.7.10: with an EAGLE-3 draft vocabulary smaller than the target's, the verify pass decides acceptance by
the argmax over the draft vocabulary's tokens, so a target token outside it is skipped (greedy) and sampled drafts
are accepted without a target draw.

.peers/mlx-vlm/bin/python mlx_peer_properties/repro/mlx_vlm_eagle3_hot_vocab.py   (exit 1 while it stands)
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from ncm_verify.peers.mlx_vlm_spec import generate, make_drafter, make_target  # noqa: E402

target = make_target("attention", 5, 12)
drafter = make_drafter("eagle3", target, 6, block_size=3, draft_vocab=6)  # draft ids stand for target ids 0, 2, ..., 10
plain = generate(target, [1, 3, 5], 12, temperature=0.0)
spec = generate(target, [1, 3, 5], 12, drafter, "eagle3", temperature=0.0)
print(f"plain greedy:               {plain}")
print(f"EAGLE-3, 6-token vocabulary: {spec}")
sys.exit(0 if spec == plain else 1)
