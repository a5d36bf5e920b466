"""The prefix caches MLX servers keep, judged cached == uncached: the protocol an engine's adapter implements, the
tiny model folders it serves, the uncached oracle and a model of the documented reuse policy.

Imports the standard library, NumPy and MLX only at module level: every engine runs in an environment of its own
(`.peers/<name>/`). A user judges their own engine by writing a `PrefixEngine` adapter (README, "Judging your own
prefix cache"); `mlx_peer_properties/prefix_cache_machine.py` is the one state machine every adapter is run through.

A model folder is a real one (``config.json``, ``model.safetensors``, ``tokenizer.json``, ``tokenizer_config.json``):
its word-level tokenizer maps the word ``w<i>`` to id ``i`` and back, so token ids pass through an engine's own text
request path unchanged (`text_of`). Its end-of-sequence token ``<eos>`` has id `vocab` (outside the model's
vocabulary: greedy decoding never stops early, every completion has exactly ``max_tokens`` tokens).
"""

from __future__ import annotations

import dataclasses
import json
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

import mlx.core as mx
import numpy as np

FAMILIES = ("attention", "sliding", "hybrid")
"""attention: mlx-lm's llama, every layer full attention (a `KVCache` per layer); sliding: llama with sliding-window
layers (a `RotatingKVCache` of `WINDOW` entries, wrapping inside a prompt); hybrid: qwen3_next, GatedDeltaNet layers
between attention layers (recurrent state that cannot be trimmed)."""
DTYPES = ("float32", "bfloat16")
WINDOW = 4
"""The sliding family's window: shorter than most drawn prompts, so the ring wraps inside the prompt or generation."""
HIDDEN = 32
CAPABILITIES = frozenset({"batch", "restart", "persist", "speculative", "evict_bytes", "fail"})
"""What an engine may support: several prompts in one batch; a restart of its process (a cache that outlives it is
"persist"); files it saves and restores; a draft model; eviction by bytes; a request it refuses (rule 6)."""


@dataclasses.dataclass(frozen=True)
class EngineModel:
    """A model folder an engine serves: `family` in `FAMILIES`, `dtype` in `DTYPES`, its vocabulary size (the model's;
    the tokenizer adds ``<eos>`` and ``<unk>`` after it) and its sliding window (None: no sliding layer)."""

    path: Path
    family: str
    dtype: str
    vocab: int
    window: int | None
    seed: int = 0

    def __post_init__(self):
        if self.family not in FAMILIES:
            raise ValueError(f"family: expected one of {FAMILIES}, got {self.family!r}")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype: expected one of {DTYPES}, got {self.dtype!r}")
        if not 4 <= self.vocab <= 1024:
            raise ValueError(f"vocab: expected an integer in [4, 1024], got {self.vocab!r}")

    @property
    def eos(self) -> int:
        return self.vocab


@dataclasses.dataclass(frozen=True)
class Served:
    """One response: the prompt, the greedy tokens generated, each one's log-probability as the engine reports it
    (None: the engine reports none; then only the tokens are compared, and an `audit` of its stored entries carries
    the log-probability check), and `reused`: how many prompt tokens the engine says it served from its cache (None:
    it reports nothing)."""

    prompt: tuple[int, ...]
    tokens: tuple[int, ...]
    logprobs: tuple[float, ...] | None
    reused: int | None = None

    def __post_init__(self):
        if self.logprobs is not None and len(self.tokens) != len(self.logprobs):
            raise ValueError(f"logprobs: {len(self.logprobs)} for {len(self.tokens)} tokens")
        if self.reused is not None and not 0 <= self.reused <= len(self.prompt):
            raise ValueError(f"reused: expected 0..{len(self.prompt)} (the prompt's length), got {self.reused}")

    @property
    def key(self) -> tuple[int, ...]:
        """What a cache that stores a completed request keys it by: the prompt and its completion."""
        return self.prompt + self.tokens


class NotRefused(Exception):
    """Raised by an adapter's ``fail()`` where the engine answered the request that was to fail: rule 6 then has no
    failure to follow, and reads not applicable with this message (what was sent, what came back)."""


