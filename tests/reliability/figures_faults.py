"""One figure per matrix row: what was tried and what went wrong, printed in the summary."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class Figure:
    row: str
    cases: int = 0
    failures: int = 0
    duplicates: int = 0
    worst_seconds: float = 0.0
    detail: str = ""

    def took(self, seconds: float) -> None:
        self.worst_seconds = max(self.worst_seconds, seconds)

    def line(self) -> str:
        extra = f"; {self.detail}" if self.detail else ""
        return (
            f"{self.row}: {self.cases} cases, {self.failures} failures, "
            f"{self.duplicates} duplicates, worst run {self.worst_seconds:.2f} s{extra}"
        )


def record(figures: Any, figure: Figure) -> None:
    """Keep the line for the summary (and print it, for `-s` runs of one module)."""
    figures.append(figure.line())
    print(figure.line())
