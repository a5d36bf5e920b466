"""Findings in the prefix caches MLX servers keep (`make verify-peers PEERS=mlx-lm`, ...): strict expected failures
by node id, merged into `mlx_findings.KNOWN_PEER_FINDINGS` (each reason says what differs, where, and the repro)."""

from __future__ import annotations

MLX_LM_EXACT_KEY = (
    "mlx-lm 0.32.2 models/cache.py:1654-1656 -> server.py:843-867 -> generate.py:1696-1698: a prompt that is exactly "
    "a stored key (a client resending prompt + completion, no new turn) is an exact trie hit that returns no token to "
    "compute; insert_segments raises ValueError('Sequence N has an empty prompt') in the generation thread, which "
    "dies (server.py:544-547): the request gets no reply and every later request {'error': 'generation thread "
    "died'}. The server also stores each prompt's head (all but its last token, server.py:940-969; kept where the "
    "cache cannot be trimmed: hybrid, sliding window), so a prompt equal to another's head ends it too: on the "
    "sliding and hybrid models, two concurrent requests [0, 0] and [0] do. Known upstream: mlx-lm #1215 (closed; "
    "IndexError then, ValueError now), PRs #1581/#1596/#1887 not in "
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
MLX_LM_FLIPPED_FILE = (
    "mlx-lm 0.32.2 models/cache.py:82-112 (load_prompt_cache) and generate.py:2038-2070: a prompt-cache file carries "
    "no checksum, and the only check is the model path string in its metadata; one exponent bit flipped in a stored "
    "key is loaded and served in silence: generate --prompt-cache-file continuing [3, 1, 2, 5, 7] with [9, 9] gives "
    "[2, 13, 18], uncached [18, 13, 10]; the machine's drawn flips find it too on the hybrid model (other tokens); "
    "on the sliding model the default run's drawn flips changed nothing served, and that node passes. A truncated "
    "file, a broken header and another model's file are refused. "
    "Repro: .peers/mlx-lm/bin/python mlx_peer_properties/repro/mlx_lm_flipped_file.py"
)

LOCALS_DISK_SNAPSHOT = (
    "locals 0.2.1 locals/hybrid_batch.py:351-378 (DiskPromptCache.restore; saved at :287-326): a system-prompt "
    "snapshot on disk is mlx-lm's save_prompt_cache safetensors with no checksum and no record of the weights that "
    "wrote it (only its folder's name, <model>--<dtype>--<size and mtime of the weights>, says whose it is); restore "
    "load_prompt_cache()s it into the prompt cache whatever its bytes hold. After a restart, one flipped exponent bit "
    "in a stored key, or another model's snapshot of the same tokens in its place, is served silently: prompt "
    "[3,1,4,1,5,9,2,6,7] gets [0,0,0] / [0,10,10] where uncached decoding gives [23,2,13]. A truncated file is "
    "refused (forgotten) as documented. Repro: .peers/locals/bin/python "
    "mlx_peer_properties/repro/locals_disk_snapshot.py"
)
OPENAI_SERVER_PICKLE = (
    "mlx-openai-server 1.8.1 app/utils/prompt_cache.py:291 and :295-303 (_write_cache_to_disk / "
    "_load_cache_from_disk): every prompt-cache entry is a dill pickle in --prompt-cache-dir with no checksum; a "
    "pickle whose bytes changed loads without error (only an unpicklable or truncated one is refused, :318-331) and "
    "the next hit serves it: one flipped exponent bit in a stored key moves the served log-probabilities by up to "
    "1.29 nats and changes the greedy tokens ([16,1,1] before, [16,1,16] after). Unpickling files from a shared "
    "folder also runs whatever code they hold. Repro: .peers/mlx-openai-server/bin/python "
    "mlx_peer_properties/repro/mlx_openai_server_pickle.py"
)
OPENAI_SERVER_DRAFT_ENTRY = (
    "mlx-openai-server 1.8.1 app/handler/mlx_lm.py:322 and :337-344: with --draft-model, the handler stores the "
    "prompt cache under prompt + every emitted token, but mlx-lm's speculative_generate_step never feeds the last "
    "emitted token, so the model's layers hold one position fewer than the key (prompt [0,0]: key [0,0,13,23,23], "
    "4 positions held). A follow-up request extending that key reuses it as if whole (reused 5) and is served off "
    "uncached decoding: [18,13,1] against [18,13,10], log-probabilities off by 0.36 nats at its first token "
    "(mlx-lm 0.32.2's own server does the same: MLX_LM_DRAFT_KEY). Repro: "
    ".peers/mlx-openai-server/bin/python mlx_peer_properties/repro/mlx_openai_server_draft_entry.py"
)
TEXTGEN_SAME_NAME = (
    "mlx-textgen 0.2.1 mlx_textgen/model_utils.py:447-458 and cache_utils.py:244, :721: the prompt-cache folder is "
    "~/.cache/mlx_textgen/prompt_cache/<the model folder's last path component, lowercased> (an HF id's organisation "
    "dropped), and get_cache loads a saved file without reading the model_name its metadata holds: two models "
    "whose folders share a name (two fine-tunes of one base, one name under two organisations) share one cache, "
    "and the second continues the first one's saved prompt: served [5,20,16] where its uncached greedy tokens are "
    "[12,2,6]. Repro: .peers/mlx-textgen/bin/python mlx_peer_properties/repro/mlx_textgen_same_name.py"
)
YUNSHU_SSD_BFLOAT16 = (
    "yunshu 0.1.5 yunshu_engine/kv_prefix_cache.py:1833-1834 (restore_prefix_from_ssd): K/V restored from the SSD "
    "tier are cast to bfloat16 whatever the model's dtype and whatever YUNSHU_SSD_CACHE_PRECISION says (default "
    "'native', documented 'stored bit-exact; lossless'; the function's docstring says 'int8-LOSSY by design'): a "
    "float32 model's prompt served from the SSD tier after a restart (reused 10 of 11 tokens) is off uncached "
    "decoding by 5.5e-4 nats, where its memory hits are off by 2.9e-7 (float16 models, as 4-bit MLX models compute, "
    "lose 3 mantissa bits the same way). Repro: .peers/yunshu/bin/python "
    "mlx_peer_properties/repro/yunshu_ssd_bfloat16.py"
)

TEXTGEN_DAMAGED_FILE = (
    "mlx-textgen 0.2.1 mlx_textgen/cache_utils.py:645-721 (CacheManager.get_cache): a saved cache file is read with "
    "mx.load when a prompt matches its tokens, with no checksum and no error handling: after a restart one flipped "
    "exponent bit in a stored key is served ([0,0,0] where uncached decoding gives [23,2,13]), and a file cut short "
    "raises RuntimeError ('[load_safetensors] ... invalid data offsets') on every request that matches it, for "
    "good (the entry stays in cached_prompts.json). Repro: .peers/mlx-textgen/bin/python "
    "mlx_peer_properties/repro/mlx_textgen_damaged_file.py"
)

TEXTGEN_BATCH_SHIFT = (
    "mlx-textgen 0.2.1 mlx_textgen/model_utils.py:814-865 (LLMModel.create_inference_plan, a left-padded batch) with "
    "cache_utils.py:695-735 (CacheManager.get_cache): a prompt batched beside a longer one is served wrong. After "
    "[3, 1, 2, 4, 5] was served, the batch [[3, 1, 2, 4, 5], [3, 1, 7]] gives its second row [14, 6, 16] on every "
    "run, where uncached decoding and the prompt alone on the same warm cache give [20, 18, 13] (1.84 nats off at the "
    "first token); on a cold cache the same batch's second row varies from run to run ([10, 10, 10], [20, 20, 20], "
    "[18, 13, 18], once [20, 18, 13]), so the fault is in the batch path and not only in the reused K/V (suspected: "
    "get_cache copies a row's saved K/V, computed at positions 0, 1, ..., to its left-padded place, :729-735); the "
    "line at fault is not pinned. Repro: .peers/mlx-textgen/bin/python "
    "mlx_peer_properties/repro/mlx_textgen_batch_shift.py"
)

YUNSHU_SSD_FLIPPED = (
    "yunshu 0.1.5 yunshu_engine/ssd_kv_cache.py:753-800 (SSDKVCache.load_block): a block file on the SSD tier is "
    "checked for the checkpoint's fingerprint (another model's block is refused) but not for its bytes: after a "
    "restart a block with one flipped exponent bit is restored and served (bfloat16 model, prompt of 11 tokens, "
    "reused 10: the first token's log-probability off uncached by 0.57 nats). Repro: .peers/yunshu/bin/python "
    "mlx_peer_properties/repro/yunshu_ssd_flipped.py"
)

_MLX_LM = "mlx_peer_properties/test_mlx_lm.py::"
PREFIX_FINDINGS: dict[str, str] = {
    f"{_MLX_LM}test_a_prompt_that_is_exactly_a_stored_key_is_served": MLX_LM_EXACT_KEY,
    f"{_MLX_LM}test_the_server_keeps_serving_after_a_request_it_refuses": MLX_LM_EMPTY_PROMPT,
    f"{_MLX_LM}test_an_entry_larger_than_the_byte_limit_is_never_reused[batched]": MLX_LM_CACHE_BYTES,
    f"{_MLX_LM}test_an_entry_larger_than_the_byte_limit_is_never_reused[sequential]": MLX_LM_CACHE_BYTES,
    f"{_MLX_LM}test_with_a_draft_model_every_response_and_every_reuse_equals_uncached": MLX_LM_DRAFT_KEY,
    f"{_MLX_LM}test_a_stored_one_token_prefix_is_reused": MLX_LM_ONE_TOKEN_PREFIX,
    f"{_MLX_LM}test_a_prompt_cache_file_with_one_flipped_bit_in_its_keys_is_refused_or_harmless": MLX_LM_FLIPPED_FILE,
    f"{_MLX_LM}test_a_prompt_cache_file_restores_exactly_or_is_refused[hybrid-float32]": MLX_LM_FLIPPED_FILE,
    **{
        f"mlx_peer_properties/test_locals_prefix_cache.py::test_a_saved_system_prompt_damaged_on_disk_is_refused_or_"
        f"served_exactly[{kind}]": LOCALS_DISK_SNAPSHOT
        for kind in ("flipped byte", "another model")
    },
    "mlx_peer_properties/test_mlx_openai_server_prefix_cache.py::test_a_damaged_pickle_is_refused_or_served_exactly_"
    "on_its_next_hit[flipped byte]": OPENAI_SERVER_PICKLE,
    "mlx_peer_properties/test_mlx_openai_server_prefix_cache.py::test_with_a_draft_model_every_response_and_stored_"
    "entry_equals_uncached": OPENAI_SERVER_DRAFT_ENTRY,
    "mlx_peer_properties/test_yunshu_prefix_cache.py::test_a_float32_prompt_served_from_the_ssd_tier_after_a_restart_"
    "equals_uncached": YUNSHU_SSD_BFLOAT16,
    "mlx_peer_properties/test_mlx_textgen_prefix_cache.py::test_a_model_never_continues_another_models_saved_prompt": (
        TEXTGEN_SAME_NAME
    ),
    **{
        f"mlx_peer_properties/test_mlx_textgen_prefix_cache.py::test_a_saved_file_damaged_on_disk_is_refused_or_served_"
        f"exactly[{kind}]": TEXTGEN_DAMAGED_FILE
        for kind in ("truncated", "flipped byte")
    },
    "mlx_peer_properties/test_mlx_textgen_prefix_cache.py::test_a_new_prompt_batched_beside_a_saved_one_it_shares_"
    "its_first_tokens_with_is_served_as_uncached": TEXTGEN_BATCH_SHIFT,
    "mlx_peer_properties/test_mlx_textgen_prefix_cache.py::test_saved_files_restore_exactly_or_a_damaged_or_foreign_"
    "file_is_refused": TEXTGEN_DAMAGED_FILE,
    "mlx_peer_properties/test_yunshu_prefix_cache.py::test_a_block_damaged_on_the_ssd_tier_is_refused_or_served_"
    "exactly[flipped byte]": YUNSHU_SSD_FLIPPED,
    "mlx_peer_properties/test_locals_prefix_cache.py::test_the_disk_tier_restores_exactly_or_refuses_a_damaged_or_"
    "foreign_file": LOCALS_DISK_SNAPSHOT,
}
PREFIX_RAISES: dict[str, tuple[type[BaseException], ...]] = {
    MLX_LM_FLIPPED_FILE: (AssertionError, ValueError),  # a damaged ring offset fails in attention, not an assertion
    TEXTGEN_DAMAGED_FILE: (AssertionError, RuntimeError),  # the machine meets the cut file as a failed request
}
"""What a finding fails with when not an assertion."""
