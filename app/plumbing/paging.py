"""One numbered page of rows, as the portal's lists show them (scans, deliveries, ledger)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Page:
    items: list
    total: int
    page: int
    per_page: int

    @property
    def pages(self) -> int:
        return max(1, -(-self.total // self.per_page))
