"""Issue 42's drafters of SmolLM2: the sub-vocabulary wrappers, the sparse-row acceptance bounds, the shipped files."""

import json
import shutil

import mlx.core as mx
import numpy as np
import pytest

from ncm_verify.oracles.exact_acceptance import Component, expected_accepted_length
from ncm_verify.oracles.sparse_acceptance import SparseTargetRows, two_token_acceptance
from ncm_verify.reference.drafting.models import llama_args
from ncm_verify.reference.drafting.subvocab import SubVocabLlama, check_token_ids
from ncm_verify.reference.drafting.trained import SMOLLM2_DRAFTING, file_sha256, load_record, load_trained
from ncm_verify.tolerances import NORMALISATION

V, C = 12, 5


def _rows(rng, shape, alpha=0.3):
    return rng.dirichlet(np.full(V, alpha), size=shape)


def _world(seed, z):
    """A target with rows p(. | c), p(. | c, x) and a Z-component drafter q_z(. | c), q_z(. | c, x), on V tokens."""
    rng = np.random.default_rng(seed)
    p1, p2 = _rows(rng, C), _rows(rng, (C, V))
    w = rng.dirichlet(np.ones(z), size=C)
    q1, q2 = _rows(rng, (C, z)), _rows(rng, (C, z, V))
    return p1, p2, w, q1, q2


def _dense(p1, p2, w, q1, q2):
    """E[accepted] per context from `exact_acceptance` (every block enumerated), one component per (c, z)."""
    total = np.zeros(C)
    for z in range(w.shape[1]):

        def target(keys):
            return np.stack([p1[c] if not x else p2[c, x[0]] for c, x in keys])

        def draft(keys, z=z):
            return np.stack([q1[c, z] if not x else q2[c, z, x[0]] for c, x in keys])

        comps = [Component(c, float(w[c, z])) for c in range(C)]
        total += expected_accepted_length(comps, C, 2, target, draft, floor=0.0).lower
    return total


def _sparse(p1, p2, keep, expand):
    """The target's rows kept as C10 ships them: the `keep` largest entries, the first `expand` tokens expanded."""
    first = np.argsort(-p1, axis=1, kind="stable")[:, :keep]
    fp = np.take_along_axis(p1, first, 1)
    second = np.stack([np.argsort(-p2[c, first[c, :expand]], axis=1, kind="stable")[:, :keep] for c in range(C)])
    sp = np.stack([np.take_along_axis(p2[c, first[c, :expand]], second[c], 1) for c in range(C)])
    rows = SparseTargetRows(first, fp, np.maximum(1 - fp.sum(1), 0), second, sp, np.maximum(1 - sp.sum(-1), 0))
    return rows, first, second


def _values(q1, q2, first, second, expand):
    qf = np.take_along_axis(q1, first[:, None, :].repeat(q1.shape[1], 1), 2)
    qs = np.empty((C, q1.shape[1], expand, second.shape[-1]))
    for c in range(C):
        for j in range(expand):
            qs[c, :, j] = q2[c, :, first[c, j]][:, second[c, j]]
    return qf, qs


