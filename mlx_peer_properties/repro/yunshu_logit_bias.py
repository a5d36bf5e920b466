"""yunshu 0.1.5: generate with a logit_bias raises after a round that accepts no draft, else ignores the bias.

.peers/yunshu/bin/python mlx_peer_properties/repro/yunshu_logit_bias.py    (exit 1 while the finding stands)
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

import mlx.core as mx  # noqa: E402

from ncm_verify.peers.yunshu_spec import generate, make_drafter, make_target, plain  # noqa: E402

target, drafter, bias = make_target("attention", 0, 4), make_drafter(1, 4), {0: 3.0}
want = plain(target, [0], 6, logit_bias=bias)
mx.random.seed(0)
try:
    spec = generate(target, drafter, [0], 6, 2, logit_bias=bias)
except AttributeError as error:
    print(f"logit_bias {bias}: generate raised AttributeError: {error} (plain: {want})")
    sys.exit(1)
print(f"logit_bias {bias}: speculative {spec}, plain {want}")
sys.exit(1 if spec != want else 0)
