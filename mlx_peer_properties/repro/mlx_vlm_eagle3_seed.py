"""mlx-vlm 0.7.10: the EAGLE-3 path ignores a request's seed (DFlash, MTP and plain decoding honour it).

.peers/mlx-vlm/bin/python mlx_peer_properties/repro/mlx_vlm_eagle3_seed.py    (exit 1 while it stands)
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from ncm_verify.peers.mlx_vlm_spec import generate, make_drafter, make_target  # noqa: E402

target = make_target("attention", 1, 12)
runs = {}
for kind in ("mtp", "eagle3"):
    drafter = make_drafter(kind, target, 2)
    runs[kind] = [generate(target, [1, 2, 3, 4, 5], 16, drafter, kind, temperature=1.0, seed=3) for _ in range(3)]
    print(f"{kind}, seed=3, three calls:", *runs[kind], sep="\n  ")
print("plain, seed=3:", generate(target, [1, 2, 3, 4, 5], 16, temperature=1.0, seed=3))
sys.exit(0 if all(r == runs["eagle3"][0] for r in runs["eagle3"]) else 1)
