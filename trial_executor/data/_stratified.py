"""A stratified hold-out: each class held out in its share of the rows, never a class's last row."""

from __future__ import annotations

import math
import random

from trial_executor.data._values import Label


def stratified_rows(labels: list[Label], n_valid: int, rng: random.Random) -> list[int]:
    """``n_valid`` row indices to hold out (in file order), each class's count its share of them. A class keeps a row for
    training (one of one row is never held out): a class whose share exceeds that gives all it can and the others share
    the rest in proportion; fractional shares are rounded up largest remainder first. Fewer only where every class
    with rows to spare has given them all."""
    by_class: dict[Label, list[int]] = {}
    for i, label in enumerate(labels):
        by_class.setdefault(label, []).append(i)
    classes = sorted(by_class)  # type: ignore[type-var]  # one kind: the same draw on every machine
    room = {c: len(by_class[c]) - 1 for c in classes}
    n_valid = min(n_valid, sum(room.values()))
    count: dict[Label, int] = {}
    free = classes
    while True:
        left, rows = n_valid - sum(count.values()), sum(len(by_class[c]) for c in free)
        quota = {c: len(by_class[c]) * left / rows for c in free}
        capped = [c for c in free if quota[c] >= room[c]]
        if not capped:
            break
        count.update((c, room[c]) for c in capped)
        free = [c for c in free if c not in count]
    count.update((c, math.floor(quota[c])) for c in free)
    short = n_valid - sum(count.values())
    for c in sorted(free, key=lambda c: quota[c] - count[c], reverse=True)[:short]:  # stable: ties in class order
        count[c] += 1
    held = []
    for c in classes:
        held += rng.sample(by_class[c], count[c])
    return sorted(held)
