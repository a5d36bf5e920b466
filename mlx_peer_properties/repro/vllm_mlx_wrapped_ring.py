"""vllm-mlx 0.6.0: MLLMBatchGenerator with an assistant drafter diverges from plain decoding once a sliding-window
ring is full (its rollback leaves rejected drafts attended).

.peers/vllm-mlx/bin/python mlx_peer_properties/repro/vllm_mlx_wrapped_ring.py   (exit 1 while it stands)
"""

import logging
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))
logging.basicConfig(level=logging.ERROR)

from ncm_verify.peers import mlx_vlm_spec as vlm  # noqa: E402
from ncm_verify.peers.vllm_mlx_spec import serve  # noqa: E402

target = vlm.make_target("sliding-window", 0, 4)  # mlx-vlm's gemma4, sliding layers with a window of 4
drafter = vlm.make_drafter("mtp", target, 1)  # mlx-vlm's Gemma 4 assistant, the external drafter
plain = vlm.generate(target, [0], 8, temperature=0.0)
alone, stats = serve(target, [[0]], 8, drafter)
print(f"plain generate_step:                     {plain}")
print(f"MLLMBatchGenerator + assistant, alone:    {alone[0]}  (rounds {stats['accepted']} +, {stats['rejected']} -)")
print(f"MLLMBatchGenerator + assistant, batched:  {serve(target, [[0], [0, 0]], 8, drafter)[0][0]}")
sys.exit(0 if alone[0] == plain else 1)
