"""mlx-lm-broomva 0.31.3: the MTP loop hands logits processors no token history; max_tokens=-1 never drafts.

.peers/mlx-lm-broomva/bin/python mlx_peer_properties/repro/mlx_lm_broomva_processors.py   (exit 1 while it stands)
"""

import itertools
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

import mlx.core as mx  # noqa: E402
from mlx_lm.generate import mtp_speculative_generate_step  # noqa: E402
from mlx_lm.sample_utils import make_logits_processors  # noqa: E402

from ncm_verify.peers.mlx_lm_broomva_spec import generate, make_drafter, make_target  # noqa: E402

target, drafter = make_target("attention", 0, 12), make_drafter("attention", 1, 12)
failed = False
print(
    "plain, repetition_penalty=1.5:", generate(target, [1, 2], 8, logits_processors=make_logits_processors(None, 1.5))
)
try:
    processors = make_logits_processors(None, 1.5)
    print("MTP,   repetition_penalty=1.5:", generate(target, [1, 2], 8, drafter, logits_processors=processors))
except TypeError as error:
    print(f"MTP,   repetition_penalty=1.5: TypeError: {error}")
    failed = True
calls = []
own = type(drafter).__call__
type(drafter).__call__ = lambda self, *a, **k: calls.append(1) or own(self, *a, **k)
steps = mtp_speculative_generate_step(mx.array([1, 2]), target, drafter, num_draft_tokens=3, max_tokens=-1)
tokens = [int(step[0]) for step in itertools.islice(steps, 12)]
print(f"max_tokens=-1: 12 tokens {tokens}, drafter calls {len(calls)}")
sys.exit(1 if failed or not calls else 0)
