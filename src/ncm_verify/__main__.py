"""`python -m ncm_verify`: the ncm-verify command line."""

import sys

from ncm_verify.cli import main

sys.exit(main())
