"""Tree decoding over mlx-lm models: a draft model expands a tree, the target scores it in one pass.

Each round the draft expands a tree level by level from the last emitted token (the root): every node of depth
d < len(branching) gets ``branching[d]`` children, drawn from the draft's row at that node by the implementation's
`verify_tree` mode (i.i.d., without replacement, or its top k); without replacement a row with fewer tokens of
positive mass gets them all, never a child of probability 0 (as recursive rejection sampling). The target then
scores the root and every node in ONE pass under a tree attention mask (a node sees the context, the root and
its own ancestors) at per-node positions (the context's length plus the node's depth); `verify_tree` accepts a
path and one more token; both models' caches (mlx-lm's `KVCache`) are compacted to the context and that path.

mlx-lm's llama cannot take this pass itself: its `Model` builds its own causal mask, and its `Attention`
ropes every row at the one scalar ``cache.offset``. So `tree_pass` applies the model's own modules (its
embedding, norms, projections, its rope module with one offset per row, mlx-lm's attention, its head) and
writes the K/V through mlx-lm's `KVCache.update_and_fetch`. Temperature 0 is greedy: the target's rows are
one-hot at its argmax (its first maximum) and children are the draft's top k (its rows at temperature 1).
"""

from __future__ import annotations

import numbers
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any, NamedTuple

import mlx.core as mx
import numpy as np
from mlx_lm.models.base import scaled_dot_product_attention
from mlx_lm.models.cache import KVCache, make_prompt_cache, trim_prompt_cache

from ncm_verify.reference import tree
from ncm_verify.reference.drafting.base import rows_at_temperature
from ncm_verify.reference.ncm.kv_cache import check_count

__all__ = ["DraftTree", "TreeGeneration", "draw_tree_children", "generate_tree_drafted", "tree_pass", "tree_shape"]


@dataclass(frozen=True)
class TreeGeneration:
    """What one tree-drafted generation emitted and how.

    Attributes:
        tokens: the `max_tokens` ids emitted after the prompt.
        accepted: nodes accepted in each round (one target pass per round).
        nodes: nodes drafted in each round.
    """

    tokens: list[int]
    accepted: list[int]
    nodes: list[int]

    @property
    def target_passes(self) -> int:
        """Verification passes of the target (its prefill apart)."""
        return len(self.accepted)


class DraftTree(NamedTuple):
    """One round's tree, root first (row 0), nodes in breadth-first order (row n + 1 is node n)."""

    tokens: list[int]  # node n's token
    parents: list[int]  # node n's parent: -1 the root, else an earlier node
    depths: list[int]  # node n's depth: 1 for the root's children
    draft_rows: mx.array  # [1, N+1, V] the draft's row at the root and at each node


def tree_shape(branching) -> tuple[list[int], list[int]]:
    """(parents, depths) of the breadth-first tree where every node of depth d has ``branching[d]`` children."""
    parents: list[int] = []
    depths: list[int] = []
    level = [-1]
    for depth, count in enumerate(branching):
        nxt = []
        for parent in level:
            for _ in range(count):
                parents.append(parent)
                depths.append(depth + 1)
                nxt.append(len(parents) - 1)
        level = nxt
    return parents, depths


def ancestors_mask(parents: list[int], offset: int) -> mx.array:
    """Boolean ``[N+1, offset+N+1]``: row r (the root, then node r-1) sees the context, the root, its ancestors
    and itself."""
    count = len(parents) + 1
    seen = [[True] * offset + [False] * count for _ in range(count)]
    seen[0][offset] = True
    for node, parent in enumerate(parents):
        row = node + 1
        seen[row] = list(seen[parent + 1])
        seen[row][offset + row] = True
    return mx.array(seen)


