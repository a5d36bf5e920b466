"""locals 0.2.1: a saved system-prompt snapshot is loaded after a restart whatever its bytes hold.

Run from the repository root: .peers/locals/bin/python mlx_peer_properties/repro/locals_disk_snapshot.py
Exits 1 while the finding stands (a snapshot with one flipped bit, or another model's snapshot of the same tokens,
is served silently), 0 once such files are refused or their requests served as uncached.
"""

import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

import mlx.core as mx  # noqa: E402
import numpy as np  # noqa: E402

from ncm_verify.peers.prefix_engines import Uncached, make_model_folder  # noqa: E402
from ncm_verify.peers.prefix_locals import LocalsEngine  # noqa: E402
from ncm_verify.peers.prefix_peer_files import damage  # noqa: E402

root = Path(tempfile.mkdtemp())
model = make_model_folder(root / "attention", "attention")
other = make_model_folder(root / "other" / "attention", "attention", seed=1)
prompt = (3, 1, 4, 1, 5, 9, 2, 6)  # a "system" checkpoint at 4 tokens: saved to disk
follow = prompt + (7,)
want, _ = Uncached(model).greedy(follow, 3)
wrong = 0
for case in ("flipped byte", "another model"):
    engine, foreign = LocalsEngine(), LocalsEngine()
    engine.start(model, 3)
    engine.serve([prompt], 3)
    (snapshot,) = engine.disk_dir.glob("*.safetensors")
    if case == "another model":
        foreign.start(other, 3)
        foreign.serve([prompt], 3)
        (theirs,) = foreign.disk_dir.glob("*.safetensors")
        shutil.copy(theirs, snapshot)
        what = "replaced by the other model's snapshot of the same tokens"
    else:
        stored = max(mx.load(str(snapshot)).values(), key=lambda a: a.size)
        what = damage(snapshot, "flipped byte", np.array(stored).reshape(-1))
    engine.restart()  # a new server process: the disk folder is read again
    served = engine.serve([follow], 3)[0]
    print(f"{case}: {what}; served {list(served.tokens)} (reused {served.reused}), uncached {want}")
    wrong += list(served.tokens) != want
    engine.close()
    foreign.close()
sys.exit(1 if wrong else 0)
