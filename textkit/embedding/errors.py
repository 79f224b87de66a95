"""The error raised for malformed embedding files."""

from __future__ import annotations

import os

from textkit.errors import TextkitError


class EmbeddingFormatError(TextkitError, ValueError):
    """A vector file is malformed; the message names the file, the line (or row) and the problem."""

    def __init__(self, path: str | os.PathLike, where: str, problem: str):
        self.path = os.fspath(path)
        self.where = where
        self.problem = problem
        super().__init__(f"{self.path}: {where}: {problem}")
