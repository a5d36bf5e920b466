"""mlx-vlm 0.7.10: APC's disk tier is named by the model path, not the weights, so a model updated in place under
the same path restarts onto the old weights' blocks and serves from them.

.peers/mlx-vlm/bin/python mlx_peer_properties/repro/mlx_vlm_disk_foreign.py   (exit 1 while it stands)
"""

import logging
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))
logging.disable(logging.WARNING)

from ncm_verify.peers.mlx_vlm_prefix import MlxVlmApc  # noqa: E402
from ncm_verify.peers.prefix_engines import Uncached, attention_model  # noqa: E402

work = Path(tempfile.mkdtemp())
old, new = attention_model(work / "old", seed=0), attention_model(work / "new", seed=1)  # same config, new weights
prompt = [0, 0, 13, 23, 23, 0, 0, 0]
server = MlxVlmApc(disk=True)
server.start(old, 3)  # the old weights' server writes its disk tier
server.serve([prompt], 3)
server.persist(work / "tier")
server.close()
restarted = MlxVlmApc(disk=True)
restarted.start(new, 3)  # the model at that path now holds other weights: the same namespace, the same files
restarted.restore(work / "tier")
served = restarted.serve([prompt + [0]], 3)[0]
tokens, logprobs = Uncached(new).greedy(served.prompt, 3)
gap = max(abs(a - b) for a, b in zip(served.logprobs, logprobs))
print(f"prompt {list(served.prompt)}: reused {served.reused} tokens of the old weights' disk blocks")
print(f"served {list(served.tokens)}, uncached {tokens}; log-probabilities off by up to {gap:.3g} nats")
shutil.rmtree(work, ignore_errors=True)
sys.exit(1 if served.reused or gap > 1e-4 else 0)
