"""The Pareto front of tokens/s per device against tokens/s per user."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from app.core.optimizer import ParetoPoint, Probe, pareto_front
from app.core.parallel import ParallelLayout

LAYOUTS = (ParallelLayout(tp=8, dp=1), ParallelLayout(tp=4, dp=2), ParallelLayout(tp=2, dp=4))


def _probe(
    tpot_ms: float | None,
    throughput: float,
    layout: ParallelLayout = LAYOUTS[0],
    batch_size: int = 1,
    feasible: bool = True,
) -> Probe:
    return Probe(
        layout=layout,
        batch_size=batch_size,
        concurrency=batch_size * layout.dp,
        feasible=feasible,
        reason=None if feasible else "TPOT over the limit",
        ttft_ms=100.0,
        tpot_ms=tpot_ms,
        throughput_tokens_s=throughput,
        request_throughput=throughput / 100.0,
        memory_left_gb=1.0,
        method="closed_loop",
    )


def _dominates(a: ParetoPoint, b: ParetoPoint) -> bool:
    return (
        a.user_tokens_s >= b.user_tokens_s
        and a.device_tokens_s >= b.device_tokens_s
        and (a.user_tokens_s > b.user_tokens_s or a.device_tokens_s > b.device_tokens_s)
    )


def test_known_front() -> None:
    """More concurrency: more tokens/s per device, fewer per user; a slower layout drops out."""
    fast = [_probe(10.0, 800.0, batch_size=1), _probe(20.0, 3200.0, batch_size=4)]
    dominated = _probe(25.0, 2400.0, layout=LAYOUTS[1], batch_size=2)  # slower and less
    out_of_memory = _probe(None, 0.0, layout=LAYOUTS[2], batch_size=64, feasible=False)
    front = pareto_front([*fast, dominated, out_of_memory])
    assert [p.probe for p in front] == [fast[1], fast[0]]
    assert [p.user_tokens_s for p in front] == [50.0, 100.0]
    assert [p.device_tokens_s for p in front] == [400.0, 100.0]
    assert [p.tpot_ms for p in front] == [20.0, 10.0]


def test_sla_infeasible_points_take_part() -> None:
    over_limit = _probe(40.0, 16000.0, batch_size=16, feasible=False)
    front = pareto_front([_probe(10.0, 800.0), over_limit])
    assert over_limit in [p.probe for p in front]


def test_ties_keep_the_first_and_degenerate_probes_are_left_out() -> None:
    first, second = _probe(10.0, 800.0, batch_size=1), _probe(10.0, 800.0, batch_size=2)
    degenerate = [_probe(0.0, 800.0), _probe(math.inf, 800.0), _probe(5.0, 0.0)]
    front = pareto_front([first, second, *degenerate])
    assert [p.probe for p in front] == [first]
    assert pareto_front([]) == ()


probes = st.lists(
    st.builds(
        _probe,
        tpot_ms=st.one_of(st.none(), st.floats(0.5, 500.0)),
        throughput=st.floats(0.0, 1e6),
        layout=st.sampled_from(LAYOUTS),
        batch_size=st.integers(1, 512),
        feasible=st.booleans(),
    ),
    max_size=40,
)


@given(probes)
def test_front_is_exactly_the_non_dominated_set(given_probes: list[Probe]) -> None:
    front = pareto_front(given_probes)
    candidates = [
        ParetoPoint(
            probe=p,
            tpot_ms=p.tpot_ms,
            user_tokens_s=1000.0 / p.tpot_ms,
            device_tokens_s=p.throughput_per_device,
        )
        for p in given_probes
        if p.tpot_ms is not None and p.throughput_per_device > 0.0
    ]
    for point in front:  # nothing evaluated beats a front point on both axes
        assert not any(_dominates(c, point) for c in candidates)
    chosen = {id(p.probe) for p in front}
    for candidate in candidates:  # every other candidate is dominated or equalled by the front
        if id(candidate.probe) not in chosen:
            assert any(
                f.user_tokens_s >= candidate.user_tokens_s
                and f.device_tokens_s >= candidate.device_tokens_s
                for f in front
            )
    users = [p.user_tokens_s for p in front]
    devices = [p.device_tokens_s for p in front]
    assert users == sorted(users) and len(set(users)) == len(users)
    assert devices == sorted(devices, reverse=True)
