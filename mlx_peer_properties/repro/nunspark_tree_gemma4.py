"""nunspark 0.13.0: tree speculative decoding raises on a sliding-window (gemma4_text) target.

.peers/nunspark/bin/python mlx_peer_properties/repro/nunspark_tree_gemma4.py    (exit 1 while the finding stands)
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from ncm_verify.peers.nunspark_spec import engine, generate, make_drafter, make_target, plain  # noqa: E402

target, drafter = make_target("sliding-window", 0, 4), make_drafter(1, 4)
print(f"plain (its generate): {plain(engine(target), [0, 0], 4)}")
try:
    print(f"tree: {generate(engine(target), drafter, [0, 0], 4, 'tree', shape=[2])}")
except (TypeError, ValueError) as error:
    print(f"tree_speculative_generate raised {type(error).__name__}: {str(error).splitlines()[0]}")
    sys.exit(1)
