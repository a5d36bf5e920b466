"""vllm-mlx 0.6.0: on a hybrid (qwen3_next) model a request decoded beside a longer one, no cache involved, gets a
conditional off the uncached one (mlx-lm 0.31.3's BatchGenerator pads it on the left).

.peers/vllm-mlx/bin/python mlx_peer_properties/repro/vllm_mlx_hybrid_batch.py   (exit 1 while it stands)
"""

import logging
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))
logging.disable(logging.WARNING)

from ncm_verify.peers.prefix_engines import Uncached, hybrid_model  # noqa: E402
from ncm_verify.peers.vllm_mlx_prefix import VllmMlxPrefix  # noqa: E402

model = hybrid_model(Path(tempfile.mkdtemp()) / "hybrid")
uncached = Uncached(model)
engine = VllmMlxPrefix("memory")
engine.start(model, 3)
worst = 0.0
for served in engine.serve([[12, 19, 23, 0, 11], [18, 10, 10, 2]], 3):  # a fresh scheduler: nothing cached
    tokens, logprobs = uncached.greedy(list(served.prompt), 3)
    gap = max(abs(a - b) for a, b in zip(served.logprobs, logprobs))
    worst = max(worst, gap)
    print(
        f"prompt {list(served.prompt)} (reused {served.reused}): served {list(served.tokens)}, uncached {tokens}; "
        f"log-probabilities off by up to {gap:.3g} nats"
    )
sys.exit(1 if worst > 1e-4 else 0)
