"""vllm-mlx 0.6.0 --use-paged-cache: blocks are looked up by their tokens alone (paged_cache.py:951-972, :873), so a
block stored after another prefix is served at the wrong position.

.peers/vllm-mlx/bin/python mlx_peer_properties/repro/vllm_mlx_paged_position.py   (exit 1 while it stands)
"""

import logging
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))
logging.disable(logging.WARNING)

from ncm_verify.peers.prefix_engines import Uncached, attention_model  # noqa: E402
from ncm_verify.peers.vllm_mlx_prefix import VllmMlxPrefix  # noqa: E402

model = attention_model(Path(tempfile.mkdtemp()) / "attention")
engine = VllmMlxPrefix("paged")  # block size 4
engine.start(model, 3)
body = [12, 15, 11, 14, 23, 20, 13, 2, 14, 17, 6, 12]
engine.serve([[11, 3, 13, 4] + body], 3)  # stores the blocks of `body` at positions 4-15
prompt = body + [7]  # the same blocks at positions 0-11: nothing of this prompt was ever computed there
served = engine.serve([prompt], 3)[0]
tokens, logprobs = Uncached(model).greedy(prompt, 3)
gap = max(abs(a - b) for a, b in zip(served.logprobs, logprobs))
print(f"prompt {prompt}: reused {served.reused} (of a block table stored at positions 4-15)")
print(f"served {list(served.tokens)}, uncached {tokens}; log-probabilities off by up to {gap:.3g} nats")
sys.exit(1 if served.reused or list(served.tokens) != tokens or gap > 1e-4 else 0)
