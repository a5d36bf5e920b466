"""`make train`: `python -m ncm_verify.train [--fresh] [--only NAME ...]`."""

from ncm_verify.train.plan import main

raise SystemExit(main())