class TreeSteps(NamedTuple):
    """The loop's decisions where tree decoders break, apart so that a planted bug replaces exactly one."""

    mask: Callable[[list[int], int], mx.array]
    """(parents, context positions cached) -> which cached and tree rows each tree row attends to."""
    positions: Callable[[list[int], int], mx.array]
    """(depths of the nodes, context positions cached) -> each tree row's position, the root's first."""
    kept: Callable[[list[int]], list[int]]
    """(accepted path, node indices) -> the tree rows after the root that the caches keep, in order."""
    child_row: Callable[[mx.array, int, str], mx.array]
    """(a level's draft rows [n, V], node i of the level, mode) -> the row node i's children are drawn from."""
    round_keys: Callable[[mx.array], tuple]
    """(the loop's key) -> (the next round's key, the draft's key, verify_tree's key)."""


REFERENCE_TREE_STEPS = TreeSteps(
    mask=ancestors_mask,
    positions=lambda depths, offset: mx.array([offset] + [offset + d for d in depths], dtype=mx.int32),
    kept=lambda path: [node + 1 for node in path],
    child_row=lambda level, i, mode: level[i],
    round_keys=lambda key: tuple(mx.random.split(key, 3)),
)


def _check_caches(cache: list, name: str) -> None:
    if not all(type(layer) is KVCache for layer in cache):
        kinds = sorted({type(layer).__name__ for layer in cache})
        raise ValueError(f"{name}: tree decoding needs mlx-lm's KVCache at every layer, got {kinds}")


def _rope_rows(rope, a: mx.array, positions: mx.array) -> mx.array:
    """`a` ``[B, H, L, D]`` through the model's own `rope`, row l at ``positions[l]``."""
    # each row as its own length-1 sequence, so the rope's offset vector gives it its own position
    length = a.shape[2]
    rows = a.transpose(2, 0, 1, 3).reshape(length, -1, 1, a.shape[-1])
    rotated = rope(rows, offset=positions)
    return rotated.reshape(length, a.shape[0], a.shape[1], a.shape[-1]).transpose(1, 2, 0, 3)


def tree_pass(model, tokens: mx.array, positions: mx.array, mask: mx.array, cache: list) -> mx.array:
    """Logits ``[1, L, V]`` of `tokens` ``[1, L]`` at `positions` ``[L]`` under boolean `mask` ``[L, C+L]`` (C
    positions cached), through mlx-lm's own modules; the rows' K/V are appended to `cache`."""
    inner = model.model
    h = inner.embed_tokens(tokens)
    length = tokens.shape[1]
    for layer, layer_cache in zip(inner.layers, cache):
        attn, x = layer.self_attn, layer.input_layernorm(h)
        q, k, v = attn.q_proj(x), attn.k_proj(x), attn.v_proj(x)
        q = q.reshape(1, length, attn.n_heads, -1).transpose(0, 2, 1, 3)
        k = k.reshape(1, length, attn.n_kv_heads, -1).transpose(0, 2, 1, 3)
        v = v.reshape(1, length, attn.n_kv_heads, -1).transpose(0, 2, 1, 3)
        keys, values = layer_cache.update_and_fetch(_rope_rows(attn.rope, k, positions), v)
        out = scaled_dot_product_attention(
            _rope_rows(attn.rope, q, positions), keys, values, cache=layer_cache, scale=attn.scale, mask=mask
        )
        h = h + attn.o_proj(out.transpose(0, 2, 1, 3).reshape(1, length, -1))
        h = h + layer.mlp(layer.post_attention_layernorm(h))
    h = inner.norm(h)
    if getattr(model.args, "tie_word_embeddings", False):
        return inner.embed_tokens.as_linear(h)
    return model.lm_head(h)


def draw_tree_children(q_row: mx.array, count: int, *, mode: str, key: mx.array) -> list[int]:
    """`count` children from draft row ``[V]`` as `mode` draws them (sequential order for without replacement;
    then at most as many as the row has tokens of positive mass): a function of the row and `key` alone."""
    row = q_row
    if mode == "with_replacement":
        drawn = mx.random.categorical(mx.log(row), num_samples=count, key=key)
    elif mode == "without_replacement":  # Gumbel top-k: the order of sequential draws without replacement
        # No more children than tokens with mass: past them Gumbel top-k ranks tokens of probability 0. A Gumbel
        # draw of -inf (a uniform of 0) must still rank a token with mass above every token without.
        scores = mx.maximum(mx.log(row) + mx.random.gumbel(row.shape, key=key), np.finfo(np.float32).min)
        drawn = mx.argsort(-mx.where(row > 0, scores, -mx.inf))[: min(count, int(np.count_nonzero(np.array(row) > 0)))]
    else:
        drawn = mx.argsort(-row)[:count]
    return [int(t) for t in np.array(drawn).reshape(-1)]


