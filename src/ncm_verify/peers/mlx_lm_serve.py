"""``mlx_lm server`` with the planted control: ``python -m ncm_verify.peers.mlx_lm_serve --planted <server args>``.

The planted change (`plant`): mlx-lm's own ``LRUPromptCache.fetch_nearest_cache`` claims one prompt token more than
the cache it returns holds (the first token it should leave to compute is dropped), so a reuse serves a cache one
position short of its prompt. `mlx_peer_properties/prefix_cache_machine.py` must catch it (rule 1).
"""

from __future__ import annotations

import sys


def plant() -> None:
    from mlx_lm.models.cache import LRUPromptCache

    own = LRUPromptCache.fetch_nearest_cache

    def one_token_more(self, model, tokens):
        cache, rest = own(self, model, tokens)
        if cache is not None and len(rest) > 1:
            return cache, rest[1:]
        return cache, rest

    setattr(LRUPromptCache, "fetch_nearest_cache", one_token_more)  # noqa: B010 (mypy: a method assigned)


def main(argv: list[str]) -> None:
    if argv[:1] == ["--planted"]:
        plant()
        argv = argv[1:]
    from mlx_lm.server import main as serve

    sys.argv = ["mlx_lm.server", *argv]
    serve()


if __name__ == "__main__":
    main(sys.argv[1:])
