"""Properties of third-party peers (`make verify-peers`): the suite's Hypothesis profiles and hooks, reused.

properties/conftest.py registers the profiles and the shrink budget; its hooks are re-exported here, so a peer's
property runs under the same profile, budget and reporter as the suite's own. Never collected by `make verify`.
"""

import importlib.util
from pathlib import Path

import torch
import transformers

_spec = importlib.util.spec_from_file_location(
    "_ncm_verify_properties_conftest", Path(__file__).resolve().parents[1] / "properties" / "conftest.py"
)
_properties = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_properties)
pytest_configure = _properties.pytest_configure
pytest_runtest_call = _properties.pytest_runtest_call

# Tiny models: a second thread costs 4-15x per generate call on a shared 2-core machine (measured 3 ms vs 14-47 ms).
torch.set_num_threads(1)
# The assistant's nested generate warns on every call that it is handed a config and arguments together.
transformers.logging.set_verbosity_error()
