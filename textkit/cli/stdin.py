"""Standard input as lines of text, for the commands that read one item per line (generate,
translate): read as bytes and decoded as UTF-8, so that input in another encoding is refused
naming its line; lines end as ``textkit.data.datasets.read_lines`` reads them from a file (at
``\\n``, a ``\\r`` before it dropped)."""

from __future__ import annotations

import sys

from textkit.errors import DataFileError

__all__ = ["read_stdin_lines"]


def read_stdin_lines() -> list[str]:
    """The lines of standard input (a leading BOM dropped); bytes that are not UTF-8 raise
    ``DataFileError`` naming the line and the byte."""
    lines = sys.stdin.buffer.read().split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    texts = []
    for number, line in enumerate(lines, start=1):
        line = line.removesuffix(b"\r")
        try:
            texts.append(line.decode("utf-8-sig" if number == 1 else "utf-8"))
        except UnicodeDecodeError as err:
            raise DataFileError(f"standard input, line {number}: not UTF-8 ({err.reason} at "
                                f"byte {err.start} of the line); expected UTF-8 text, one "
                                "item per line") from None
    return texts
