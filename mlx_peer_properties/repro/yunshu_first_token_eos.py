"""yunshu 0.1.5: when the prefill's token is the end-of-sequence token, generate emits a round past it.

.peers/yunshu/bin/python mlx_peer_properties/repro/yunshu_first_token_eos.py    (exit 1 while the finding stands)
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

import mlx.core as mx  # noqa: E402

from ncm_verify.peers.yunshu_spec import decoder, make_drafter, make_target, plain  # noqa: E402

target, drafter = make_target("attention", 0, 4), make_drafter(1, 4)
eos = plain(target, [0], 6)[0]
mx.random.seed(0)
spec = [int(t) for t in decoder(target, drafter, 1, eos=eos).generate(mx.array([[0]]), 6, 0.0)]
print(f"eos_token_id {eos}, the first token: generate emits {spec}, plain decoding stops at [{eos}]")
sys.exit(1 if spec != [eos] else 0)
