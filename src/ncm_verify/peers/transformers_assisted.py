"""transformers' assisted generation end to end: `model.generate(..., assistant_model=draft)` on tiny llamas.

What is judged is transformers' own loop (prefill, the assistant's drafting, its
schedule of `num_assistant_tokens`, `_speculative_sampling`, cache cropping, the
budget cut); this module only builds seeded `LlamaForCausalLM` models (and
`MistralForCausalLM` with a sliding window, whose caches crop differently) from
a config (nothing is downloaded), calls `generate`, records what each
verification step was handed, and computes the exact float64 laws the loop must
follow. Planted variants swap transformers' step for a wrong one while a
recording runs, so the properties can show they have teeth.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from typing import Any, TypeAlias

import numpy as np
import torch
from transformers import (
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    cache_utils,
)
from transformers.generation import utils as generation_utils

from ncm_verify.oracles.exact_text_drafting import sequence_law

ACCEPTANCE_RULE = "sum min(p, q)"
"""The rule its step uses (Leviathan et al.'s optimal p/q): a draft x from q stands with probability
min(1, p(x)/q(x)), so a first draft stands at rate sum_x min(p(x), q(x))."""

CAPABILITIES = {
    "traceable": "a PyTorch loop, not an MLX kernel: there is nothing for mx.compile to trace",
    "apply": "its uniforms are drawn inside generate (torch.rand_like, torch.multinomial), never taken as input",
    "value_error_contract": "transformers' own error contract (its exceptions name no argument)",
}
"""What this peer cannot do, with the reason; a property that needs one reads 'not applicable: <reason>'.
It is a loop, not a kernel: the kernel properties do not apply to it at all, and assisted generation takes
one sequence at a time (batch size 1)."""

PROCESSING_OFF = {"temperature": 1.0, "top_k": 0, "top_p": 1.0}
"""Every sampling warper off, said explicitly: transformers' default top_k is 50 and a model's generation config
may set others. The exact laws are of the raw softmax; the exact step check sees any warper left on."""

SCHEDULES = ("constant", "heuristic", "heuristic_transient")
"""transformers' `num_assistant_tokens_schedule` values: the heuristic ones add 2 after a round whose drafts all
stood and take 1 off otherwise ("heuristic" keeps the count across generate calls, "_transient" resets it)."""

DEFAULT_ASSISTANT_TOKENS = 20
DEFAULT_CONFIDENCE = 0.4
"""transformers' defaults (`GenerationConfig._get_default_generation_params`): 20 drafts at most per round, and the
assistant stops drafting after a token it gives probability below 0.4."""


CausalLM: TypeAlias = LlamaForCausalLM | MistralForCausalLM
KINDS = ("llama", "sliding-window mistral")
"""Architectures built: a plain llama, and a mistral whose every layer attends through a sliding window (its cache
layers keep the window only, and crop through transformers' past recording)."""


@dataclasses.dataclass(frozen=True)
class TinySpec:
    """A tiny model of `kind` in `KINDS`: vocabulary 2-8, seeded weights, its head scaled by `logit_scale`."""

    kind: str = "llama"
    vocab_size: int = 6
    seed: int = 0
    num_layers: int = 1
    hidden_size: int = 16
    num_heads: int = 2
    logit_scale: float = 1.0
    window: int = 3

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"kind: expected one of {KINDS}, got {self.kind!r}")
        if not 2 <= self.vocab_size <= 8:
            raise ValueError(f"vocab_size: expected an integer in [2, 8], got {self.vocab_size!r}")
        if self.num_layers < 1:
            raise ValueError(f"num_layers: expected a positive integer, got {self.num_layers!r}")
        if self.hidden_size % (2 * self.num_heads):
            raise ValueError(f"hidden_size: {self.hidden_size} is not a multiple of 2 * num_heads ({self.num_heads})")
        if self.window < 1:
            raise ValueError(f"window: expected a positive integer, got {self.window!r}")


def model_config(spec: TinySpec) -> LlamaConfig | MistralConfig:
    """The config of `spec`; no special tokens, so no end-of-sequence token can cut a generation short."""
    shared: dict[str, Any] = dict(
        vocab_size=spec.vocab_size,
        hidden_size=spec.hidden_size,
        intermediate_size=2 * spec.hidden_size,
        num_hidden_layers=spec.num_layers,
        num_attention_heads=spec.num_heads,
        num_key_value_heads=spec.num_heads,
        max_position_embeddings=64,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
        tie_word_embeddings=False,
    )
    if spec.kind == "sliding-window mistral":
        return MistralConfig(sliding_window=spec.window, **shared)
    return LlamaConfig(**shared)


def make_model(spec: TinySpec, dtype: torch.dtype = torch.float32) -> CausalLM:
    """A `LlamaForCausalLM` (or `MistralForCausalLM`) in evaluation mode whose weights depend only on `spec`.

    Unit-variance embeddings, 1/sqrt(fan_in) projections, norms at 1; the head is
    scaled by `logit_scale` (1.0 gives next-token laws with a largest entry of about
    0.3-0.7 and a smallest of about 0.02 at vocabulary 6). Weights are rounded to
    float32 first, so a float64 twin computes the float32 model's exact law.
    """
    config = model_config(spec)
    model = MistralForCausalLM(config) if isinstance(config, MistralConfig) else LlamaForCausalLM(config)
    generator = torch.Generator().manual_seed(spec.seed)
    with torch.no_grad():
        for name, parameter in sorted(model.named_parameters()):
            if "norm" in name:
                parameter.fill_(1.0)
                continue
            scale = 1.0 if "embed" in name else parameter.shape[-1] ** -0.5
            if name.startswith("lm_head"):
                scale *= spec.logit_scale
            values = scale * torch.randn(parameter.shape, generator=generator, dtype=torch.float64)
            parameter.copy_(values.to(torch.float32))
    torch.nn.Module.to(model, dtype)  # transformers wraps `to` in a decorator mypy cannot read
    model.eval()
    model.generation_config.bos_token_id = model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = None
    return model


@dataclasses.dataclass(frozen=True)
class Assistance:
    """How the assistant drafts: its schedule, its starting draft count and its confidence stop (0: off)."""

    schedule: str = "constant"
    num_assistant_tokens: int = DEFAULT_ASSISTANT_TOKENS
    confidence_threshold: float = DEFAULT_CONFIDENCE

    def __post_init__(self):
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule: expected one of {SCHEDULES}, got {self.schedule!r}")
        if self.num_assistant_tokens < 1:
            raise ValueError(f"num_assistant_tokens: expected a positive integer, got {self.num_assistant_tokens!r}")

    def configure(self, draft: CausalLM) -> None:
        """Set the assistant's generation config; "heuristic" then carries its count from call to call."""
        config = draft.generation_config
        config.num_assistant_tokens_schedule = self.schedule
        config.num_assistant_tokens = self.num_assistant_tokens
        config.assistant_confidence_threshold = self.confidence_threshold


def generate_tokens(
    target: CausalLM,
    prompt: list[int],
    max_new_tokens: int,
    *,
    do_sample: bool,
    draft: CausalLM | None = None,
) -> list[int]:
    """The new tokens of transformers' `generate` (assisted when `draft` is given) after `prompt`.

    Sampling draws from torch's global generator: seed it (`torch.manual_seed`) first.
    """
    options: dict[str, object] = dict(PROCESSING_OFF) if do_sample else {}
    if draft is not None:
        options["assistant_model"] = draft
    with torch.no_grad():
        output = target.generate(torch.tensor([prompt]), do_sample=do_sample, max_new_tokens=max_new_tokens, **options)
    return [int(t) for t in output[0, len(prompt) :]]


def greedy_logits(target: CausalLM, prompt: list[int], max_new_tokens: int) -> np.ndarray:
    """The logits plain greedy `generate` scored each new token from, ``[max_new_tokens, V]``."""
    with torch.no_grad():
        output = target.generate(
            torch.tensor([prompt]),
            do_sample=False,
            max_new_tokens=max_new_tokens,
            return_dict_in_generate=True,
            output_logits=True,
        )
    return torch.cat(output.logits).to(torch.float64).numpy()


@dataclasses.dataclass
class Round:
    """One call of the verification step: what it was handed and what it returned."""

    candidate_input_ids: torch.Tensor  # [1, cur_len + k]: the tokens so far, then k drafts
    candidate_logits: torch.Tensor  # [1, k, V]: the assistant's (processed) logits the drafts were drawn from
    new_logits: torch.Tensor  # [1, k + 1, V]: the target's (processed) logits over the candidates
    accepted: int  # drafts that stood
    tokens: list[int]  # what the step emitted: the standing drafts, then a correction or a bonus token

    @property
    def drafts(self) -> int:
        return self.candidate_logits.shape[1]

    @property
    def start(self) -> int:
        """Tokens (prompt included) before this round's drafts."""
        return self.candidate_input_ids.shape[1] - self.drafts


Step = Callable[..., tuple[torch.Tensor, torch.Tensor]]


def draft_logits_sharpened_behind_the_verifiers_back(
    candidate_input_ids, candidate_logits, candidate_length, new_logits, **options
):
    """PLANTED: the verifier is handed the assistant's logits doubled (temperature 0.5), not the q the drafts
    were drawn from; a wrong q in min(1, p/q) and in the residual, so the emitted law is not the target's."""
    return _transformers_step()(candidate_input_ids, 2.0 * candidate_logits, candidate_length, new_logits, **options)


def correction_drawn_from_the_target(candidate_input_ids, candidate_logits, candidate_length, new_logits, **options):
    """PLANTED: after a rejection the correction is drawn from the target's p, not from normalised max(p - q, 0)
    (the pre-#28508 family of errors): tokens after a rejected draft over-weight what the draft proposes."""
    valid, matches = _transformers_step()(
        candidate_input_ids, candidate_logits, candidate_length, new_logits, **options
    )
    if int(matches) < candidate_length:
        row = new_logits[0, int(matches)].softmax(dim=-1)
        valid = torch.cat([valid[:, : int(matches)], torch.multinomial(row, 1)[None]], dim=-1)
    return valid, matches


@contextlib.contextmanager
def caches_cropped_one_short() -> Iterator[None]:
    """PLANTED (loop): every cache crop keeps the first position it should drop, so after a rejection the
    target (and the assistant) attend to a rejected draft; the step itself is transformers' own."""
    original = cache_utils.Cache.crop

    def crop(self, tokens_to_remove: int) -> None:
        original(self, tokens_to_remove + 1 if tokens_to_remove < 0 else tokens_to_remove)

    cache_utils.Cache.crop = crop
    try:
        yield
    finally:
        cache_utils.Cache.crop = original


PLANTED_STEPS: dict[str, Step] = {
    "draft_logits_sharpened_behind_the_verifiers_back": draft_logits_sharpened_behind_the_verifiers_back,
    "correction_drawn_from_the_target": correction_drawn_from_the_target,
}
"""Planted verification steps, each wrong in a way the sampled laws must catch."""
PLANTED_LOOPS: dict[str, Callable[[], contextlib.AbstractContextManager]] = {
    "caches_cropped_one_short": caches_cropped_one_short,
}
"""Planted changes to the loop around transformers' own step, which the exact step check must catch."""
PLANTED = (*PLANTED_STEPS, *PLANTED_LOOPS)


class StepRecorder:
    """Every call of the loop's verification step while `recording()` runs, in order.

    `verifier` is "transformers" (its own loop and step, only observed) or a name in `PLANTED`.
    """

    def __init__(self, verifier: str = "transformers"):
        if verifier != "transformers" and verifier not in PLANTED:
            raise ValueError(f"verifier: expected 'transformers' or one of {sorted(PLANTED)}, got {verifier!r}")
        self.step = PLANTED_STEPS.get(verifier)
        self.loop_change = PLANTED_LOOPS.get(verifier, contextlib.nullcontext)
        self.rounds: list[Round] = []

    @contextlib.contextmanager
    def recording(self) -> Iterator[StepRecorder]:
        """transformers' module-level `_speculative_sampling` wrapped (or replaced by a planted step), restored
        after; a planted loop change is in force meanwhile."""
        original = generation_utils._speculative_sampling
        step = self.step or original

        def recorded(candidate_input_ids, candidate_logits, candidate_length, new_logits, **options):
            valid, matches = step(candidate_input_ids, candidate_logits, candidate_length, new_logits, **options)
            self.rounds.append(
                Round(candidate_input_ids, candidate_logits, new_logits, int(matches), [int(t) for t in valid[0]])
            )
            return valid, matches

        generation_utils._speculative_sampling = recorded
        try:
            with self.loop_change():
                yield self
        finally:
            generation_utils._speculative_sampling = original


_STEP = generation_utils._speculative_sampling


def _transformers_step() -> Step:
    """transformers' own step, as imported (the recorder swaps the module attribute while it runs)."""
    return _STEP


def next_token_probs(model: CausalLM, sequences: np.ndarray) -> np.ndarray:
    """The softmax of the model's next-token logits after each row of `sequences` ``[B, T]``, in float64,
    from one uncached pass (run a float64 model for the exact law)."""
    with torch.no_grad():
        logits = model(torch.as_tensor(np.asarray(sequences), dtype=torch.long), use_cache=False).logits[:, -1]
    return logits.to(torch.float64).softmax(dim=-1).numpy()


def first_tokens_law(model: CausalLM, prompt: list[int], length: int) -> np.ndarray:
    """The exact law of the first `length` tokens after `prompt`, enumerated; entry ``x_1 V^(L-1) + ... + x_L``
    (the order of `mlx_lm_real.models.outcome_index`) is the probability of emitting ``x_1 .. x_L``."""
    if length < 1:
        raise ValueError(f"length: expected a positive integer, got {length!r}")
    return sequence_law(lambda sequences: next_token_probs(model, sequences), prompt, length)


@dataclasses.dataclass(frozen=True)
class FirstRoundLaws:
    """Exact laws of a first round whose first draft comes from q after the prompt, under the optimal rule."""

    tokens: np.ndarray  # the first L tokens: the target's law
    stood: np.ndarray  # [P(first draft stands), P(it is rejected)] = [sum min(p, q), 1 - that]
    joint: np.ndarray  # (stood or rejected, first token): index flag * V + token; flag 0 = stood
    after_rejection: np.ndarray  # the first L tokens given a rejected first draft: residual, then the target


def first_round_laws(target: CausalLM, draft: CausalLM, prompt: list[int], length: int):
    """`FirstRoundLaws` of `target` (p) and `draft` (q); pass float64 models for exact laws.

    A first draft x stands with probability q(x) min(1, p(x)/q(x)) = min(p, q)(x),
    whatever the schedule or the number of drafts; what follows the first token is
    the target's conditional either way.
    """
    tokens = first_tokens_law(target, prompt, length)
    vocab = target.config.vocab_size
    p = next_token_probs(target, np.asarray([prompt]))[0]
    q = next_token_probs(draft, np.asarray([prompt]))[0]
    overlap = np.minimum(p, q)
    then = tokens.reshape(vocab, -1) / p[:, None]  # the law of tokens 2..L given the first
    residual = p - overlap
    stood = float(overlap.sum())
    after = (residual[:, None] * then).ravel() / residual.sum() if residual.sum() > 0 else np.zeros_like(tokens)
    joint = np.concatenate([overlap, residual])
    return FirstRoundLaws(tokens, np.array([stood, 1.0 - stood]), joint, after)


def uncached_logits(model: CausalLM, tokens: list[int] | torch.Tensor) -> torch.Tensor:
    """The model's logits ``[T, V]`` at every position of `tokens`, from one uncached pass."""
    ids = torch.as_tensor(tokens, dtype=torch.long).reshape(1, -1)
    with torch.no_grad():
        return model(ids, use_cache=False).logits[0]