def _expand(draft, cache, root: int, branching, mode, key, temperature, steps: TreeSteps, draw) -> DraftTree:
    """The draft's tree below `root`, level by level through its cache (which then holds every tree row); each
    node's children drawn by `draw` (a `draw_tree_children`)."""
    offset = cache[0].offset
    tokens: list[int] = []
    parents: list[int] = []
    depths: list[int] = []
    rows = []
    draft_temperature = 1.0 if temperature == 0 else temperature
    level_rows, passed = [root], 0  # tokens of the next level's rows; tree rows already in the cache
    for depth in range(len(branching) + 1):
        # the tree is known through this level: its rows' mask and positions need no deeper node
        end = passed + len(level_rows)
        positions = steps.positions(depths, offset)[passed:end]
        mask = steps.mask(parents, offset)[passed:end, : offset + end]
        logits = tree_pass(draft, mx.array([level_rows], dtype=mx.int32), positions, mask, cache)
        level = rows_at_temperature(logits[0], draft_temperature)
        rows.append(level)
        if depth == len(branching):
            break
        level_rows = []
        for i, node_key in enumerate(mx.random.split(mx.random.split(key, len(branching) + 1)[depth], level.shape[0])):
            children = draw(steps.child_row(level, i, mode), branching[depth], mode=mode, key=node_key)
            parents += [passed + i - 1] * len(children)  # tree row passed + i is node passed + i - 1
            depths += [depth + 1] * len(children)
            level_rows += children
        tokens += level_rows
        passed = end
    return DraftTree(tokens, parents, depths, mx.concatenate(rows)[None])


def _compact(cache: list, offset: int, kept: list[int], rows: int) -> None:
    """Keep the first `offset` positions, the root and tree rows `kept` (in order) of a cache holding `rows`."""
    if cache[0].offset != offset + rows:
        raise ValueError(f"cache: holds {cache[0].offset} positions, expected {offset + rows}")
    index = mx.array([offset + r for r in kept], dtype=mx.int32)
    states = [(layer.keys[..., index, :], layer.values[..., index, :]) for layer in cache]
    if rows > 1 and trim_prompt_cache(cache, rows - 1) != rows - 1:
        raise ValueError("cache: could not be trimmed; tree decoding needs trimmable caches")
    if kept:
        for layer, (k, v) in zip(cache, states):
            layer.update_and_fetch(k, v)


