"""nunspark 0.13.0 with mlx-lm 0.32 (what its bound mlx-lm>=0.31.0 resolves): every speculative path raises.

    .peers/dspark-mlx/bin/python mlx_peer_properties/repro/nunspark_mlx_lm_032.py    (exit 1 while it stands)

Run with any environment holding mlx-lm 0.32.x (dspark-mlx's does); nunspark itself (pure Python) is taken from
.peers/nunspark/ (make install-peers PEER=nunspark), which holds mlx-lm 0.31.3 so that its loops can be judged.
"""

import sys
import tempfile
from pathlib import Path

root = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(root / "src"))
package = next((root / ".peers" / "nunspark" / "lib").glob("python*/site-packages/nunspark"))
alone = Path(tempfile.mkdtemp())
(alone / "nunspark").symlink_to(package)  # nunspark alone, without the mlx-lm beside it there
sys.path.insert(0, str(alone))

import mlx_lm  # noqa: E402

from ncm_verify.peers.nunspark_spec import engine, generate, make_drafter, make_target  # noqa: E402

print(f"mlx-lm {mlx_lm.__version__}")
target, drafter = make_target("attention", 0, 4), make_drafter(1, 4)
for loop in ("linear", "tree"):
    try:
        print(f"{loop}: {generate(engine(target), drafter, [0, 1], 4, loop)}")
    except ValueError as error:
        print(f"{loop}: ValueError: {error} (KVCache.state is (keys, values, offset) in mlx-lm 0.32)")
        sys.exit(1)
