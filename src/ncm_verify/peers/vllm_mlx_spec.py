"""vllm-mlx 0.6.0's speculative rule for image/text MTP (`mllm_batch_generator.py`), driven directly.

`install_mtp_mllm`'s sampled branch (mllm_batch_generator.py:3171-3270): the draft x is drawn from q =
`_sampling_logprobs(draft logits, request)`, accepted by `_accept_sampled_draft(log p(x), log q(x), u)` with u
uniform, and on a rejection the correction is drawn from `_residual_logprobs(p, q)`, where p is
`_sampling_logprobs` of the verify logits. These functions are judged as that branch composes them; plain
decoding's law is mlx-lm's own `make_sampler` (read from the `categorical_sampling` call it ends in). The
batch generator itself, `MLLMBatchGenerator` (continuous batching over an mlx-vlm model), is driven end to end by
`serve` with `install_mtp_mllm`'s external assistant drafter (mlx-vlm's own Gemma 4 target and assistant, built by
`mlx_vlm_spec`); its native MTP branch needs a Qwen 3.5 language model carrying `mtp` (vllm-mlx's
`patches/qwen3_5_mtp.inject_mtp_support`, which loads an MTP checkpoint from disk into mlx-lm's `qwen3_5`
layers). The text path (`scheduler._install_mtp`) disables itself on the mlx-lm 0.31.3 its pin admits.
`planted()` replaces the residual by p.
"""

from __future__ import annotations

import contextlib
import types
from typing import Any
from unittest import mock

import mlx.core as mx
import numpy as np

PACKAGE = "vllm-mlx"
VERSION = "0.6.0"


def request(temperature: float, top_p: float = 1.0, top_k: int = 0, min_p: float = 0.0):
    """The request fields `_sampling_logprobs` reads (an `MLLMBatchRequest` carries them)."""
    return types.SimpleNamespace(temperature=temperature, top_p=top_p, top_k=top_k, min_p=min_p)


def sampling_logprobs(logits: np.ndarray, req) -> np.ndarray:
    """vllm-mlx's log-probabilities for `logits` ``[V]`` under `req` (`_sampling_logprobs`), in float32."""
    from vllm_mlx.mllm_batch_generator import _sampling_logprobs

    return np.array(_sampling_logprobs(mx.array(logits[None], dtype=mx.float32), req)[0])


def plain_law(logits: np.ndarray, req) -> np.ndarray:
    """The law mlx-lm's own `make_sampler` draws from for `logits` ``[V]``: its filters, then the logits and
    temperature it hands `categorical_sampling`, read from that call."""
    from mlx_lm import sample_utils

    seen = []
    own = sample_utils.categorical_sampling

    def record(logprobs, temp):
        seen.append((np.array(logprobs, dtype=np.float64), float(temp)))
        return own(logprobs, temp)

    with mock.patch.object(sample_utils, "categorical_sampling", record):
        sampler = sample_utils.make_sampler(temp=req.temperature, top_p=req.top_p, min_p=req.min_p, top_k=req.top_k)
        row = mx.array(logits[None], dtype=mx.float32)
        sampler(row - mx.logsumexp(row, axis=-1, keepdims=True))
    (logprobs, temp), *_ = seen
    scaled = logprobs[0] / temp
    law = np.exp(scaled - scaled[np.isfinite(scaled)].max())
    return law / law.sum()


def acceptance_threshold(log_p: float, log_q: float) -> float:
    """The u below which `_accept_sampled_draft(log_p, log_q, u)` accepts, found by bisection on its own answers;
    also checks that it accepts below and rejects above (a threshold rule, as min(1, p/q) is)."""
    from vllm_mlx.mllm_batch_generator import _accept_sampled_draft

    if _accept_sampled_draft(log_p, log_q, float(np.nextafter(1.0, 0.0))):
        return 1.0
    low, high = 0.0, 1.0
    for _ in range(64):
        middle = (low + high) / 2
        if _accept_sampled_draft(log_p, log_q, middle):
            low = middle
        else:
            high = middle
    return low


