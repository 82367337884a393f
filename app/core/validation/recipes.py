"""The engine settings a measured row ran with, from the public benchmark recipe it came from.

The measured file's newer rows were benchmarked by SemiAnalysis InferenceX (docs/engine.md,
"How the measured file's rows were benchmarked"): one launch script per model, precision,
hardware and engine, one container image per engine build, both versioned in the repository
``SemiAnalysisAI/InferenceX`` (``configs/nvidia-master.yaml`` names the image of each
``<model>-<precision>-<hardware>-<engine>`` entry; ``benchmarks/.../<model>_<precision>_<hardware>
[_trt].sh`` launches the server). A row carries its provenance in ``engine`` (family and build,
i.e. the image), ``model``, ``hardware``, ``gemm_quant`` and ``tp``, which is the key of
:data:`RECIPE_SETTINGS` (``catalog/data/inferencex_recipe_settings.csv``): for every image the
config history paired with that entry, the launch script at every commit in that period, and
the settings read from it (``python -m scripts.inferencex_recipes`` regenerates the table):

- ``kv_cache_dtype``: ``fp8`` where the script passes ``--kv-cache-dtype fp8`` / ``fp8_e4m3``
  (SGLang, vLLM) or ``kv_cache_config: dtype: fp8`` (TensorRT-LLM); ``default`` where it sets
  none, which is the engine's own default, the profile's rule (a 16-bit cache on vLLM and
  SGLang, the checkpoint's FP8 on TensorRT-LLM);
- ``memory_fraction``: SGLang's ``--mem-fraction-static``, vLLM's ``--gpu-memory-utilization``,
  TensorRT-LLM's ``free_gpu_memory_fraction``, each the profile's ``memory_fraction``;
- ``scheduler_recv_interval``: SGLang's ``--scheduler-recv-interval``, a number or a CONC rule
  ``10;30@16`` (10, or 30 when the run's concurrency is at least 16, as the scripts choose it),
  the profile's ``scheduler_recv_interval`` for the row's concurrency;
- ``stream_interval``: ``--stream-interval`` (SGLang, vLLM) or ``stream_interval``
  (TensorRT-LLM), the profile's ``stream_interval``; every build of the table sends the first
  token at once (docs/engine_defaults.md), so it leaves the client's TTFT and TPOT as they are;
- ``chunked_prefill_size``: SGLang's ``--chunked-prefill-size``, vLLM's
  ``--max-num-batched-tokens``, TensorRT-LLM's ``--max_num_tokens``, the profile's
  ``max_batched_tokens`` (the step's token budget; the SGLang scripts pass the same value as
  ``--max-prefill-tokens``). Applied alone it moved the validator's TTFT median 38.6 -> 37.1 %
  overall, SGLang B200 57.0 -> 54.3 %, TensorRT-LLM B200 31.9 -> 25.7 %, TPOT unchanged
  overall (11.3 %);
- ``mxfp4_moe``: the MXFP4 MoE backend a vLLM script exports (``mxfp8``:
  ``VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1``, FlashInfer's TensorRT-LLM MoE with MXFP8
  activations, the gpt-oss B200 scripts; ``marlin``: ``VLLM_MXFP4_USE_MARLIN=1``, Marlin with
  BF16 activations, the gpt-oss H100 / H200 scripts of vLLM 0.18; ``default``: neither, vLLM's
  own choice), the profile's ``mxfp4_activation`` (``fp8`` / ``bf16``; docs/engine_defaults.md,
  "MXFP4 MoE kernels"); ``marlin`` also sets the profile's ``mxfp4_moe_kernel`` (Marlin's own
  measured curve where the engine's fitted kernels serve the device; docs/kernels.md, "vLLM
  on Hopper");
- ``max_running_requests`` (``--max-running-requests`` / ``--max-num-seqs`` / TensorRT-LLM's
  ``--max_batch_size`` or a top-level ``max_batch_size``; ``conc``: the run's concurrency) is
  recorded, not applied: as ``max_num_seqs`` it moved SGLang B200's TTFT median 57.0 -> 58.4 %
  (Qwen3.5 B200 57.1 -> 59.3 %: the script's 128 queues half of 256 clients in the replay),
  overall 38.6 -> 38.7 %; the measured TTFT at 256 clients does not show that queue, so the
  cap's effect in SGLang is not yet understood here;
- ``batch_wait_iters`` / ``batch_wait_max_tokens_ratio``: TensorRT-LLM's
  ``batch_wait_timeout_iters`` / ``batch_wait_max_tokens_ratio`` in the extra options file, the
  profile's values of the same names (docs/engine_defaults.md, "TensorRT-LLM batch wait").

A script may choose settings by the run's lengths and layout (the Llama-3.1-70B TensorRT-LLM
scripts write the batch wait only ``if [[ "$ISL" == "1024" && "$OSL" == "1024" && ${TP} -lt 8
]]``). Such a recipe is several rows of the table with one key, each with a ``condition``
(``isl==1024&osl==1024&tp<8``: clauses on ``isl``, ``osl``, ``tp`` and ``conc``, joined by
``&``; empty: any run), in the script's order: a measured row takes the first whose condition
it meets (:func:`row_settings`).

Every row with a recipe (``recipe`` or ``ambiguous`` below) ran InferenceX's client
(``benchmarks/benchmark_lib.sh``: ``--dataset-name random --random-range-ratio 0.8``, its copy
of vLLM's ``benchmark_serving.py``): prompts and outputs drawn uniformly from 0.8-1.0 of the
nominal lengths. The replay runs it with that length range (:data:`INFERENCEX_LENGTH_RANGE_RATIO`,
the workload's ``length_range_ratio``); a row without one keeps fixed lengths.

Each row of the replay is then one of (the ``settings`` column of the validator's OUT):

- ``recipe``: the settings its recipe states, applied as engine options;
- ``ambiguous``: the recipe changed a setting while the row's image was in use (or the row's
  build names several images), so the measurement cannot be tied to one value: that setting
  stays the profile's default, the others apply, and the note says which values were in play;
  or the entry's MTP variant (speculative decoding, ``<entry>-mtp``) ran the same image, so the
  provenance does not say whether the row decoded speculatively: the plain recipe's settings
  apply, without speculation, and the note names the variant;
- ``default``: no recipe found for the row (builds whose image no config entry names): the
  engine profile's defaults.

The ``trtllm 1.0.0rc3`` H100 rows are not InferenceX's: they are AIConfigurator's own sweep
(the wheel's ``silicon_sample.csv`` names their source files,
``aic-auto-gap-analysis/data/h100_sxm/trtllm/1.0.0rc3/<model>.csv``, a local folder of the
AIConfigurator author who added them; ai-dynamo/aiconfigurator@ed133e9d, "add older bench
data"), and their ``batch_size`` is the run's concurrency, AIConfigurator's benchmark rule
(concurrency = workers x ``max_batch_size``). Their launch files are not public; the settings
are those AIConfigurator's TensorRT-LLM generator wrote for an aggregated worker in the
1.0.0rc3 period (:data:`AIC_SWEEP_SOURCE`): ``max_num_tokens = max_batch_size + isl + 1500``
with ``max_batch_size`` the concurrency (:func:`aiconfigurator_settings`), chunked prefill off
(no prompt is longer than that budget), the overlap scheduler on (the profile's default), and
a genai-perf client with fixed lengths. ``recipe`` rows with the note saying so.
"""

