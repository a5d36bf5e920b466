"""yunshu 0.1.5: a block on its SSD tier with one flipped bit is served after a restart.

Run from the repository root (Python 3.13 env):
    .peers/yunshu/bin/python mlx_peer_properties/repro/yunshu_ssd_flipped.py
Exits 1 while the finding stands (the damaged block is served: log-probabilities off uncached by more than bfloat16
roundoff), 0 once such a block is refused. The model is bfloat16, where the SSD restore's cast is exact.
"""

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

import mlx.core as mx  # noqa: E402
import numpy as np  # noqa: E402

from ncm_verify.peers.prefix_engines import Uncached, make_model_folder  # noqa: E402
from ncm_verify.peers.prefix_peer_files import damage  # noqa: E402
from ncm_verify.peers.prefix_yunshu import YunshuEngine  # noqa: E402

model = make_model_folder(Path(tempfile.mkdtemp()) / "attention-bfloat16", "attention", dtype="bfloat16")
oracle = Uncached(model)
engine = YunshuEngine()
engine.start(model, 3)
prompt = (13, 21, 22, 15, 7, 11, 5, 5, 16, 15, 4)
engine.serve([prompt], 3)
engine.serve([prompt], 3)  # a memory hit: the block goes to the SSD tier
engine.persist(engine.root / "copy")  # the tier's writer drained: the block is on disk
(block,) = list(engine.ssd.rglob("*.safetensors"))
stored = max(mx.load(str(block)).values(), key=lambda a: a.size)
what = damage(block, "flipped byte", np.array(stored.view({2: mx.uint16, 4: mx.uint32}[stored.itemsize])).reshape(-1))
engine.restart()
again = engine.serve([prompt], 3)[0]
want = [float(oracle.rows(prompt + again.tokens[: i + 1])[-2][t]) for i, t in enumerate(again.tokens)]
gap = max(abs(a - b) for a, b in zip(again.logprobs, want))
print(f"{what}; after the restart: reused {again.reused}, tokens {list(again.tokens)}, off uncached by {gap:.3g} nats")
engine.close()
sys.exit(1 if gap > 2.0**-4 else 0)
