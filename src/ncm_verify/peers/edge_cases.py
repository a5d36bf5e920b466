"""Edge cases no sampling test sees, probed in each peer by a reproduction a maintainer can paste upstream.

Each case is a short standalone program that uses only the peer's own library (transformers and torch, or the
NumPy step) and leaves what it saw in ``observed``; the probe runs that very program, so the reproduction
shown is the one that produced the verdict. Verdicts: ``handled`` (the protocol's behaviour), ``refused``
(raises, but not the protocol's ValueError naming the argument: another contract, not a silent error) and
``mishandled`` (a silent wrong answer).
"""

from __future__ import annotations

import dataclasses
import textwrap
from collections.abc import Callable

HANDLED, REFUSED, MISHANDLED = "handled", "refused", "mishandled"
CASES = {
    "p(x) = 0 at u = 0": "a draft the target rules out is rejected even at a uniform of exactly 0",
    "numerically zero residual": "a rejection where max(p - q, 0) is all zero in float32 falls back to p, no NaN",
    "half-precision inputs": "decisions of half-precision inputs are those of their float32 values",
    "out-of-range ids": "a drafted id outside [0, V) raises a ValueError naming draft_tokens",
    "NaN rows": "a NaN probability raises a ValueError naming its argument",
}
"""Each case and what the protocol expects of it (DESIGN.md, 'Numerics that must hold')."""


@dataclasses.dataclass(frozen=True)
class EdgeCase:
    name: str
    snippet: str
    judge: Callable[[dict], tuple[str, str]]
    """(verdict, what happened) from the snippet's ``observed`` (or ``{"raised": ...}``)."""


def raised_or(observed: dict, silent: Callable[[dict], tuple[str, str]], valid_input: bool = False) -> tuple[str, str]:
    """Raising on valid input is mishandling it; on invalid input, a refusal unless it is the protocol's ValueError
    naming the argument. Without an exception, `silent` judges."""
    raised = observed.get("raised")
    if raised is None:
        return silent(observed)
    if valid_input:
        return MISHANDLED, f"raises on valid input: {raised}"
    if raised.startswith(("ValueError: draft_tokens", "ValueError: target_probs")):
        return HANDLED, raised
    return REFUSED, f"raises {raised}"


def judge_zero_probability(observed: dict) -> tuple[str, str]:
    def silent(o):
        if o["accepted"]:
            return MISHANDLED, f"kept the draft whose target probability is 0 (tokens {o['tokens']})"
        return HANDLED, f"rejected it (tokens {o['tokens']})"

    return raised_or(observed, silent, valid_input=True)


def judge_zero_residual(observed: dict) -> tuple[str, str]:
    def silent(o):
        if not o["finite"]:
            return MISHANDLED, f"emitted {o['tokens']} from a NaN residual"
        return HANDLED, f"emitted {o['tokens']} without NaN"

    return raised_or(observed, silent, valid_input=True)


def judge_half(observed: dict) -> tuple[str, str]:
    def silent(o):
        if o["kept_impossible"]:
            share = o["kept_impossible"] / o["draws"]
            return MISHANDLED, (
                f"kept a draft with p(x) = 0 in {o['kept_impossible']} of {o['draws']} draws ({share:.2%}): "
                "its uniforms are drawn in the logits' half precision, exactly 0 about once in 2^9"
            )
        return HANDLED, f"kept no draft with p(x) = 0 in {o['draws']} draws"

    return raised_or(observed, silent, valid_input=True)


def judge_ids(observed: dict) -> tuple[str, str]:
    def silent(o):
        return MISHANDLED, f"accepted drafted id -1 silently: emitted {o['tokens']}"

    return raised_or(observed, silent)


def judge_nan(observed: dict) -> tuple[str, str]:
    def silent(o):
        return MISHANDLED, f"accepted a NaN target row silently: emitted {o['tokens']}"

    return raised_or(observed, silent)


TRANSFORMERS_PRELUDE = """\
import torch
from unittest import mock
from transformers.generation.utils import _speculative_sampling
"""

