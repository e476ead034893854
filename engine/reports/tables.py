"""Plain-text tables for the CLI: aligned columns, wrapped cells, no colour codes in pipes."""

from __future__ import annotations

from collections.abc import Sequence

MAX_CELL = 72


def _wrap(cell: str, width: int) -> list[str]:
    lines: list[str] = []
    for raw in cell.split("\n"):
        while len(raw) > width:
            cut = raw.rfind(" ", 0, width)
            cut = cut if cut > width // 2 else width
            lines.append(raw[:cut])
            raw = raw[cut:].lstrip()
        lines.append(raw)
    return lines


def render_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Columns sized to content (cells wrap past ``MAX_CELL``); one header line."""
    cells = [[_wrap("" if c is None else str(c), MAX_CELL) for c in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        for i, lines in enumerate(row):
            widths[i] = max(widths[i], *(len(line) for line in lines))
    out = ["  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip()]
    for row in cells:
        height = max(len(lines) for lines in row) if row else 1
        for k in range(height):
            parts = [(lines[k] if k < len(lines) else "").ljust(w) for lines, w in zip(row, widths)]
            out.append("  ".join(parts).rstrip())
    return "\n".join(out)
