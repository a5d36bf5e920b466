"""mlx-lm 0.32.2's prefix caches as served: the real ``mlx_lm server`` (LRUPromptCache), its draft-model path and its
prompt-cache files, through `prefix_cache_machine` (rules 1-6 of docs/prefix-engines.md).

make install-peers PEER=mlx-lm && make verify-peers PEERS=mlx-lm
"""

from __future__ import annotations

import pytest
from prefix_cache_machine import assert_served_equals_uncached, run_machine

from ncm_verify.peers import mlx_lm_prefix as peer
from ncm_verify.peers.prefix_engines import make_model_folder

MODELS = {
    "attention-float32": ("attention", "float32", 0),
    "attention-bfloat16": ("attention", "bfloat16", 0),
    "sliding-float32": ("sliding", "float32", 0),
    "hybrid-float32": ("hybrid", "float32", 0),
    "draft-float32": ("attention", "float32", 1),  # the draft model: the attention target's shape, other weights
    "other-float32": ("attention", "float32", 2),
}
STEPS = 6
EXACT_KEY_AVOIDED = ("a_stored_key",)
"""A prompt that is exactly a stored key ends the server (`test_a_prompt_that_is_exactly_a_stored_key_is_served`,
a finding): the machine's runs leave that case to that test, so that each still judges everything else."""


@pytest.fixture(scope="session")
def models(tmp_path_factory):
    folder = tmp_path_factory.mktemp("prefix-models")
    return {name: make_model_folder(folder / name, *spec) for name, spec in MODELS.items()}


@pytest.fixture(scope="session")
def examples(request):
    """Machine runs per server property: each starts a server (5 s on 2 idle cores, 13 s under load 12), so one
    run of `STEPS` requests unless --mlx-peers-examples asks fewer than 3 (the default) or more."""
    asked = request.config.getoption("--mlx-peers-examples")
    return 1 if asked <= 3 else asked - 2


@pytest.mark.prefix_rule(1)
@pytest.mark.parametrize("case", ["attention-float32", "attention-bfloat16", "sliding-float32", "hybrid-float32"])
def test_every_served_response_equals_an_uncached_forward_of_its_tokens(case, models, examples):
    """Greedy tokens and log-probabilities the server returns, whatever it reused, against a fresh model's one full
    forward; the sliding model's ring (window 4) wraps inside most prompts, the hybrid's recurrent state cannot be
    trimmed (LRUPromptCache falls back to a shorter prefix or none)."""
    run_machine(peer.MlxLmServer, models[case], (1,), examples=examples, steps=STEPS, avoid=EXACT_KEY_AVOIDED)


@pytest.mark.prefix_rule(1)
def test_planted_a_fetch_claiming_one_token_more_is_caught(models, examples):
    run_machine(lambda: peer.MlxLmServer(planted=True), models["attention-float32"], (1,), examples=examples,
                steps=STEPS, avoid=EXACT_KEY_AVOIDED)  # fmt: skip


@pytest.mark.prefix_rule(2)
@pytest.mark.parametrize("case", ["attention-float32", "sliding-float32", "hybrid-float32"])
def test_the_reported_cached_tokens_follow_the_documented_trie_policy(case, models, examples):
    """usage.prompt_tokens_details.cached_tokens against `LongestPrefixLRU` stating LRUPromptCache's documented
    policy (exact, longer trimmed, shorter prefix; prompt + completion keys; --prompt-cache-size entries)."""
    run_machine(peer.MlxLmServer, models[case], (2,), examples=examples, steps=STEPS, avoid=EXACT_KEY_AVOIDED)


@pytest.mark.prefix_rule(3)
@pytest.mark.parametrize("case", ["attention-float32"])
def test_an_evicted_entry_is_never_served_and_a_reuse_never_changes_its_entry(case, models, examples):
    run_machine(peer.MlxLmServer, models[case], (1, 3), examples=examples, steps=STEPS, avoid=EXACT_KEY_AVOIDED)


@pytest.mark.prefix_rule(3)
@pytest.mark.parametrize("path", ["batched", "sequential"])
def test_an_entry_larger_than_the_byte_limit_is_never_reused(path, models):
    """``--prompt-cache-bytes 1024``: every entry of this model is larger (256 bytes a token, a key of 9 or more
    tokens), so none may be reused. Sequential: a request with a seed (server.py `_is_batchable`)."""
    engine = peer.MlxLmServer(extra=("--prompt-cache-bytes", "1024"))
    engine.start(models["attention-float32"], 8)
    try:
        prompt = (3, 1, 2, 5, 7, 9)
        extra = {"seed": 0} if path == "sequential" else {}
        engine.complete(prompt, 3, **extra)
        again = engine.complete(prompt, 3, **extra)
    finally:
        engine.close()
    assert again.reused == 0, (
        f"--prompt-cache-bytes 1024 ({path}): the same prompt again reused {again.reused} tokens from an entry of "
        f"at least {256 * (len(prompt) + 3)} bytes\n  repro: .peers/mlx-lm/bin/python "
        "mlx_peer_properties/repro/mlx_lm_cache_bytes.py"
    )


