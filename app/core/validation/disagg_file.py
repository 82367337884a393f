"""Replay a file of measured disaggregated serving runs (``chunkwise validate --cases FILE``).

A file has exactly the columns of ``shared/validation/measured_disagg_serving_cases.csv``
(:data:`DISAGG_CASE_COLUMNS`), recognised by its header (:func:`is_disagg_header`): a
deployment of ``prefill_workers`` workers of (``prefill_tp``, ``prefill_attn_dp``,
``prefill_moe_tp``, ``prefill_moe_ep``) and ``decode_workers`` workers of the same for decode,
a closed loop of ``concurrency`` clients over the whole deployment, and the measured means.
Every row is simulated by :func:`~app.core.workload.disagg_serving.simulate_disagg_serving`
under the engine profile its ``engine`` column names, or refused with the reason; the report
and the OUT CSV are the aggregated replay's (:class:`~app.core.validation.case_file.
CaseFileReport`).

The model, hardware, quantization and engine family map exactly as in
:mod:`app.core.validation.case_file`. Per pool:

- serving model: the pool's layout (``tp``, ``attn_dp`` ranks, ``moe_ep``) as the engine runs
  it (:func:`~app.core.validation.predict.engine_serving_model`: reserve, KV pool and dtype,
  CUDA-graph limit, host time per iteration);
- ``moe_tp``: must be what the runner derives, ``tp x attn_dp / moe_ep``
  (:func:`~app.core.validation.case_file.check_expert_split`); without expert parallelism
  beside attention data parallelism every expert is tensor-parallel over all ``tp x attn_dp``
  ranks of the worker (the layout's ``moe_over_dp``: the ranks all-gather their tokens before
  the experts and reduce-scatter after). ``moe_tp`` and ``moe_ep`` both 1 is the source's
  "none" (not set: the case ids say ``tpnone_epnone``): the engines' default, experts
  tensor-parallel over every rank of the worker;
- prefill: the profile's token budget and chunk plan; a job holds at most the prompts whose
  KV fits the worker;
- decode: the profile's running cap and the KV pool (``isl + osl`` tokens per request);
- lengths: a row with a recipe runs its benchmark client's length range
  (:data:`~app.core.validation.disagg_recipes.SA_BENCH_LENGTH_RANGE_RATIO`): the mean prompt is
  prefilled and sent, the mean output decoded, and the KV pools hold the mean request;
- ``prefill_batch_size`` / ``decode_batch_size`` are not engine settings in the source (the
  decode one is ``concurrency`` per decode rank) and are not read.

A row whose provenance names several candidate recipes (:mod:`.disagg_recipes`) is replayed
under each and reported as their centre (:func:`candidate_centre`).

KV transfer (:func:`kv_transfer`): the prompt's KV on one prefill device, times the copies
that device sends (:func:`~app.core.runner.plan.kv_send_copies`: the decode
worker's attention ranks holding an MLA latent the prefill worker holds on fewer), over one
device's link of the innermost interconnect tier that holds the whole deployment (NVLink
inside an 8-GPU node or a 72-GPU NVL72 rack, otherwise the network tier), plus
:data:`KV_TRANSFER_FIXED_MS`.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from app.core.catalog.devices import get_device
from app.core.catalog.hardware import Device
from app.core.catalog.models import get_model
from app.core.errors import ChunkwiseError, InvalidParameterError
from app.core.optimizer.common import MemoLatency
from app.core.parallel import ParallelLayout
from app.core.profiles import get_profile
from app.core.runner.plan import kv_send_copies
from app.core.runner.serving import RunnerServingModel
from app.core.spec import WorkloadSpec
from app.core.validation.case_file import (
    CaseFileReport,
    RowOutcome,
    RowPrediction,
    check_expert_split,
    file_report,
    int_column,
    measured_value,
    parallel_size,
    read_case_rows,
    row_deployment,
    row_outcome,
)
from app.core.validation.cases import layout_duplicates
from app.core.validation.csv_text import csv_lines, malformed_csv
from app.core.validation.disagg_recipes import (
    DEFAULT_DISAGG_SETTINGS,
    MTP_ACCEPTANCE_RATES,
    DisaggSettings,
    Options,
    disagg_row_settings,
)
from app.core.validation.predict import engine_family, engine_serving_model
from app.core.workload import ranks_are_coupled
from app.core.workload.disagg_serving import (
    DisaggServingResult,
    KvTransfer,
    simulate_disagg_serving,
)
from app.core.workload.disagg_setup import (
    FIRST_TOKEN_RULE,
    KV_TRANSFER_FIXED_MS,
    PoolWorker,
    disagg_pools,
    tier_kv_transfer,
)

__all__ = [
    "DISAGG_CASE_COLUMNS",
    "FIRST_TOKEN_RULE",
    "KV_TRANSFER_FIXED_MS",
    "DisaggReplay",
    "PoolLayout",
    "is_disagg_header",
    "kv_transfer",
    "pool_layout",
    "replay_disagg_file",
]

#: The columns of a disaggregated measurement file, in the order of the shared sample.
DISAGG_CASE_COLUMNS: tuple[str, ...] = (
    "case_id",
    "model",
    "hardware",
    "engine",
    "gemm_quant",
    "moe_quant",
    "isl",
    "osl",
    "concurrency",
    "prefill_workers",
    "prefill_batch_size",
    "prefill_tp",
    "prefill_attn_dp",
    "prefill_moe_tp",
    "prefill_moe_ep",
    "decode_workers",
    "decode_batch_size",
    "decode_tp",
    "decode_attn_dp",
    "decode_moe_tp",
    "decode_moe_ep",
    "num_devices",
    "ttft_ms",
    "tpot_ms",
)
#: Columns a disaggregated file may add: ``recipe``, the InferenceX recipe the row ran
#: (:func:`~app.core.validation.disagg_recipes.disagg_row_settings`).
DISAGG_OPTIONAL_COLUMNS: tuple[str, ...] = ("recipe",)
#: Columns only a disaggregated file has: a header with any of them is read as one.
_DISAGG_MARKERS = frozenset({"prefill_workers", "decode_workers"})


def is_disagg_header(text: str) -> bool:
    """Whether a measurement file's header names the disaggregated columns."""
    try:
        first = next(csv.reader(csv_lines(text)), [])
    except csv.Error as exc:
        raise malformed_csv(exc) from None
    return bool(_DISAGG_MARKERS & {c.strip() for c in first})


