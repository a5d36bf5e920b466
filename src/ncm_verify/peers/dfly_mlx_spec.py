"""dfly-mlx 0.1.0: a DFly drafter (`model.DFlyDraftModel`: DFlash backbone, per-layer fusion of the target's hidden
states, a predecessor-conditioned hidden correction) and its backend (`backend.DFlyDraftBackend.draft_greedy`: the
backbone once, then each position corrected and drafted left to right), over dflash-mlx 0.1.8's
`stream_dflash_generate`, as its own `generate.generate` runs them (block verify mode, prompt lookup off).

Targets, the engine and plain decoding are `peers.dflash_mlx_spec`'s (mlx-lm's own models at tiny sizes; plain is
dflash-mlx's `stream_baseline_generate`). dfly-mlx's own code only drafts, so a change there cannot move a
verified output: `planted()` is dflash-mlx's block walk keeping one rejected draft (`dflash_mlx_spec.planted`).
"""

from __future__ import annotations

from ncm_verify.peers import dflash_mlx_spec
from ncm_verify.peers.dflash_mlx_spec import conditional, make_target, plain, planted  # noqa: F401

PACKAGE = "dfly-mlx"
VERSION = "0.1.0"
TARGET_KINDS = ("attention", "sliding-window")
"""qwen3 (the family its checkpoints target) and gemma4_text; on qwen3_next dflash-mlx's tape finding repeats."""


def make_drafter(target, seed: int, block_size: int = 4, correction: bool = True):
    """dfly-mlx's own `DFlyDraftModel` over target layers 1 and 3, seeded; `correction`: its hidden-state
    correction (on by default, off in checkpoints that ship none)."""
    from dfly_mlx.model import DFlyDraftModel

    return dflash_mlx_spec.make_drafter(
        target, seed, block_size, model_class=DFlyDraftModel, num_target_layers=2, enable_hidden_correction=correction
    )


def generate(target, drafter, prompt: list[int], max_tokens: int, **options):
    """dflash-mlx's engine with dfly-mlx's `DFlyDraftBackend`, as `dfly_mlx.generate.generate` runs it."""
    from dfly_mlx.backend import DFlyDraftBackend

    return dflash_mlx_spec.generate(
        target, drafter, prompt, max_tokens, "dflash", draft_backend=DFlyDraftBackend(), prompt_lookup=False,
        block_tokens=int(drafter.block_size), **options,
    )  # fmt: skip


def generate_traced(target, drafter, prompt: list[int], max_tokens: int, **options):
    """`generate` with dflash-mlx's cycle tracing on (`DiagnosticsConfig.trace.cycle_events`, what its
    ``--profile`` runs use): the engine then launches each draft synchronously, not prefetched."""
    import dataclasses
    from unittest import mock

    from dflash_mlx.diagnostics import DiagnosticsConfig, TraceConfig
    from dflash_mlx.runtime import context as runtime_context

    own = runtime_context.build_offline_runtime_context

    def traced(**kwargs):
        return dataclasses.replace(own(**kwargs), diagnostics=DiagnosticsConfig(trace=TraceConfig(cycle_events=True)))

    with mock.patch.object(runtime_context, "build_offline_runtime_context", traced):
        return generate(target, drafter, prompt, max_tokens, **options)
