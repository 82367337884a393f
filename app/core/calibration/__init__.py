"""Calibration: physical parameters of the latency and serving model fitted to a user's own
measurements, and the 80 % prediction intervals of every estimate.

- :mod:`.parameters` the fittable parameters, their bounds, and how they apply;
- :mod:`.fit` robust bounded least squares on log errors, and its cross-validation;
- :mod:`.profile` the calibration profile (a value with a content digest) and applicability;
- :mod:`.interval` spreads of held-out log errors and the intervals they give;
- :mod:`.residuals` the product's own validation residuals, per group (uncalibrated intervals).

The fit over measurement rows lives in :mod:`app.core.validation.calibrate` (it replays rows).
"""

from app.core.calibration.interval import (
    Intervals,
    Spread,
    answer_notice,
    at_risk,
    estimate_intervals,
)
from app.core.calibration.parameters import (
    PARAMETER_NAMES,
    PARAMETERS,
    apply_to_device,
    apply_to_profile,
)
from app.core.calibration.profile import CalibrationProfile, profile_from_dict

__all__ = [
    "PARAMETERS",
    "PARAMETER_NAMES",
    "CalibrationProfile",
    "Intervals",
    "Spread",
    "answer_notice",
    "apply_to_device",
    "apply_to_profile",
    "at_risk",
    "estimate_intervals",
    "profile_from_dict",
]
