"""`make train`'s loop resumes exactly, and its data keep what they promise (a toy run in tmp, 6 steps)."""

import mlx.core as mx
import numpy as np
from mlx.utils import tree_flatten

from ncm_verify.reference.drafting.models import llama_args, make_llama
from ncm_verify.reference.drafting.text import VOCAB, decode, encode, text_ids
from ncm_verify.train import data
from ncm_verify.train.loop import RunSpec, train
from ncm_verify.train.tasks import NextTokenTask, block_starts, block_window, ncm_block_log_likelihood


def _fresh():
    mx.random.seed(0)
    return make_llama(llama_args(16, hidden=16, layers=1, intermediate=16, heads=2))


def test_a_run_stopped_at_a_checkpoint_and_resumed_ends_where_an_unbroken_run_ends(tmp_path):
    grammar = data.make_grammar()
    task = NextTokenTask(grammar.sample(3000, seed=1), 4, 16, 0)
    straight, resumed = _fresh(), _fresh()
    train(straight, task, RunSpec("straight", 6, 1e-3, 0, warmup=2, checkpoint_every=3), tmp_path / "a")
    spec = RunSpec("resumed", 6, 1e-3, 0, warmup=2, checkpoint_every=3)
    train(resumed, task, RunSpec("resumed", 3, 1e-3, 0, warmup=2, checkpoint_every=3), tmp_path / "b")
    again = _fresh()
    train(again, task, spec, tmp_path / "b")
    for (name, x), (_, y) in zip(tree_flatten(straight.parameters()), tree_flatten(again.parameters())):
        assert mx.array_equal(x, y).item(), name


def test_grammar_rows_are_laws_and_its_samples_follow_them():
    grammar = data.make_grammar()
    np.testing.assert_allclose(grammar.table.sum(axis=-1), 1.0)
    ids = grammar.sample(20000, seed=3)
    # The empirical entropy rate of its own samples is near the law's (a loose, deterministic check).
    counts = np.zeros_like(grammar.table)
    np.add.at(counts, (ids[:-2], ids[1:-1], ids[2:]), 1)
    frequent = counts.sum(axis=-1) > 200
    empirical = counts[frequent] / counts[frequent].sum(axis=-1, keepdims=True)
    assert np.abs(empirical - grammar.table[frequent]).max() < 0.15


def test_text_vocabulary_round_trips_ascii_and_the_split_is_ninety_ten():
    assert decode(encode("def f(x):\n\treturn ~x")) == "def f(x):\n\x00return ~x"
    train_ids, held_out = text_ids()
    assert abs(len(held_out) / (len(train_ids) + len(held_out)) - 0.1) < 1e-4
    assert train_ids.max() < len(VOCAB)


def test_blocks_start_inside_the_window_and_end_at_its_last_context_token():
    starts = block_starts(32, 4)
    assert starts.tolist() == [19, 23, 27, 31]


def test_each_ncm_training_block_is_scored_after_its_own_full_context():
    from ncm_verify.mlx_lm_real.text_drafters import tiny_concept_config
    from ncm_verify.reference.drafting.concept_drafter import ConceptBlockDrafter

    drafter = ConceptBlockDrafter(tiny_concept_config(16, seed=3))  # a prefix of 6, blocks of 4
    length = block_window(6, 4, 3)
    assert length == 6 + 8 + 4
    w = mx.array(np.random.default_rng(0).integers(0, 16, size=(2, length)), dtype=mx.int32)
    got = ncm_block_log_likelihood(drafter, w, 6, 3, None)
    starts = block_starts(length - 4, 3)
    assert starts.tolist() == [5, 9, 13]
    want = mx.concatenate(
        [drafter.block_log_likelihood(w[:, s - 5 : s + 1], w[:, s + 1 : s + 5]) for s in starts.tolist()]
    )
    np.testing.assert_allclose(np.array(got), np.array(want), rtol=1e-6)
