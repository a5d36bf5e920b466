"""Findings in the six MLX speculative decoders added in late 2026 (yunshu, dspark-mlx, mlx-dspark, dfly-mlx,
mlx-flash, nunspark): strict expected failures by node id, merged into `mlx_findings.KNOWN_PEER_FINDINGS`.

Kept apart from `mlx_findings` so that each package's rows stay together; the rules are the same: each row says
the version, file:line, what differs and a reproduction script that runs in seconds and exits 1 while it stands.
"""

from __future__ import annotations

YUNSHU_ROLLBACK_REFUSED = (
    "yunshu 0.1.5 yunshu_engine/speculative_decoder.py:1270 (and :1148-1195, verify_draft :525): generate rolls "
    "the target cache back with mlx-lm's trim_prompt_cache and ignores its result; it trims nothing when any cache "
    "is not trimmable (a GatedDeltaNet layer's ArraysCache always, a RotatingKVCache once its ring is full), so "
    "rejected drafts stay attended and greedy output leaves plain decoding (hybrid: first divergent token at 2, "
    "[1, 0, 3, 2] vs [1, 0, 2, 1]; sliding window: at 3; a probe of the cache is off by 1.9-5.7 nats). Repro: "
    ".peers/yunshu/bin/python mlx_peer_properties/repro/yunshu_rollback.py"
)
YUNSHU_RULE_LAW = (
    "yunshu 0.1.5 yunshu_engine/speculative_decoder.py:572-589,608-672 (verify_draft): a rejected draft is "
    "corrected by a draw from the target's tempered p itself, not from norm(max(p - q, 0)), and the acceptance "
    "ratio uses the untempered target log-probability against the draft's untempered log-softmax, even when the "
    "draft was drawn greedily (the batched engine's draft_temperature=0.0): the emitted law is not p. TV 0.009 "
    "(draft at temperature 1), 0.165 (greedy draft: its token always accepted). No lossy mode is documented. "
    "Repro: .peers/yunshu/bin/python mlx_peer_properties/repro/yunshu_rule_law.py"
)
YUNSHU_BATCH_VERIFY_GREEDY = (
    "yunshu 0.1.5 yunshu_engine/speculative_decoder.py:766-773 (batch_verify_drafts): no temperature-0 branch: "
    "drafts are accepted by U < min(1, p(x)/q(x)) on raw logits at temperature 0, where verify_draft (:585-589) "
    "accepts only the target's argmax: request 0 (context [0], draft [0], argmax 3) gets [0] + bonus 3 in the "
    "batch, [] + bonus 3 alone. Repro: .peers/yunshu/bin/python mlx_peer_properties/repro/yunshu_batch_verify.py"
)
YUNSHU_LOGIT_BIAS = (
    "yunshu 0.1.5 yunshu_engine/speculative_decoder.py:1159 (generate, SP-PEN): with any penalty or logit_bias a "
    "round that accepts no draft raises AttributeError ('int' object has no attribute 'item': last_tok is an int); "
    "otherwise the bias reaches only each round's bonus (the first token :1039 and accepted drafts never see it), "
    "the bonus is an argmax at any temperature (:1193), and it is computed after feeding the last accepted token "
    "a second time (:1163-1164). Repro: .peers/yunshu/bin/python mlx_peer_properties/repro/yunshu_logit_bias.py"
)
YUNSHU_SEED = (
    "yunshu 0.1.5: engine_speculative.py:423 serves a request's seed by mx.random.seed only, but the speculative "
    "rule's coins come from an unseeded random.Random() (speculative_decoder.py:364) and its correction sampler "
    "from _build_temp_sampler(seed=None) (:617, :1022), seeded by time.time_ns() (engine_sampling.py:126-131): "
    "the same seeded request decodes differently each time ([3, 2, 2, 1, ...], [3, 2, 2, 2, ...], [2, 1, ...]). "
    "Repro: .peers/yunshu/bin/python mlx_peer_properties/repro/yunshu_seed.py"
)

