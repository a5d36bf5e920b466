"""mlx-lm: speculative_generate_step refuses a recurrent target but accepts a recurrent draft and never rolls it back.

    .venv/bin/python mlx_peer_properties/repro/mlx_lm_recurrent_draft.py    (exit 1 while the finding stands)

An attention-only target (a tiny llama) and a recurrent draft (a tiny lfm2: a short convolution and attention): the
loop's rewind asks `trim_prompt_cache` to drop the rejected drafts from the draft's caches, which returns 0 (the
ArraysCache cannot be trimmed, so no layer is) and is ignored. The draft's attention layer then holds more positions
than tokens exist, and its proposals are conditioned on drafts that were never emitted.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

import mlx.core as mx  # noqa: E402
from mlx_lm.generate import speculative_generate_step  # noqa: E402

from ncm_verify.mlx_lm_real.hybrid_models import HybridSpec, make_hybrid_cache, make_hybrid_model  # noqa: E402

target_spec, draft_spec = HybridSpec("llama", "AA", seed=1), HybridSpec("lfm2", "RA", seed=2)
target, draft = make_hybrid_model(target_spec), make_hybrid_model(draft_spec)
target_cache, draft_cache = make_hybrid_cache(target, target_spec), make_hybrid_cache(draft, draft_spec)
prompt = [1, 2, 3]
steps = list(
    speculative_generate_step(
        mx.array(prompt), target, draft, num_draft_tokens=3, max_tokens=10, prompt_cache=target_cache + draft_cache
    )
)
tokens = len(prompt) + len(steps)
held = max(layer.offset for layer in draft_cache if hasattr(layer, "offset"))
from_draft = sum(bool(step[2]) for step in steps)
print(f"{len(steps)} tokens emitted, {from_draft} from the draft; the draft's attention layer holds {held} positions")
print(f"for {tokens} tokens ({'keeps rejected drafts' if held > tokens else 'rolled back'})")
sys.exit(1 if held > tokens else 0)
