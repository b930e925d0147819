"""Privacy: erasure, suppressions, targets' identity, engine deletions."""