@runtime_checkable
class PrefixEngine(Protocol):
    """The thin adapter that puts an engine under `prefix_cache_machine`: start it on a model folder with a cache of
    `capacity` entries, serve greedy requests (several prompts at once are one batch, where "batch" is supported),
    restart it, close it. Optional methods, by capability: ``persist(folder) -> list[Path]`` and
    ``restore(folder)`` ("persist": raise on a file it refuses), ``fail()`` ("fail": send a request the engine must
    refuse, return the refusal's text), ``policy()`` (a `LongestPrefixLRU` stating its documented reuse)."""

    name: str
    supports: frozenset[str]

    def start(self, model: EngineModel, capacity: int) -> None: ...

    def serve(self, prompts: Sequence[Sequence[int]], max_tokens: int) -> list[Served]: ...

    def restart(self) -> None: ...

    def close(self) -> None: ...


def words(vocab: int) -> list[str]:
    return [f"w{i}" for i in range(vocab)]


def text_of(tokens: Sequence[int]) -> str:
    """The text a word-level tokenizer encodes back to exactly `tokens`."""
    return " ".join(f"w{int(t)}" for t in tokens)


def tokens_of(text: str) -> list[int]:
    """`text_of`'s inverse (a ValueError naming `text` for a word outside the vocabulary)."""
    try:
        return [int(word.removeprefix("w")) for word in text.split()]
    except ValueError:
        raise ValueError(f"text: expected words w<i>, got {text!r}") from None


def _config(family: str, dtype: str, vocab: int) -> dict:
    common = dict(
        hidden_size=HIDDEN, intermediate_size=2 * HIDDEN, num_attention_heads=2, num_key_value_heads=1,
        rms_norm_eps=1e-5, vocab_size=vocab, tie_word_embeddings=False, rope_theta=10000.0,
        max_position_embeddings=512, torch_dtype=dtype,
    )  # fmt: skip
    if family == "attention":
        return dict(model_type="llama", num_hidden_layers=2, head_dim=16, **common)
    if family == "sliding":
        layers = ["sliding_attention", "full_attention", "sliding_attention"]
        return dict(model_type="llama", num_hidden_layers=3, head_dim=16, layer_types=layers, sliding_window=WINDOW,
                    **common)  # fmt: skip
    return dict(
        model_type="qwen3_next", num_hidden_layers=3, head_dim=8, linear_num_value_heads=2, linear_num_key_heads=2,
        linear_key_head_dim=8, linear_value_head_dim=8, linear_conv_kernel_dim=3, num_experts=0,
        num_experts_per_tok=1, decoder_sparse_step=1, shared_expert_intermediate_size=2 * HIDDEN,
        mlp_only_layers=[0, 1, 2], moe_intermediate_size=2 * HIDDEN, partial_rotary_factor=0.5,
        full_attention_interval=3, **common,
    )  # fmt: skip


def _tokenizer(vocab: int) -> tuple[dict, dict]:
    ids = {word: i for i, word in enumerate(words(vocab))}
    specials = {"<eos>": vocab, "<unk>": vocab + 1}
    added = [
        dict(id=i, content=w, single_word=False, lstrip=False, rstrip=False, normalized=False, special=True)
        for w, i in specials.items()
    ]
    tokenizer = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
        "pre_tokenizer": {"type": "WhitespaceSplit"}, "post_processor": None, "decoder": None,
        "model": {"type": "WordLevel", "vocab": {**ids, **specials}, "unk_token": "<unk>"},
    }  # fmt: skip
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<eos>", "unk_token": "<unk>",
        "model_max_length": 512, "clean_up_tokenization_spaces": False,
    }  # fmt: skip
    return tokenizer, config


