"""``python -m ncm_verify.bench``: run or compare the C9 measurements (see :mod:`ncm_verify.bench.measure`)."""

import sys

from ncm_verify.bench.measure import main

sys.exit(main())