@dataclass(frozen=True, slots=True, kw_only=True)
class PoolLayout:
    """One pool of a row: ``workers`` workers of ``tp x dp`` devices, experts over ``ep``
    (``moe_over_dp``: each expert tensor-parallel over all ``tp x dp`` ranks)."""

    workers: int
    tp: int
    dp: int
    ep: int
    moe_over_dp: bool = False

    @property
    def devices(self) -> int:
        return self.workers * self.tp * self.dp

    @property
    def layout(self) -> ParallelLayout:
        return ParallelLayout(tp=self.tp, dp=self.dp, ep=self.ep, moe_over_dp=self.moe_over_dp)


def pool_layout(row: Mapping[str, str], pool: str, *, is_moe: bool) -> PoolLayout:
    """The layout of the row's ``pool`` ("prefill" or "decode"), refused when the runner
    cannot represent its expert split (see the module docstring)."""
    workers = int_column(row, f"{pool}_workers")
    tp = int_column(row, f"{pool}_tp")
    dp = parallel_size(row, f"{pool}_attn_dp")
    moe_tp = parallel_size(row, f"{pool}_moe_tp")
    ep = parallel_size(row, f"{pool}_moe_ep")
    over_dp = is_moe and check_expert_split(tp, dp, moe_tp, ep, pool)
    return PoolLayout(workers=workers, tp=tp, dp=dp, ep=ep, moe_over_dp=over_dp)


def row_pools(row: Mapping[str, str]) -> tuple[PoolLayout, PoolLayout, int]:
    """The row's two pools and its device total, refused when the runner cannot represent an
    expert split or the total is not the pools' devices."""
    is_moe = get_model(row_deployment(row)[0]).is_moe
    prefill = pool_layout(row, "prefill", is_moe=is_moe)
    decode = pool_layout(row, "decode", is_moe=is_moe)
    devices = int_column(row, "num_devices")
    if devices != prefill.devices + decode.devices:
        raise InvalidParameterError(
            "num_devices",
            devices,
            f"the devices of both pools, {prefill.devices} + {decode.devices}",
        )
    return prefill, decode, devices


