"""mlx-vlm 0.7.10: generate_step with two prompts and a DFlash drafter raises in run_speculative_rounds.

.peers/mlx-vlm/bin/python mlx_peer_properties/repro/mlx_vlm_batch_dflash.py    (exit 1 while the finding stands)
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

import mlx.core as mx  # noqa: E402
from mlx_vlm.generate.ar import generate_step  # noqa: E402

from ncm_verify.peers.mlx_vlm_spec import make_drafter, make_target  # noqa: E402

target = make_target("hybrid", 1, vocab=12)
drafter = make_drafter("dflash", target, 2)
steps = generate_step(
    mx.array([[1, 2, 3], [4, 5, 6]]),
    target,
    None,
    None,
    max_tokens=6,
    temperature=0.0,
    draft_model=drafter,
    draft_kind="dflash",
)
try:
    print([tokens for tokens, _ in steps])
except ValueError as error:
    print(f"ValueError: {error}")
    sys.exit(1)