def rule_law(p_log: np.ndarray, q_log: np.ndarray) -> np.ndarray:
    """The exact law of the token the sampled MTP branch emits after a draft x ~ exp(q_log): x with probability
    its acceptance threshold, else a draw from `_residual_logprobs(p, q)`."""
    from vllm_mlx.mllm_batch_generator import _residual_logprobs

    q = np.exp(q_log.astype(np.float64))
    residual = np.exp(
        np.array(_residual_logprobs(mx.array(p_log[None], mx.float32), mx.array(q_log[None], mx.float32))[0])
    ).astype(np.float64)
    law = np.zeros_like(q)
    for x in np.flatnonzero(q > 0):
        accept = acceptance_threshold(float(p_log[x]), float(q_log[x]))
        law[x] += q[x] * accept
        law += q[x] * (1 - accept) * residual
    return law


def sampled_branch(p_log: np.ndarray, q_log: np.ndarray, n: int) -> np.ndarray:
    """n tokens of the sampled MTP branch for one request (batch_size 1), drawn with MLX's global generator as
    mllm_batch_generator.py:3171-3262 draws them: the draft by ``mx.random.categorical`` on q, one uniform per
    verify, `_accept_sampled_draft` on p(x), q(x) and it, and on a rejection ``mx.random.categorical`` on
    `_residual_logprobs(p, q)`. The n rounds are drawn at once (independent rounds, the same law)."""
    from vllm_mlx.mllm_batch_generator import _accept_sampled_draft, _residual_logprobs

    p_row, q_row = mx.array(p_log[None], mx.float32), mx.array(q_log[None], mx.float32)
    drafts = mx.random.categorical(mx.repeat(q_row, n, axis=0))
    uniforms = mx.random.uniform(shape=(n,))
    corrections = mx.random.categorical(mx.repeat(_residual_logprobs(p_row, q_row), n, axis=0))
    mx.eval(drafts, uniforms, corrections)
    tokens = []
    for x, u, c in zip(np.array(drafts).tolist(), np.array(uniforms).tolist(), np.array(corrections).tolist()):
        tokens.append(x if _accept_sampled_draft(float(p_log[x]), float(q_log[x]), u) else c)
    return np.array(tokens)


def make_native_mtp_target(seed: int, vocab: int, directory):
    """mlx-vlm's hybrid Qwen 3.5 target (`mlx_vlm_spec.make_target('hybrid', seed, vocab)`) given an MTP head the
    way vllm-mlx gives one: a seeded one-layer MTP checkpoint written to `directory`/mtp/weights.safetensors, then
    vllm-mlx's own `patches.qwen3_5_mtp.inject_mtp_support` (mlx-lm's qwen3_5 layers, `mtp_forward`). Returns the
    target (its language model now returns bare logits) and a plain copy for reference decoding."""
    from pathlib import Path

    import mlx.nn as nn
    from mlx.utils import tree_flatten
    from mlx_lm.models.qwen3_5 import DecoderLayer, TextModelArgs
    from vllm_mlx.patches.qwen3_5_mtp import inject_mtp_support

    from ncm_verify.peers import mlx_vlm_spec as vlm
    from ncm_verify.peers.mlx_tiny import build

    config = {"text_config": {**vlm.text_config(vocab), "mtp_num_hidden_layers": 1}}
    args = TextModelArgs.from_dict(config["text_config"])

    class Head(nn.Module):  # the parameter names inject_mtp_support loads (mtp.*)
        def __init__(self):
            super().__init__()
            self.pre_fc_norm_hidden = nn.RMSNorm(args.hidden_size)
            self.pre_fc_norm_embedding = nn.RMSNorm(args.hidden_size)
            self.fc = nn.Linear(2 * args.hidden_size, args.hidden_size, bias=False)
            self.layers = [DecoderLayer(args, layer_idx=args.full_attention_interval - 1)]
            self.norm = nn.RMSNorm(args.hidden_size)

    (Path(directory) / "mtp").mkdir(parents=True, exist_ok=True)
    parameters: Any = tree_flatten(build(Head, seed + 1).parameters())
    weights = {f"mtp.{name}": value for name, value in parameters}
    mx.save_safetensors(str(Path(directory) / "mtp" / "weights.safetensors"), weights)
    target = vlm.make_target("hybrid", seed, vocab)
    if not inject_mtp_support(target, directory, config):
        raise RuntimeError(f"inject_mtp_support refused the checkpoint in {directory}")
    return target, vlm.make_target("hybrid", seed, vocab)


