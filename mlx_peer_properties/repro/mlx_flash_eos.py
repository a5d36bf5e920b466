"""mlx-flash 0.9.2: both engines return the tokens a round accepted after the end-of-sequence token.

.peers/mlx-flash/bin/python mlx_peer_properties/repro/mlx_flash_eos.py    (exit 1 while the finding stands)
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from ncm_verify.peers.mlx_flash_spec import generate_with, make_engine, make_target, plain  # noqa: E402

wrong = False
for kind, seed, eos in (("dflash", 1, 2), ("eagle3", 8, 1)):
    target = make_target(seed, 4)
    prompt = [seed % 4, 1]
    want = plain(target, prompt, 10)
    want = want[: want.index(eos) + 1]
    tokens, rounds = generate_with(make_engine(kind, target, seed + 1, 4), prompt, 10, eos=eos)
    print(f"{kind}, eos_token_id {eos}: {tokens} (rounds {rounds}); plain decoding stops at {want}")
    wrong |= tokens != want
sys.exit(1 if wrong else 0)
