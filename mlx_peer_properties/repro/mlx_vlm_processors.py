"""mlx-vlm 0.7.10: logit_bias and the penalties are dropped after the first token of speculative decoding.

.peers/mlx-vlm/bin/python mlx_peer_properties/repro/mlx_vlm_processors.py    (exit 1 while the finding stands)
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from ncm_verify.peers.mlx_vlm_spec import generate, make_drafter, make_target  # noqa: E402

target = make_target("hybrid", 1, vocab=12)
drafter = make_drafter("dflash", target, 2)
options = dict(temperature=0.0, logit_bias={7: 20.0})
plain = generate(target, [1, 2, 3], 12, **options)
spec = generate(target, [1, 2, 3], 12, drafter, "dflash", **options)
print(f"plain decoding,       logit_bias={{7: 20.0}}: {plain}")
print(f"speculative (DFlash), logit_bias={{7: 20.0}}: {spec}")
sys.exit(0 if spec == plain else 1)
