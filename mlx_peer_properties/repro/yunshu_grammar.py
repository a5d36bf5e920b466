"""yunshu 0.1.5: grammar-constrained speculative decoding emits tokens its grammar forbids.

.peers/yunshu/bin/python mlx_peer_properties/repro/yunshu_grammar.py    (exit 1 while the finding stands)
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

import mlx.core as mx  # noqa: E402

from ncm_verify.peers.yunshu_spec import (  # noqa: E402
    CHOICES,
    CharTokenizer,
    constrained_decoder,
    grammar_violation,
    make_drafter,
    make_target,
    plain_constrained,
)

tokenizer = CharTokenizer(6)
target, drafter = make_target("attention", 3, 6), make_drafter(4, 6)
mx.random.seed(0)
spec = [int(t) for t in constrained_decoder(target, drafter, 3, tokenizer).generate(mx.array([[3, 1]]), 10, 0.0)]
plain = plain_constrained(target, [3, 1], 10, tokenizer)
violation = grammar_violation(spec, tokenizer)
print(
    f"choices {CHOICES}: speculative {spec} ({tokenizer.decode(spec)!r}), plain constrained {plain} "
    f"({tokenizer.decode(plain)!r}); {violation or 'within the grammar'}"
)
sys.exit(1 if violation or spec != plain else 0)
