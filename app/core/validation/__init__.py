"""Replay of measured data (above the optimizer and runner; imported by nothing in core).

cases.py     ValidationCase and the loaders of the measurement files
predict.py   predictions of a case (one forward, or a serving simulation); ServingReplay
report.py    errors per case, summaries per kind and group, targets, CSV / table / JSON
replay.py    LOADERS, load_cases, run_validation
case_file.py any measurement file with the serving columns (validate --cases)
disagg_file.py a measurement file of disaggregated deployments (prefill and decode pools)
recipe_layouts.py agg rows whose recipe ran another deployment than the one recorded
replicas.py  configurations measured more than once: the file's replica floor
ascend_file.py published Ascend serving results (one metric per row, free-text load columns)
"""

from app.core.validation.ascend_file import (
    ASCEND_CASE_COLUMNS,
    is_ascend_header,
    replay_ascend_file,
)
from app.core.validation.case_file import (
    CASE_COLUMNS,
    MAX_CASE_ROWS,
    CaseFileReport,
    GroupErrors,
    RowOutcome,
    read_case_rows,
    replay_case_file,
    row_case,
)
from app.core.validation.cases import (
    SERVING_TPOT_KIND,
    SERVING_TTFT_KIND,
    TARGET_DEVICE_MEDIAN_APE_PCT,
    TARGET_KIND,
    TARGET_MEDIAN_APE_PCT,
    TARGETS,
    ValidationCase,
    load_agg_serving_cases,
    load_msmodeling_cases,
    load_published_points,
)
from app.core.validation.disagg_file import (
    DISAGG_CASE_COLUMNS,
    DisaggReplay,
    is_disagg_header,
    replay_disagg_file,
)
from app.core.validation.predict import (
    ALL_AT_ONCE_RATE,
    BenchmarkRun,
    ServingReplay,
    engine_serving_model,
    predictors,
)
from app.core.validation.replay import LOADERS, load_cases, run_validation
from app.core.validation.report import CaseResult, ErrorSummary, ValidationReport

__all__ = [
    "ALL_AT_ONCE_RATE",
    "ASCEND_CASE_COLUMNS",
    "CASE_COLUMNS",
    "DISAGG_CASE_COLUMNS",
    "LOADERS",
    "MAX_CASE_ROWS",
    "SERVING_TPOT_KIND",
    "SERVING_TTFT_KIND",
    "TARGETS",
    "TARGET_DEVICE_MEDIAN_APE_PCT",
    "TARGET_KIND",
    "TARGET_MEDIAN_APE_PCT",
    "BenchmarkRun",
    "CaseFileReport",
    "CaseResult",
    "DisaggReplay",
    "ErrorSummary",
    "GroupErrors",
    "RowOutcome",
    "ServingReplay",
    "ValidationCase",
    "ValidationReport",
    "engine_serving_model",
    "is_ascend_header",
    "is_disagg_header",
    "load_agg_serving_cases",
    "load_cases",
    "load_msmodeling_cases",
    "load_published_points",
    "predictors",
    "read_case_rows",
    "replay_ascend_file",
    "replay_case_file",
    "replay_disagg_file",
    "row_case",
    "run_validation",
]
