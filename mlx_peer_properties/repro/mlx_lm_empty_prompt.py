"""mlx-lm 0.32.2 mlx_lm.server: an empty prompt kills the generation thread; every later request is refused.

.peers/mlx-lm/bin/python mlx_peer_properties/repro/mlx_lm_empty_prompt.py   (exit 1 while it stands)
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from ncm_verify.peers.mlx_lm_prefix import running_server  # noqa: E402

with running_server() as server:
    print(f"w3 w1 w2 -> {server.post({'prompt': 'w3 w1 w2', 'max_tokens': 2, 'temperature': 0.0})}")
    print(f"empty prompt -> {server.fail()}")
    after = server.post({"prompt": "w3 w1 w2 w5", "max_tokens": 2, "temperature": 0.0})
    print(f"w3 w1 w2 w5 -> {after}\nserver log: {server.tail(6)}")
sys.exit(0 if "choices" in after else 1)
