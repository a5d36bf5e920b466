"""mlx-textgen 0.2.1: a damaged prompt-cache file is never refused: flipped bits are served, a cut file fails every
request that matches it, for good.

Run from the repository root: .peers/mlx-textgen/bin/python mlx_peer_properties/repro/mlx_textgen_damaged_file.py
Exits 1 while the finding stands, 0 once a damaged file is refused and its requests served as uncached.
"""

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

import mlx.core as mx  # noqa: E402
import numpy as np  # noqa: E402

from ncm_verify.peers.prefix_engines import Uncached, make_model_folder  # noqa: E402
from ncm_verify.peers.prefix_mlx_textgen import TextgenEngine  # noqa: E402
from ncm_verify.peers.prefix_peer_files import damage  # noqa: E402

model = make_model_folder(Path(tempfile.mkdtemp()) / "attention", "attention")
prompt = (3, 1, 4, 1, 5, 9, 2, 6)
want, _ = Uncached(model).greedy(prompt + (7,), 3)
wrong = 0
for kind in ("flipped byte", "truncated"):
    engine = TextgenEngine()
    engine.start(model, 3)
    engine.serve([prompt], 3)
    (saved,) = engine.cache_dir.glob("*.safetensors")
    what = damage(saved, kind, np.array(max(mx.load(str(saved)).values(), key=lambda a: a.size)).reshape(-1))
    engine.restart()
    for attempt in (1, 2):
        try:
            served = list(engine.serve([prompt + (7,)], 3)[0].tokens)
            print(f"{what}; request {attempt}: served {served}, uncached {want}")
            wrong += served != want
        except RuntimeError as error:
            print(f"{what}; request {attempt}: {error}")
            wrong += attempt == 2  # a request may be refused once; the prompt must not be lost for good
    engine.close()
sys.exit(1 if wrong else 0)
