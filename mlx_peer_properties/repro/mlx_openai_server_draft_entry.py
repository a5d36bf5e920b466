"""mlx-openai-server 1.8.1 with a draft model: the prompt cache it stores after a request is not the cache of its key.

Run from the repository root:
    .peers/mlx-openai-server/bin/python mlx_peer_properties/repro/mlx_openai_server_draft_entry.py
Exits 1 while the finding stands (a stored entry attends off its key, and a follow-up request served from it differs
from uncached decoding), 0 once fixed.
"""

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from ncm_verify.peers.prefix_engines import Uncached, make_model_folder  # noqa: E402
from ncm_verify.peers.prefix_mlx_openai_server import OpenAIServerEngine  # noqa: E402

root = Path(tempfile.mkdtemp())
model = make_model_folder(root / "attention", "attention")
draft = make_model_folder(root / "draft", "attention", seed=2)
oracle = Uncached(model)
engine = OpenAIServerEngine(draft=draft)
engine.start(model, 3)
prompt = (0, 0)
first = engine.serve([prompt], 3)[0]
((key, entry),) = engine.entries()
cache = engine.handler.prompt_cache._load_cache_from_disk(entry)
n_model = engine.handler.model._num_model_cache_layers
print(
    f"served {list(first.tokens)} for {list(prompt)}; stored under {list(key)}; offsets (model, draft layers): "
    f"{[c.offset for c in cache]}"
)
short = len(key) - cache[0].offset
print(f"the model's layers hold {cache[0].offset} positions for a key of {len(key)} tokens ({short} short)")
follow = key + (5,)
served = engine.serve([follow], 3)[0]
uncached, _ = oracle.greedy(follow, 3)
print(f"follow-up {list(follow)}: served {list(served.tokens)} (reused {served.reused}), uncached {uncached}")
gaps = [
    abs(a - b)
    for a, b in zip(
        served.logprobs, [float(oracle.rows(follow + tuple(uncached[: i + 1]))[-2][t]) for i, t in enumerate(uncached)]
    )
]
print(f"log-probability gaps: {[round(g, 4) for g in gaps]}")
engine.close()
sys.exit(1 if short != 0 or list(served.tokens) != uncached or max(gaps) > 1e-4 else 0)
