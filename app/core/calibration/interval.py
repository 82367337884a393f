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

import bisect
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
#: The widest an 80 % interval may be to carry information (issue 31: hi / lo <= 4): a wider
#: one says the measurement lies within a factor of two either way of the estimate or worse,
#: and the answer says so (:attr:`Intervals.notice`) rather than ship it as if it informed.
MAX_WIDTH_RATIO = 4.0


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


def _weighted_quantile(values: Sequence[float], centres: Sequence[float], q: float) -> float:
    """``q``'s value, linear between the sorted ``values`` at their mass ``centres``."""
    if q <= centres[0]:
        return values[0]
    if q >= centres[-1]:
        return values[-1]
    i = bisect.bisect_right(centres, q) - 1
    share = (q - centres[i]) / (centres[i + 1] - centres[i])
    return values[i] + (values[i + 1] - values[i]) * share


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

    @classmethod
    def of_weighted(cls, weighted_errors: Sequence[tuple[float, float]]) -> Spread:
        """The spread of ``(log error, weight)`` pairs: from :data:`EMPIRICAL_MIN` errors on,
        the weighted 10th and 90th percentiles (each error's mass centred on its value,
        linear between them); from fewer, :meth:`of` of the errors."""
        if len(weighted_errors) < EMPIRICAL_MIN:
            return cls.of([e for e, _ in weighted_errors])
        clip = MAX_LOG_ERROR
        pairs = sorted((max(-clip, min(clip, e)), w) for e, w in weighted_errors)
        if any(not w > 0 for _, w in pairs):
            raise InvalidParameterError("weights", [w for _, w in pairs], "positive weights")
        total = math.fsum(w for _, w in pairs)
        centres, cumulative = [], 0.0
        for _, w in pairs:
            centres.append((cumulative + w / 2) / total)
            cumulative += w
        values = [e for e, _ in pairs]
        return cls(
            low=_weighted_quantile(values, centres, LOW_QUANTILE),
            high=_weighted_quantile(values, centres, HIGH_QUANTILE),
            count=len(pairs),
        )

    def widened(self, other: Spread) -> Spread:
        """The union of two spreads (an estimate outside a calibration's ranges)."""
        return Spread(
            low=min(self.low, other.low),
            high=max(self.high, other.high),
            count=min(self.count, other.count),
        )

    @property
    def excludes_zero(self) -> bool:
        """The errors all lie on one side: an estimate's own value would fall outside its
        interval (a systematic bias the model does not represent)."""
        return self.low > 0.0 or self.high < 0.0

    def around_point(self) -> Spread:
        """The spread an estimate states when :attr:`excludes_zero`: centred on the estimate
        and widened to the symmetric hull of the errors (``-+ max(|low|, |high|)``), so the
        interval holds both the estimate and every value the residuals put the measurement
        at; a spread that already holds zero is returned as it is."""
        if not self.excludes_zero:
            return self
        half = max(abs(self.low), abs(self.high))
        return Spread(low=-half, high=half, count=self.count)

    @property
    def width_ratio(self) -> float:
        """The interval's ``hi / lo`` (the same for every estimate)."""
        return math.exp(self.high - self.low)

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


#: What an answer says when an interval had to be centred on its estimate.
OUTSIDE_DOMAIN_NOTICE = (
    "the estimate lies outside the validated domain: the {metrics} residuals of this "
    "device, engine and model class all lie on one side of the estimate (a bias the model "
    "does not yet represent), so the 80 % interval is centred on the estimate and widened to "
    "hold every value those residuals put the measurement at"
)
#: What an answer says when an interval is too wide to inform (:data:`MAX_WIDTH_RATIO`).
WIDE_NOTICE = (
    "the estimate's uncertainty exceeds the informative range: its 80 % {metrics} interval "
    "spans {ratios} (hi / lo, over {limit:g}x), the spread of the residuals it comes from "
    "(other deployments of this device and engine, or a calibration's points); read it as a "
    "rough estimate, or calibrate with measured points of this deployment"
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Intervals:
    """80 % intervals of one estimate's TTFT, TPOT and output throughput."""

    ttft_ms: tuple[float, float]
    tpot_ms: tuple[float, float]
    throughput: tuple[float, float]
    #: The metrics (``ttft``, ``tpot``) whose spread excluded the estimate and was centred.
    centred: tuple[str, ...] = ()
    #: The metrics whose interval is wider than :data:`MAX_WIDTH_RATIO`, with that width.
    wide: tuple[tuple[str, float], ...] = ()

    @property
    def notice(self) -> str | None:
        """The outside-the-validated-domain notice when an interval was centred, and the
        too-wide-to-inform one when an interval spans more than :data:`MAX_WIDTH_RATIO`."""
        parts = []
        if self.centred:
            metrics = " and ".join(m.upper() for m in self.centred)
            parts.append(OUTSIDE_DOMAIN_NOTICE.format(metrics=metrics))
        if self.wide:
            parts.append(
                WIDE_NOTICE.format(
                    metrics=" and ".join(m.upper() for m, _ in self.wide),
                    ratios=" and ".join(f"{ratio:.1f}x" for _, ratio in self.wide),
                    limit=MAX_WIDTH_RATIO,
                )
            )
        return "; ".join(parts) or None

    def sla_confidence(
        self, *, ttft_limit_ms: float | None, tpot_limit_ms: float | None
    ) -> float | None:
        """The share of the intervals inside the limits (``None`` without a limit): per
        limited metric the share of its interval, on the log scale the errors are measured
        on, below the limit, and the smaller of the two (the errors share their causes, so
        the likelier miss decides). 0.5 or less: the limit is as likely missed as met."""
        shares = [
            _share_below(interval, limit)
            for interval, limit in ((self.ttft_ms, ttft_limit_ms), (self.tpot_ms, tpot_limit_ms))
            if limit is not None
        ]
        return min(shares) if shares else None


#: Below this ``sla_confidence`` a limit is more likely missed than met.
SLA_AT_RISK = 0.5


def at_risk(confidence: float | None) -> bool:
    """The intervals say a limit is more likely missed than met."""
    return confidence is not None and confidence < SLA_AT_RISK


def answer_notice(intervals: Intervals, at_risk_labels: Sequence[str] = ()) -> str | None:
    """An answer's notice: the outside-the-validated-domain one, and the estimates (rows by
    label) that meet the limits at their point while their intervals say a limit is more
    likely missed than met."""
    parts = [intervals.notice] if intervals.notice else []
    if at_risk_labels:
        parts.append(
            f"{', '.join(at_risk_labels)}: the point meets the limits but its 80 % interval "
            f"says a limit is more likely missed than met (sla_confidence < {SLA_AT_RISK:g}); "
            "not plainly feasible"
        )
    return "; ".join(parts) or None


def _share_below(interval: tuple[float, float], limit: float) -> float:
    low, high = interval
    if high <= limit:
        return 1.0
    if low >= limit:
        return 0.0
    if low <= 0.0:  # an interval reaching zero (no such latency): its linear share
        return (limit - low) / (high - low)
    return math.log(limit / low) / math.log(high / low)


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
    centred = tuple(
        name for name, spread in (("ttft", ttft), ("tpot", tpot)) if spread.excludes_zero
    )
    ttft, tpot = ttft.around_point(), tpot.around_point()
    wide = tuple(
        (name, spread.width_ratio)
        for name, spread in (("ttft", ttft), ("tpot", tpot))
        if spread.width_ratio > MAX_WIDTH_RATIO
    )
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
    return Intervals(ttft_ms=ttft_iv, tpot_ms=tpot_iv, throughput=thr, centred=centred, wide=wide)
