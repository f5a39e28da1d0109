"""heap_frozen: the collections inside it walk only what was made since it began; nothing is kept past it."""

from __future__ import annotations

import gc
import weakref

import torch

from trial_executor import heap_frozen
from trial_executor.device import release_memory


class _Node:
    other: _Node


def _cycle() -> tuple[_Node, weakref.ref[_Node]]:
    """Two objects that only the collector frees (each keeps the other alive), and a weak reference to one."""
    first, second = _Node(), _Node()
    first.other, second.other = second, first
    return first, weakref.ref(first)


def test_collections_inside_heap_frozen_free_what_the_trials_made_and_the_callers_objects_after() -> None:
    held, held_ref = _cycle()
    with heap_frozen():
        with heap_frozen():  # nested, as a verdict inside a run would be
            made, made_ref = _cycle()
            del made, held  # a trial's model, done with; an object the caller dropped meanwhile
            release_memory(torch.device("cpu"))
            assert made_ref() is None  # what the trials made is collected between trials
            assert held_ref() is not None  # what lived before is not walked (the cost the block saves)
        assert gc.get_freeze_count() > 0  # the inner block's end leaves the outer one's objects out
    assert gc.get_freeze_count() == 0
    gc.collect()
    assert held_ref() is None  # nothing the caller held is kept from the collector past the block



def test_a_heap_the_caller_froze_itself_keeps_its_freeze_as_it_was() -> None:
    # A server freezes its heap before it forks (copy-on-write); the block's end unfroze all of it.
    held, held_ref = _cycle()
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        with heap_frozen():
            made, made_ref = _cycle()
            del made
            release_memory(torch.device("cpu"))
            assert made_ref() is None
            assert gc.get_freeze_count() <= frozen  # nothing frozen on top (a frozen object freed by its refcount leaves)
        assert 0 < gc.get_freeze_count() <= frozen  # and nothing unfrozen
    finally:
        gc.unfreeze()
    del held
    gc.collect()
    assert held_ref() is None