YUNSHU_FIRST_TOKEN_EOS = (
    "yunshu 0.1.5 yunshu_engine/speculative_decoder.py:1043 (generate): the prefill's token is never checked "
    "against the tokenizer's EOS ids; the loop runs a speculative round and only then sees it (:1304): with EOS "
    "as the first token it emits [3, 2] where plain decoding stops at [3]. Repro: .peers/yunshu/bin/python "
    "mlx_peer_properties/repro/yunshu_first_token_eos.py"
)
YUNSHU_GRAMMAR = (
    "yunshu 0.1.5 yunshu_engine/speculative_decoder.py:1035-1039 (generate): with a grammar constraint (the one "
    "engine_speculative wires in for a response format) the prefill's token is taken unmasked and never advanced "
    "into the constraint, and verify_draft's bonus mask (:640-646) is skipped whenever the constraint's rollback "
    "needs a checkpoint (Choice, Regex: TypeError): the correction token is unmasked. Choices ('abcab', 'bad', "
    "'cabbed', 'aced', 'ebbed'): speculative 'cddddddcdc' where constrained plain decoding gives 'cabbed'; JSON "
    "schema {a: integer}: 'a{\"a\":1111' where plain gives '{\"a\":11111' (the first token unmasked, then the "
    "object from the start). Repro: "
    ".peers/yunshu/bin/python mlx_peer_properties/repro/yunshu_grammar.py"
)
YUNSHU_DRAFT_RING = (
    "yunshu 0.1.5 yunshu_engine/speculative_decoder.py:933,962 (_snapshot_cache / _restore_cache): a draft "
    "model's RotatingKVCache is snapshotted as (offset, _idx) only; once its ring is full, drafting overwrites ring "
    "slots that the restore does not bring back, so after a rejection the draft cache holds rejected drafts' keys: "
    "off an uncached pass by 1.85 nats after one round, 9.43 after four (sliding-window drafter, window 4). Greedy "
    "output stays exact (the target verifies); the drafts are conditioned on a wrong context. Repro: "
    ".peers/yunshu/bin/python mlx_peer_properties/repro/yunshu_draft_ring.py"
)
YUNSHU_BATCH_GRAMMAR = (
    "yunshu 0.1.5 yunshu_engine/speculative_decoder.py:810-845 (batch_verify_drafts): under a grammar constraint "
    "every request of the batch is masked through the decoder's one constraint (self.constraint), rolled back and "
    "advanced by each request in turn: a request's bonus is masked by another request's grammar state. JSON "
    "schema, temperature 0.8, same coins: request 1's correction law [0.0015, 0.0569, 0.0009, 0.5088, ...] in the "
    "batch, [1, 0, 0, ...] (only '{' allowed) alone. No caller in yunshu 0.1.5 batches (public API). Repro: "
    ".peers/yunshu/bin/python mlx_peer_properties/repro/yunshu_batch_grammar.py"
)
NUNSPARK_TREE_SLIDING = (
    "nunspark 0.13.0 nunspark/engine.py:1012-1022 (StreamingEngine.tree_forward): tree verification gives every "
    "layer a plain KVCache and one mask and calls slot(h, mask=mask, cache=ephem) as for a Llama block; on a "
    "gemma4_text target (in its architecture table; window 4 here) it raises TypeError (the layer's tuple return "
    "fed on as h) or ValueError (mask (3, 6) against keys of 8): tree_speculative_generate cannot decode there, "
    "where its linear loop and plain decoding do. Repro: .peers/nunspark/bin/python "
    "mlx_peer_properties/repro/nunspark_tree_gemma4.py"
)
NUNSPARK_SERVER_TEMPERATURE = (
    "nunspark 0.13.0 nunspark/server.py:132-143 (stream_chat_completion): with a draft model loaded, the request's "
    "temperature (read at :415 and :463, passed in as temp) is not handed to speculative_generate, which decodes "
    "greedily; without a draft model it reaches stream_generate (:146). Dropped without an error. Repro: "
    ".peers/nunspark/bin/python mlx_peer_properties/repro/nunspark_server_temperature.py"
)

MLX_FLASH_SAMPLER_PROBABILITIES = (
    "mlx-flash 0.9.2 mlx_flash_compress/dflash.py:310 (verify_tokens; also :268 drafts and :455 its plain "
    "_generate_fallback): at temperature > 0 it hands mx.random.categorical the probabilities softmax(l / T), "
    "which categorical takes as logits: tokens are drawn from softmax(softmax(l / T)), far flatter than the "
    "target's law (TV 0.414 at T=1: [0.183, 0.184, 0.213, 0.42] for p = [0.005, 0.006, 0.154, 0.835]). Repro: "
    ".peers/mlx-flash/bin/python mlx_peer_properties/repro/mlx_flash_sampling.py"
)
MLX_FLASH_EAGLE3_TEMPERATURE = (
    "mlx-flash 0.9.2 mlx_flash_compress/eagle3.py:336 (EAGLE3Engine.verify): the target's tokens are its argmax "
    "whatever EAGLE3Config.temperature says (which only tempers the drafts, :296-300): at temperature > 0 the "
    "engine emits greedy decoding, the temperature ignored without an error. Repro: .peers/mlx-flash/bin/python "
    "mlx_peer_properties/repro/mlx_flash_sampling.py"
)
MLX_FLASH_MAX_TOKENS = (
    "mlx-flash 0.9.2 mlx_flash_compress/dflash.py:392 and eagle3.py:412: generate adds every token a round "
    "accepts and stops only once the count reaches max_tokens, so a round accepting drafts near the end returns "
    "more (DFlash: 11 for max_tokens=10; EAGLE-3: 4 for 3); its plain decoding returns exactly max_tokens. Repro: "
    ".peers/mlx-flash/bin/python mlx_peer_properties/repro/mlx_flash_max_tokens.py"
)
MLX_FLASH_EOS = (
    "mlx-flash 0.9.2 mlx_flash_compress/dflash.py:390-400 and eagle3.py:410-426: generate appends every token a "
    "round accepted and only then looks for the tokenizer's EOS in them: the tokens accepted after the EOS in the "
    "same round are returned (DFlash, EOS 2: [2, 2, 1] where plain decoding stops at [2]; EAGLE-3, EOS 1: "
    "[1, 1, 1, 1] for [1]). Repro: .peers/mlx-flash/bin/python mlx_peer_properties/repro/mlx_flash_eos.py"
)

