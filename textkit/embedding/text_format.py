"""Text vector files: GloVe (no header) and word2vec / fastText ``.vec`` (an ``N D`` header).

The file is read in blocks of whole lines (1 MiB by default, so every pass stays in cache). Per
block, numpy finds the fields (runs of bytes > 0x20), the first field of every line and hence the
token (everything before the line's last D fields, so tokens may contain spaces), and
``float_parser.parse_fields`` converts all numbers of the block at once. Tokens are decoded as
UTF-8 with one ``decode`` per block; only when that fails is the offending line searched for.
"""

from __future__ import annotations

import collections
import concurrent.futures
import gzip
import os
import warnings
from pathlib import Path
from typing import NamedTuple

import numpy as np
from tqdm.auto import tqdm

from textkit.embedding.errors import EmbeddingFormatError
from textkit.embedding.float_parser import FIELD_PAD, parse_fields

__all__ = ["has_text_header", "open_maybe_gzip", "read_text_vectors"]

_BLOCK_BYTES = 1 << 20
_PROGRESS_MIN_BYTES = 64 << 20
_GZIP_MAGIC = b"\x1f\x8b"
_BOM = b"\xef\xbb\xbf"


def open_maybe_gzip(path: str | os.PathLike):
    """``(stream, raw)``: a binary stream of the (decompressed) content and the raw file."""
    raw = open(path, "rb")
    if raw.read(2) == _GZIP_MAGIC:
        raw.seek(0)
        return gzip.GzipFile(fileobj=raw, mode="rb"), raw
    raw.seek(0)
    return raw, raw


def _parse_header(line: bytes) -> tuple[int, int] | None:
    """``(count, dim)`` if ``line`` is a word2vec header ``N D``, else None."""
    fields = line.split()
    if len(fields) == 2 and fields[0].isdigit() and fields[1].isdigit():
        return int(fields[0]), int(fields[1])
    return None


def has_text_header(first_line: bytes) -> bool:
    """Whether a text vector file starting with ``first_line`` has an ``N D`` header (after
    a UTF-8 byte order mark, if any)."""
    return _parse_header(first_line.removeprefix(_BOM)) is not None


def _most_common_dim(head: bytes) -> int:
    """D of a file without header: the most common field count - 1 over its first lines (one
    odd first line, e.g. a token with a space, does not decide it)."""
    lines = head.split(b"\n")[:-1] or [head]
    counts = collections.Counter(len(line.split()) for line in lines[:200] if line.strip())
    return counts.most_common(1)[0][0] - 1 if counts else 0


def _decode_tokens(tokens: list[bytes], path, first_line: int, line_numbers: np.ndarray | None,
                   errors: str) -> list[str]:
    try:
        return b"\n".join(tokens).decode("utf-8", errors).split("\n")
    except UnicodeDecodeError:
        for offset, token in enumerate(tokens):
            try:
                token.decode("utf-8")
            except UnicodeDecodeError as err:
                line = offset if line_numbers is None else int(line_numbers[offset])
                raise EmbeddingFormatError(
                    path, f"line {first_line + line}",
                    f"token {token!r} is not valid UTF-8 ({err.reason} at byte {err.start}); "
                    "pass encoding_errors='replace' to load it with U+FFFD") from None
        raise


class _Options(NamedTuple):
    """How a block is parsed: codec error handler, whether D came from a header, and whether
    non-finite values are kept."""

    errors: str = "strict"
    from_header: bool = False
    allow_nonfinite: bool = False


def _is_number(field: bytes) -> bool:
    try:
        float(field)
    except ValueError:
        return False
    return True


def _check_token_fields(buffer: np.ndarray, starts: np.ndarray, ends: np.ndarray, first: int,
                        last: int, dim: int, path, line: int, options: _Options) -> None:
    """A token spanning fields ``first..last`` must not be a word followed by numbers (a row
    with extra values, or a header whose D is smaller than the rows)."""
    extra = [buffer[starts[f] : ends[f]].tobytes() for f in range(first + 1, last + 1)]
    if all(map(_is_number, extra)):
        word = buffer[starts[first] : ends[first]].tobytes()
        source = "the header's D" if options.from_header else "the dimension of the file"
        raise EmbeddingFormatError(
            path, f"line {line}",
            f"token {word[:40]!r} is followed by {dim + len(extra)} values, expected {dim} "
            f"({source}); the row has extra values or the dimension is wrong")


