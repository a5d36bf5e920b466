"""Unit tests of the tree-decoding loop's pieces (reference/drafting/tree_loop.py) and its input contract."""

import dataclasses

import mlx.core as mx
import numpy as np
import pytest
from mlx_lm.models.cache import RotatingKVCache, make_prompt_cache

from ncm_verify.mlx_lm_real.models import TinySpec, make_successor_draft, make_tiny_model
from ncm_verify.mlx_lm_real.text_drafters import RecordingKernels
from ncm_verify.reference import tree
from ncm_verify.reference.drafting.tree_loop import ancestors_mask, generate_tree_drafted, tree_pass, tree_shape

SPEC = TinySpec(vocab_size=8, seed=3)


@pytest.fixture(scope="module")
def pair():
    return make_tiny_model(SPEC), make_tiny_model(dataclasses.replace(SPEC, logit_scale=2.0))


def test_tree_shape_lists_nodes_breadth_first_with_their_depths():
    assert tree_shape((2, 2)) == ([-1, -1, 0, 0, 1, 1], [1, 1, 2, 2, 2, 2])
    assert tree_shape((1, 1, 1)) == ([-1, 0, 1], [1, 2, 3])


def test_a_node_sees_the_context_the_root_its_ancestors_and_itself_only():
    mask = np.array(ancestors_mask([-1, -1, 0], offset=2))
    # columns: two cached, the root, nodes 0, 1, 2; rows: the root, nodes 0, 1, 2
    assert mask.tolist() == [
        [True, True, True, False, False, False],
        [True, True, True, True, False, False],
        [True, True, True, False, True, False],
        [True, True, True, True, False, True],
    ]


def test_a_chain_through_the_tree_pass_gives_the_models_own_causal_logits(pair):
    target, _ = pair
    context, chain = [1, 2, 3], [4, 5, 6]
    cache = make_prompt_cache(target)
    target(mx.array([context[:-1]]), cache=cache)
    parents, depths = tree_shape((1, 1, 1))
    offset = cache[0].offset
    positions = mx.array([offset] + [offset + d for d in depths], dtype=mx.int32)
    got = tree_pass(target, mx.array([context[-1:] + chain]), positions, ancestors_mask(parents, offset), cache)
    want = target(mx.array([context + chain]))[:, len(context) - 1 :]
    assert np.allclose(np.array(got), np.array(want), atol=1e-5)


@pytest.mark.parametrize(
    ("changes", "argument"),
    [
        ({"branching": ()}, "branching"),
        ({"branching": (2, 0)}, "branching"),
        ({"branching": "22"}, "branching"),
        ({"branching": (9,), "mode": "top_k"}, "branching"),
        ({"mode": "sampled"}, "mode"),
        ({"temperature": -1.0}, "temperature"),
        ({"temperature": 0, "mode": "with_replacement"}, "mode"),
        ({"max_tokens": -1}, "max_tokens"),
        ({"prompt": []}, "prompt"),
        ({"prompt": [8]}, "prompt"),
    ],
)
def test_bad_loop_input_is_refused_with_a_value_error_naming_the_argument(pair, changes, argument):
    target, draft = pair
    arguments = {"prompt": [1, 2], "max_tokens": 3, "branching": (2, 1), "mode": "top_k", "temperature": 1.0}
    arguments.update(changes)
    prompt, max_tokens = arguments.pop("prompt"), arguments.pop("max_tokens")
    with pytest.raises(ValueError, match=f"^{argument}:"):
        generate_tree_drafted(target, draft, prompt, max_tokens, key=mx.random.key(0), **arguments)


def test_a_cache_that_is_not_mlx_lms_kv_cache_is_refused(pair):
    target, draft = pair
    with pytest.raises(ValueError, match="^target_cache:"):
        generate_tree_drafted(
            target,
            draft,
            [1],
            2,
            branching=(2,),
            mode="top_k",
            key=mx.random.key(0),
            target_cache=[RotatingKVCache(4) for _ in target.layers],
        )


def test_the_loop_emits_exactly_max_tokens_and_one_pass_per_round(pair):
    target, draft = pair
    generation = generate_tree_drafted(
        target, draft, [1, 2], 7, branching=(2, 2), mode="without_replacement", key=mx.random.key(1)
    )
    assert len(generation.tokens) == 7
    assert sum(a + 1 for a in generation.accepted) >= 7 and generation.target_passes == len(generation.nodes)


def test_without_replacement_a_row_narrower_than_the_branching_gets_its_support_alone_and_verifies():
    """Regression: each successor-draft row keeps mass on two tokens; with three children per node the loop once
    drafted a third child of probability 0, which `verify_tree` refused."""
    target, draft = make_tiny_model(SPEC), make_successor_draft(SPEC)
    calls: list = []
    generation = generate_tree_drafted(
        target,
        draft,
        [1, 2],
        6,
        branching=(3, 3),
        mode="without_replacement",
        key=mx.random.key(0),
        kernels=RecordingKernels(tree, calls),
    )
    assert len(generation.tokens) == 6 and calls
    for _, record in calls:
        parents = np.array(record["parents"]).reshape(-1).tolist()
        nodes = np.array(record["tree_tokens"]).reshape(-1).tolist()
        q = np.array(record["q"]).reshape(len(parents) + 1, -1)
        for row in range(len(parents) + 1):
            children = [nodes[n] for n, parent in enumerate(parents) if parent == row - 1]
            # every node of depth < the tree's drafted its row's two tokens of mass: no more, no fewer
            if children or row == 0:
                assert sorted(children) == np.flatnonzero(q[row] > 0).tolist(), (row, children, q[row])
    depth_two = [record for _, record in calls if np.array(record["parents"]).reshape(-1).max() >= 0]
    assert depth_two, "no round drafted two levels"
    assert all(np.array(record["parents"]).size == 2 + 2 * 2 for record in depth_two)
