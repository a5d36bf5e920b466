"""mlx-lm 0.32.2 mlx_lm.server: a prompt that is exactly a stored key (prompt + completion) ends the server.

.peers/mlx-lm/bin/python mlx_peer_properties/repro/mlx_lm_exact_key.py   (exit 1 while it stands)
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from ncm_verify.peers.mlx_lm_prefix import running_server  # noqa: E402

with running_server() as server:
    first = server.complete((3, 1, 2, 5, 7), 3)
    print(f"prompt {list(first.prompt)} -> {list(first.tokens)} (stored under {list(first.key)})")
    reply = server.post({"prompt": " ".join(f"w{t}" for t in first.key), "max_tokens": 3, "temperature": 0.0})
    print(f"prompt {list(first.key)} (exactly the stored key) -> {reply}")
    after = server.post({"prompt": "w3 w1 w2", "max_tokens": 3, "temperature": 0.0})
    print(f"the next request -> {after}\nserver log: {server.tail(6)}")
sys.exit(0 if "choices" in reply and "choices" in after else 1)
