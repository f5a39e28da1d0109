"""The heap while trials run: what lived before them is left out of the collections between them.

Torch-free, as :mod:`trial_executor._caches`: the orchestrator runs its trials inside :func:`heap_frozen` too.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

_lock = threading.Lock()
_depth = 0
_ours = False  # whether the outermost block froze the heap (not a caller that had frozen it already)


@contextlib.contextmanager
def heap_frozen() -> Iterator[None]:
    """Run trials with the objects alive before them left out of garbage collection.

    :func:`~trial_executor.run_trial` collects garbage before and after its trial
    (``trial_executor.device.release_memory``), and a full collection also walks every object the
    libraries, the data and the caller hold: about 0.26 s each on a 2-core AMD EPYC with torch and
    transformers loaded, half of a small trial's seconds. Inside this block a collection walks only what
    was made since it began, the trials' models among it: a trial takes one full collection, at the
    block's start, and a caller running trials one after another inside one block none.
    When the outermost block ends (nested, or entered from several threads), those objects are collected
    as before: nothing the caller holds is kept from the collector past the block. A caller that froze
    its heap itself (``gc.freeze()``, as a server does before it forks) keeps its freeze as it is: the
    block then freezes and unfreezes nothing.
    """
    global _depth, _ours
    with _lock:
        if _depth == 0:
            _ours = gc.get_freeze_count() == 0
            if _ours:
                gc.collect()  # what is garbage already is freed now, not kept for the block's length
                gc.freeze()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _ours:
                gc.unfreeze()
