"""Building a disaggregated deployment: the pools' caps and refusals, the KV transfer."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from app.core.catalog.models import get_model
from app.core.errors import InfeasibleError, InvalidParameterError
from app.core.profiles import PROFILES
from app.core.runner.plan import kv_copies, kv_send_copies
from app.core.workload.disagg_serving import FIRST_TOKEN_RULES
from app.core.workload.disagg_setup import (
    BYTES_PER_GB,
    FIRST_TOKEN_RULE,
    FIRST_TOKEN_TEXT,
    KV_TRANSFER_FIXED_MS,
    PoolWorker,
    disagg_pools,
    tier_kv_transfer,
)
from tests.unit.engine.fakes import ConstantLatency

LATENCY = ConstantLatency(1.0)


@dataclass(frozen=True)
class Tier:
    bandwidth_gb_s: float
    efficiency: float


def worker(kv_requests: int, *, workers: int = 2, ranks: int = 1) -> PoolWorker:
    return PoolWorker(
        workers=workers,
        ranks=ranks,
        coupled=False,
        latency=LATENCY,
        kv_requests=kv_requests,
        label="TP8 DP1 of B200",
    )


def test_the_decode_cap_is_the_engines_cap_or_the_kv_pool_whichever_is_smaller() -> None:
    prefill, decode = disagg_pools(
        worker(40), worker(300), input_length=1024, output_length=1024, running_cap=256
    )
    assert decode.max_running == 256 and prefill.max_requests_per_rank == 40
    assert (prefill.workers, decode.workers) == (2, 2)
    _, decode = disagg_pools(
        worker(40), worker(100), input_length=1024, output_length=1024, running_cap=256
    )
    assert decode.max_running == 100
    _, decode = disagg_pools(
        worker(40), worker(100), input_length=1024, output_length=1024, running_cap=None
    )
    assert decode.max_running == 100


@pytest.mark.parametrize(
    ("prefill_kv", "decode_kv", "needle"),
    [
        (0, 10, "prefill worker TP8 DP1 of B200: no room for one prompt's KV (1024 tokens)"),
        (10, 0, "decode worker TP8 DP1 of B200: no room for one request's KV (2048 tokens)"),
    ],
)
def test_a_worker_without_room_for_one_kv_is_refused(
    prefill_kv: int, decode_kv: int, needle: str
) -> None:
    with pytest.raises(InfeasibleError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        disagg_pools(
            worker(prefill_kv),
            worker(decode_kv),
            input_length=1024,
            output_length=1024,
            running_cap=None,
        )


def test_pool_workers_are_checked() -> None:
    with pytest.raises(InvalidParameterError, match="workers"):
        worker(1, workers=0)
    with pytest.raises(InvalidParameterError, match="kv_requests"):
        worker(-1)


def test_the_transfer_is_bytes_over_the_tiers_effective_link_plus_the_fixed_cost() -> None:
    transfer = tier_kv_transfer(Tier(bandwidth_gb_s=50.0, efficiency=0.8), 40e6)
    assert transfer.bandwidth_bytes_per_s == pytest.approx(50.0 * BYTES_PER_GB * 0.8)
    assert transfer.fixed_ms == KV_TRANSFER_FIXED_MS
    assert transfer.time_ms(1) == pytest.approx(KV_TRANSFER_FIXED_MS + 1.0)
    assert transfer.time_ms(4) == pytest.approx(KV_TRANSFER_FIXED_MS + 4.0)


def test_every_engine_has_a_first_token_rule_and_every_rule_a_text() -> None:
    assert set(FIRST_TOKEN_RULE) == set(PROFILES)
    assert set(FIRST_TOKEN_TEXT) == set(FIRST_TOKEN_RULES)
    assert FIRST_TOKEN_RULE["sglang"] == "admission"


def test_mla_latent_is_sent_once_per_decode_replica_the_prefill_replicas_do_not_cover() -> None:
    """MLA's latent sits on every attention rank: an attention-DP prefill rank (tp 1) feeding
    a TEP8 decode worker sends it eight times, a TP2 prefill worker's ranks four times each,
    equal or wider prefill TP once."""
    r1 = get_model("deepseek-ai/DeepSeek-R1")
    assert kv_copies(r1, 8) == 8
    assert kv_send_copies(r1, 1, 8) == 8
    assert kv_send_copies(r1, 2, 8) == 4
    assert kv_send_copies(r1, 8, 8) == 1
    assert kv_send_copies(r1, 8, 1) == 1  # one of the prefill replicas sends, once


def test_gqa_heads_split_until_the_ranks_outnumber_them() -> None:
    """GQA heads split over the ranks (each prefill device's share goes to the decode ranks
    holding it, once); past ``num_kv_heads`` ranks a head sits on several decode ranks."""
    qwen = get_model("Qwen/Qwen3-32B")  # 8 KV heads
    assert qwen.num_kv_heads == 8
    assert kv_copies(qwen, 4) == 1
    assert kv_send_copies(qwen, 2, 8) == 1
    assert kv_send_copies(qwen, 2, 16) == 2
    assert kv_send_copies(qwen, 16, 16) == 1