MLX_DSPARK_MAX_TOKENS = (
    "mlx-dspark 0.20.3 mlx_dspark/generate.py:1486 (speculative_generate): a round's committed tokens (accepted "
    "drafts + the bonus) are all appended; the loop stops only once max_new_tokens is reached (:1269), and neither "
    "the drafter block (:1378) nor the bonus is clamped to what is left (lookup drafts are, :1275, but not their "
    "bonus): it returns more tokens than asked (9 for max_new_tokens=8; 8 for 7 on the hybrid), where "
    "greedy_generate returns exactly max_new_tokens; the first max_new_tokens equal plain decoding. Repro: "
    ".peers/mlx-dspark/bin/python mlx_peer_properties/repro/mlx_dspark_max_tokens.py"
)

_YUNSHU = "mlx_peer_properties/test_yunshu.py::"
_DSPARK = "mlx_peer_properties/test_mlx_dspark.py::"
_FLASH = "mlx_peer_properties/test_mlx_flash.py::"
_NUNSPARK = "mlx_peer_properties/test_nunspark.py::"
MORE_PEER_FINDINGS: dict[str, str] = {
    **{
        f"{_YUNSHU}test_greedy_speculative_decoding_emits_plain_greedy_decoding[{kind}-own]": YUNSHU_ROLLBACK_REFUSED
        for kind in ("hybrid", "sliding-window")
    },
    **{
        f"{_YUNSHU}test_at_every_round_the_target_cache_attends_as_the_tokens_it_holds_uncached[{kind}]": (
            YUNSHU_ROLLBACK_REFUSED
        )
        for kind in ("hybrid", "sliding-window")
    },
    **{
        f"{_YUNSHU}test_the_rule_emits_exactly_the_target_law[{draft}-own]": YUNSHU_RULE_LAW
        for draft in ("default draft", "engine's greedy draft")
    },
    f"{_YUNSHU}test_batch_verification_gives_each_request_what_verifying_it_alone_gives": YUNSHU_BATCH_VERIFY_GREEDY,
    f"{_YUNSHU}test_logit_bias_acts_on_the_speculative_path_as_on_plain_decoding": YUNSHU_LOGIT_BIAS,
    f"{_YUNSHU}test_a_seeded_request_decodes_the_same_tokens_each_time": YUNSHU_SEED,
    f"{_YUNSHU}test_greedy_speculative_decoding_stops_at_the_end_of_sequence_token_as_plain_decoding": (
        YUNSHU_FIRST_TOKEN_EOS
    ),
    **{
        f"{_YUNSHU}test_grammar_constrained_speculative_decoding_emits_constrained_plain_decoding[{fmt}]": (
            YUNSHU_GRAMMAR
        )
        for fmt in ("choice", "json schema")
    },
    f"{_YUNSHU}test_sampled_batch_verification_gives_each_request_the_coins_and_law_of_verifying_it_alone"
    "[json schema]": YUNSHU_BATCH_GRAMMAR,
    f"{_YUNSHU}test_at_every_round_the_draft_cache_attends_as_the_tokens_it_holds_uncached[sliding-window]": (
        YUNSHU_DRAFT_RING
    ),
    f"{_NUNSPARK}test_greedy_speculative_decoding_emits_plain_greedy_decoding[sliding-window-tree-own]": (
        NUNSPARK_TREE_SLIDING
    ),
    f"{_NUNSPARK}test_a_served_request_s_temperature_reaches_the_speculative_loop": NUNSPARK_SERVER_TEMPERATURE,
    **{
        f"{_DSPARK}test_speculative_decoding_returns_max_new_tokens_tokens[{kind}]": MLX_DSPARK_MAX_TOKENS
        for kind in ("attention", "hybrid")
    },
    f"{_FLASH}test_at_a_rejected_draft_the_engine_draws_from_the_target_s_tempered_conditional[dflash]": (
        MLX_FLASH_SAMPLER_PROBABILITIES
    ),
    f"{_FLASH}test_at_a_rejected_draft_the_engine_draws_from_the_target_s_tempered_conditional[eagle3]": (
        MLX_FLASH_EAGLE3_TEMPERATURE
    ),
    **{
        f"{_FLASH}test_an_end_of_sequence_token_ends_decoding_as_plain_decoding[{kind}]": MLX_FLASH_EOS
        for kind in ("dflash", "eagle3")
    },
    **{
        f"{_FLASH}test_the_engine_returns_max_tokens_tokens_when_a_block_is_accepted_near_the_end[{kind}]": (
            MLX_FLASH_MAX_TOKENS
        )
        for kind in ("dflash", "eagle3")
    },
}

MORE_FINDING_RAISES: dict[str, tuple[type[BaseException], ...]] = {
    YUNSHU_LOGIT_BIAS: (AttributeError, AssertionError),
    NUNSPARK_TREE_SLIDING: (TypeError, ValueError),
}