from __future__ import annotations

import csv
import dataclasses
import operator
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Literal

from app.core.catalog.models import resolve_model_name
from app.core.limits import DEFAULT_LENGTH_RANGE_RATIO

#: The catalog's data (the directory of :data:`app.core.validation.cases.DATA_DIR`, which reads
#: this module for its built-in serving rows).
RECIPE_SETTINGS = (
    Path(__file__).resolve().parents[1] / "catalog" / "data" / "inferencex_recipe_settings.csv"
)
RECIPE_SOURCE = "SemiAnalysisAI/InferenceX"
Settings = Literal["recipe", "ambiguous", "default"]
#: A recipe's KV-cache dtype -> the engine option (``default``: none, the profile's rule).
_KV_OPTION: Mapping[str, str | None] = {"fp8": "fp8", "default": None}
#: A recipe's MXFP4 MoE backend -> the activations its expert GEMMs run with (``default``: the
#: profile's ``mxfp4_activation``).
_MXFP4_MOE_ACTIVATION: Mapping[str, str | None] = {
    "mxfp8": "fp8",
    "marlin": "bf16",
    "default": None,
}
#: A recipe's MXFP4 MoE backend -> the kernel its experts run on (the profile's
#: ``mxfp4_moe_kernel``; only Marlin has a measured curve of its own).
_MXFP4_MOE_KERNEL: Mapping[str, str] = {"marlin": "marlin"}
#: A CONC rule of the recv interval: ``low;high@threshold``.
_CONC_RULE = re.compile(r"^(\d+);(\d+)@(\d+)$")
#: A clause of a recipe row's ``condition``: a run's value, a comparison, a whole number.
_CLAUSE = re.compile(r"^(isl|osl|tp|conc)(==|!=|<=|>=|<|>)(\d+)$")
_COMPARE: Mapping[str, Callable[[int, int], bool]] = {
    "==": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}
