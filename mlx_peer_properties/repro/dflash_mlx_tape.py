"""dflash-mlx 0.1.8: off Metal, the recurrent state restored after a round that accepts a draft is wrong.

    .peers/dflash-mlx/bin/python mlx_peer_properties/repro/dflash_mlx_tape.py    (exit 1 while the finding stands)

A hybrid (qwen3_next) target, its engine in block mode; after each restore the caches are read and the next
token's log-probabilities from them compared with one uncached pass over the tokens they hold.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

import mlx.core as mx  # noqa: E402
from dflash_mlx.engine.target_ops import resolve_target_ops  # noqa: E402
from mlx_lm.models.cache import ArraysCache, KVCache  # noqa: E402

from ncm_verify.peers.dflash_mlx_spec import conditional, generate, log_softmax, make_drafter, make_target  # noqa: E402

target = make_target("hybrid", 21432, 6)
drafter = make_drafter(target, 21433, block_size=6)
ops = type(resolve_target_ops(target))
own = ops.restore_after_acceptance
rounds = []


def restore(self, caches, **kwargs):
    result = own(self, caches, **kwargs)
    held = []
    for cache in caches:
        if hasattr(cache, "cache"):
            copy = ArraysCache(2)
            copy.cache = list(cache.cache)
        else:
            copy = KVCache()
            copy.update_and_fetch(cache.keys[..., : cache.offset, :], cache.values[..., : cache.offset, :])
        held.append(copy)
    rounds.append((kwargs, held))
    return result


ops.restore_after_acceptance = restore
spec, _, _ = generate(target, drafter, [0], 13, "dflash")
tokens = [0] + spec
worst = 0.0
for kwargs, caches in rounds:
    length = kwargs["target_len"]
    if length >= len(tokens):
        continue
    cached = log_softmax(target(mx.array([[tokens[length]]]), cache=caches)[0, -1])
    error = float(mx.abs(cached - conditional(target, tokens[: length + 1])).max())
    worst = max(worst, error)
    print(
        f"accepted {kwargs['acceptance_length']} of {kwargs['drafted_tokens']}: next-token log-prob error {error:.2e}"
    )
sys.exit(0 if worst < 1e-4 else 1)
