"""``one_ahead``: item n + 1 is started before pair n is handed out; closing closes the source."""

from __future__ import annotations

from textkit.lookahead import one_ahead


def test_the_next_item_starts_before_the_current_one_is_handed_out():
    events = []

    def source():
        for item in range(3):
            events.append(f"take {item}")
            yield item

    for item, started in one_ahead(source(), lambda item: events.append(f"start {item}") or -item):
        events.append(f"handle {item} {started}")
    assert events == ["take 0", "start 0", "take 1", "start 1", "handle 0 0",
                      "take 2", "start 2", "handle 1 -1", "handle 2 -2"]
    assert list(one_ahead([], lambda item: item)) == []


def test_closing_early_closes_the_source():
    closed = []

    def source():
        try:
            yield from range(10)
        finally:
            closed.append(True)

    pairs = one_ahead(source(), lambda item: item)
    assert next(pairs) == (0, 0)
    pairs.close()
    assert closed == [True]
