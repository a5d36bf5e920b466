"""Findings in the prefix caches MLX servers keep (`make verify-peers PEERS=mlx-lm`, ...): strict expected failures
by node id, merged into `mlx_findings.KNOWN_PEER_FINDINGS` (each reason says what differs, where, and the repro)."""

from __future__ import annotations

MLX_LM_EXACT_KEY = (
    "mlx-lm 0.32.2 models/cache.py:1654-1656 -> server.py:843-867 -> generate.py:1696-1698: a prompt that is exactly "
    "a stored key (a client resending prompt + completion, no new turn) is an exact trie hit that returns no token to "
    "compute; insert_segments raises ValueError('Sequence N has an empty prompt') in the generation thread, which "
    "dies (server.py:544-547): the request gets no reply and every later request {'error': 'generation thread "
    "died'}. Known upstream: mlx-lm #1215 (closed; IndexError then, ValueError now), PRs #1581/#1596/#1887 not in "
    "0.32.2. Repro: .peers/mlx-lm/bin/python mlx_peer_properties/repro/mlx_lm_exact_key.py"
)
MLX_LM_EMPTY_PROMPT = (
    "mlx-lm 0.32.2 server.py:843-867 (insert_segments outside the try that guards _tokenize) -> generate.py:1697: "
    "a completion request with an empty prompt is not refused with an error reply: it kills the generation thread "
    "(no reply), and every later request gets {'error': 'generation thread died'} until a restart (max_tokens 0 "
    "does the same, generate.py:1699). The server no longer hangs (0.32.2 reports the dead thread), but it never "
    "serves again: mlx-lm #1505/#1909's class. Repro: .peers/mlx-lm/bin/python "
    "mlx_peer_properties/repro/mlx_lm_empty_prompt.py"
)
MLX_LM_CACHE_BYTES = (
    "mlx-lm 0.32.2 server.py:1914 (LRUPromptCache(prompt_cache_size), no max_bytes) and :886-889 (trim_to only when "
    "a batched request is admitted, after its fetch): with --prompt-cache-bytes 1024 an entry of 2304 bytes is kept "
    "and the same prompt again reuses 5 tokens from it, batched and sequential (a seeded request, _serve_single, "
    "never trims) alike. Known upstream: mlx-lm PRs #1392, #1409 (open). Repro: .peers/mlx-lm/bin/python "
    "mlx_peer_properties/repro/mlx_lm_cache_bytes.py"
)

MLX_LM_DRAFT_KEY = (
    "mlx-lm 0.32.2 server.py:1131 and :1145 (_serve_single, the --draft-model path): every generated token is "
    "appended to the entry's key, but speculative decoding never feeds the last one, so the entry stored under "
    "prompt + completion holds one position less than its key (caches at offset 4 under a 5-token key). A request "
    "that reuses it is served from the wrong cache: prompt [0, 0] again (a longer entry trimmed) gets token 1's "
    "log-probability off by 0.048 nats; the key extended by a new turn (reused 5) gets other tokens ([18, 5, 11] "
    "vs uncached [18, 13, 10]). The class of mlx-lm #1494 (a cache that no longer matches its key). Repro: "
    ".peers/mlx-lm/bin/python mlx_peer_properties/repro/mlx_lm_draft_key.py"
)
MLX_LM_ONE_TOKEN_PREFIX = (
    "mlx-lm 0.32.2 models/cache.py:1578 (PromptTrie.search: `if last_index > 0`): a stored one-token prefix is never "
    "found, so a prompt starting with it is computed from scratch (reused 0, documented: the longest stored "
    "prefix, 1). It shows where entries cannot be trimmed (hybrid, wrapped sliding window: the server keeps each "
    "prompt's head, server.py:940-969); what is served stays right. Upstream fix proposed in mlx-lm PR #1496. "
    "Repro: .peers/mlx-lm/bin/python mlx_peer_properties/repro/mlx_lm_one_token_prefix.py"
)

_MLX_LM = "mlx_peer_properties/test_mlx_lm.py::"
PREFIX_FINDINGS: dict[str, str] = {
    f"{_MLX_LM}test_a_prompt_that_is_exactly_a_stored_key_is_served": MLX_LM_EXACT_KEY,
    f"{_MLX_LM}test_the_server_keeps_serving_after_a_request_it_refuses": MLX_LM_EMPTY_PROMPT,
    f"{_MLX_LM}test_an_entry_larger_than_the_byte_limit_is_never_reused[batched]": MLX_LM_CACHE_BYTES,
    f"{_MLX_LM}test_an_entry_larger_than_the_byte_limit_is_never_reused[sequential]": MLX_LM_CACHE_BYTES,
    f"{_MLX_LM}test_with_a_draft_model_every_response_and_every_reuse_equals_uncached": MLX_LM_DRAFT_KEY,
    f"{_MLX_LM}test_a_stored_one_token_prefix_is_reused": MLX_LM_ONE_TOKEN_PREFIX,
}
PREFIX_RAISES: dict[str, tuple[type[BaseException], ...]] = {}
"""What a finding fails with when not an assertion."""
