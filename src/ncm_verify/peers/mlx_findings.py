"""Findings in the MLX speculative decoders (`make verify-peers PEERS=...`): strict expected failures by node id.

As `mlx_lm_real.known_bugs` does for mlx-lm: a property that fails on a package's own code is a finding, listed
here with what differs and a reproduction that runs in seconds; `mlx_peer_properties/conftest.py` marks each node a
strict expected failure, so a release that fixes it turns the run red until its row goes. A planted control (a
node whose id holds ``planted``) is expected to fail the same way: it is how we know the property has teeth there.
"""

from __future__ import annotations

PLANTED = "planted control: the package's own loop with one known-biased change; the property must catch it"

MLX_VLM_PROCESSORS_DROPPED = (
    "mlx-vlm 0.7.10 mlx_vlm/generate/ar.py:318-328,525-538: generate_step builds logits processors (logit_bias, "
    "repetition/presence/frequency penalties) and applies them in _step, but run_speculative_rounds is handed only "
    "the sampler: every token after the first ignores them, silently. Repro: "
    ".peers/mlx-vlm/bin/python mlx_peer_properties/repro/mlx_vlm_processors.py"
)

MLX_VLM_BATCH_DFLASH_CRASH = (
    "mlx-vlm 0.7.10 mlx_vlm/speculative/utils.py:428 (eagle3: :379): generate_step with a batch of prompts and a "
    "DFlash drafter raises ValueError ('Cannot squeeze axis -1 with size 2'): run_speculative_rounds squeezes the "
    "first token [B] as if it were [B, 1] (its MTP branch reshapes instead). Repro: "
    ".peers/mlx-vlm/bin/python mlx_peer_properties/repro/mlx_vlm_batch_dflash.py"
)

_VLM = "mlx_peer_properties/test_mlx_vlm.py::"
KNOWN_PEER_FINDINGS: dict[str, str] = {
    # node id -> what differs, where, and the reproduction
    **{
        f"{_VLM}test_sampling_options_act_on_the_speculative_path_as_on_plain_decoding[{option}-{draft}]": (
            MLX_VLM_PROCESSORS_DROPPED
        )
        for option in ("logit_bias", "repetition_penalty", "presence_penalty", "frequency_penalty")
        for draft in ("dflash", "mtp")
    },
    f"{_VLM}test_a_batch_of_greedy_requests_gets_what_each_gets_alone[dflash]": MLX_VLM_BATCH_DFLASH_CRASH,
}

FINDING_RAISES: dict[str, tuple[type[BaseException], ...]] = {MLX_VLM_BATCH_DFLASH_CRASH: (ValueError,)}
"""What a finding fails with when not an assertion: the package's own error."""