@pytest.mark.prefix_rule(4)
def test_with_a_draft_model_every_response_and_every_reuse_equals_uncached(models, examples):
    """``--draft-model`` (the server then serves one request at a time, `_serve_single`): the entry it stores
    under prompt + completion is reused by the requests that extend it, so an entry that is not its key's shows."""
    run_machine(lambda: peer.MlxLmServer(draft=models["draft-float32"]), models["attention-float32"], (1, 4),
                examples=examples, steps=STEPS, avoid=EXACT_KEY_AVOIDED)  # fmt: skip


@pytest.mark.prefix_rule(5)
@pytest.mark.parametrize("case", ["attention-float32", "sliding-float32", "hybrid-float32"])
def test_a_prompt_cache_file_restores_exactly_or_is_refused(case, models, examples):
    """``mlx_lm.cache_prompt`` then ``mlx_lm.generate --prompt-cache-file``: intact, the file's cache continued by
    the rest of the prompt serves the uncached tokens; truncated, one flipped byte, another model's file: refused,
    or what is served is still the uncached tokens."""
    run_machine(peer.MlxLmPromptFiles, models[case], (1, 5), examples=max(examples, 3), steps=6,
                other_model=models["other-float32"])  # fmt: skip


@pytest.mark.prefix_rule(1, 6)
def test_a_prompt_that_is_exactly_a_stored_key_is_served(models):
    """A client sending back a completed exchange (prompt + completion, no new turn): LRUPromptCache has it exactly
    and returns no token to compute."""
    engine = peer.MlxLmServer()
    engine.start(models["attention-float32"], 4)
    try:
        first = engine.complete((3, 1, 2, 5, 7), 3)
        again = engine.serve([first.key], 3)[0]
        assert_served_equals_uncached(again, models["attention-float32"], call=f"serve([{list(first.key)}], 3)")
    except AssertionError as error:
        raise AssertionError(
            f"{error}\n  repro: .peers/mlx-lm/bin/python mlx_peer_properties/repro/mlx_lm_exact_key.py"
        ) from None
    finally:
        engine.close()


@pytest.mark.prefix_rule(6)
def test_the_server_keeps_serving_after_a_request_it_refuses(models):
    """An empty prompt must get an error reply and the server must then serve the next requests."""
    engine = peer.MlxLmServer()
    engine.start(models["attention-float32"], 4)
    try:
        engine.complete((3, 1, 2), 2)
        refusal = engine.fail()
        try:
            after = engine.complete((3, 1, 2, 5), 2)
        except AssertionError as error:
            raise AssertionError(
                f"after the refused request ({refusal}), the next one: {error}\n  repro: .peers/mlx-lm/bin/python "
                "mlx_peer_properties/repro/mlx_lm_empty_prompt.py"
            ) from None
        assert_served_equals_uncached(after, models["attention-float32"], call="after an empty prompt")
    finally:
        engine.close()


@pytest.mark.prefix_rule(2)
def test_a_stored_one_token_prefix_is_reused(models):
    """The hybrid model's entries cannot be trimmed, so the server keeps each prompt's head ([4] after [4, 6]); a
    later prompt starting with it must reuse it, as documented (the longest stored prefix)."""
    engine = peer.MlxLmServer()
    engine.start(models["hybrid-float32"], 4)
    try:
        engine.complete((4, 6), 3)
        later = engine.complete((4, 9, 9), 3)
    finally:
        engine.close()
    assert later.reused == 1, (
        f"prompt [4, 9, 9] after [4, 6] (stored: [4] and [4, 6] + completion): reused {later.reused}, documented 1"
        "\n  repro: .peers/mlx-lm/bin/python mlx_peer_properties/repro/mlx_lm_one_token_prefix.py"
    )


@pytest.mark.prefix_rule(5)
def test_a_prompt_cache_file_with_one_flipped_bit_in_its_keys_is_refused_or_harmless(models, tmp_path):
    """The drawn damage of the machine's runs mostly lands in the header (refused) or in the unused tail of a
    256-position buffer (harmless); here one exponent bit of the first stored key value, inside the prompt."""
    from ncm_verify.peers.prefix_engines import Served

    engine = peer.MlxLmPromptFiles()
    engine.start(models["attention-float32"], 3)
    engine.serve([(3, 1, 2, 5, 7)], 2)
    engine.persist(tmp_path)
    peer.flip_first_key_bit(tmp_path / "prompt.safetensors")
    try:
        engine.restore(tmp_path)
    except Exception:  # refused: what a damaged file must get
        return
    served: Served = engine.serve([(3, 1, 2, 5, 7, 9, 9)], 3)[0]
    assert_served_equals_uncached(
        served,
        models["attention-float32"],
        call="cache_prompt [3, 1, 2, 5, 7]; one bit flipped; generate --prompt-cache-file, prompt [9, 9]\n  repro: "
        ".peers/mlx-lm/bin/python mlx_peer_properties/repro/mlx_lm_flipped_file.py",
    )
