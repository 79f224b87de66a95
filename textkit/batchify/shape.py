"""The padded shape a batch must take, as decided by a bucket sampler."""

from typing import NamedTuple


class BatchShape(NamedTuple):
    """Target shape of one padded batch.

    rows:    number of rows of the batch (the bucket's fixed batch size); rows beyond the real
             samples are dummy rows made only of padding (their length is 0).
    lengths: padded length per length field, e.g. ``(src_len, tgt_len)``; a ``Pad`` picks its
             entry with ``length_index``.
    """

    rows: int
    lengths: tuple[int, ...]
