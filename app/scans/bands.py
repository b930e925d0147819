"""A risk score's band (E2): the one table of bands, read by the normaliser (``results``) and by a
read that leaves findings out (``confidence``), which derives the band of the score it sums again."""
from __future__ import annotations

BANDS = (("low", 0, 24), ("medium", 25, 49), ("high", 50, 74), ("critical", 75, 100))
BAND_NAMES = {name for name, _, _ in BANDS}


def band_for(score: int) -> str:
    return next(name for name, low, high in BANDS if low <= score <= high)
