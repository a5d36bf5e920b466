"""mlx-vlm 0.7.10: after an MTP round on the hybrid Qwen 3.5 target, the committed cache is off a cache rebuilt from
the accepted tokens in the engine's own passes (same chunking), by far more than any chunking's roundoff; the cause
is the exact speculative verifier's GatedDeltaNet q/k normalisation epsilon, not the rollback.

.peers/mlx-vlm/bin/python mlx_peer_properties/repro/mlx_vlm_hybrid_mtp_commit.py   (exit 1 while it stands)

Prints per round: the committed cache's next-token log-probabilities (one probe token) against (a) a rebuild that
feeds the accepted tokens in the SAME passes as the engine (the prompt's prefill passes, then each round's accepted
tokens as one pass), (b) an uncached pass; and the same with the verifier's epsilon set to the model's
(``1e-6 / head_k_dim``, `language.py` `_normalize_qk`): then the committed cache equals plain cached decoding.
"""

import copy
import sys
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

import mlx.core as mx  # noqa: E402
import numpy as np  # noqa: E402
from mlx_vlm.models import cache as vlm_cache  # noqa: E402
from mlx_vlm.models.qwen3_5 import speculative_verifier  # noqa: E402
from mlx_vlm.speculative import mtp  # noqa: E402

from ncm_verify.peers.mlx_vlm_spec import conditional, generate, log_softmax, make_drafter, make_target  # noqa: E402
from ncm_verify.tolerances import RECURRENT_LOGPROBS  # noqa: E402

target = make_target("hybrid", 10000, 4)
drafter = make_drafter("mtp", target, 10001, block_size=3)
lm = target.language_model
prompt, probe = [0, 3], 3
VERIFIER = next(
    v for v in vars(speculative_verifier).values() if isinstance(v, type) and "_normalize_gated_delta_qk" in vars(v)
)


def model_epsilon(layer, q, k):
    """The verifier's q/k normalisation with the model's own epsilon (language.py `_normalize_qk`)."""
    inv_scale = k.shape[-1] ** -0.5
    eps = 1e-6 / k.shape[-1]
    return (inv_scale**2) * mx.fast.rms_norm(q, None, eps), inv_scale * mx.fast.rms_norm(k, None, eps)


def probed(cache) -> np.ndarray:
    return np.array(log_softmax(lm(mx.array([[probe]]), cache=copy.deepcopy(cache)).logits[0, -1]))


def run(patches) -> float:
    """The engine's rounds, each committed cache against the same-chunk rebuild; returns the worst difference."""
    passes, commits = [], []
    own_call, own_commit = type(lm).__call__, mtp.commit_speculative_round

    def call(self, inputs=None, *args, **kwargs):
        if kwargs.get("cache") is not None and inputs is not None:
            passes.append(np.array(inputs).reshape(-1).tolist())
        return own_call(self, inputs, *args, **kwargs)

    def commit(model, caches, state, accepted, block_size):
        result = own_commit(model, caches, state, accepted, block_size)
        held = max(int(c.offset) for c in caches if hasattr(c, "offset") and not isinstance(c.offset, mx.array))
        commits.append((len(passes), held, copy.deepcopy(caches)))
        return result

    with mock.patch.object(mtp, "commit_speculative_round", commit), mock.patch.object(type(lm), "__call__", call):
        for patch in patches:
            patch.start()
        try:
            emitted = prompt + generate(target, prompt, 17, drafter, "mtp", temperature=0.0)
        finally:
            for patch in patches:
                patch.stop()
    chunks, held_before, worst = passes[: commits[0][0] - 1], len(prompt), 0.0
    for number, (count, held, committed) in enumerate(commits):
        chunks.append(passes[count - 1][: held - held_before])  # the round's accepted tokens, as the engine fed them
        held_before = held
        rebuilt = vlm_cache.make_prompt_cache(lm)
        for chunk in chunks:
            lm(mx.array([chunk]), cache=rebuilt)
        uncached = np.array(conditional(target, emitted[:held] + [probe]))
        same = float(np.abs(probed(committed) - probed(rebuilt)).max())
        print(
            f"  round {number}: holds {emitted[:held]}: committed vs same-chunk rebuild {same:.3g} nats; "
            f"rebuild vs uncached {float(np.abs(probed(rebuilt) - uncached).max()):.3g}"
        )
        worst = max(worst, same)
    return worst


print("mlx-vlm as shipped (verifier epsilon 1e-6):")
shipped = run([])
print("the verifier given the model's epsilon (1e-6 / head_k_dim):")
fixed = run([mock.patch.object(VERIFIER, "_normalize_gated_delta_qk", staticmethod(model_epsilon))])
print(f"worst: shipped {shipped:.3g} nats, with the model's epsilon {fixed:.3g} (bound {RECURRENT_LOGPROBS.atol})")
sys.exit(0 if shipped <= RECURRENT_LOGPROBS.atol else 1)
