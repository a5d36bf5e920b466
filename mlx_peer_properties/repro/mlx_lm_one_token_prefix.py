"""mlx-lm 0.32.2 LRUPromptCache: a stored one-token prefix is never reused (PromptTrie.search `last_index > 0`).

.peers/mlx-lm/bin/python mlx_peer_properties/repro/mlx_lm_one_token_prefix.py   (exit 1 while it stands)
"""

import sys

import mlx.core as mx
from mlx_lm.models.cache import ArraysCache, LRUPromptCache

cache = LRUPromptCache(max_size=4)
for tokens in ([4], [4, 6, 1]):  # what the server keeps for a hybrid model after the prompt [4, 6]: its head, its key
    layer = ArraysCache(size=1)  # a recurrent layer's state: not trimmable, so the head is kept beside the key
    layer[0] = mx.zeros((1, 8))
    cache.insert_cache("model", tokens, [layer])
for prompt in ([4, 9, 9], [4, 6, 9]):
    found, rest = cache.fetch_nearest_cache("model", prompt)
    print(f"prompt {prompt}: reuses {len(prompt) - len(rest)} tokens (stored prefixes: [4], [4, 6, 1])")
found, rest = cache.fetch_nearest_cache("model", [4, 9, 9])
sys.exit(0 if len(rest) == 2 else 1)