def _parse_block(buffer: np.ndarray, size: int, dim: int, path, first_line: int,
                 options: _Options) -> tuple[list[str], np.ndarray]:
    """Tokens and float32 [L, dim] vectors of the ``size`` bytes at ``buffer[FIELD_PAD:]``.

    The block holds whole lines, the last one ending in ``\\n``; ``buffer`` has ``FIELD_PAD``
    spaces before and 8 after it.
    """
    end = FIELD_PAD + size
    is_space = buffer[: end + 1] <= 0x20  # [B+1], the byte after the block is a space
    edges = np.flatnonzero(is_space[1:] != is_space[:-1]) + 1
    starts, ends = edges[0::2], edges[1::2]  # [F] field bounds
    newlines = np.flatnonzero(buffer[FIELD_PAD:end] == 0x0A) + FIELD_PAD  # [L]
    line_starts = np.concatenate(([FIELD_PAD], newlines[:-1] + 1))
    first_field = np.searchsorted(starts, line_starts)  # [L]
    n_fields = np.diff(first_field, append=starts.shape[0])  # [L]
    lines = np.flatnonzero(n_fields)  # [L'] non-blank lines (blank lines are skipped)
    if lines.shape[0] < n_fields.shape[0]:
        first_field, n_fields = first_field[lines], n_fields[lines]
    if (short := np.flatnonzero(n_fields < dim + 1)).size:
        line = first_line + int(lines[short[0]])
        found = int(n_fields[short[0]])
        hint = " (the header's D)" if options.from_header else ""
        if line == 1 and found == 2:
            hint = " (this looks like a word2vec 'N D' header: use format='word2vec_text')"
        raise EmbeddingFormatError(
            path, f"line {line}",
            f"expected a token and {dim} values{hint}, found {found} fields")
    token_last = first_field + n_fields - (dim + 1)  # [L'] last field of each token
    is_token = np.zeros(starts.shape[0], dtype=bool)
    is_token[first_field] = True
    for line in np.flatnonzero(token_last != first_field).tolist():  # tokens with spaces
        _check_token_fields(buffer, starts, ends, int(first_field[line]), int(token_last[line]),
                            dim, path, first_line + int(lines[line]), options)
        is_token[first_field[line] : token_last[line] + 1] = True
    number_starts, number_ends = starts[~is_token], ends[~is_token]  # [L' * dim], line order
    values, invalid = parse_fields(buffer, number_starts, number_ends)
    if invalid.size:
        field = int(invalid[0])
        text = buffer[number_starts[field] : number_ends[field]].tobytes()
        raise EmbeddingFormatError(
            path, f"line {first_line + int(lines[field // dim])}",
            f"value {field % dim + 1} of {dim} is not a number: {text[:40]!r}")
    if not options.allow_nonfinite and not (finite := np.isfinite(values)).all():
        field = int(np.argmin(finite))
        text = buffer[number_starts[field] : number_ends[field]].tobytes()
        raise EmbeddingFormatError(
            path, f"line {first_line + int(lines[field // dim])}",
            f"value {field % dim + 1} of {dim} is not finite ({text[:40]!r}); pass "
            "allow_nonfinite=True to load it anyway")
    block = buffer[:end].tobytes()
    tokens = [block[s:e] for s, e in zip(starts[first_field].tolist(), ends[token_last].tolist())]
    line_numbers = None if lines.shape[0] == newlines.shape[0] else lines
    return (_decode_tokens(tokens, path, first_line, line_numbers, options.errors),
            values.reshape(-1, dim))


def _capacity(n_declared: int | None, file_size: int, is_gzip: bool, bytes_per_row: float) -> int:
    """Rows to reserve: the header count unless the file size makes it implausible."""
    estimate = int(file_size * (3.0 if is_gzip else 1.0) / bytes_per_row * 1.02) + 16
    if n_declared is not None and n_declared <= 2 * estimate:
        return n_declared
    return estimate


def _blocks(stream, pending: bytes, line_no: int, block_bytes: int):
    """Yield ``(block, first line number)``: runs of whole lines, each ending in ``\\n``."""
    while True:
        chunk = stream.read(block_bytes)
        data = pending + chunk
        if not chunk:  # end of file
            if data.strip():
                yield (data if data.endswith(b"\n") else data + b"\n"), line_no
            return
        cut = data.rfind(b"\n") + 1
        if cut == 0:  # no whole line yet
            pending = data
            continue
        block, pending = data[:cut], data[cut:]
        yield block, line_no
        line_no += block.count(b"\n")


def _parse_bytes(block: bytes, dim: int, path, first_line: int,
                 options: _Options) -> tuple[list[str], np.ndarray, int]:
    """``_parse_block`` on a padded copy of ``block``; returns (tokens, vectors, len(block))."""
    buffer = np.empty(FIELD_PAD + len(block) + 8, dtype=np.uint8)
    buffer[:FIELD_PAD] = 0x20
    buffer[FIELD_PAD : FIELD_PAD + len(block)] = np.frombuffer(block, np.uint8)
    buffer[FIELD_PAD + len(block) :] = 0x20
    block_tokens, vectors = _parse_block(buffer, len(block), dim, path, first_line, options)
    return block_tokens, vectors, len(block)