def generate_tree_drafted(
    target,
    draft,
    prompt,
    max_tokens: int,
    *,
    branching,
    mode: str,
    key: mx.array,
    temperature: float = 1.0,
    kernels: ModuleType | Any = tree,
    target_cache: list | None = None,
    draft_cache: list | None = None,
    _steps: TreeSteps = REFERENCE_TREE_STEPS,
) -> TreeGeneration:
    """Generate `max_tokens` tokens after `prompt` from `target`, drafted as trees by `draft`.

    Args:
        target, draft: mlx-lm models (llama-style: ``model.layers``, ``self_attn``, ``mlp``) over one vocabulary.
        prompt: 1-D token ids, at least one.
        max_tokens: tokens to emit, 0 or more.
        branching: children per node at each depth, each >= 1 (at most V unless i.i.d.): (1, 1, 1) is a chain
            of three drafts, (2, 2) a tree of 6 nodes; a round drafts no deeper than the tokens still wanted.
            Without replacement a node whose draft row has fewer tokens of positive mass gets only those.
        mode: how children are drawn, one of `tree.MODES`; temperature 0 needs "top_k".
        key: an ``mx.random.key``; each round splits it for the draft and for `verify_tree`.
        temperature: >= 0; the target's rows are ``softmax(logits / temperature)``, the draft's alike.
        kernels: the implementation providing ``verify_tree``; its ``draw_tree_children`` draws every node's
            children when it has one (so a caller sees each draw), else this module's.
        target_cache, draft_cache: empty mlx-lm caches (KVCache at every layer) to fill; made here when None.
    """
    max_tokens = check_count("max_tokens", max_tokens)
    if isinstance(branching, (str, bytes)) or not hasattr(branching, "__iter__"):
        raise ValueError(f"branching: expected a sequence of positive integers, got {branching!r}")
    branching = tuple(check_count("branching", b, minimum=1) for b in branching)
    if not branching:
        raise ValueError("branching: expected at least one depth")
    if mode not in tree.MODES:
        raise ValueError(f"mode: expected one of {tree.MODES}, got {mode!r}")
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not temperature >= 0:
        raise ValueError(f"temperature: expected a number >= 0, got {temperature!r}")
    if temperature == 0 and mode != "top_k":
        raise ValueError(f"mode: greedy decoding (temperature 0) drafts the top k, got {mode!r}")
    vocab = target.args.vocab_size
    if draft.args.vocab_size != vocab:
        raise ValueError(f"draft: vocabulary {draft.args.vocab_size}, the target's is {vocab}")
    if mode != "with_replacement" and max(branching) > vocab:
        raise ValueError(f"branching: {mode} children are distinct, at most {vocab} per node; got {branching}")
    raw: Any = prompt.reshape(-1).tolist() if isinstance(prompt, mx.array) else list(prompt)
    if len(raw) < 1 or not all(isinstance(t, numbers.Integral) and 0 <= int(t) < vocab for t in raw):
        raise ValueError(f"prompt: expected at least one token id in [0, {vocab}), got {raw}")
    context = [int(t) for t in raw]
    target_cache = make_prompt_cache(target) if target_cache is None else target_cache
    draft_cache = make_prompt_cache(draft) if draft_cache is None else draft_cache
    _check_caches(target_cache, "target_cache")
    _check_caches(draft_cache, "draft_cache")
    if len(context) > 1:  # both caches hold every context token but the last, the next tree's root
        prefill = mx.array([context[:-1]], dtype=mx.int32)
        for model, cache in ((target, target_cache), (draft, draft_cache)):
            model(prefill, cache=cache)
            mx.eval([c.state for c in cache])
    emitted: list[int] = []
    accepted: list[int] = []
    nodes: list[int] = []
    draw = getattr(kernels, "draw_tree_children", draw_tree_children)
    while len(emitted) < max_tokens:
        key, draft_key, verify_key = _steps.round_keys(key)
        offset = target_cache[0].offset
        # no deeper than the tokens still wanted, as the chain loop drafts: the caches never run past them
        shape = branching[: max_tokens - len(emitted)]
        grown = _expand(draft, draft_cache, context[-1], shape, mode, draft_key, temperature, _steps, draw)
        count = len(grown.tokens)
        parents, depths = grown.parents, grown.depths
        inputs = mx.array([[context[-1]] + grown.tokens], dtype=mx.int32)
        logits = tree_pass(target, inputs, _steps.positions(depths, offset), _steps.mask(parents, offset), target_cache)
        p = rows_at_temperature(logits, temperature)
        outcome = kernels.verify_tree(
            p,
            grown.draft_rows,
            mx.array([grown.tokens], dtype=mx.int32),
            mx.array([parents], dtype=mx.int32),
            key=verify_key,
            mode=mode,
        )
        stood = int(outcome.num_accepted[0].item())
        path = [int(n) for n in outcome.path[0, :stood].tolist()]
        tokens = [int(t) for t in outcome.tokens[0, : stood + 1].tolist()]
        kept = _steps.kept(path)
        for cache in (target_cache, draft_cache):
            _compact(cache, offset, kept, count + 1)
        context += tokens
        emitted += tokens
        accepted.append(stood)
        nodes.append(count)
    return TreeGeneration(tokens=emitted[:max_tokens], accepted=accepted, nodes=nodes)