TRANSFORMERS = (
    EdgeCase(
        "p(x) = 0 at u = 0",
        TRANSFORMERS_PRELUDE
        + """\
target = torch.tensor([[[0.0, 1.0], [0.5, 0.5]]]).log()  # p(0) = 0
draft = torch.tensor([[[1.0, 0.0]]]).log()  # the draft proposes 0
with mock.patch.object(torch, "rand_like", torch.zeros_like):  # torch.rand draws exactly 0 once in 2^24
    tokens, n_matches = _speculative_sampling(torch.tensor([[0]]), draft, 1, target)
observed = {"accepted": int(n_matches), "tokens": tokens.tolist()}  # n_matches 1: token 0 kept, r <= p/q is 0 <= 0
""",
        judge_zero_probability,
    ),
    EdgeCase(
        "numerically zero residual",
        TRANSFORMERS_PRELUDE
        + """\
p = torch.tensor([0.25, 0.25, 0.5])
q = p.clone()
q[0] = torch.nextafter(p[0], torch.tensor(1.0))  # q(0) one ulp above p(0): p/q < 1, max(p - q, 0) == 0
target, draft = torch.stack([p, p])[None].log(), q[None, None].log()
with mock.patch.object(torch, "rand_like", lambda t: torch.full_like(t, 1 - 2**-24)):  # rejects token 0
    tokens, n_matches = _speculative_sampling(torch.tensor([[0]]), draft, 1, target)
observed = {"finite": True, "tokens": tokens.tolist()}  # raises: 0 / 0 residual, then torch.multinomial refuses NaN
""",
        judge_zero_residual,
    ),
    EdgeCase(
        "half-precision inputs",
        TRANSFORMERS_PRELUDE
        + """\
torch.manual_seed(0)
target = torch.tensor([[[0.0, 1.0], [0.5, 0.5]]]).log().to(torch.bfloat16)  # p(0) = 0, bfloat16 logits
draft = torch.tensor([[[1.0, 0.0]]]).log().to(torch.bfloat16)
kept = sum(int(_speculative_sampling(torch.tensor([[0]]), draft, 1, target)[1]) for _ in range(20_000))
observed = {"draws": 20_000, "kept_impossible": kept}  # torch.rand_like(bfloat16 ratio) is 0 once in ~2^9
""",
        judge_half,
    ),
    EdgeCase(
        "out-of-range ids",
        TRANSFORMERS_PRELUDE
        + """\
p = torch.tensor([[[0.2, 0.3, 0.5], [0.2, 0.3, 0.5]]])
tokens, n_matches = _speculative_sampling(torch.tensor([[-1]]), p[:, :1].log(), 1, p.log())  # id -1 of V = 3
observed = {"tokens": tokens.tolist()}  # -1 indexes the last column: kept and emitted as a token
""",
        judge_ids,
    ),
    EdgeCase(
        "NaN rows",
        TRANSFORMERS_PRELUDE
        + """\
p = torch.tensor([[[0.2, float("nan"), 0.8], [0.2, 0.3, 0.5]]])  # a NaN in the target row
q = torch.tensor([[[0.1, 0.3, 0.6]]])
tokens, n_matches = _speculative_sampling(torch.tensor([[2]]), q.log(), 1, p.log())
observed = {"tokens": tokens.tolist()}
""",
        judge_nan,
    ),
)

NUMPY_PRELUDE = """\
import numpy as np
from ncm_verify.oracles.numpy_steps import numpy_chain_step
"""

