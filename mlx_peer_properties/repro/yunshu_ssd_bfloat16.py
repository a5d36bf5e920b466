"""yunshu 0.1.5: its SSD prefix tier restores K/V as bfloat16, in the 'native' precision documented as bit-exact.

Run from the repository root (Python 3.13 env):
    .peers/yunshu/bin/python mlx_peer_properties/repro/yunshu_ssd_bfloat16.py
Exits 1 while the finding stands (a float32 model served from its SSD tier after a restart is off its uncached
log-probabilities by more than float32 roundoff), 0 once fixed.
"""

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from ncm_verify.peers.prefix_engines import Uncached, make_model_folder  # noqa: E402
from ncm_verify.peers.prefix_yunshu import YunshuEngine  # noqa: E402

model = make_model_folder(Path(tempfile.mkdtemp()) / "attention", "attention")
oracle = Uncached(model)
engine = YunshuEngine()
engine.start(model, 3)
prompt = (13, 21, 22, 15, 7, 11, 5, 5, 16, 15, 4)
first = engine.serve([prompt], 3)[0]
engine.serve([prompt], 3)  # a hit from memory: the entry is written to the SSD tier
engine.restart()  # a new process: memory tiers empty, the SSD folder kept
ssd = engine.engine._kv_prefix_cache._ssd_cache
files = sorted(str(f.relative_to(engine.ssd)) for f in engine.ssd.rglob("*") if f.is_file())
again = engine.serve([prompt], 3)[0]
want = [float(oracle.rows(prompt + again.tokens[: i + 1])[-2][t]) for i, t in enumerate(again.tokens)]
gap = max(abs(a - b) for a, b in zip(again.logprobs, want))
first_gap = max(abs(a - b) for a, b in zip(first.logprobs, want))
dtypes = sorted({str(c.keys.dtype) for c in engine.engine._kv_prefix_cache._caches[0] if hasattr(c, "keys")})
print(f"model float32, SSD precision 'native' (documented bit-exact); files in the SSD folder at the restart: {files}")
print(
    f"uncached request: off uncached by {first_gap:.2g} nats; after the restart: reused {again.reused}, tokens "
    f"{list(again.tokens)}, off uncached by {gap:.2g} nats; keys held now: {dtypes}"
)
engine.close()
sys.exit(1 if gap > 1e-4 else 0)