@pytest.mark.parametrize("z", [1, 3])
def test_sparse_bounds_equal_the_enumerated_acceptance_when_every_entry_is_kept(z):
    p1, p2, w, q1, q2 = _world(z, z)
    rows, first, second = _sparse(p1, p2, V, V)
    low, high = two_token_acceptance(rows, w, *_values(q1, q2, first, second, V))
    exact = _dense(p1, p2, w, q1, q2)
    np.testing.assert_allclose(low, exact, rtol=1e-12)
    np.testing.assert_allclose(high, exact, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("keep,expand", [(6, 3), (4, 4), (9, 1)])
def test_sparse_bounds_bracket_the_enumerated_acceptance_when_rows_are_truncated(keep, expand):
    p1, p2, w, q1, q2 = _world(10 + keep, 3)
    rows, first, second = _sparse(p1, p2, keep, expand)
    low, high = two_token_acceptance(rows, w, *_values(q1, q2, first, second, expand))
    exact = _dense(p1, p2, w, q1, q2)
    assert np.all(low <= exact + 1e-12) and np.all(exact <= high + 1e-12), (low, exact, high)
    assert np.all(high - low > 1e-6)  # truncation leaves a gap: the bounds are not the exact value by accident


def test_sparse_rows_refuse_mismatched_shapes_and_negative_mass():
    p1, p2, w, q1, q2 = _world(0, 1)
    rows, first, second = _sparse(p1, p2, 4, 2)
    with pytest.raises(ValueError, match="q_first"):
        two_token_acceptance(rows, w, np.zeros((C, 1, 3)), np.zeros((C, 1, 2, 4)))
    with pytest.raises(ValueError, match="first_rest"):
        SparseTargetRows(
            rows.first_ids, rows.first_probs, -rows.first_rest - 1, second, rows.second_probs, rows.second_rest
        )


def test_a_sub_vocabulary_llama_gives_proper_full_vocabulary_rows_zero_outside_it(tmp_path):
    vocab, ids = 50, mx.array([-1, 7, 3, 41, 19], dtype=mx.int32)
    mx.random.seed(0)
    model = SubVocabLlama(vars(llama_args(5, hidden=16, layers=1, intermediate=32)), ids, vocab)
    tokens = mx.array([[7, 3, 0, 41, 49]])  # 0 and 49 lie outside the sub-vocabulary
    rows = np.array(mx.softmax(model(tokens).astype(mx.float32), axis=-1), dtype=np.float64)
    np.testing.assert_allclose(rows.sum(-1), 1.0, atol=1e-6)
    outside = np.setdiff1d(np.arange(vocab), [7, 3, 41, 19])
    assert rows[..., outside].max() == 0.0 and rows[..., [7, 3, 41, 19]].min() > 0
    # the ids travel with the weights: a model built with other ids reads them back
    path = tmp_path / "m.safetensors"
    mx.save_safetensors(str(path), dict(__import__("mlx.utils").utils.tree_flatten(model.parameters())))
    other = SubVocabLlama(model.inner.args.__dict__, mx.array([-1, 0, 1, 2, 3], dtype=mx.int32), vocab)
    other.load_weights(str(path))
    np.testing.assert_array_equal(np.array(other(tokens)), np.array(model(tokens)))


@pytest.mark.parametrize("ids", [[0, 1, 2], [-1], [-1, 3, 3], [-1, 50]])
def test_bad_sub_vocabulary_ids_are_refused(ids):
    with pytest.raises(ValueError, match="token_ids"):
        check_token_ids(ids, 50)


shipped = pytest.mark.skipif(
    not (SMOLLM2_DRAFTING / "record.json").exists(), reason="no SmolLM2 drafters shipped (make train ONLY=smollm2)"
)


@shipped
def test_every_shipped_smollm2_file_matches_its_record_sha256():
    record = load_record(SMOLLM2_DRAFTING / "record.json")
    entries = [*record["models"].values(), record["c10_rows"]]
    assert entries
    for entry in entries:
        assert file_sha256(SMOLLM2_DRAFTING / entry["file"]) == entry["sha256"], entry["file"]


@shipped
def test_a_corrupted_smollm2_drafter_file_is_rejected(tmp_path):
    record = load_record(SMOLLM2_DRAFTING / "record.json")
    name = sorted(record["models"])[0]
    entry = record["models"][name]
    (tmp_path / "record.json").write_text(json.dumps(record))
    shutil.copy(SMOLLM2_DRAFTING / entry["file"], tmp_path / entry["file"])
    load_trained(name, tmp_path)  # intact: loads
    data = bytearray((tmp_path / entry["file"]).read_bytes())
    data[-3] ^= 0x10
    (tmp_path / entry["file"]).write_bytes(bytes(data))
    with pytest.raises(ValueError, match="sha256"):
        load_trained(name, tmp_path)


@shipped
def test_shipped_smollm2_drafters_give_proper_rows_on_the_full_vocabulary():
    record = load_record(SMOLLM2_DRAFTING / "record.json")
    context = mx.array([[504, 2017, 314, 253, 1789, 30]], dtype=mx.int32)
    for name in sorted(record["models"]):
        model = load_trained(name, SMOLLM2_DRAFTING)
        if hasattr(model, "sub_law"):
            features = mx.zeros((1, model.config.feature_dim)) if model.reads_features else None
            log_prior, log_rows = model.block_law(context, 2, features=features)
            rows = np.exp(np.array(log_rows[0], dtype=np.float64))
            prior = np.exp(np.array(log_prior, dtype=np.float64)).sum()
            np.testing.assert_allclose(prior, 1.0, atol=NORMALISATION[mx.float32], err_msg=name)
        else:
            rows = np.array(mx.softmax(model(context)[:, -1].astype(mx.float32), axis=-1), dtype=np.float64)
        assert rows.shape[-1] == 49152, name
        # float32 rows normalised by MLX's own (sequential) sums: the suite's float32 normalisation bound
        np.testing.assert_allclose(rows.sum(-1), 1.0, atol=NORMALISATION[mx.float32], err_msg=name)
        assert (rows > 0).sum(-1).max() < 4096, name  # nothing outside the sub-vocabulary


@shipped
def test_a_shipped_smollm2_ncm_drafter_proposes_tokens_of_its_rows_and_remembers_the_block():
    model = load_trained("smollm2_ncm_data", SMOLLM2_DRAFTING)
    cache = model.make_cache()
    context = mx.array([[504, 2017, 314, 253, 1789, 30]], dtype=mx.int32)
    block = model.propose(cache, context, 3, mx.random.key(0), temperature=0.7)
    rows, tokens = np.array(block.probs, dtype=np.float64), np.array(block.tokens)
    assert rows.shape == (1, 3, 49152) and tokens.shape == (1, 3)
    np.testing.assert_allclose(rows.sum(-1), 1.0, atol=NORMALISATION[mx.float32])
    assert rows[0, np.arange(3), tokens[0]].min() > 0  # each drafted token has mass in the row handed to the loop
    assert set(tokens[0].tolist()) <= set(np.array(model.token_ids).tolist()[1:])
    assert cache[0].offset == 6 + 3  # the drafted block stays in the history until the loop trims it
