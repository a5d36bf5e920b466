"""yunshu 0.1.5: batch_verify_drafts at temperature 0 accepts drafts verify_draft rejects (no greedy branch).

.peers/yunshu/bin/python mlx_peer_properties/repro/yunshu_batch_verify.py    (exit 1 while the finding stands)
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from ncm_verify.peers.yunshu_spec import conditional, decoder, make_drafter, make_target, verify_rows  # noqa: E402

target, drafter = make_target("attention", 0, 4), make_drafter(1, 4)
contexts, drafts = [[0], [0]], [[0], [0]]
logprobs = [[float(conditional(drafter, c)[d[0]])] for c, d in zip(contexts, drafts)]
batched, alone = verify_rows(decoder(target, drafter), target, contexts, drafts, logprobs, 0.0, rng_seed=0)
print(f"target argmax after [0]: {int(conditional(target, [0]).argmax())}; draft [0]")
print(f"batch_verify_drafts: accepted {batched[0].accepted_ids}, bonus {batched[0].bonus_token_id}")
print(f"verify_draft alone:  accepted {alone[0].accepted_ids}, bonus {alone[0].bonus_token_id}")
sys.exit(
    1 if (batched[0].accepted_ids, batched[0].bonus_token_id) != (alone[0].accepted_ids, alone[0].bonus_token_id) else 0
)