#: A condition's run values -> the measured row's columns.
_RUN_COLUMNS: Mapping[str, str] = {"isl": "isl", "osl": "osl", "tp": "tp", "conc": "concurrency"}
#: InferenceX's client's ``--random-range-ratio`` (``benchmarks/benchmark_lib.sh``, every
#: engine's runs): the length range of every row with a recipe. The 2025 template-era runs
#: passed the same 0.8 (``full-sweep-tmpl.yml``) to ``kimbochen/bench_serving``'s
#: ``benchmark_serving.py`` (not read here; taken to draw lengths as the later copy does).
INFERENCEX_LENGTH_RANGE_RATIO = 0.8
#: InferenceX's client sends each request over HTTP to the engine's OpenAI server
#: (``benchmark_serving.py --backend openai`` against ``vllm serve``, ``python -m
#: sglang.launch_server``, ``trtllm-serve``): every re-submission takes a client's turnaround
#: (the engine option ``client_turnaround``, on for every row with a recipe, whichever engine).
INFERENCEX_CLIENT_TURNAROUND = True
#: Where the AIConfigurator sweep's settings are read (see the module docstring).
AIC_SWEEP_SOURCE = (
    "ai-dynamo/aiconfigurator@f8cc5207 (2025-09-15): src/aiconfigurator/cli/backends/"
    "trtllm.py (agg: max_num_tokens = bs + isl + 1500, disable_overlap_scheduler False), "
    "cli/templates/trtllm/dynamo/extra_engine_args.1.0.0rc3.yaml.j2 (max_batch_size bs, "
    "enable_chunked_prefill false), eval/benchmarks/genai_perf_runner.py (genai-perf, "
    "streaming, fixed lengths)"
)
#: The (engine build, hardware) of the measured file's AIConfigurator sweeps.
AIC_SWEEPS = frozenset({("trtllm 1.0.0rc3", "H100 SXM 80GB")})
#: AIConfigurator's aggregated TensorRT-LLM token budget: ``max_batch_size`` + the prompt +
#: this many tokens (``agg_config["max_num_tokens"]`` in :data:`AIC_SWEEP_SOURCE`).
AIC_AGG_BUDGET_EXTRA_TOKENS = 1500


