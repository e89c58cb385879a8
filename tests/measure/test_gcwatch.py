"""GcWatch times the client's garbage-collector pauses and leaves the collector as it found it."""

from __future__ import annotations

import gc

from latsim.measure.gcwatch import GcWatch


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


def test_collections_are_timed_and_the_heap_is_frozen_only_inside() -> None:
    callbacks = list(gc.callbacks)
    with GcWatch() as watch:
        assert gc.get_freeze_count() > 0
        for _ in range(50_000):  # reference cycles: only the collector frees them
            a, b = Node(), Node()
            a.other, b.other = b, a
        gc.collect()
    stats = watch.stats()
    assert stats["collections"] >= 1 and stats["pause_total_s"] > 0.0
    assert stats["pause_max_s"] <= stats["pause_total_s"]
    assert gc.get_freeze_count() == 0 and gc.callbacks == callbacks
