"""mlx-vlm 0.7.10: its server engine gives a short request batched beside a longer one (left padding) on a
qwen3_5 hybrid target the wrong conditional; alone, or at equal lengths, it is exact.

    .peers/mlx-vlm/bin/python mlx_peer_properties/repro/mlx_vlm_hybrid_padding.py    (exit 1 while it stands)
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from ncm_verify.peers.mlx_vlm_spec import conditional, make_target, serve  # noqa: E402

target = make_target("hybrid", 0, 12)
worst = 0.0
for prompts in ([[1, 2, 3, 4], [5, 6, 7, 8]], [[1, 2, 3, 4], [5, 6, 7, 8, 9, 10]]):
    reported: list = []
    tokens = serve(target, prompts, 6, logprobs=reported)
    errors = [abs(lp - float(conditional(target, prompts[0] + tokens[0][:i])[t])) for i, (t, lp) in
              enumerate(zip(tokens[0], reported[0]))]  # fmt: skip
    print(f"beside a prompt of {len(prompts[1])} tokens: log-prob error per token {[round(e, 4) for e in errors]}")
    worst = max(worst, max(errors)) if len(prompts[1]) != len(prompts[0]) else worst
sys.exit(0 if worst < 1e-4 else 1)
