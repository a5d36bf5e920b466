"""mlx-vlm 0.7.10: after an MTP round on the hybrid Qwen 3.5 target, the committed cache is off a rebuilt one by
far more than plain cached decoding's roundoff.

.peers/mlx-vlm/bin/python mlx_peer_properties/repro/mlx_vlm_hybrid_mtp_commit.py   (exit 1 while it stands)
"""

import copy
import sys
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

import mlx.core as mx  # noqa: E402
import numpy as np  # noqa: E402
from mlx_vlm.models import cache as vlm_cache  # noqa: E402
from mlx_vlm.speculative import mtp  # noqa: E402

from ncm_verify.peers.mlx_vlm_spec import conditional, generate, log_softmax, make_drafter, make_target  # noqa: E402
from ncm_verify.tolerances import RECURRENT_LOGPROBS  # noqa: E402

target = make_target("hybrid", 10000, 4)
drafter = make_drafter("mtp", target, 10001, block_size=3)
prompt, probe, rounds = [0, 3], 3, []
own = mtp.commit_speculative_round


def commit(model, caches, state, accepted, block_size):
    result = own(model, caches, state, accepted, block_size)
    held = max(int(c.offset) for c in caches if hasattr(c, "offset") and not isinstance(c.offset, mx.array))
    logits = target.language_model(mx.array([[probe]]), cache=copy.deepcopy(caches)).logits[0, -1]
    rounds.append((held, np.array(log_softmax(logits))))
    return result


with mock.patch.object(mtp, "commit_speculative_round", commit):
    emitted = prompt + generate(target, prompt, 17, drafter, "mtp", temperature=0.0)
worst = 0.0
for number, (held, cached) in enumerate(rounds):
    off = float(np.abs(cached - np.array(conditional(target, emitted[:held] + [probe]))).max())
    cache = vlm_cache.make_prompt_cache(target.language_model)  # plain cached decoding of the same tokens
    for token in emitted[:held] + [probe]:
        logits = target.language_model(mx.array([[token]]), cache=cache).logits[0, -1]
    plain = float(np.abs(np.array(log_softmax(logits)) - np.array(conditional(target, emitted[:held] + [probe]))).max())
    print(f"round {number}: cache holds {emitted[:held]}: committed off by {off:.3g} nats, plain cached by {plain:.3g}")
    worst = max(worst, off)
sys.exit(0 if worst <= RECURRENT_LOGPROBS.atol else 1)
