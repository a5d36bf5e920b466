"""mlx-textgen 0.2.1: a prompt batched beside a longer one is served wrong: always on a warm cache holding the longer
one (the shorter shares its first tokens), from run to run on a cold one.

Run from the repository root: .peers/mlx-textgen/bin/python mlx_peer_properties/repro/mlx_textgen_batch_shift.py
Exits 1 while the finding stands, 0 once the batched row gets what uncached decoding gives.
"""

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from ncm_verify.peers.prefix_engines import Uncached, make_model_folder  # noqa: E402
from ncm_verify.peers.prefix_mlx_textgen import TextgenEngine  # noqa: E402

model = make_model_folder(Path(tempfile.mkdtemp()) / "attention", "attention")
saved, sharing = (3, 1, 2, 4, 5), (3, 1, 7)
want, _ = Uncached(model).greedy(sharing, 3)
served = {}
for label, warm in (("cold cache", False), ("warm cache", True)):
    engine = TextgenEngine()
    engine.start(model, 3)
    if warm:
        engine.serve([saved], 3)
    served[label] = list(engine.serve([saved, sharing], 3)[1].tokens)
    engine.close()
    print(f"{label}: batch [{list(saved)}, {list(sharing)}] serves row 1 {served[label]}; uncached {list(want)}")
sys.exit(int(any(tokens != list(want) for tokens in served.values())))
