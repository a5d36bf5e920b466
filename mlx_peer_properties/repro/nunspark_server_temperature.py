"""nunspark 0.13.0: with a draft model its server drops a request's temperature (greedy speculative loop).

.peers/nunspark/bin/python mlx_peer_properties/repro/nunspark_server_temperature.py    (exit 1 while it stands)
"""

import sys
from unittest import mock

from nunspark import generate, server

calls = []


def recording(*args, **kwargs):
    calls.append(kwargs)
    yield from ()


tokenizer = mock.Mock(eos_token_ids={0})
tokenizer.detokenizer.last_segment = ""
with mock.patch.object(generate, "speculative_generate", recording):
    list(server.stream_chat_completion(None, tokenizer, [1, 2], max_tokens=4, temp=0.8, kv_budget=1 << 30,
                                       prefetch=False, stop_sequences=[], draft_model=object()))  # fmt: skip
print(f"request temperature 0.8; speculative_generate called with {sorted(calls[0])}")
sys.exit(0 if "temp" in calls[0] or "temperature" in calls[0] else 1)
