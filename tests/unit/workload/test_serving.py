"""simulate_serving: data-parallel split, KV admission, combination of replicas."""

from __future__ import annotations

import pytest

from app.core.errors import InfeasibleError, InvalidParameterError
from app.core.spec import WorkloadSpec
from app.core.workload import simulate_closed_loop, simulate_serving
from tests.unit.engine.fakes import LinearLatency

DATA = WorkloadSpec(input_length=512, output_length=64, max_batched_tokens=1024)


class KvLimited(LinearLatency):
    """A fake that also knows how many requests its KV cache holds."""

    def __init__(self, capacity: int) -> None:
        super().__init__(base_ms=1.0, per_token_ms=0.001)
        self.capacity = capacity
        self.asked: list[tuple[int, int]] = []

    def kv_capacity_requests(self, context_len: int, max_batched_tokens: int) -> int:
        self.asked.append((context_len, max_batched_tokens))
        return self.capacity


def test_one_replica_is_the_closed_loop() -> None:
    latency = LinearLatency()
    got = simulate_serving(DATA, 8, latency, num_requests=40)
    want = simulate_closed_loop(DATA, 8, LinearLatency(), num_requests=40)
    assert got == want


def test_kv_admission_caps_running_requests() -> None:
    latency = KvLimited(capacity=3)
    capped = simulate_serving(DATA, 12, latency, num_requests=24)
    assert latency.asked == [(512 + 64, 1024)]
    assert capped.max_running == 3
    free = simulate_serving(
        DATA, 12, LinearLatency(base_ms=1.0, per_token_ms=0.001), num_requests=24
    )
    assert free.max_running is None
    assert capped.ttft_ms > free.ttft_ms  # queued for KV blocks
    both = simulate_serving(DATA, 12, KvLimited(capacity=5), num_requests=24, max_num_seqs=2)
    assert both.max_running == 2
    with pytest.raises(InfeasibleError, match="does not fit"):
        simulate_serving(DATA, 4, KvLimited(capacity=0))


def test_data_parallel_replicas_add_throughput() -> None:
    one = simulate_serving(DATA, 4, LinearLatency(), num_requests=40)
    two = simulate_serving(DATA, 8, LinearLatency(), dp=2, num_requests=80)
    assert two.clients == 8 and two.measured_requests == 80
    assert two.throughput_tokens_s == pytest.approx(2 * one.throughput_tokens_s)
    assert two.ttft_ms == pytest.approx(one.ttft_ms)
    assert two.tpot_ms == pytest.approx(one.tpot_ms)


def test_uneven_split_weights_latencies_by_requests() -> None:
    three = simulate_serving(DATA, 3, LinearLatency(), num_requests=30)
    two = simulate_serving(DATA, 2, LinearLatency(), num_requests=20)
    split = simulate_serving(DATA, 5, LinearLatency(), dp=2, num_requests=50)
    assert split.measured_requests == 50
    assert split.ttft_ms == pytest.approx((three.ttft_ms * 30 + two.ttft_ms * 20) / 50)
    assert split.throughput_tokens_s == pytest.approx(
        three.throughput_tokens_s + two.throughput_tokens_s
    )
    # More replicas than clients: idle replicas add nothing.
    sparse = simulate_serving(DATA, 2, LinearLatency(), dp=8, num_requests=20)
    single = simulate_serving(DATA, 1, LinearLatency(), num_requests=10)
    assert sparse.throughput_tokens_s == pytest.approx(2 * single.throughput_tokens_s)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"dp": 0}, "dp"),
        ({"num_requests": 3}, "num_requests"),
        ({"max_num_seqs": 0}, "max_num_seqs"),
    ],
)
def test_bad_arguments(kwargs: dict[str, int], field: str) -> None:
    with pytest.raises(InvalidParameterError, match=field):
        simulate_serving(DATA, 4, LinearLatency(), **kwargs)  # type: ignore[arg-type]
