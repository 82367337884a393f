"""80 % prediction intervals from measured log errors.

A spread summarises the log errors ``r = ln(predicted / measured)`` of predictions whose
measurements were not used to make them (a calibration's cross-validated residuals, or the
product's own validation residuals). The measurement of a new estimate ``p`` then lies in
``[p * exp(-r_high), p * exp(-r_low)]`` with 80 % probability, where ``r_low`` / ``r_high`` are
the spread's 10th / 90th percentiles:

- from at least :data:`EMPIRICAL_MIN` errors, their empirical percentiles;
- from fewer, a Student-t prediction interval around their mean (``mean -+ t(0.9, n - 1) *
  stdev * sqrt(1 + 1 / n)``: where the next error falls, the mean's own uncertainty included),
  which widens as the sample shrinks (from 3 errors, ``t = 1.89``, times 1.15).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from app.core.errors import InvalidParameterError

#: Coverage the intervals aim at, and its two tails.
COVERAGE = 0.8
LOW_QUANTILE = (1 - COVERAGE) / 2
HIGH_QUANTILE = 1 - LOW_QUANTILE
#: Errors from which the empirical percentiles are used instead of the t interval.
EMPIRICAL_MIN = 20
#: Student-t 90th percentiles by degrees of freedom (1-19); the normal's beyond.
_T90 = (3.078, 1.886, 1.638, 1.533, 1.476, 1.440, 1.415, 1.397, 1.383, 1.372, 1.363, 1.356,
        1.350, 1.345, 1.341, 1.337, 1.333, 1.330, 1.328)  # fmt: skip
_Z90 = 1.2816
#: Largest |log error| a spread may state (a factor of about 20 000 either way).
MAX_LOG_ERROR = 10.0


def t90(degrees_of_freedom: int) -> float:
    if degrees_of_freedom < 1:
        raise InvalidParameterError("degrees_of_freedom", degrees_of_freedom, ">= 1")
    if degrees_of_freedom <= len(_T90):
        return _T90[degrees_of_freedom - 1]
    return _Z90


def _quantile(sorted_values: Sequence[float], q: float) -> float:
    position = q * (len(sorted_values) - 1)
    low = math.floor(position)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (position - low)


@dataclass(frozen=True, slots=True, kw_only=True)
class Spread:
    """The 10th and 90th percentiles of held-out log errors, and how many there were."""

    low: float
    high: float
    count: int

    def __post_init__(self) -> None:
        for field in ("low", "high"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise InvalidParameterError(field, value, "a number")
            if not -MAX_LOG_ERROR <= value <= MAX_LOG_ERROR:
                raise InvalidParameterError(
                    field, value, f"a log error in [-{MAX_LOG_ERROR:g}, {MAX_LOG_ERROR:g}]"
                )
        if self.low > self.high:
            raise InvalidParameterError("low", self.low, f"<= high ({self.high})")
        if isinstance(self.count, bool) or not isinstance(self.count, int) or self.count < 1:
            raise InvalidParameterError("count", self.count, "an integer >= 1")

    @classmethod
    def of(cls, log_errors: Sequence[float]) -> Spread:
        """The spread of ``log_errors`` (see the module docstring)."""
        errors = sorted(max(-MAX_LOG_ERROR, min(MAX_LOG_ERROR, e)) for e in log_errors)
        n = len(errors)
        if n == 0:
            raise InvalidParameterError("log_errors", n, "at least one error")
        if n >= EMPIRICAL_MIN:
            low, high = _quantile(errors, LOW_QUANTILE), _quantile(errors, HIGH_QUANTILE)
        elif n == 1:
            low = high = errors[0]
        else:
            mean = statistics.fmean(errors)
            half = t90(n - 1) * statistics.stdev(errors) * math.sqrt(1.0 + 1.0 / n)
            low, high = mean - half, mean + half
        clip = MAX_LOG_ERROR
        return cls(low=max(-clip, low), high=min(clip, high), count=n)

    def widened(self, other: Spread) -> Spread:
        """The union of two spreads (an estimate outside a calibration's ranges)."""
        return Spread(
            low=min(self.low, other.low),
            high=max(self.high, other.high),
            count=min(self.count, other.count),
        )

    def interval(self, predicted: float) -> tuple[float, float]:
        """Where the measurement of ``predicted`` lies with 80 % probability."""
        return predicted * math.exp(-self.high), predicted * math.exp(-self.low)

    def to_dict(self) -> dict[str, Any]:
        return {"low": self.low, "high": self.high, "count": self.count}

    @classmethod
    def from_dict(cls, data: object, field: str) -> Spread:
        if not isinstance(data, Mapping) or set(data) != {"low", "high", "count"}:
            raise InvalidParameterError(field, data, "an object with low, high and count")
        try:
            return cls(low=data["low"], high=data["high"], count=data["count"])
        except InvalidParameterError as err:
            raise InvalidParameterError(f"{field}.{err.field}", err.value, err.allowed) from None


@dataclass(frozen=True, slots=True, kw_only=True)
class Intervals:
    """80 % intervals of one estimate's TTFT, TPOT and output throughput."""

    ttft_ms: tuple[float, float]
    tpot_ms: tuple[float, float]
    throughput: tuple[float, float]


def estimate_intervals(
    *,
    ttft_ms: float,
    tpot_ms: float,
    throughput: float,
    output_length: int,
    ttft: Spread,
    tpot: Spread,
) -> Intervals:
    """The intervals of one estimate. Throughput scales inversely with a request's end-to-end
    time (``TTFT + (output_length - 1) * TPOT``): its bounds take both latencies at the same
    end of their intervals (the two errors share their causes, so they move together)."""
    ttft_iv = ttft.interval(ttft_ms)
    tpot_iv = tpot.interval(tpot_ms)
    decode_steps = max(0, output_length - 1)
    e2e = ttft_ms + decode_steps * tpot_ms
    slow = ttft_iv[1] + decode_steps * tpot_iv[1]
    fast = ttft_iv[0] + decode_steps * tpot_iv[0]
    if e2e > 0 and slow > 0 and fast > 0:
        thr = (throughput * e2e / slow, throughput * e2e / fast)
    else:
        thr = (throughput, throughput)
    return Intervals(ttft_ms=ttft_iv, tpot_ms=tpot_iv, throughput=thr)
