"""mlx-lm-broomva 0.31.3: once a sliding-window ring wraps, the MTP loop keeps rejected drafts attended.

.peers/mlx-lm-broomva/bin/python mlx_peer_properties/repro/mlx_lm_broomva_ring.py   (exit 1 while it stands)
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from ncm_verify.peers.mlx_lm_broomva_spec import generate, make_drafter, make_target  # noqa: E402

target = make_target("sliding-window", 7333, 6)
drafter = make_drafter("sliding-window", 7334, 6)
prompt = [0, 4, 1, 3, 3, 5]  # longer than the window (4): the ring has wrapped before the first round
plain = generate(target, prompt, 9)
spec = generate(target, prompt, 9, drafter, num_draft_tokens=3)
print(f"generate_step:                 {plain}")
print(f"mtp_speculative_generate_step: {spec}")
sys.exit(0 if spec == plain else 1)
