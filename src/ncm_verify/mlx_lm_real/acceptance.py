"""Acceptance rates and tokens per target forward of mlx-lm's speculative loop and the exact verifier,
on tiny seeded mlx-lm models: ``python -m ncm_verify.mlx_lm_real.acceptance [--runs N]``.

The first draft's measured acceptance is set beside its exact rate under each
loop's rule (mlx-lm: sum p*q; the exact verifier: sum min(p, q)). Speed is
measured here, never asserted in a test.
"""

from __future__ import annotations

import argparse
import json

import mlx.core as mx
import numpy as np

from ncm_verify.mlx_lm_real.decoders import load_decoder
from ncm_verify.mlx_lm_real.exact_verifier import DistributionSampler
from ncm_verify.mlx_lm_real.models import TinySpec, first_tokens_law, make_tiny_model
from ncm_verify.mlx_lm_real.recording import CallLog


def measure(
    decoder_name: str, target, draft, *, runs: int, max_tokens: int, num_draft: int, temp: float, seed: int
) -> dict:
    """First-draft acceptance over `runs` one-token decodings, then the long-run figures of `runs // 8` decodings."""
    decoder, log = load_decoder(decoder_name), CallLog()
    counted = log.model(target, "target")
    mx.random.seed(seed)
    sampler = decoder.make_sampler(temp=temp)
    prompt = mx.array([1])  # one token: no prefill, so every target call is a decoding round
    first = [
        next(
            decoder.speculative_generate_step(prompt, target, draft, num_draft_tokens=1, max_tokens=1, sampler=sampler)
        )[2]
        for _ in range(runs)
    ]
    tokens = stood = 0
    for _ in range(max(runs // 8, 1)):
        steps = list(
            decoder.speculative_generate_step(
                prompt, counted, draft, num_draft_tokens=num_draft, max_tokens=max_tokens, sampler=sampler
            )
        )
        tokens, stood = tokens + len(steps), stood + sum(bool(step[2]) for step in steps)
    return {
        "first_draft_acceptance": float(np.mean(first)),
        "tokens_per_target_forward": tokens / len(log.forwards),
        "drafts_accepted_per_token": stood / tokens,
    }


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--num-draft", type=int, default=3)
    parser.add_argument("--temp", type=float, default=1.0)
    args = parser.parse_args(argv)
    results = []
    for vocab, target_seed, draft_seed in ((8, 1, 2), (16, 3, 4), (32, 5, 5)):
        spec = TinySpec(vocab_size=vocab, seed=target_seed)
        target, draft = make_tiny_model(spec), make_tiny_model(spec.with_seed(draft_seed))
        probs = DistributionSampler(args.temp).probs
        p, q = first_tokens_law(target, [1], 1, probs), first_tokens_law(draft, [1], 1, probs)
        row = {
            "vocab": vocab,
            "target_seed": target_seed,
            "draft_seed": draft_seed,
            "sum_pq": float(np.sum(p * q)),
            "sum_min_pq": float(np.sum(np.minimum(p, q))),
        }
        for name in ("mlx-lm", "exact verifier"):
            row[name] = measure(
                name,
                target,
                draft,
                runs=args.runs,
                max_tokens=args.max_tokens,
                num_draft=args.num_draft,
                temp=args.temp,
                seed=target_seed,
            )
        results.append(row)
        print(json.dumps(row))


if __name__ == "__main__":
    main()