def kv_transfer(device: Device, devices: int, bytes_per_request: float) -> KvTransfer:
    """The transfer of one prompt's KV (``bytes_per_request`` on one prefill device) over the
    innermost tier holding all ``devices`` of the deployment (an 8-GPU NVLink node, a 72-GPU
    NVL72 rack, else the network: one NIC per GPU), plus :data:`KV_TRANSFER_FIXED_MS`."""
    return tier_kv_transfer(device.tier_for(devices), bytes_per_request)


#: (engine, engine options, MTP draft tokens, model, device, layout, precision)
_Deployment = tuple[str, Options, int, str, str, ParallelLayout, str]


class DisaggReplay:
    """Predictions of one disaggregated file, memoised: per pool deployment its serving model
    and :class:`MemoLatency` (shared by the rows and pools of that deployment), per row's
    inputs its result."""

    __slots__ = ("_models", "_results")

    def __init__(self) -> None:
        self._models: dict[_Deployment, tuple[RunnerServingModel, MemoLatency]] = {}
        self._results: dict[tuple[object, ...], DisaggServingResult] = {}

    def _model(self, deployment: _Deployment) -> tuple[RunnerServingModel, MemoLatency]:
        found = self._models.get(deployment)
        if found is None:
            engine, options, mtp, model, device, layout, precision = deployment
            profile = get_profile(engine).with_overrides(dict(options))
            plain = engine_serving_model(
                profile,
                model,
                device,
                layout.tp,
                layout.dp,
                layout.ep,
                precision,
                moe_over_dp=layout.moe_over_dp,
            )
            serving = RunnerServingModel(
                plain.runner, mtp, MTP_ACCEPTANCE_RATES[:mtp], profile=plain.profile
            )
            found = self._models[deployment] = (serving, MemoLatency(serving))
        return found

    def predict(
        self, row: Mapping[str, str], settings: DisaggSettings = DEFAULT_DISAGG_SETTINGS
    ) -> tuple[float, float]:
        """The row's (TTFT, TPOT): its settings' simulation, or with several candidate recipes
        the centre of theirs (:func:`candidate_centre`)."""
        if settings.candidates:
            row_pools(row)  # the row as recorded must add up, whichever recipe ran it
            try:
                return candidate_centre(row, settings.candidates, self.simulate)
            except ChunkwiseError:  # none modelled: the recorded layout, the shared settings
                pass
        result = self.simulate(row, settings)
        return result.ttft_ms, result.tpot_ms

    def simulate(
        self, row: Mapping[str, str], settings: DisaggSettings = DEFAULT_DISAGG_SETTINGS
    ) -> DisaggServingResult:
        """The row's disaggregated closed loop under its recipe ``settings`` (domain errors
        say why it cannot run, a setting the product cannot model among them)."""
        settings.check_modelled()
        row = {**row, **dict(settings.layout)}  # the recipe's layout where it is known
        model, device, precision = row_deployment(row)
        family = get_profile(engine_family(row["engine"]))
        profile = family.with_overrides(dict(settings.prefill_options))
        decode_profile = family.with_overrides(dict(settings.decode_options))
        prefill, decode, devices = row_pools(row)
        architecture = get_model(model)
        is_moe = architecture.is_moe
        isl = int_column(row, "isl")
        osl = int_column(row, "osl")
        concurrency = int_column(row, "concurrency")
        measured_value(row, "ttft_ms")
        deployment = (family.name, settings, model, device, precision, prefill, decode)
        key = (*deployment, isl, osl, concurrency)
        found = self._results.get(key)
        if found is not None:
            return found
        hardware = get_device(device)
        budget = profile.token_budget(hardware.hbm_capacity_gb, hardware.name, hardware.vendor)
        spec = WorkloadSpec(
            input_length=isl,
            output_length=osl,
            max_batched_tokens=budget,
            num_mtp_tokens=settings.num_mtp_tokens,
            mtp_acceptance_rates=settings.mtp_acceptance_rates,
            length_range_ratio=settings.length_range_ratio,
            **profile.spec_terms(isl),
        )
        # a length range's mean request (the prefilled prompt, its KV and a decode slot's)
        prompt = spec.mean_input_length
        context = prompt + spec.mean_output_length

        def pool_model(
            pool: PoolLayout, options: Options, mtp: int
        ) -> tuple[RunnerServingModel, MemoLatency]:
            return self._model((family.name, options, mtp, model, device, pool.layout, precision))

        p_serving, p_memo = pool_model(prefill, settings.prefill_options, 0)
        d_serving, d_memo = pool_model(decode, settings.decode_options, settings.num_mtp_tokens)
        decode_kv = d_serving.kv_capacity_requests(context, budget)
        if settings.decode_max_total_tokens is not None:
            decode_kv = min(decode_kv, settings.decode_max_total_tokens // context)
        prefill_pool, decode_pool = disagg_pools(
            PoolWorker(
                workers=prefill.workers,
                ranks=prefill.dp,
                coupled=ranks_are_coupled(is_moe, prefill.layout),
                latency=p_memo,
                kv_requests=p_serving.kv_capacity_requests(prompt, budget),
                label=f"{prefill.layout.label} of {hardware.name}",
            ),
            PoolWorker(
                workers=decode.workers,
                ranks=decode.dp,
                coupled=ranks_are_coupled(is_moe, decode.layout),
                latency=d_memo,
                kv_requests=decode_kv,
                label=f"{decode.layout.label} of {hardware.name}",
            ),
            input_length=prompt,
            output_length=context - prompt,
            running_cap=decode_profile.running_cap(hardware.hbm_capacity_gb, hardware.name),
        )
        result = simulate_disagg_serving(
            spec,
            concurrency,
            prefill_pool,
            decode_pool,
            kv_transfer(
                hardware,
                devices,
                p_serving.runner.kv_cache_bytes(1, prompt)
                * kv_send_copies(architecture, prefill.tp, decode.tp),
            ),
            first_token=FIRST_TOKEN_RULE[profile.name],
        )
        self._results[key] = result
        return result


def candidate_centre(
    row: Mapping[str, str],
    candidates: tuple[DisaggSettings, ...],
    simulate: Callable[[Mapping[str, str], DisaggSettings], DisaggServingResult],
) -> tuple[float, float]:
    """The geometric mean of the (TTFT, TPOT) each candidate recipe predicts for ``row``, over
    the candidates the product models (one it refuses is left out; when it refuses all, the
    first refusal is raised).

    A row whose provenance names several recipes (an MTP entry and its plain twin at the same
    concurrency, or items of other pool sizes) was measured under exactly one of them, which
    the row does not say; configurations measured more than once show both (TPOT 4.7 and
    9.8 ms at four clients of one DeepSeek-R1 SGLang B200 configuration). The geometric mean
    is the centre the replica floor measures such rows against (``validate --replicas``); for
    two candidates it is also the prediction with the least worst-case log error."""
    found: list[tuple[float, float]] = []
    refused: ChunkwiseError | None = None
    for candidate in candidates:
        try:
            result = simulate(row, candidate)
        except ChunkwiseError as err:
            refused = refused or err
            continue
        found.append((result.ttft_ms, result.tpot_ms))
    if not found:
        assert refused is not None  # candidates is never empty
        raise refused
    return (
        math.exp(math.fsum(math.log(t) for t, _ in found) / len(found)),
        math.exp(math.fsum(math.log(t) for _, t in found) / len(found)),
    )


def replay_disagg_file(text: str, *, drop_layout_duplicates: bool = False) -> CaseFileReport:
    """Predict every row of a disaggregated measurement file (``drop_layout_duplicates``:
    leave out rows that repeat a smaller deployment's measurement)."""
    rows = read_case_rows(text, DISAGG_CASE_COLUMNS, DISAGG_OPTIONAL_COLUMNS)
    skip = layout_duplicates(rows) if drop_layout_duplicates else set()
    replay = DisaggReplay()
    outcomes: dict[int, RowOutcome] = {}
    for i, row in enumerate(rows):
        if i in skip:
            continue
        settings = disagg_row_settings(row)

        def predict(r: Mapping[str, str], s: DisaggSettings = settings) -> RowPrediction:
            return (*replay.predict(r, s), None)  # no intervals: the residuals are agg's

        outcomes[i] = row_outcome(row, predict, settings)
    return file_report(rows, outcomes)
