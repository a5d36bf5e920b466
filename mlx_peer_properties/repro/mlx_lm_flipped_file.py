"""mlx-lm 0.32.2 prompt-cache files: one flipped bit in a stored key is loaded and served, silently wrong.

.peers/mlx-lm/bin/python mlx_peer_properties/repro/mlx_lm_flipped_file.py   (exit 1 while it stands)
"""

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from ncm_verify.peers.mlx_lm_prefix import MlxLmPromptFiles, flip_first_key_bit  # noqa: E402
from ncm_verify.peers.prefix_engines import Uncached, attention_model  # noqa: E402

with tempfile.TemporaryDirectory() as folder:
    model = attention_model(Path(folder) / "attention")
    files = MlxLmPromptFiles()
    files.start(model, 3)
    files.serve([(3, 1, 2, 5, 7)], 2)
    files.persist(Path(folder) / "cache")  # mlx_lm.cache_prompt on [3, 1, 2, 5, 7]
    name = flip_first_key_bit(Path(folder) / "cache" / "prompt.safetensors")
    files.restore(Path(folder) / "cache")  # mlx_lm.generate --prompt-cache-file: no error
    served = files.serve([(3, 1, 2, 5, 7, 9, 9)], 3)[0]
    tokens, _ = Uncached(model).greedy((3, 1, 2, 5, 7, 9, 9), 3)
    print(
        f"array {name}: one exponent bit flipped; generate --prompt-cache-file --prompt 'w9 w9' served "
        f"{list(served.tokens)}, uncached {tokens}"
    )
sys.exit(0 if list(served.tokens) == tokens else 1)
