"""Disaggregated optimize: worker layouts, worker counts and concurrency under a device budget.

A configuration is a prefill worker layout ``Lp`` and a decode worker layout ``Ld`` (each a
:class:`PoolOption`), ``N_p`` prefill and ``N_d`` decode workers with
``N_p * size(Lp) + N_d * size(Ld) <= num_devices``, and ``C`` closed-loop clients over the whole
deployment; it is priced by :func:`~app.core.workload.disagg_serving.simulate_disagg_serving`.
A configuration's answer is its highest ``C`` whose mean TTFT and TPOT meet the limits; the
configurations rank by output tokens/s per device.

The search never walks the grid; its cost follows the configurations it has to simulate
(docs/engine.md, "Disaggregated optimize"):

- **Per layout, once.** Each pool option's capacity: a prefill unit's rate (requests/ms) at
  the largest job whose own duration meets the TTFT limit, a decode unit's at the largest
  running batch whose step meets the TPOT limit (bisections over the batch, a handful of
  forwards). A layout that cannot meet a limit even with one request is infeasible with the
  reason, as is one whose worker cannot hold one prompt's or one request's KV.
- **A bound per configuration.** ``osl * min(N_p * rate_p, N_d * rate_d) / devices``. For
  fixed layouts and ``N_p`` it rises with ``N_d`` up to the balance
  ``N_d = N_p * rate_p / rate_d`` and falls after it, so configurations are taken best-bound
  first from a heap seeded with the balance points and grown outwards one ``N_d`` at a time;
  the search stops when the next bound is no better than the best configuration found.
- **Measured prefill rates.** Under a TTFT limit the prefill pool runs well below its
  limit-sized jobs' capacity (queueing, and the decode side's waits count in TTFT), so each
  prefill layout's rate is measured when first needed (:func:`_measured_prefill`).
- **Estimates.** A configuration is simulated only when its bound times its pair's measured
  efficiency (:data:`MEASURED_MARGIN`, :data:`UNMEASURED_MARGIN`) beats the best found; a pair
  that misses a limit with one client is dropped for that transfer; pools that are the same
  units under other layout names are simulated once.
- **Climbing.** The best configuration so far has its four neighbours in the worker counts
  simulated whatever their estimate (the pools' interplay is not in the bound).
- **Copies.** Configurations have at most :data:`SEARCH_WORKERS` workers per pool; the
  deployment is as many copies of one as the budget and ``max_workers`` allow, and each is
  simulated as its smallest equal part (:class:`_Atoms`): k copies serve k times the clients
  at the same TTFT, TPOT and throughput per device.
- **Concurrency by galloping and interpolation.** Feasibility falls and throughput rises with
  ``C`` (more clients queue longer and run larger batches), so a configuration's search starts
  at Little's law's clients (:func:`_little_clients`, :data:`START_SHARE`), gallops by
  :data:`GALLOP_FACTOR` to a feasible/infeasible bracket and narrows it where the limits are
  crossed to within :data:`CONCURRENCY_TOLERANCE`. An infeasible probe whose throughput per
  device beats the best found by less than :data:`NEAR_TIE` ends the configuration (every
  feasible ``C`` below it runs slower). ``C`` never exceeds the clients both pools can hold at
  once (more only queue).
- **Memoised forwards.** Each option's latency model is the caller's (one cached serving model
  per layout, shared by every configuration and probe).

The bound, the measured rates and the estimates are heuristics, not proofs; the search takes
them as exact (docs/engine.md compares it with an exhaustive walk).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from app.core.chunking import require_int
from app.core.cost import interrupt_of
from app.core.engine import MS_PER_S
from app.core.errors import InfeasibleError, InvalidParameterError
from app.core.limits import DEFAULT_MAX_WORKERS, MAX_SEARCH_WORKERS, FirstToken, Pool
from app.core.optimizer.agg import limit_reason
from app.core.parallel import ParallelLayout
from app.core.spec import WorkloadSpec
from app.core.workload.disagg_serving import (
    DecodePool,
    DisaggServingResult,
    KvTransfer,
    PrefillPool,
    decode_step_ms,
    prefill_job_max,
    prefill_job_ms,
    simulate_disagg_serving,
    unit_model,
    units_per_worker,
)
from app.core.workload.disagg_setup import PoolWorker, disagg_pools
from app.core.workload.metrics import MAX_REQUESTS

#: A configuration's concurrency search stops when the feasible/infeasible bracket is within
#: this share of its feasible end (or one client).
CONCURRENCY_TOLERANCE = 1 / 8
#: A configuration is simulated only when its estimate beats the best found: a pair of
#: layouts' later configurations are estimated at their bound times the pair's measured
#: efficiency (the best probe's throughput over its bound: k copies of a deployment serve k
#: times the clients at the same throughput per device, and the pool balance is in the bound);
#: a pair not simulated yet at its bound times the best efficiency measured so far, raised by
#: this share (pairs differ in how close their closed loop comes to the bound).
UNMEASURED_MARGIN = 0.05
#: The same for a pair already simulated: its efficiency changes a little with the counts
#: (the pools' interplay is not in the bound).
MEASURED_MARGIN = 0.1
#: Workers per pool of the configurations the search simulates; a deployment of more is
#: copies of one of them (k copies of a deployment serve k times its clients at the same
#: TTFT, TPOT and throughput per device).
SEARCH_WORKERS = 4
#: A configuration's concurrency search starts at this share of Little's law's clients (the
#: closed loop reaches the bound's rate only in part), and gallops by GALLOP_FACTOR.
START_SHARE = 0.75
GALLOP_FACTOR = 1.25
#: Gains below this share of the best found are not chased (a configuration whose infeasible
#: probe beats the best by less ends its search).
NEAR_TIE = 0.01
#: Under a TTFT limit each prefill option's rate is measured (:func:`_measured_prefill`) with
#: a decode pool of this many times its rate.
PREFILL_PROBE_DECODE_HEADROOM = 2.0
PREFILL_PROBE_TOLERANCE = 1 / 4

TransferFor = Callable[[ParallelLayout, ParallelLayout, int], KvTransfer]
_CLIMB = 2  # a heap entry's step: a neighbour of the best configuration so far


@dataclass(frozen=True, slots=True, kw_only=True)
class PoolOption:
    """One worker layout a pool may use: ``worker`` is the core's view of one worker of it
    (its ``workers`` is ignored: the count is the search's)."""

    layout: ParallelLayout
    worker: PoolWorker


@dataclass(frozen=True, slots=True, kw_only=True)
class DisaggSearchSettings:
    """What bounds the search: the device budget, the workers per pool, the clients, and the
    engine's running cap and first-token rule; ``transfer(prefill layout, decode layout,
    devices)`` is one KV transfer from a prefill worker of that layout to a decode worker of
    that layout in a deployment of ``devices``."""

    num_devices: int
    transfer: TransferFor
    max_workers: int = DEFAULT_MAX_WORKERS
    max_concurrency: int = MAX_REQUESTS
    requests_per_client: int = 10
    running_cap: int | None = None
    first_token: FirstToken = "decode_step"

    def __post_init__(self) -> None:
        require_int("num_devices", self.num_devices, 1, None)
        require_int("max_workers", self.max_workers, 1, MAX_SEARCH_WORKERS)
        require_int("max_concurrency", self.max_concurrency, 1, MAX_REQUESTS)
        require_int("requests_per_client", self.requests_per_client, 1, None)


@dataclass(frozen=True, slots=True, kw_only=True)
class DisaggConfig:
    """Layouts and worker counts of one deployment."""

    prefill: ParallelLayout
    decode: ParallelLayout
    prefill_workers: int
    decode_workers: int

    @property
    def prefill_devices(self) -> int:
        return self.prefill_workers * self.prefill.num_devices

    @property
    def decode_devices(self) -> int:
        return self.decode_workers * self.decode.num_devices

    @property
    def num_devices(self) -> int:
        return self.prefill_devices + self.decode_devices


@dataclass(frozen=True, slots=True, kw_only=True)
class DisaggProbe:
    """One simulated (deployment, concurrency) point: the deployment ``config`` with
    ``concurrency`` clients is ``copies`` copies of the simulated one (``result``)."""

    config: DisaggConfig
    copies: int
    concurrency: int
    feasible: bool
    reason: str | None
    result: DisaggServingResult

    @property
    def throughput_per_device(self) -> float:
        return self.result.throughput_tokens_s * self.copies / self.config.num_devices


@dataclass(frozen=True, slots=True, kw_only=True)
class DisaggRow:
    """A deployment at its highest feasible concurrency: ``copies`` copies of the simulated
    configuration (``result`` is one copy's best probe; 1: the deployment itself ran)."""

    config: DisaggConfig
    copies: int
    concurrency: int
    result: DisaggServingResult

    @property
    def throughput_tokens_s(self) -> float:
        return self.result.throughput_tokens_s * self.copies

    @property
    def request_throughput_s(self) -> float:
        return self.result.request_throughput_s * self.copies

    @property
    def throughput_per_device(self) -> float:
        return self.throughput_tokens_s / self.config.num_devices


def _scaled(config: DisaggConfig, copies: int) -> DisaggConfig:
    return replace(
        config,
        prefill_workers=config.prefill_workers * copies,
        decode_workers=config.decode_workers * copies,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class DisaggSearchResult:
    """Ranked rows (best first), every probe, why layouts failed, and what the search cost."""

    rows: tuple[DisaggRow, ...]
    probes: tuple[DisaggProbe, ...]
    #: ``(pool, layout label, reason)`` of every option no configuration can use.
    infeasible: tuple[tuple[Pool, str, str], ...]
    #: Configurations within the budget (counted, not walked) and those simulated.
    configurations: int
    evaluated: int
    reason: str | None

    @property
    def best(self) -> DisaggRow | None:
        return self.rows[0] if self.rows else None


# -- per layout ----------------------------------------------------------------------------
@dataclass(frozen=True, slots=True, kw_only=True)
class _Side:
    """One usable option with its capacity: ``rate`` requests/ms per worker at the batch
    ``batch`` per unit (the largest within the side's limit), ``units`` engine units per
    worker, ``slots`` requests one worker holds at once (every unit at its cap)."""

    option: PoolOption
    rate: float
    batch: int
    batch_ms: float
    units: int
    slots: int
    #: decode: one unit's step at a running batch (the start of a concurrency search)
    step_ms: Callable[[int], float] | None = None

    def signature(self, workers: int) -> tuple[float, int, int, int, int]:
        """What a pool of ``workers`` of this option looks like to the simulation: units of
        the same rate, batch and cap, and their number and devices (two workers of one
        independent rank each are one worker of two ranks)."""
        return (
            self.rate / self.units,
            self.batch,
            self.slots // self.units,
            workers * self.units,
            workers * self.size,
        )

    @property
    def size(self) -> int:
        return self.option.layout.num_devices


@dataclass(frozen=True, slots=True, kw_only=True)
class _Atoms:
    """A deployment as ``copies`` copies of its smallest equal part: ``prefill_atoms`` of
    ``prefill`` and ``decode_atoms`` of ``decode``, where an atom is one rank of a worker
    whose ranks are independent (each is its own engine unit), else one worker."""

    deployment: DisaggConfig
    copies: int
    prefill: PoolOption
    decode: PoolOption
    prefill_atoms: int
    decode_atoms: int
    transfer: KvTransfer
    #: One copy's request rate bound (requests/ms) and the clients its units hold at once.
    rate: float
    slots: int


def _atom(side: _Side) -> PoolOption:
    if side.units == 1:
        return side.option
    worker = replace(side.option.worker, ranks=1, coupled=False)
    return replace(side.option, worker=worker)


def _atoms(p: _Side, d: _Side, deployment: DisaggConfig, transfer: KvTransfer) -> _Atoms:
    units_p = deployment.prefill_workers * p.units
    units_d = deployment.decode_workers * d.units
    copies = math.gcd(units_p, units_d)
    a_p, a_d = units_p // copies, units_d // copies
    return _Atoms(
        deployment=deployment,
        copies=copies,
        prefill=_atom(p),
        decode=_atom(d),
        prefill_atoms=a_p,
        decode_atoms=a_d,
        transfer=transfer,
        rate=min(a_p * p.rate / p.units, a_d * d.rate / d.units),
        slots=a_p * p.slots // p.units + a_d * d.slots // d.units,
    )


def _largest_within(cap: int, cost_ms: Callable[[int], float], limit_ms: float | None) -> int:
    """The largest batch in ``[1, cap]`` whose cost is within ``limit_ms`` (costs rise with the
    batch); 0 when one request exceeds it."""
    if limit_ms is None or cost_ms(cap) <= limit_ms:
        return cap
    if cost_ms(1) > limit_ms:
        return 0
    lo, hi = 1, cap  # cost(lo) within, cost(hi) over
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if cost_ms(mid) <= limit_ms:
            lo = mid
        else:
            hi = mid
    return lo


def _prefill_side(spec: WorkloadSpec, option: PoolOption) -> _Side | str:
    pool, _ = _pools(spec, option, None, 1, 1, running_cap=None)
    model = unit_model(pool)
    job_max = prefill_job_max(spec, pool)
    limit = spec.ttft_limit_ms

    def job_ms(requests: int) -> float:
        return spec.reported_ttft_ms(prefill_job_ms(spec, model, requests))

    batch = _largest_within(job_max, job_ms, limit)
    if batch == 0:  # only under a limit (without one the cap is within)
        return f"ttft_limit: one prompt's prefill takes {job_ms(1):.2f} ms > {limit:g} ms"
    units = units_per_worker(pool)
    duration = prefill_job_ms(spec, model, batch)
    return _Side(
        option=option,
        rate=units * batch / duration,
        batch=batch,
        batch_ms=duration,
        units=units,
        slots=units * job_max,
    )


def _decode_side(spec: WorkloadSpec, option: PoolOption, running_cap: int | None) -> _Side | str:
    _, pool = _pools(spec, None, option, 1, 1, running_cap=running_cap)
    model = unit_model(pool)
    cap = pool.max_running * (pool.ranks // units_per_worker(pool))
    limit = spec.tpot_limit_ms if spec.output_length > 1 else None

    def step_ms(running: int) -> float:
        return decode_step_ms(spec, model, running)

    batch = _largest_within(cap, step_ms, limit)
    if batch == 0:
        return f"tpot_limit: one request's decode step takes {step_ms(1):.3f} ms > {limit:g} ms"
    units = units_per_worker(pool)
    duration = step_ms(batch)
    return _Side(
        option=option,
        rate=units * batch / (duration * max(spec.output_length - 1, 1)),
        batch=batch,
        batch_ms=duration,
        units=units,
        slots=units * cap,
        step_ms=step_ms,
    )


def _pools(
    spec: WorkloadSpec,
    prefill: PoolOption | None,
    decode: PoolOption | None,
    prefill_workers: int,
    decode_workers: int,
    *,
    running_cap: int | None,
) -> tuple[PrefillPool, DecodePool]:
    """The simulation's pools of the options (a missing side borrows the other's worker with
    room for one request, so only the given side's checks apply)."""
    given = prefill or decode
    assert given is not None
    stand_in = replace(given.worker, kv_requests=max(1, given.worker.kv_requests))
    p_worker = prefill.worker if prefill is not None else stand_in
    d_worker = decode.worker if decode is not None else stand_in
    return disagg_pools(
        replace(p_worker, workers=prefill_workers),
        replace(d_worker, workers=decode_workers),
        input_length=spec.input_length,
        output_length=spec.output_length,
        running_cap=running_cap,
    )


def _sides(
    spec: WorkloadSpec,
    pool: Pool,
    options: Sequence[PoolOption],
    running_cap: int | None,
    infeasible: list[tuple[Pool, str, str]],
) -> list[_Side]:
    """The pool's usable options with their capacities; the others go to ``infeasible``."""
    sides: list[_Side] = []
    for option in options:
        try:
            side = (
                _prefill_side(spec, option)
                if pool == "prefill"
                else _decode_side(spec, option, running_cap)
            )
        except InfeasibleError as exc:
            side = f"memory: {exc}"
        if isinstance(side, str):
            infeasible.append((pool, option.layout.label, side))
        else:
            sides.append(side)
    return sides


# -- the search ----------------------------------------------------------------------------
@dataclass(slots=True)
class _Run:
    spec: WorkloadSpec
    settings: DisaggSearchSettings
    check: Callable[[], None] | None
    probes: list[DisaggProbe]
    best_per_device: float = 0.0
    hopeless: bool = False
    tolerance: float = CONCURRENCY_TOLERANCE

    def simulate(self, atoms: _Atoms, clients: int) -> DisaggProbe:
        """One closed loop of ``clients`` over one copy of ``atoms``."""
        if self.check is not None:
            self.check()
        settings = self.settings
        prefill, decode = _pools(
            self.spec,
            atoms.prefill,
            atoms.decode,
            atoms.prefill_atoms,
            atoms.decode_atoms,
            running_cap=settings.running_cap,
        )
        result = simulate_disagg_serving(
            self.spec,
            clients,
            prefill,
            decode,
            atoms.transfer,
            num_requests=clients * settings.requests_per_client,
            first_token=settings.first_token,
        )
        reason = limit_reason(self.spec, result.ttft_ms, result.tpot_ms)
        probe = DisaggProbe(
            config=atoms.deployment,
            copies=atoms.copies,
            concurrency=clients * atoms.copies,
            feasible=reason is None,
            reason=reason,
            result=result,
        )
        self.probes.append(probe)
        return probe

    def evaluate(self, p: _Side, d: _Side, deployment: DisaggConfig) -> DisaggRow | None:
        """The deployment at its highest feasible concurrency (``None``: none is, or none can
        beat the best found; :attr:`hopeless` tells the first: one client is over a limit)."""
        self.hopeless = False
        atoms = _atoms(
            p,
            d,
            deployment,
            self.settings.transfer(deployment.prefill, deployment.decode, deployment.num_devices),
        )
        most = min(self.settings.max_concurrency // atoms.copies, atoms.slots)
        clients = max(1, min(most, round(_little_clients(self.spec, p, d, atoms) * START_SHARE)))
        feasible: DisaggProbe | None = None
        infeasible: DisaggProbe | None = None
        while True:  # gallop to a bracket
            probe = self.simulate(atoms, clients)
            if probe.feasible:
                feasible = probe
                if clients >= most or infeasible is not None:
                    break
                clients = min(most, math.ceil(clients * GALLOP_FACTOR))
            else:
                infeasible = probe
                if self._cannot_win(probe) or clients == 1 or feasible is not None:
                    break
                clients = max(1, math.floor(clients / GALLOP_FACTOR))
        moved: bool | None = None  # the side the last narrowing moved (True: feasible)
        repeated = False
        while (
            feasible is not None
            and infeasible is not None
            and infeasible.concurrency - feasible.concurrency
            > max(atoms.copies, feasible.concurrency * self.tolerance)
            and not self._cannot_win(infeasible)
        ):  # narrow the bracket where the limits are crossed (a halving after a repeat)
            low, high = feasible.concurrency // atoms.copies, infeasible.concurrency // atoms.copies
            share = 0.5 if repeated else _crossing(self.spec, feasible.result, infeasible.result)
            probe = self.simulate(
                atoms, min(high - 1, max(low + 1, low + round(share * (high - low))))
            )
            # the limits bend up with the clients, so a straight line keeps landing on the same
            # side: after two in a row, halve
            repeated = probe.feasible == moved
            moved = probe.feasible
            if probe.feasible:
                feasible = probe
            else:
                infeasible = probe
        if feasible is None:
            self.hopeless = infeasible is not None and infeasible.concurrency == atoms.copies
            return None
        row = DisaggRow(
            config=deployment,
            copies=atoms.copies,
            concurrency=feasible.concurrency,
            result=feasible.result,
        )
        self.best_per_device = max(self.best_per_device, row.throughput_per_device)
        return row

    def _cannot_win(self, probe: DisaggProbe) -> bool:
        """An infeasible probe no better than the best found (by more than
        :data:`NEAR_TIE`): every feasible concurrency below it is slower still."""
        return not probe.feasible and probe.throughput_per_device <= self.best_per_device * (
            1 + NEAR_TIE
        )


def _little_clients(spec: WorkloadSpec, p: _Side, d: _Side, atoms: _Atoms) -> float:
    """Little's law: the bound's request rate times a request's time, the TTFT limit (or the
    limit-sized prefill job) and the decode steps at the running batch that rate keeps on a
    decode unit: the fixed point ``running = rate x steps x step_ms(running) / units``
    (bisected: the step grows more slowly than the batch), at most the limit-sized batch."""
    ttft_ms = spec.ttft_limit_ms or p.batch_ms
    steps = max(spec.output_length - 1, 1)
    per_unit = atoms.rate * steps / atoms.decode_atoms
    step_ms = d.step_ms
    if step_ms is None or d.batch <= per_unit * step_ms(d.batch):
        return atoms.rate * (ttft_ms + steps * d.batch_ms)
    lo, hi = 0, d.batch  # running below / at or above its fixed point
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if mid < per_unit * step_ms(mid):
            lo = mid
        else:
            hi = mid
    return atoms.rate * (ttft_ms + steps * step_ms(hi))


def _crossing(spec: WorkloadSpec, low: DisaggServingResult, high: DisaggServingResult) -> float:
    """Where between a feasible and an infeasible probe the limits are crossed, as a share of
    the way (linear in TTFT and TPOT, the first limit crossed; kept within the middle 80 %
    so the bracket always shrinks)."""
    shares = [0.5]
    for limit, a, b in (
        (spec.ttft_limit_ms, low.ttft_ms, high.ttft_ms),
        (spec.tpot_limit_ms, low.tpot_ms, high.tpot_ms),
    ):
        if limit is not None and b > limit >= a and b > a:
            shares.append((limit - a) / (b - a))
    return min(max(min(shares[1:] or shares), 0.1), 0.9)


def _measured_prefill(
    spec: WorkloadSpec,
    settings: DisaggSearchSettings,
    check: Callable[[], None] | None,
    p: _Side,
    ds: Sequence[_Side],
) -> _Side | str:
    """The prefill option with the rate one engine unit of it reaches within the TTFT limit
    (times the worker's units) in a closed loop whose decode pool has twice its capacity (the
    fastest decode option per device): the TTFT limit holds the prefill pool below the
    capacity of its limit-sized jobs by its queueing, which only a simulation tells (one unit
    queues more than several sharing the load: the estimate errs low, and the best so far
    has its neighbours simulated). Its rate may only fall."""
    d = max(ds, key=lambda side: (side.rate / side.size, -side.size))
    unit = replace(  # one engine unit of the worker
        p, option=_atom(p), rate=p.rate / p.units, units=1, slots=p.slots // p.units
    )
    decode_workers = max(1, math.ceil(PREFILL_PROBE_DECODE_HEADROOM * unit.rate / d.rate))
    probe = DisaggConfig(
        prefill=p.option.layout,
        decode=d.option.layout,
        prefill_workers=1,
        decode_workers=decode_workers,
    )
    run = _Run(
        spec=spec, settings=settings, check=check, probes=[], tolerance=PREFILL_PROBE_TOLERANCE
    )
    row = run.evaluate(unit, d, probe)
    if row is None:  # one client misses the TTFT limit beside an idle decode pool
        one = run.probes[-1].result
        return (
            f"ttft_limit: one client's TTFT is {one.ttft_ms:.2f} ms > {spec.ttft_limit_ms:g} ms "
            f"(with {decode_workers} x {d.option.layout.label} decode workers)"
        )
    return replace(p, rate=min(p.rate, p.units * row.request_throughput_s / MS_PER_S))


def _bound(spec: WorkloadSpec, p: _Side, d: _Side, n_p: int, n_d: int) -> float:
    """Output tokens/s per device no closed loop of these pools exceeds."""
    rate = min(n_p * p.rate, n_d * d.rate)  # requests per ms
    return rate * MS_PER_S * spec.output_length / (n_p * p.size + n_d * d.size)


def _decode_counts(budget: int, most: int, p: _Side, d: _Side, n_p: int) -> int:
    """Decode workers that fit beside ``n_p`` prefill workers."""
    return min(most, (budget - n_p * p.size) // d.size)


def _count_configurations(budget: int, most: int, ps: Sequence[_Side], ds: Sequence[_Side]) -> int:
    total = 0
    for p in ps:
        for d in ds:
            for n_p in range(1, min(most, (budget - d.size) // p.size) + 1):
                total += max(0, _decode_counts(budget, most, p, d, n_p))
    return total


#: A queued configuration: ``(-bound, sequence, prefill side, decode side, N_p, N_d, step)``.
_Entry = tuple[float, int, int, int, int, int, int]


@dataclass(slots=True)
class _Queue:
    """Configurations best bound first (the capacities at the limit-sized batches), each queued
    once; equal bounds in the order they were queued."""

    spec: WorkloadSpec
    ps: Sequence[_Side]
    ds: Sequence[_Side]
    heap: list[_Entry] = field(default_factory=list)
    queued: set[tuple[int, int, int, int]] = field(default_factory=set)
    seq: int = 0

    def push(self, pi: int, di: int, n_p: int, n_d: int, step: int) -> None:
        """Queue a configuration (``step``: -1 / 1 grow it outwards in ``N_d`` when taken,
        0 both ways, :data:`_CLIMB` a neighbour of the best so far: simulated whatever its
        estimate)."""
        if (pi, di, n_p, n_d) in self.queued:
            return
        self.queued.add((pi, di, n_p, n_d))
        self.seq += 1
        bound = _bound(self.spec, self.ps[pi], self.ds[di], n_p, n_d)
        heapq.heappush(self.heap, (-bound, self.seq, pi, di, n_p, n_d, step))

    def seed(self, budget: int, small: int) -> None:
        """Every pair of layouts' and ``N_p``'s balance point ``N_d = N_p * rate_p / rate_d``
        (both counts around it when it falls between two, each to grow outwards)."""
        for pi, p in enumerate(self.ps):
            for di, d in enumerate(self.ds):
                for n_p in range(1, min(small, (budget - d.size) // p.size) + 1):
                    top = _decode_counts(budget, small, p, d, n_p)
                    if top < 1:
                        continue
                    balance = n_p * p.rate / d.rate
                    low = min(top, max(1, math.floor(balance)))
                    high = min(top, max(1, math.ceil(balance)))
                    if low == high:
                        self.push(pi, di, n_p, low, 0)
                    else:
                        self.push(pi, di, n_p, low, -1)
                        self.push(pi, di, n_p, high, 1)


def _deployment(p: _Side, d: _Side, n_p: int, n_d: int, budget: int, most: int) -> DisaggConfig:
    """The deployment of ``N_p`` x ``N_d`` workers of these layouts: as many copies of it as
    ``most`` workers per pool and the device budget allow."""
    config = DisaggConfig(
        prefill=p.option.layout,
        decode=d.option.layout,
        prefill_workers=n_p,
        decode_workers=n_d,
    )
    copies = min(most // max(n_p, n_d), budget // config.num_devices)
    return _scaled(config, copies)


@dataclass(slots=True)
class _Search:
    """The walk over the queued configurations (``small``: workers per pool of the ones it
    simulates) and what it has measured, found and ruled out on the way."""

    spec: WorkloadSpec
    settings: DisaggSearchSettings
    ps: Sequence[_Side]
    ds: Sequence[_Side]
    infeasible: list[tuple[Pool, str, str]]
    check: Callable[[], None] | None
    small: int
    run: _Run
    queue: _Queue
    rows: list[DisaggRow] = field(default_factory=list)
    evaluated: int = 0
    # the heap's order and the stopping rule take the capacities at the limit-sized batches;
    # the estimates (and each concurrency search's start) the measured prefill rates
    # (measured when first needed: a layout whose bound never beats the best is not)
    measured_ps: dict[int, _Side | None] = field(default_factory=dict)
    # (layouts, transfer) pairs where one client misses a limit: so does every count of them
    # with that transfer (one client meets one prefill and one decode worker)
    hopeless: set[tuple[int, int, KvTransfer]] = field(default_factory=set)
    # per pair of layouts, see UNMEASURED_MARGIN
    efficiency: dict[tuple[int, int], float] = field(default_factory=dict)
    seen: set[tuple[object, ...]] = field(default_factory=set)

    def walk(self) -> None:
        """Take the configurations best bound first until none left can beat the best found."""
        heap, run = self.queue.heap, self.run
        while heap:
            negative, _, pi, di, n_p, n_d, step = heapq.heappop(heap)
            if self.rows and -negative <= run.best_per_device:
                break  # no configuration left can beat the best
            self._take(pi, di, n_p, n_d, step)

    def _measured_prefill(self, pi: int) -> _Side | None:
        """Prefill side ``pi`` at its measured rate (None: one client misses the TTFT limit)."""
        if pi not in self.measured_ps:
            side: _Side | str = self.ps[pi]
            if self.spec.ttft_limit_ms is not None:
                side = _measured_prefill(self.spec, self.settings, self.check, self.ps[pi], self.ds)
            if isinstance(side, str):
                self.infeasible.append(("prefill", self.ps[pi].option.layout.label, side))
            self.measured_ps[pi] = None if isinstance(side, str) else side
        return self.measured_ps[pi]

    def _take(self, pi: int, di: int, n_p: int, n_d: int, step: int) -> None:
        """One configuration off the queue: its outward neighbour queued, then simulated at its
        highest feasible concurrency unless it is ruled out, estimated not to beat the best
        found, or the same pools as one simulated already."""
        found = self._measured_prefill(pi)
        if found is None:
            return  # one client misses the TTFT limit with this prefill layout
        p, d = found, self.ds[di]
        budget, small = self.settings.num_devices, self.small
        top = _decode_counts(budget, small, p, d, n_p)
        for nxt in () if step == _CLIMB else (n_d - 1, n_d + 1) if step == 0 else (n_d + step,):
            if 1 <= nxt <= top:
                self.queue.push(pi, di, n_p, nxt, nxt - n_d)
        config = _deployment(p, d, n_p, n_d, budget, self.settings.max_workers)
        key = (pi, di, self.settings.transfer(config.prefill, config.decode, config.num_devices))
        if key in self.hopeless:
            return
        measured = self.efficiency.get((pi, di))
        estimate = self._estimate(measured)
        bound = _bound(self.spec, p, d, n_p, n_d)
        if step != _CLIMB and bound * estimate <= self.run.best_per_device:
            return
        signature = (
            p.signature(config.prefill_workers),
            d.signature(config.decode_workers),
            key[2],
        )
        if signature in self.seen:
            return  # the same pools under other layout names
        self.seen.add(signature)
        self.evaluated += 1
        row = self.run.evaluate(p, d, config)
        reached = 0.0 if row is None else row.throughput_per_device
        self.efficiency[(pi, di)] = max(measured or 0.0, reached / bound if bound > 0 else 0.0)
        if row is not None:
            self.rows.append(row)
            if row.throughput_per_device >= self.run.best_per_device:
                self._climb(pi, di, p, d, n_p, n_d)
        elif self.run.hopeless:
            self.hopeless.add(key)

    def _estimate(self, measured: float | None) -> float:
        """A pair's efficiency estimate: its own measured one, else the best measured so far
        (see :data:`UNMEASURED_MARGIN`)."""
        if measured is not None:
            return measured * (1 + MEASURED_MARGIN)
        return max(self.efficiency.values(), default=math.inf) * (1 + UNMEASURED_MARGIN)

    def _climb(self, pi: int, di: int, p: _Side, d: _Side, n_p: int, n_d: int) -> None:
        """The pools' interplay (a decode pool's waits count in TTFT) is not in the bound: the
        best configuration so far has its four neighbours in the counts simulated."""
        budget, small = self.settings.num_devices, self.small
        for q, e in ((n_p - 1, n_d), (n_p + 1, n_d), (n_p, n_d - 1), (n_p, n_d + 1)):
            if 1 <= q <= small and 1 <= e <= _decode_counts(budget, small, p, d, q):
                self.queue.push(pi, di, q, e, _CLIMB)


def optimize_disagg(
    spec: WorkloadSpec,
    prefill_options: Sequence[PoolOption],
    decode_options: Sequence[PoolOption],
    settings: DisaggSearchSettings,
) -> DisaggSearchResult:
    """The best disaggregated deployments of the options within the budget (see the module
    docstring); infeasible options are reported with the reason, never raised."""
    if not prefill_options or not decode_options:
        raise InvalidParameterError(
            "prefill_options" if not prefill_options else "decode_options", [], "at least one"
        )
    infeasible: list[tuple[Pool, str, str]] = []
    ps = _sides(spec, "prefill", prefill_options, settings.running_cap, infeasible)
    ds = _sides(spec, "decode", decode_options, settings.running_cap, infeasible)
    budget, most = settings.num_devices, settings.max_workers
    check = interrupt_of(prefill_options[0].worker.latency)
    search = _Search(
        spec=spec,
        settings=settings,
        ps=ps,
        ds=ds,
        infeasible=infeasible,
        check=check,
        small=min(most, SEARCH_WORKERS),
        run=_Run(spec=spec, settings=settings, check=check, probes=[]),
        queue=_Queue(spec=spec, ps=ps, ds=ds),
    )
    search.queue.seed(budget, search.small)
    search.walk()
    rows = search.rows
    rows.sort(key=lambda r: (-r.throughput_per_device, -r.config.num_devices, r.concurrency))
    probes = search.run.probes
    reason = None if rows else _why_nothing(infeasible, probes, ps, ds)
    return DisaggSearchResult(
        rows=tuple(rows),
        probes=tuple(probes),
        infeasible=tuple(infeasible),
        configurations=_count_configurations(budget, most, ps, ds),
        evaluated=search.evaluated,
        reason=reason,
    )


def _why_nothing(
    infeasible: Sequence[tuple[Pool, str, str]],
    probes: Sequence[DisaggProbe],
    ps: Sequence[_Side],
    ds: Sequence[_Side],
) -> str:
    """Why no configuration is feasible: every option of a pool failed, no pair fits the
    budget, or every simulated configuration missed a limit (the closest one's reason)."""
    if not ps or not ds:
        pool = "prefill" if not ps else "decode"
        found = "; ".join(f"{label}: {why}" for side, label, why in infeasible if side == pool)
        return f"no feasible {pool} worker layout: {found}"
    if not probes:
        return (
            "no configuration fits num_devices: the smallest prefill worker and the smallest "
            "decode worker together need more devices"
        )
    closest = max(probes, key=lambda probe: probe.throughput_per_device)
    config = closest.config
    return (
        f"no configuration meets the limits; e.g. {config.prefill_workers} x {config.prefill.label}"
        f" prefill + {config.decode_workers} x {config.decode.label} decode at "
        f"{closest.concurrency} clients: {closest.reason}"
    )
