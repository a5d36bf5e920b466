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
YUNSHU_REASONS: tuple[Reason, ...] = ()

DSPARK_MLX = (
    Scope("dspark_mlx/loop.py"),
    Scope("dspark_mlx/generate.py"),
    Scope("dspark_mlx/verify.py"),
    Scope("dspark_mlx/hosts/mlx_lm.py"),
    Scope("dspark_mlx/arch/qwen3.py", ("Qwen3DSparkDrafter",)),
)
DSPARK_MLX_REASONS: tuple[Reason, ...] = ()

MLX_DSPARK = (
    Scope("mlx_dspark/generate.py", ("_Penalizer", "_spec_sample_accept", "speculative_generate", "greedy_generate")),
    Scope("mlx_dspark/target.py", ("Target.verify", "Target.rollback", "Target._rollback_gated_delta")),
)
MLX_DSPARK_REASONS: tuple[Reason, ...] = ()

DFLY_MLX = (Scope("dfly_mlx/backend.py"), Scope("dfly_mlx/model.py", ("DFlyDraftModel", "HiddenStatesCorrection")))
DFLY_MLX_REASONS: tuple[Reason, ...] = ()

MLX_FLASH = (
    Scope(
        "mlx_flash_compress/dflash.py",
        ("DFlashEngine.draft_tokens", "DFlashEngine.verify_tokens", "DFlashEngine.generate"),
    ),
    Scope("mlx_flash_compress/eagle3.py", ("EAGLE3Engine.draft", "EAGLE3Engine.verify", "EAGLE3Engine.generate")),
)
MLX_FLASH_REASONS: tuple[Reason, ...] = ()

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
NUNSPARK_REASONS: tuple[Reason, ...] = ()
