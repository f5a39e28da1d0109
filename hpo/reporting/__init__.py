"""What a study did: per-precision reports, flat exports, status, live progress, tracking and the dashboard's view.

``hpo.reporting._dashboard`` (optuna-dashboard) is imported only by the ``dashboard`` command.
"""

from hpo.reporting._report import PrecisionRow, StudyReport, build_report

__all__ = ["PrecisionRow", "StudyReport", "build_report"]
