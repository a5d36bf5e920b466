"""C9, measured and never asserted: kernel steps beside peers and floors (measure); ratios (ratios)."""
