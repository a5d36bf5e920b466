"""mlx-flash 0.9.2: DFlash and EAGLE-3 generate return more than max_tokens new tokens.

.peers/mlx-flash/bin/python mlx_peer_properties/repro/mlx_flash_max_tokens.py    (exit 1 while the finding stands)
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from ncm_verify.peers.mlx_flash_spec import generate, make_engine, make_target  # noqa: E402

over = 0
for kind, seed, vocab, drafts, prompt, max_tokens in (
    ("dflash", 5, 6, 4, [1, 2, 3], 10),
    ("eagle3", 0, 4, 3, [0, 1], 3),
):
    spec = generate(make_engine(kind, make_target(seed, vocab), seed + 1, drafts), prompt, max_tokens)
    print(f"{kind}: max_tokens={max_tokens}, {len(spec)} returned: {spec}")
    over += len(spec) != max_tokens
sys.exit(1 if over else 0)
