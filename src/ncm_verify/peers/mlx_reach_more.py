"""The speculative code (`Scope`s) of the six MLX peers added in late 2026, and why what their properties leave
unreached stays so (`Reason`s); as `mlx_reach` does for the first five, pinned to the versions `MLX_PEERS` installs.
"""

from __future__ import annotations

from ncm_verify.peers.reach import Reason, Scope

YUNSHU = (
    Scope(
        "yunshu_engine/speculative_decoder.py",
        (
            "SpeculativeDecoder.verify_draft",
            "SpeculativeDecoder.batch_verify_drafts",
            "SpeculativeDecoder._snapshot_cache",
            "SpeculativeDecoder._restore_cache",
            "SpeculativeDecoder.generate",
        ),
    ),
)
YUNSHU_REASONS = (
    *(
        Reason(
            "yunshu_engine/speculative_decoder.py",
            lines,
            "grammar branches the constrained properties do not reach: choice and JSON-schema runs fail on their "
            "first example (finding S14); a constraint without rollback or advance (every yunshu constraint has "
            "both), an empty allowed set, EOS inside the accepted drafts; penalties with a grammar (finding S4 "
            "raises first)",
            runnable=True,
        )
        for lines in ("626-669", "1065-1067", "1089-1100", "1179-1190", "1238-1261", "1291-1304")
    ),
    Reason(
        "yunshu_engine/speculative_decoder.py",
        "810-845",
        "batch verify under a grammar: a constraint without rollback or advance, an empty allowed set, EOS inside "
        "the accepted drafts (the JSON-schema batch fails, finding S16)",
        runnable=True,
    ),
    *(
        Reason(
            "yunshu_engine/speculative_decoder.py",
            lines,
            "dead with mlx-lm caches: trim_prompt_cache returns 0 rather than raising",
        )
        for lines in ("532-543", "735-740", "877-883", "1198-1202", "1270-1275")
    ),
    Reason(
        "yunshu_engine/speculative_decoder.py",
        "920-969",
        "draft caches of kinds no judged drafter has: CacheList (composite models), ChunkedKVCache (chunked "
        "attention), a cache without an offset",
        runnable=True,
    ),
    *(
        Reason(
            "yunshu_engine/speculative_decoder.py",
            lines,
            "an accepted draft that is the EOS: not forced (EOS ids are drawn from plain decoding's tokens)",
            runnable=True,
        )
        for lines in ("1108-1110", "1219-1220", "1229-1230")
    ),
    Reason(
        "yunshu_engine/speculative_decoder.py",
        "1216",
        "the break is dead: drafts are capped at the remaining budget (effective_K), so accepted drafts never pass "
        "it (kept in the total: the line's other exit runs)",
        runnable=True,
    ),
)

DSPARK_MLX = (
    Scope("dspark_mlx/loop.py"),
    Scope("dspark_mlx/generate.py"),
    Scope("dspark_mlx/verify.py"),
    Scope("dspark_mlx/hosts/mlx_lm.py"),
    Scope("dspark_mlx/arch/qwen3.py", ("Qwen3DSparkDrafter",)),
)
DSPARK_MLX_REASONS = (
    Reason(
        "dspark_mlx/arch/qwen3.py",
        "283",
        "extend_context with no new hiddens: its loops always commit one",
        runnable=True,
    ),
    Reason(
        "dspark_mlx/loop.py",
        "38",
        "dead from its only caller: generate_eager calls it only with a threshold above 0",
        runnable=True,
    ),
)

MLX_DSPARK = (
    Scope("mlx_dspark/generate.py", ("_Penalizer", "_spec_sample_accept", "speculative_generate", "greedy_generate")),
    Scope("mlx_dspark/target.py", ("Target.verify", "Target.rollback", "Target._rollback_gated_delta")),
    Scope("mlx_dspark/batch_engine.py", ("SpecSlots", "batch_spec_generate")),
)
MLX_DSPARK_REASONS = (
    Reason(
        "mlx_dspark/generate.py",
        "greedy_generate",
        "plain decoding (the reference) with a prefix cache handed in or prefill callbacks: server paths",
        runnable=True,
    ),
    Reason(
        "mlx_dspark/generate.py",
        "1200-1203",
        "drafters that reuse the target's head or embedding (Nemotron, Muse) are not built",
        runnable=True,
    ),
    Reason(
        "mlx_dspark/generate.py", "1220-1222", "prefix-cache reuse (a cache handed in) is not judged", runnable=True
    ),
    Reason("mlx_dspark/generate.py", "1236-1237", "the server's prefill callbacks are not judged", runnable=True),
    Reason(
        "mlx_dspark/generate.py",
        "1306-1316",
        "a parked sprint without a round callback, or with lookup drafts on: the parking property runs with the "
        "callback and without lookup (a lookup round leaves the controller alone)",
        runnable=True,
    ),
    Reason(
        "mlx_dspark/generate.py",
        "1457-1470",
        "a lookup round under a cap controller: the parking property runs without lookup",
        runnable=True,
    ),
    Reason("mlx_dspark/generate.py", "1500-1504", "verbose printing", runnable=True),
    Reason("mlx_dspark/target.py", "555-556", "drafter-free lookup mode (tap=None) is not judged", runnable=True),
    Reason("mlx_dspark/target.py", "582-583", "every cache of the dense targets judged can trim", runnable=True),
    Reason("mlx_dspark/target.py", "586-589", "rollback without a capture: an internal error path", runnable=True),
    Reason("mlx_dspark/target.py", "591-594", "Mamba-2 and short-conv hybrids are not built", runnable=True),
)

