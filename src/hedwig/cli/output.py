"""How commands print: tables for people, JSON for programs, progress only on a terminal.

Listings print an aligned table, or with ``--json`` one JSON document (a list of objects, keys
as the table's columns) for scripts. Long operations show a progress line on stderr when stderr
is a terminal, rewritten in place at most a few times a second and cleared when done; piped,
they stay quiet.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from typing import Any, TextIO


def table(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> str:
    cells = [["" if r.get(c) is None else str(r.get(c)) for c in columns] for r in rows]
    widths = [max([len(c), *(len(row[i]) for row in cells)]) for i, c in enumerate(columns)]
    lines = ["  ".join(c.upper().ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip()]
    lines += [
        "  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip() for row in cells
    ]
    return "\n".join(lines)


def emit(rows: Sequence[dict[str, Any]], columns: Sequence[str], *, as_json: bool) -> None:
    if as_json:
        print(json.dumps(list(rows), indent=2, default=str))
    elif rows:
        print(table(rows, columns))
    else:
        print("(none)")


class Progress:
    """A progress line on stderr, only when stderr is a terminal."""

    def __init__(self, stream: TextIO | None = None, *, every_s: float = 0.2) -> None:
        self._stream = stream or sys.stderr
        self.enabled = self._stream.isatty()
        self._every = every_s
        self._last = 0.0
        self._width = 0

    def show(self, text: str, *, force: bool = False) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if not force and now - self._last < self._every:
            return
        self._last = now
        pad = max(0, self._width - len(text))
        self._stream.write("\r" + text + " " * pad)
        self._stream.flush()
        self._width = len(text)

    def done(self) -> None:
        if self.enabled and self._width:
            self._stream.write("\r" + " " * self._width + "\r")
            self._stream.flush()
            self._width = 0


def rate(count: int, seconds: float) -> str:
    return f"{count / seconds:,.0f}/s" if seconds > 0 else "-"
