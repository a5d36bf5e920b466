"""mlx-openai-server 1.8.1: a prompt-cache pickle with one flipped bit is loaded and served on the next hit.

Run from the repository root: .peers/mlx-openai-server/bin/python mlx_peer_properties/repro/mlx_openai_server_pickle.py
Exits 1 while the finding stands, 0 once a damaged pickle is refused (the request served as uncached).
"""

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from ncm_verify.peers.prefix_engines import Uncached, make_model_folder  # noqa: E402
from ncm_verify.peers.prefix_mlx_openai_server import OpenAIServerEngine  # noqa: E402

model = make_model_folder(Path(tempfile.mkdtemp()) / "attention", "attention")
oracle = Uncached(model)
engine = OpenAIServerEngine()
engine.start(model, 3)
prompt = (3, 1, 4, 1, 5, 9, 2, 6)
first = engine.serve([prompt], 3)[0]
what = engine.damage_entry(first.key, "flipped byte")
again = engine.serve([prompt], 3)[0]
want = [float(oracle.rows(prompt + again.tokens[: i + 1])[-2][t]) for i, t in enumerate(again.tokens)]
gap = max(abs(a - b) for a, b in zip(again.logprobs, want))
print(
    f"before: {list(first.tokens)}; {what}; after: {list(again.tokens)} (reused {again.reused}); "
    f"log-probabilities off uncached by up to {gap:.3g} nats"
)
engine.close()
sys.exit(1 if gap > 1e-4 else 0)
