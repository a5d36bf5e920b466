"""nunspark 0.13.0: with a draft model its server drops a request's temperature (greedy speculative loop).

.peers/nunspark/bin/python mlx_peer_properties/repro/nunspark_server_temperature.py    (exit 1 while it stands)
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from ncm_verify.peers.nunspark_spec import served_speculative_call  # noqa: E402

kwargs = served_speculative_call(0.8)
print(f"request temperature 0.8; speculative_generate called with {sorted(kwargs)}")
sys.exit(0 if "temp" in kwargs or "temperature" in kwargs else 1)