def make_model_folder(folder: Path | str, family: str, dtype: str = "float32", seed: int = 0, vocab: int = 24):
    """A real model folder of `family` in `folder` (written once: an existing one with the same config is reused),
    weights seeded from `seed` alone; needs mlx-lm (the model classes name the parameters). Returns its
    `EngineModel`."""
    from mlx.utils import tree_flatten
    from mlx_lm.utils import _get_classes

    from ncm_verify.peers.mlx_tiny import seed_parameters

    model = EngineModel(Path(folder), family, dtype, vocab, WINDOW if family == "sliding" else None, seed)
    path = model.path
    config = {**_config(family, dtype, vocab), "ncm_verify_seed": seed}
    if (path / "config.json").exists() and json.loads((path / "config.json").read_text()) == config:
        return model
    path.mkdir(parents=True, exist_ok=True)
    classes = _get_classes(config)
    net = seed_parameters(classes[0](classes[1].from_dict(config)), seed)
    flat: list[tuple[str, mx.array]] = tree_flatten(net.parameters())  # type: ignore[assignment]
    weights = {name: value.astype(getattr(mx, dtype)) for name, value in flat}
    mx.save_safetensors(str(path / "model.safetensors"), weights, metadata={"format": "mlx"})
    tokenizer, tokenizer_config = _tokenizer(vocab)
    (path / "tokenizer.json").write_text(json.dumps(tokenizer))
    (path / "tokenizer_config.json").write_text(json.dumps(tokenizer_config))
    (path / "config.json").write_text(json.dumps(config, indent=1))  # last: a folder with a config is complete
    return model


def attention_model(folder, dtype="float32", seed=0) -> EngineModel:
    return make_model_folder(folder, "attention", dtype, seed)


def sliding_model(folder, dtype="float32", seed=0) -> EngineModel:
    return make_model_folder(folder, "sliding", dtype, seed)


def hybrid_model(folder, dtype="float32", seed=0) -> EngineModel:
    return make_model_folder(folder, "hybrid", dtype, seed)


class Uncached:
    """The oracle: a fresh copy of the model loaded from its folder (mlx-lm's model class, no cache), one full forward
    of the prompt and the tokens served, float32 log-softmax at each generated position."""

    def __init__(self, model: EngineModel):
        from mlx_lm.utils import load_model

        self.model = model
        self.net, _ = load_model(model.path)
        self.memo: dict[tuple[int, ...], mx.array] = {}

    def rows(self, tokens: Sequence[int]) -> mx.array:
        """Log-probabilities [T, V] after each prefix of `tokens` (row t conditions on tokens[: t + 1])."""
        key = tuple(int(t) for t in tokens)
        if key not in self.memo:
            logits = self.net(mx.array([key], dtype=mx.int32))[0].astype(mx.float32)
            rows = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
            mx.eval(rows)
            self.memo[key] = rows
        return self.memo[key]

    def greedy(self, prompt: Sequence[int], max_tokens: int) -> tuple[list[int], list[float]]:
        """Greedy decoding by full forwards only: each token the argmax of the uncached row after all before it."""
        tokens, logprobs = list(prompt), []
        for _ in range(max_tokens):
            row = np.array(self.rows(tokens)[-1])
            token = int(row.argmax())
            tokens.append(token)
            logprobs.append(float(row[token]))
        return tokens[len(prompt) :], logprobs


