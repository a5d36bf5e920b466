"""mlx-lm 0.32.2 mlx_lm.server --prompt-cache-bytes 1024: an entry of 2304 bytes is kept and reused, batched and
sequential (a request with a seed) alike.

.peers/mlx-lm/bin/python mlx_peer_properties/repro/mlx_lm_cache_bytes.py   (exit 1 while it stands)
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from ncm_verify.peers.mlx_lm_prefix import running_server  # noqa: E402

reused = {}
with running_server(8, extra=("--prompt-cache-bytes", "1024")) as server:
    for path, fields in (("batched", {}), ("sequential", {"seed": 0})):
        prompt = (3, 1, 2, 5, 7, 9) if path == "batched" else (4, 1, 2, 5, 7, 9)
        server.complete(prompt, 3, **fields)  # an entry of 2 layers x 2 x 16 x 9 tokens x 4 bytes = 2304
        reused[path] = server.complete(prompt, 3, **fields).reused
        print(f"{path}: the same prompt again reused {reused[path]} tokens (limit 1024 bytes)")
sys.exit(0 if not any(reused.values()) else 1)
