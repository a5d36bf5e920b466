"""The README's example adapter judged by the prefix-cache machine, and a planted wrong cache caught by it."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "mlx_peer_properties"))

from prefix_cache_machine import run_machine  # noqa: E402

from ncm_verify.peers.prefix_engines import attention_model  # noqa: E402
from ncm_verify.peers.prefix_example import ExactMatchEngine  # noqa: E402


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return attention_model(tmp_path_factory.mktemp("models") / "attention-float32")


def test_the_exact_match_example_serves_uncached_tokens_and_reuses_as_it_documents(model):
    hits = run_machine(ExactMatchEngine, model, (1, 2, 3), examples=3, steps=5)
    assert any(hits)


class OneTokenShort(ExactMatchEngine):
    """A planted bug: a hit drops the cached head's last position (the cache one token short of its key)."""

    def serve(self, prompts, max_tokens):
        for prompt in map(tuple, prompts):
            if prompt in self.held and len(prompt) > 2:
                for layer in self.held[prompt]:
                    layer.trim(1)
        return super().serve(prompts, max_tokens)


def test_a_cache_one_token_short_of_its_key_is_caught(model):
    with pytest.raises(AssertionError, match="rule 1"):
        run_machine(OneTokenShort, model, (1,), examples=3, steps=5)