@dataclass(frozen=True, slots=True, kw_only=True)
class RowSettings:
    """The engine options a row ran with and how they are known."""

    settings: Settings = "default"
    kv_cache_dtype: str | None = None
    memory_fraction: float | None = None
    #: ``(below, at_or_above, threshold)``: the recv interval below the concurrency threshold
    #: and at or above it (a fixed value has equal halves).
    recv_interval_rule: tuple[int, int, int] | None = None
    #: The recv interval for the row's concurrency (:func:`row_settings` resolves the rule).
    scheduler_recv_interval: int | None = None
    stream_interval: int | None = None
    chunked_prefill_size: int | None = None
    #: The activations of the recipe's MXFP4 MoE kernel (the profile's ``mxfp4_activation``).
    mxfp4_activation: str | None = None
    #: The kernel of the recipe's MXFP4 MoE (the profile's ``mxfp4_moe_kernel``).
    mxfp4_moe_kernel: str | None = None
    #: TensorRT-LLM's batch wait (``batch_wait_timeout_iters``, ``batch_wait_max_tokens_ratio``).
    batch_wait_iters: int | None = None
    batch_wait_max_tokens_ratio: float | None = None
    #: The benchmark client's length range (``length_range_ratio``; 1: fixed lengths).
    length_range_ratio: float = DEFAULT_LENGTH_RANGE_RATIO
    #: Whether the client re-submits over HTTP (the engine option ``client_turnaround``;
    #: None: the profile's).
    client_turnaround: bool | None = None
    note: str = ""
    source: str = ""

    @property
    def options(self) -> tuple[tuple[str, str | float], ...]:
        """The engine options to apply over the profile (sorted, hashable)."""
        out: list[tuple[str, str | float]] = []
        if self.kv_cache_dtype is not None:
            out.append(("kv_cache_dtype", self.kv_cache_dtype))
        if self.memory_fraction is not None:
            out.append(("memory_fraction", self.memory_fraction))
        if self.scheduler_recv_interval is not None:
            out.append(("scheduler_recv_interval", self.scheduler_recv_interval))
        if self.stream_interval is not None:
            out.append(("stream_interval", self.stream_interval))
        if self.chunked_prefill_size is not None:
            out.append(("max_batched_tokens", self.chunked_prefill_size))
        if self.mxfp4_activation is not None:
            out.append(("mxfp4_activation", self.mxfp4_activation))
        if self.mxfp4_moe_kernel is not None:
            out.append(("mxfp4_moe_kernel", self.mxfp4_moe_kernel))
        if self.batch_wait_iters is not None:
            out.append(("batch_wait_iters", self.batch_wait_iters))
        if self.batch_wait_max_tokens_ratio is not None:
            out.append(("batch_wait_max_tokens_ratio", self.batch_wait_max_tokens_ratio))
        if self.client_turnaround is not None:
            out.append(("client_turnaround", self.client_turnaround))
        return tuple(out)

    def at_concurrency(self, concurrency: int) -> RowSettings:
        """The settings of a run at ``concurrency`` (the recv interval's CONC rule applied)."""
        rule = self.recv_interval_rule
        if rule is None:
            return self
        below, above, threshold = rule
        value = above if concurrency >= threshold else below
        return dataclasses.replace(self, scheduler_recv_interval=value)


DEFAULT_SETTINGS = RowSettings()
_Key = tuple[str, str, str, str, str]
#: A recipe row's condition: ``(run value, comparison, number)`` clauses, all to hold.
Condition = tuple[tuple[str, str, int], ...]


def _key(engine: str, model: str, hardware: str, gemm_quant: str, tp: str) -> _Key:
    return (
        " ".join(engine.split()).lower(),
        resolve_model_name(model) or model.strip().lower(),
        hardware.strip(),
        gemm_quant.strip().lower(),
        tp.strip(),
    )


@cache
def recipe_table() -> dict[_Key, tuple[tuple[Condition, RowSettings], ...]]:
    """The shipped table by key: each key's (condition, settings) rows in the file's order."""
    with RECIPE_SETTINGS.open(encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle))
    table: dict[_Key, tuple[tuple[Condition, RowSettings], ...]] = {}
    for row in rows:
        kv = row["kv_cache_dtype"]
        memory = row["memory_fraction"]
        settings = row["settings"]
        moe = row["mxfp4_moe"]
        if (
            settings not in ("recipe", "ambiguous")
            or (kv and kv not in _KV_OPTION)
            or (moe and moe not in _MXFP4_MOE_ACTIVATION)
        ):
            raise ValueError(f"{RECIPE_SETTINGS.name}: bad row {row}")  # a shipped-data bug
        stream, chunk = row["stream_interval"], row["chunked_prefill_size"]
        wait_iters, wait_ratio = row["batch_wait_iters"], row["batch_wait_max_tokens_ratio"]
        key = _key(row["engine"], row["model"], row["hardware"], row["gemm_quant"], row["tp"])
        settings_row = RowSettings(
            settings="recipe" if settings == "recipe" else "ambiguous",
            kv_cache_dtype=_KV_OPTION[kv] if kv else None,
            memory_fraction=float(memory) if memory else None,
            recv_interval_rule=_recv_rule(row["scheduler_recv_interval"], row),
            stream_interval=int(stream) if stream.isdigit() else None,
            chunked_prefill_size=int(chunk) if chunk.isdigit() else None,
            mxfp4_activation=_MXFP4_MOE_ACTIVATION[moe] if moe else None,
            mxfp4_moe_kernel=_MXFP4_MOE_KERNEL.get(moe),
            batch_wait_iters=int(wait_iters) if wait_iters else None,
            batch_wait_max_tokens_ratio=float(wait_ratio) if wait_ratio else None,
            length_range_ratio=INFERENCEX_LENGTH_RANGE_RATIO,
            client_turnaround=INFERENCEX_CLIENT_TURNAROUND,
            note=row["note"],
            source=f"{RECIPE_SOURCE}: {row['source']}",
        )
        table[key] = (*table.get(key, ()), (parse_condition(row["condition"], row), settings_row))
    return table


