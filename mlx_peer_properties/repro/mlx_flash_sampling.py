"""mlx-flash 0.9.2: at temperature > 0 DFlash draws from softmax(probabilities); EAGLE-3 verifies by argmax.

.peers/mlx-flash/bin/python mlx_peer_properties/repro/mlx_flash_sampling.py    (exit 1 while the findings stand)
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

import mlx.core as mx  # noqa: E402
import numpy as np  # noqa: E402

from ncm_verify.peers.mlx_flash_spec import conditional, make_engine, make_target, sampled_laws  # noqa: E402

target = make_target(0, 4)
p = np.exp(np.array(conditional(target, [0]), dtype=np.float64))
dflash = make_engine("dflash", target, 1, 1, temperature=1.0)
_, laws = sampled_laws(lambda: dflash.verify_tokens(mx.array([0]), mx.array([0])))
tv = 0.5 * float(np.abs(laws[0].reshape(-1) - p).sum())
print(f"target p after [0]: {p.round(3).tolist()}")
print(f"DFlash (T=1) draws the target token from {laws[0].reshape(-1).round(3).tolist()}: TV {tv:.3f}")
eagle = make_engine("eagle3", target, 1, 1, temperature=1.0)
_, laws = sampled_laws(lambda: eagle.verify(mx.array([[0]]), mx.array([[0]])))
print(f"EAGLE-3 (T=1) verify calls MLX's sampler {len(laws)} times: its target token is the argmax")
sys.exit(1 if tv > 1e-6 or not laws else 0)
