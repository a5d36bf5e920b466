"""mlx-lm 0.32.2 mlx_lm.server --draft-model: the entry stored under prompt + completion holds one position less
than its key, so a request reusing it is served from the wrong cache.

.peers/mlx-lm/bin/python mlx_peer_properties/repro/mlx_lm_draft_key.py   (exit 1 while it stands)
"""

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from ncm_verify.peers.mlx_lm_prefix import MlxLmServer  # noqa: E402
from ncm_verify.peers.prefix_engines import Uncached, make_model_folder  # noqa: E402

with tempfile.TemporaryDirectory() as folder:
    target = make_model_folder(Path(folder) / "target", "attention", "float32", 0)
    server = MlxLmServer(draft=make_model_folder(Path(folder) / "draft", "attention", "float32", 1))
    server.start(target, 4)
    oracle, worst = Uncached(target), 0.0
    try:
        first = server.complete((0, 0), 3)
        for prompt in [(0, 0), first.key + (5,)]:  # a longer entry trimmed; the key extended by a new turn
            served = server.complete(prompt, 3)
            tokens, logprobs = oracle.greedy(prompt, 3)
            gap = max(abs(a - b) for a, b in zip(served.logprobs, logprobs))
            worst = max(worst, gap if list(served.tokens) == tokens else float("inf"))
            print(
                f"prompt {list(prompt)} (reused {served.reused}): served {list(served.tokens)} "
                f"{[round(x, 4) for x in served.logprobs]}, uncached {tokens} {[round(x, 4) for x in logprobs]}"
            )
    finally:
        server.close()
print(f"largest log-probability gap {worst:.3g} (float32 tolerance 1e-4)")
sys.exit(0 if worst <= 1e-4 else 1)
