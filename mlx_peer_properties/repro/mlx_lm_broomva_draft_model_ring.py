"""mlx-lm-broomva 0.31.3: once a sliding-window ring wraps, the draft-model loop keeps rejected drafts attended.

.peers/mlx-lm-broomva/bin/python mlx_peer_properties/repro/mlx_lm_broomva_draft_model_ring.py   (exit 1 while it stands)

`speculative_generate_step`'s `_rewind_cache` (mlx_lm/generate.py:589-591) ignores `trim_prompt_cache`'s result; a
wrapped `RotatingKVCache` refuses to trim, so no layer is trimmed (upstream mlx-lm's open issue on rotating caches in
speculative decoding; its fix was closed unmerged).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from ncm_verify.peers.mlx_lm_broomva_spec import generate, generate_with_draft_model, make_target  # noqa: E402

target = make_target("sliding-window", 17761, 6)
draft = make_target("sliding-window", 27820, 6)
prompt = [5, 0, 3, 3, 0, 4]  # longer than the window (4): the ring has wrapped before the first round
plain = generate(target, prompt, 14)
spec = generate_with_draft_model(target, draft, prompt, 14, 2)
print(f"generate_step:             {plain}")
print(f"speculative_generate_step: {spec}")
sys.exit(0 if spec == plain else 1)