def probe_batch(engine, probe: int) -> list[tuple[int, int, np.ndarray]]:
    """(request index, tokens the row's attention cache holds, log-probabilities ``[V]`` after `probe`) for every
    row of the engine's active batch, read from a deep copy of its caches fed `probe`: what the model attends to."""
    import copy

    batch = engine.active_batch
    caches = copy.deepcopy(batch.cache)
    held = next(np.array(c.offset).tolist() for c in caches if type(c).__name__ == "BatchKVCache")  # full attention
    extra = {} if batch.decode_rope_deltas is None else {"rope_deltas": batch.decode_rope_deltas}  # as _step
    logits = engine.language_model(mx.array([[probe]] * len(batch)), cache=caches, **extra)
    logits = getattr(logits, "logits", logits)[:, -1, :].astype(mx.float32)
    rows = np.array(logits - mx.logsumexp(logits, axis=-1, keepdims=True))
    return [(int(request), int(held[row]), rows[row]) for row, request in enumerate(batch.request_ids)]


def serve(
    target, prompts: list[list[int]], max_tokens: int, drafter=None, probe=None, probes=None, native=False,
    requested: tuple[bool, ...] | None = None, stop_tokens: set[int] | None = None,
    budgets: list[int] | None = None, **fields,
) -> tuple[list[list[int]], dict]:  # fmt: skip
    """The tokens vllm-mlx's `MLLMBatchGenerator` emits for `prompts` decoded together (text requests, token ids
    given: no processor runs), with `install_mtp_mllm`'s external assistant `drafter` (every request asks for it:
    ``mllm_draft``) or without; `fields` are `MLLMBatchRequest`'s sampling fields (temperature, top_p, top_k,
    min_p, repetition_penalty, presence_penalty). Returns the tokens per prompt and the MTP statistics. With a
    `probe` token, `probes` (a list) receives `probe_batch`'s rows of unfinished requests after every step.
    `native`: the native MTP branch (no drafter; the target carries `mtp`, `make_native_mtp_target`). `requested`:
    per prompt, whether its request asks for the assistant (default: every one, when a drafter is given);
    `stop_tokens`: the engine's stop token ids; `budgets`: per prompt, its request's `max_tokens` (default
    `max_tokens` each)."""
    from vllm_mlx.mllm_batch_generator import MLLMBatchGenerator, MLLMBatchRequest, install_mtp_mllm

    engine = MLLMBatchGenerator(
        target, types.SimpleNamespace(), max_tokens=max_tokens, enable_vision_cache=False, stop_tokens=stop_tokens
    )
    if drafter is not None or native:
        install_mtp_mllm(engine, engine.language_model, num_draft_tokens=1, draft_model=drafter)
    fields = {"temperature": 0.0, "top_p": 1.0, **fields}
    requests = [
        MLLMBatchRequest(uid=0, request_id=str(i), prompt="", max_tokens=budgets[i] if budgets else max_tokens,
                         input_ids=mx.array([prompt]),
                         mllm_draft=drafter is not None and (requested is None or requested[i]), **fields)
        for i, prompt in enumerate(prompts)
    ]  # fmt: skip
    engine.insert(requests)
    emitted: list[list[int]] = [[] for _ in prompts]
    for _ in range(len(prompts) * (max_tokens + 2) + 8):  # a bound, never reached by a sound engine
        for response in engine.next():
            emitted[int(response.request_id)].append(int(response.token))
        if probe is not None and probes is not None and engine.active_batch is not None:
            # a finished request's row awaits removal; its caches serve nothing more (no prefix cache here)
            probes.extend(row for row in probe_batch(engine, probe) if len(emitted[row[0]]) < max_tokens)
        if not engine.has_pending():
            break
    stats = engine.get_mtp_stats() if hasattr(engine, "get_mtp_stats") else {}
    return emitted, stats


def planted() -> contextlib.AbstractContextManager:
    """The sampled MTP branch with its residual replaced by p: a rejected draft is corrected from p itself."""
    from vllm_mlx import mllm_batch_generator

    return mock.patch.object(
        mllm_batch_generator, "_residual_logprobs", lambda target_logprobs, draft_logprobs: target_logprobs
    )
