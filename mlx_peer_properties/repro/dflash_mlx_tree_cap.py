"""dflash-mlx 0.1.8: tree mode with a verify-length cap of 1 (`--verify-len-cap 1`, accepted) crashes.

    .peers/dflash-mlx/bin/python mlx_peer_properties/repro/dflash_mlx_tree_cap.py    (exit 1 while the finding stands)

Block mode with the same cap decodes (one token verified per pass, as plain decoding); tree mode asks its drafter for
top-k rows over the capped verify length minus the staged token, none, and raises in `draft_with_topk`.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from ncm_verify.peers.dflash_mlx_spec import generate, make_drafter, make_target, plain  # noqa: E402

target = make_target("attention", 132, 12)
drafter = make_drafter(target, 133, block_size=4)
want = plain(target, [3, 1, 0, 9, 8, 10], 6)
block, _, _ = generate(target, drafter, [3, 1, 0, 9, 8, 10], 6, "dflash", runtime={"verify_len_cap": 1})
print(f"plain {want}; block mode, verify_len_cap=1: {block}")
try:
    tree, _, _ = generate(target, drafter, [3, 1, 0, 9, 8, 10], 6, "ddtree", runtime={"verify_len_cap": 1})
except RuntimeError as error:
    print(f"tree mode, verify_len_cap=1: RuntimeError: {error}")
    sys.exit(1)
print(f"tree mode, verify_len_cap=1: {tree}")
sys.exit(0 if tree == want else 1)
