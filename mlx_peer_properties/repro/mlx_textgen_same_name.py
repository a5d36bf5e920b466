"""mlx-textgen 0.2.1: two models whose folders share a name share one prompt cache, and each serves the other's.

Run from the repository root: .peers/mlx-textgen/bin/python mlx_peer_properties/repro/mlx_textgen_same_name.py
Exits 1 while the finding stands (the second model continues the first one's saved cache), 0 once fixed.
"""

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from ncm_verify.peers.prefix_engines import Uncached, make_model_folder  # noqa: E402
from ncm_verify.peers.prefix_mlx_textgen import TextgenEngine  # noqa: E402

root = Path(tempfile.mkdtemp())
first_model = make_model_folder(root / "base" / "tiny-model", "attention", seed=0)
second_model = make_model_folder(root / "finetune" / "tiny-model", "attention", seed=1)
prompt = (3, 1, 4, 1, 5, 9, 2, 6)
first = TextgenEngine()
first.start(first_model, 3)
first.serve([prompt], 3)
second = TextgenEngine(home=first.home)  # one user, one ~/.cache
second.start(second_model, 3)
served = second.serve([prompt + (7,)], 3)[0]
want, _ = Uncached(second_model).greedy(prompt + (7,), 3)
print(f"cache folders: {first.cache_dir} and {second.cache_dir}")
print(f"second model served {list(served.tokens)}, its uncached greedy tokens {want}")
first.close()
sys.exit(1 if list(served.tokens) != want else 0)
