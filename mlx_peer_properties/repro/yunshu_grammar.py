"""yunshu 0.1.5: grammar-constrained speculative decoding emits tokens its grammar forbids.

.peers/yunshu/bin/python mlx_peer_properties/repro/yunshu_grammar.py    (exit 1 while the finding stands)
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

import mlx.core as mx  # noqa: E402

from ncm_verify.peers.yunshu_spec import (  # noqa: E402
    constrained_decoder,
    grammar,
    grammar_violation,
    make_drafter,
    make_target,
    plain_constrained,
)

wrong = False
for response_format, seed in (("choice", 3), ("json schema", 3)):
    tokenizer, _ = grammar(response_format)
    vocab = tokenizer.eos_token_id + 1
    target, drafter = make_target("attention", seed, vocab), make_drafter(seed + 1, vocab)
    mx.random.seed(0)
    decoder = constrained_decoder(target, drafter, 3, response_format)
    spec = [int(t) for t in decoder.generate(mx.array([[seed, 1]]), 10, 0.0)]
    plain = plain_constrained(target, [seed, 1], 10, response_format)
    violation = grammar_violation(spec, response_format)
    print(
        f"{response_format}: speculative {tokenizer.decode(spec)!r}, plain constrained {tokenizer.decode(plain)!r}; "
        f"{violation or 'within the grammar'}"
    )
    wrong |= violation is not None or spec != plain
sys.exit(1 if wrong else 0)