@dataclasses.dataclass
class LongestPrefixLRU:
    """A model of a documented reuse policy: entries keyed by token tuples, at most `entries` of them (least recently
    stored or used first out, `touch_on_hit`), a request reusing the longest stored prefix of its prompt, or (where
    `trim_longer`) a longer entry's common prefix with it, always leaving `keep_last` prompt tokens to compute; an entry
    that cannot be trimmed (`entry_trimmable`: recurrent state, a wrapped ring) is reusable only as a prefix of the
    prompt."""

    entries: int
    trim_longer: bool = True
    keep_last: int = 1
    trimmable: bool = True
    touch_on_hit: bool = False
    drop_prefixes: bool = True
    exact_only: bool = False
    key_holds_completion: bool = True
    window: int | None = None
    recurrent: bool = False
    shortest_prefix: int = 1
    """The shortest stored prefix of a prompt reused (1: any, as documented)."""
    checkpoint_head: bool = False
    """Whether the engine also stores the prompt's head (all but its last token) before the key, as mlx-lm's server
    does at the end of a prompt's first segment; a trimmable key then drops it as its prefix."""
    held: OrderedDict = dataclasses.field(default_factory=OrderedDict)

    def expected_reuse(self, prompt: Sequence[int]) -> tuple[int, tuple[int, ...] | None]:
        """How many prompt tokens the engine must serve from cache, and from which entry."""
        prompt = tuple(prompt)
        if self.exact_only:
            return (len(prompt) - self.keep_last, prompt) if prompt in self.held else (0, None)
        best, source = 0, None
        for key in self.held:
            common = 0
            for a, b in zip(key, prompt):
                if a != b:
                    break
                common += 1
            if common == len(key) < self.shortest_prefix and common < len(prompt):
                continue
            if common == len(key):  # the entry is a prefix of (or equals) the prompt
                reuse = min(common, len(prompt) - self.keep_last) if common == len(prompt) else common
            elif self.trim_longer and self.entry_trimmable(key):
                reuse = min(common, len(prompt) - self.keep_last)
            else:
                continue
            if reuse > best:
                best, source = reuse, key
        return best, source

    def entry_trimmable(self, key: tuple[int, ...]) -> bool:
        """Whether the entry under `key` can be cut back: not recurrent, a ring that has not wrapped (its cache holds
        every key token: a sliding layer's ring of `window` wraps once it holds `window` of them)."""
        return self.trimmable and not self.recurrent and (self.window is None or len(key) < self.window)

    def store(self, served: Served) -> None:
        """What the engine stores after serving `served`: its key (prompt + completion, or the prompt alone)."""
        if self.checkpoint_head and len(served.prompt) > 1:
            self.store_key(served.prompt[:-1])
        self.store_key(served.key if self.key_holds_completion else served.prompt)

    def store_key(self, key: Sequence[int]) -> None:
        key = tuple(key)
        self.held.pop(key, None)
        self.held[key] = True
        if self.drop_prefixes and self.entry_trimmable(key):
            for other in [k for k in self.held if k != key and key[: len(k)] == k]:
                del self.held[other]
        while len(self.held) > self.entries:
            self.held.popitem(last=False)

    def touch(self, key: tuple[int, ...] | None) -> None:
        if self.touch_on_hit and key in self.held:
            self.held.move_to_end(key)

    def clear(self) -> None:
        self.held.clear()


def common_length(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading tokens `a` and `b` share."""
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


@dataclasses.dataclass
class BlockPrefixLRU(LongestPrefixLRU):
    """A block cache's documented reuse: whole blocks of `block` tokens, chained (a block is reused only after the
    same blocks before it), so a request reuses its longest common prefix with a stored key cut down to whole
    blocks, never more than the key's whole blocks nor its prompt but `keep_last` tokens."""

    block: int = 16

    def expected_reuse(self, prompt: Sequence[int]) -> tuple[int, tuple[int, ...] | None]:
        prompt = tuple(prompt)
        best, source = 0, None
        for key in self.held:
            common = common_length(key, prompt)
            reuse = min(common, len(prompt) - self.keep_last, len(key)) // self.block * self.block
            if reuse > best:
                best, source = reuse, key
        return best, source


@dataclasses.dataclass
class SnapshotLRU(LongestPrefixLRU):
    """A snapshot cache's documented reuse (mlx-vlm's exact-mode APC): after a request its whole cache at the prompt
    but its last (guard) token is kept, or, where that is shorter than `minimum` and nothing was reused, at the whole
    prompt; a later prompt reuses the longest snapshot its tokens extend, leaving at least its last token to compute.
    `entries` snapshots, least recently stored or used first out."""

    minimum: int = 1

    def expected_reuse(self, prompt: Sequence[int]) -> tuple[int, tuple[int, ...] | None]:
        prompt = tuple(prompt)
        fits = [key for key in self.held if len(key) <= len(prompt) - self.keep_last and prompt[: len(key)] == key]
        best = max(fits, key=len, default=None)
        return (0, None) if best is None else (len(best), best)

    def store(self, served: Served) -> None:
        head = served.prompt[: len(served.prompt) - self.keep_last]
        if len(head) >= self.minimum and len(head) > (served.reused or 0):
            self.store_key(head)
        elif not served.reused and len(served.prompt) >= self.minimum:
            self.store_key(served.prompt)