DFLY_MLX = (Scope("dfly_mlx/backend.py"), Scope("dfly_mlx/model.py", ("DFlyDraftModel", "HiddenStatesCorrection")))
DFLY_MLX_REASONS = (
    *(
        Reason(
            "dfly_mlx/backend.py",
            lines,
            "the no-dtype exit is dead: a DFly drafter always has a floating hidden_norm weight, so dflash-mlx's "
            "_draft_compute_dtype always finds one (kept in the total: the line's other exit runs)",
            runnable=True,
        )
        for lines in ("39", "52")
    ),
)

MLX_FLASH = (
    Scope(
        "mlx_flash_compress/dflash.py",
        ("DFlashEngine.draft_tokens", "DFlashEngine.verify_tokens", "DFlashEngine.generate"),
    ),
    Scope("mlx_flash_compress/eagle3.py", ("EAGLE3Engine.draft", "EAGLE3Engine.verify", "EAGLE3Engine.generate")),
)
MLX_FLASH_REASONS = (
    Reason(
        "mlx_flash_compress/dflash.py",
        "264-268",
        "DFlash's draft loop at temperature > 0: its sampler is finding S7's at every draw, so no loop-level law is "
        "run (1024 decodes would repeat the finding the verify property shows call by call)",
        runnable=True,
    ),
    Reason(
        "mlx_flash_compress/eagle3.py",
        "296-300",
        "EAGLE-3's draft loop at temperature > 0: not judged end to end (it claims no lossless sampling and its "
        "verify ignores the temperature, finding S8)",
        runnable=True,
    ),
    *(
        Reason(
            path,
            lines,
            "the break is dead: verify always returns the bonus or the drafts, never nothing",
            runnable=True,
        )
        for path, lines in (("mlx_flash_compress/dflash.py", "386-387"), ("mlx_flash_compress/eagle3.py", "407-408"))
    ),
)

NUNSPARK = (
    Scope("nunspark/tree_spec.py"),
    Scope("nunspark/generate.py", ("speculative_generate",)),
    Scope(
        "nunspark/engine.py",
        (
            "_clone_kv_cache",
            "StreamingEngine.verify_forward",
            "StreamingEngine.commit_verified",
            "StreamingEngine.tree_forward",
            "StreamingEngine.commit_path",
        ),
    ),
)
NUNSPARK_REASONS = (
    Reason(
        "nunspark/engine.py",
        "116-131",
        "CacheList caches and empty caches: no judged target has CacheList layers",
        runnable=True,
    ),
    Reason("nunspark/engine.py", "957-960", "cache kinds beyond the dense and sliding targets judged", runnable=True),
    Reason(
        "nunspark/engine.py",
        "983-1006",
        "MoE layers (their expert pieces and expert prefetch) are not packed: no tiny MoE target is built",
        runnable=True,
    ),
    Reason("nunspark/engine.py", "1008-1013", "quantized KV in the tree loop: it takes no kv_quant", runnable=True),
    Reason("nunspark/engine.py", "1019-1020", "MoE layers are not judged", runnable=True),
    Reason("nunspark/engine.py", "1042-1043", "quantized KV in the tree loop: it takes no kv_quant", runnable=True),
    Reason("nunspark/engine.py", "1080-1092", "split-core (MoE) pieces are not judged", runnable=True),
    Reason(
        "nunspark/engine.py",
        "1112-1113",
        "the return is dead from its loops: they commit at least the anchor",
        runnable=True,
    ),
    Reason("nunspark/engine.py", "1115-1120", "CacheList layers are not in the judged targets", runnable=True),
    *(
        Reason(path, lines, "a borrowed KV store (prefix reuse) is not judged", runnable=True)
        for path, lines in (
            ("nunspark/generate.py", "431-436"),
            ("nunspark/generate.py", "539-541"),
            ("nunspark/tree_spec.py", "199-206"),
        )
    ),
    *(
        Reason(
            path,
            lines,
            "an accepted draft that is the EOS, or the budget reached inside a round: not forced",
            runnable=True,
        )  # fmt: skip
        for path, lines in (
            ("nunspark/generate.py", "521-528"),
            ("nunspark/tree_spec.py", "244-252"),
            ("nunspark/tree_spec.py", "263"),
        )
    ),
)
