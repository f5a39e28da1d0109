"""Reading a user's data: TSV/CSV/JSONL records (a format: one registered reader), their labels, splits and fingerprint; the demo data.

Torch-free: ``hpo`` reads and checks a data file without importing torch.
"""

from __future__ import annotations

from trial_executor.data._data import HOLDOUTS, DataError, TextClassificationData, hold_out_size, load_text_classification
from trial_executor.data._files import Reader, Records, register_format, unregister_format
from trial_executor.data._messages import bounded_list
from trial_executor.data._synthetic import demo_dataset, make_synthetic_reviews

__all__ = [
    "HOLDOUTS",
    "DataError",
    "Reader",
    "Records",
    "TextClassificationData",
    "bounded_list",
    "demo_dataset",
    "hold_out_size",
    "load_text_classification",
    "make_synthetic_reviews",
    "register_format",
    "unregister_format",
]