NUMPY = (
    EdgeCase(
        "p(x) = 0 at u = 0",
        NUMPY_PRELUDE
        + """\
target = np.array([[[0.0, 1.0], [0.5, 0.5]]], np.float32)  # p(0) = 0
draft = np.array([[[1.0, 0.0]]], np.float32)
uniforms = np.array([[[0.0, 0.5], [0.5, 0.5]]], np.float32)  # an acceptance uniform of exactly 0
tokens, accepted = numpy_chain_step(target, draft, np.array([[0]]), np.array([1]), uniforms)
observed = {"accepted": int(accepted[0]), "tokens": tokens.tolist()}
""",
        judge_zero_probability,
    ),
    EdgeCase(
        "numerically zero residual",
        NUMPY_PRELUDE
        + """\
p = np.array([0.25, 0.25, 0.5], np.float32)
q = p.copy()
q[0] = np.nextafter(p[0], np.float32(1))  # p/q < 1 and max(p - q, 0) == 0
uniforms = np.full((1, 2, 2), 1 - 2**-24, np.float32)  # rejects token 0
tokens, accepted = numpy_chain_step(np.stack([p, p])[None], q[None, None], np.array([[0]]), np.array([1]), uniforms)
observed = {"finite": bool(np.all(tokens[tokens >= 0] < 3)), "tokens": tokens.tolist()}
""",
        judge_zero_residual,
    ),
    EdgeCase(
        "half-precision inputs",
        NUMPY_PRELUDE
        + """\
rng = np.random.default_rng(0)
target = np.array([[[0.0, 1.0], [0.5, 0.5]]], np.float16)  # p(0) = 0, float16 rows
draft = np.array([[[1.0, 0.0]]], np.float16)
uniforms = (np.floor(rng.random((20_000, 2, 2), dtype=np.float32) * 2**23) + 0.5) / 2**23
target, draft = np.repeat(target, 20_000, axis=0), np.repeat(draft, 20_000, axis=0)
tokens, accepted = numpy_chain_step(target, draft, np.zeros((20_000, 1), int), np.ones(20_000, int), uniforms)
observed = {"draws": 20_000, "kept_impossible": int(accepted.sum())}
""",
        judge_half,
    ),
    EdgeCase(
        "out-of-range ids",
        NUMPY_PRELUDE
        + """\
p = np.array([[[0.2, 0.3, 0.5], [0.2, 0.3, 0.5]]], np.float32)
uniforms = np.full((1, 2, 2), 0.5, np.float32)
tokens, accepted = numpy_chain_step(p, p[:, :1], np.array([[-1]]), np.array([1]), uniforms)  # id -1 of V = 3
observed = {"tokens": tokens.tolist()}  # -1 is read as id 0 (padding's clamp): accepted and emitted
""",
        judge_ids,
    ),
    EdgeCase(
        "NaN rows",
        NUMPY_PRELUDE
        + """\
p = np.array([[[0.2, np.nan, 0.8], [0.2, 0.3, 0.5]]], np.float32)  # a NaN in the target row
q = np.array([[[0.1, 0.3, 0.6]]], np.float32)
uniforms = np.full((1, 2, 2), 0.5, np.float32)
tokens, accepted = numpy_chain_step(p, q, np.array([[2]]), np.array([1]), uniforms)
observed = {"tokens": tokens.tolist()}
""",
        judge_nan,
    ),
)

BY_PEER = {"ncm_verify.peers.transformers_step": TRANSFORMERS, "ncm_verify.peers.numpy_chain": NUMPY}
"""The edge cases of each peer that has its own code (the planted pre-#28508 peer is transformers' code)."""


def probe(case: EdgeCase) -> dict:
    """Run the case's reproduction and judge what it saw."""
    namespace: dict = {}
    try:
        exec(compile(case.snippet, f"<edge case: {case.name}>", "exec"), namespace)
        observed = namespace["observed"]
    except Exception as error:  # what the peer raises is its answer to the case
        observed = {"raised": f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"}
    verdict, happened = case.judge(observed)
    return {
        "case": case.name,
        "expected": CASES[case.name],
        "verdict": verdict,
        "happened": happened,
        "reproduction": textwrap.dedent(case.snippet).strip(),
    }


def probe_peer(module_name: str) -> list[dict]:
    """Every edge case of the peer `module_name` (none for a peer without its own)."""
    return [probe(case) for case in BY_PEER.get(module_name, ())]