def parse_condition(text: str, row: Mapping[str, str]) -> Condition:
    """A ``condition`` cell: ``&``-joined clauses such as ``isl==1024`` or ``tp<8`` (empty:
    any run); anything else is a shipped-data bug naming the row."""
    clauses = []
    for part in filter(None, text.replace(" ", "").split("&")):
        match = _CLAUSE.match(part)
        if match is None:
            raise ValueError(f"{RECIPE_SETTINGS.name}: bad condition {part!r} in {row}")
        clauses.append((match.group(1), match.group(2), int(match.group(3))))
    return tuple(clauses)


def meets(condition: Condition, row: Mapping[str, str]) -> bool:
    """Whether a measured row's run meets a recipe row's condition (a value the row does not
    state as a whole number meets no clause)."""
    for name, compare, number in condition:
        value = row.get(_RUN_COLUMNS[name], "").strip()
        if not (value.isdigit() and _COMPARE[compare](int(value), number)):
            return False
    return True


def _recv_rule(text: str, row: Mapping[str, str]) -> tuple[int, int, int] | None:
    """A recv-interval cell: a number, a CONC rule, or none (empty: ambiguous; ``default``:
    the script passes none)."""
    if text in ("", "default"):
        return None
    if text.isdigit():
        return (int(text), int(text), 0)
    match = _CONC_RULE.match(text)
    if match is None:
        raise ValueError(f"{RECIPE_SETTINGS.name}: bad scheduler_recv_interval in {row}")
    return (int(match.group(1)), int(match.group(2)), int(match.group(3)))


def aiconfigurator_settings(row: Mapping[str, str]) -> RowSettings | None:
    """The settings of a row of an AIConfigurator sweep (:data:`AIC_SWEEPS`): the token budget
    its generator wrote for the row's concurrency and prompt; ``None`` for any other row."""
    key = (" ".join(row["engine"].split()).lower(), row["hardware"].strip())
    concurrency, isl = row.get("concurrency", "").strip(), row.get("isl", "").strip()
    if key not in AIC_SWEEPS or not (concurrency.isdigit() and isl.isdigit()):
        return None
    budget = int(concurrency) + int(isl) + AIC_AGG_BUDGET_EXTRA_TOKENS
    return RowSettings(
        settings="recipe",
        chunked_prefill_size=budget,
        note=(
            f"AIConfigurator's own sweep: max_num_tokens {budget} (max_batch_size = concurrency "
            f"{concurrency} + isl {isl} + {AIC_AGG_BUDGET_EXTRA_TOKENS}), chunked prefill off, "
            "overlap scheduler on, fixed lengths (its generator's settings; the sweep's launch "
            "files are not public)"
        ),
        source=AIC_SWEEP_SOURCE,
    )


def row_settings(row: Mapping[str, str]) -> RowSettings:
    """The settings of a measured row (``engine``, ``model``, ``hardware``, ``gemm_quant``,
    ``tp``, ``concurrency``, and ``isl`` / ``osl`` where a recipe row's condition reads them):
    the first of its recipe's rows for its tp, else for any tp, whose condition the row meets,
    else an AIConfigurator sweep's settings (:func:`aiconfigurator_settings`), else the
    profile's defaults; the recv interval for the row's concurrency."""
    table = recipe_table()
    args = (row["engine"], row["model"], row["hardware"], row["gemm_quant"])
    candidates = (*table.get(_key(*args, row.get("tp", "")), ()), *table.get(_key(*args, ""), ()))
    found = next((s for condition, s in candidates if meets(condition, row)), None)
    if found is None:
        return aiconfigurator_settings(row) or DEFAULT_SETTINGS
    concurrency = row.get("concurrency", "")
    return found.at_concurrency(int(concurrency)) if concurrency.strip().isdigit() else found