class _Rows:
    """A growable float32 [capacity, dim] matrix; untouched capacity costs no resident memory."""

    def __init__(self, capacity: int, dim: int):
        self.matrix = np.empty((max(capacity, 1), dim), dtype=np.float32)
        self.count = 0

    def append(self, rows: np.ndarray) -> None:
        needed = self.count + rows.shape[0]
        if needed > self.matrix.shape[0]:
            grown = np.empty((max(needed, self.matrix.shape[0] * 3 // 2), rows.shape[1]),
                             dtype=np.float32)
            grown[: self.count] = self.matrix[: self.count]
            self.matrix = grown
        self.matrix[self.count : needed] = rows
        self.count = needed

    def result(self) -> np.ndarray:
        if self.count < self.matrix.shape[0]:
            try:  # realloc in place: no copy, the spare capacity is released
                self.matrix.resize((self.count, self.matrix.shape[1]), refcheck=False)
            except ValueError:
                self.matrix = self.matrix[: self.count].copy()
        return self.matrix


def read_text_vectors(
    path: str | os.PathLike,
    *,
    header: bool | None = None,
    encoding_errors: str = "strict",
    block_bytes: int = _BLOCK_BYTES,
    progress: bool | None = None,
    threads: int | None = None,
    allow_nonfinite: bool = False,
) -> tuple[list[str], np.ndarray]:
    """Read a GloVe or word2vec/fastText text vector file (optionally gzip-compressed).

    Args:
      path: the file; gzip content is detected by its magic bytes.
      header: True for an ``N D`` first line (word2vec, fastText ``.vec``), False for none
        (GloVe: D is then the most common value count among the first 200 lines), None to
        detect it (a first line of exactly two integers).
      encoding_errors: ``"strict"`` raises ``EmbeddingFormatError`` naming the line of a token
        that is not UTF-8; ``"replace"`` (or any codec error handler) decodes it anyway.
      block_bytes: bytes parsed per numpy pass.
      progress: show a tqdm bar (default: for files over 64 MiB).
      threads: blocks parsed at once (numpy releases the GIL in its loops); default: the
        number of CPUs, at most 4.
      allow_nonfinite: keep ``nan``/``inf`` values (by default they are an error naming the
        line).

    Returns:
      ``(tokens, vectors)``: N tokens and a float32 [N, D] matrix, in file order (duplicates
      kept). A UTF-8 byte order mark is skipped. A header count that disagrees with the rows is
      a warning; a line with missing or extra values (also: a header D that differs from the
      rows), an unparsable or non-finite number is an ``EmbeddingFormatError`` naming the file
      and line. A token may contain spaces, but not be a word followed by numbers.
    """
    path = Path(path)
    threads = threads or min(4, os.cpu_count() or 1)
    stream, raw = open_maybe_gzip(path)
    file_size = os.fstat(raw.fileno()).st_size
    with stream, raw:
        first = stream.readline()
        if first.startswith(_BOM):
            first = first[len(_BOM):]
        declared = _parse_header(first) if header is not False else None
        if header and declared is None:
            raise EmbeddingFormatError(path, "line 1",
                                       f"expected an 'N D' header, got {first[:60]!r}")
        if declared is not None:
            n_declared, dim = declared
            pending, line_no = b"", 2
        else:
            pending = first + stream.read(1 << 16)
            n_declared, dim = None, _most_common_dim(pending)
            if dim < 1:
                raise EmbeddingFormatError(path, "line 1", "expected a token and its values")
            line_no = 1
        is_gzip = stream is not raw
        options = _Options(encoding_errors, declared is not None, allow_nonfinite)
        rows: _Rows | None = None
        tokens: list[str] = []
        show = progress if progress is not None else file_size > _PROGRESS_MIN_BYTES
        with tqdm(total=file_size, unit="B", unit_scale=True, unit_divisor=1024,
                  desc=f"read {path.name}", disable=not show) as bar, \
                concurrent.futures.ThreadPoolExecutor(max(1, threads)) as pool:
            in_flight: collections.deque = collections.deque()

            def collect() -> None:
                nonlocal rows
                block_tokens, block_vectors, block_size = in_flight.popleft().result()
                if block_tokens:
                    if rows is None:
                        rows = _Rows(_capacity(n_declared, file_size, is_gzip,
                                               block_size / len(block_tokens)), dim)
                    rows.append(block_vectors)
                    tokens.extend(block_tokens)
                bar.update(raw.tell() - bar.n)

            for block, first_line in _blocks(stream, pending, line_no, block_bytes):
                in_flight.append(pool.submit(_parse_bytes, block, dim, path, first_line,
                                             options))
                if len(in_flight) > threads:  # bounds memory: blocks and their temporaries
                    collect()
            while in_flight:
                collect()
            bar.set_postfix_str(f"{len(tokens):,} x {dim} vectors")
    vectors = rows.result() if rows is not None else np.empty((0, dim), dtype=np.float32)
    if n_declared is not None and n_declared != len(tokens):
        warnings.warn(f"{path}: the header declares {n_declared:,} vectors but {len(tokens):,} "
                      "follow; using the rows found", stacklevel=2)
    return tokens, vectors
