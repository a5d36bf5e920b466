"""vllm-mlx 0.6.0: the memory-aware cache's load_from_disk takes a cache persisted by another model of the same
architecture (its provenance checks see the architecture and an always-'unknown' revision, never the weights).

.peers/vllm-mlx/bin/python mlx_peer_properties/repro/vllm_mlx_persist_foreign.py   (exit 1 while it stands)
"""

import logging
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))
logging.disable(logging.WARNING)

from ncm_verify.peers.prefix_engines import Uncached, attention_model  # noqa: E402
from ncm_verify.peers.vllm_mlx_prefix import VllmMlxPrefix  # noqa: E402

work = Path(tempfile.mkdtemp())
ours, theirs = attention_model(work / "ours", seed=0), attention_model(work / "theirs", seed=1)  # other weights
prompt = [6, 8, 7, 21, 2, 6, 8, 7, 21, 2]
writer = VllmMlxPrefix("memory")
writer.start(theirs, 3)
stored = writer.serve([prompt], 3)[0]
writer.persist(work / "cache")  # what the other model's server saved on shutdown
reader = VllmMlxPrefix("memory")
reader.start(ours, 3)
reader.restore(work / "cache")  # raises if it loads nothing (a refusal)
continued = list(stored.key) + [11]
served = reader.serve([continued], 3)[0]
tokens, logprobs = Uncached(ours).greedy(continued, 3)
gap = max(abs(a - b) for a, b in zip(served.logprobs, logprobs))
print(f"loaded {len(reader.scheduler.memory_aware_cache)} entries written by another model's weights")
print(
    f"prompt {continued}: reused {served.reused}; served {list(served.tokens)}, uncached {tokens}; "
    f"log-probabilities off by up to {gap:.3g} nats"
)
sys.exit(1 if served.reused or gap > 1e-4 else 0)
