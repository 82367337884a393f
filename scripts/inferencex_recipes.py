"""Regenerate ``app/core/catalog/data/inferencex_recipe_settings.csv``: the KV-cache dtype,
memory fraction, scheduler receive interval, stream interval, running cap, chunked-prefill
size, vLLM MXFP4 MoE backend and TensorRT-LLM batch wait of each (engine build, model,
hardware, quantization) of the measured agg file, read from the InferenceX launch scripts
(``app/core/validation/recipes.py`` says how they are used).

    python -m scripts.inferencex_recipes --repo PATH/TO/InferenceX [--write]

``PATH/TO/InferenceX`` is a git clone of ``SemiAnalysisAI/InferenceX`` (full history). For each
combination of the file's rows it walks the history of ``configs/nvidia-master.yaml`` (and its
earlier ``.github/configs/`` path), takes the commits where the entry
``<model>-<precision>-<hardware>-<engine>`` names an image whose tag is the row's build, reads
the entry's launch script at each of them, and keeps the settings it passes. Several values in
that period make the row ``ambiguous``; a setting the script chooses by ``$TP`` is keyed by the
row's ``tp``, one it chooses by ``$CONC`` is a rule (``10;30@16``); an ``-mtp`` entry on the
same image makes the row ``ambiguous`` too (it may have decoded speculatively). A batch wait the
script writes inside ``if [[ ... ]]`` on ``$ISL`` / ``$OSL`` / ``$TP`` / ``$CONC`` is a row with
that ``condition`` ahead of the row without it (first match wins, as the script's branches).

A model of :data:`TEMPLATE_MODELS` ran only before ``nvidia-master.yaml`` existed (2025-11-03):
its entries are the jobs of ``.github/workflows/<prefix>-tmpl.yml`` (``image``, ``precision``,
``runner``, ``framework``, ``tp-list``, ``conc-list`` or the default of
``benchmark-tmpl.yml``), and its version-blank rows take the commits whose sweep ran every
(TP, concurrency) of the rows, with their images (:func:`covering_entries`). Without
``--write`` it prints the table. About 6 minutes alone, 20 on a busy machine (it parses every
version of the config).
"""

from __future__ import annotations

import argparse
import csv
import io
import re
import subprocess
from collections import Counter, defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
TABLE = ROOT / "app" / "core" / "catalog" / "data" / "inferencex_recipe_settings.csv"
CASES = ROOT.parent / "shared" / "validation" / "measured_agg_serving_cases.csv"
CONFIGS = (".github/configs/nvidia-master.yaml", "configs/nvidia-master.yaml")
#: The rows of the measured file that come before its InferenceX-era rows (AIConfigurator's own
#: TensorRT-LLM sweeps; see shared/validation/README.md). They also hold InferenceX's 2025
#: TensorRT-LLM rows (Llama-3.1-70B, DeepSeek-R1 on H200): of those, the rows of
#: :data:`TEMPLATE_MODELS` are read.
AICONFIGURATOR_ROWS = 758
COLUMNS = (
    "engine",
    "model",
    "hardware",
    "gemm_quant",
    "tp",
    "condition",
    "kv_cache_dtype",
    "memory_fraction",
    "scheduler_recv_interval",
    "stream_interval",
    "max_running_requests",
    "chunked_prefill_size",
    "mxfp4_moe",
    "batch_wait_iters",
    "batch_wait_max_tokens_ratio",
    "settings",
    "note",
    "source",
)
#: The row's columns -> the config entry's name parts.
MODEL_PREFIX = {
    "openai/gpt-oss-120b": "gptoss",
    "moonshotai/Kimi-K2.5": "kimik2.5",
    "Qwen/Qwen3.5-397B-A17B": "qwen3.5",
    "zhipuai/GLM-5": "glm5",
    "deepseek-ai/DeepSeek-R1": "dsr1",
    "deepseek-ai/DeepSeek-V3": "dsr1",
    "nvidia/DeepSeek-R1-NVFP4": "dsr1",
}
PRECISION = {"nvfp4": "fp4", "fp8": "fp8", "int4_wo": "int4", "unrecorded": "bf16"}
RUNNER = {
    "B200 180GB": "b200",
    "B300 SXM 288GB": "b300",
    "H100 SXM 80GB": "h100",
    "H200 SXM 141GB": "h200",
    "GB200 (NVL72)": "gb200",
}
FRAMEWORK = {"vllm": "vllm", "sglang": "sglang", "trtllm": "trt"}
#: Models benchmarked only in the repository's 2025 workflow-template era (config prefix): the
#: Llama-3.3-70B jobs of ``.github/workflows/70b-tmpl.yml`` (removed 2025-10-29 / 10-31, before
#: ``nvidia-master.yaml``), the measured file's Llama-3.1-70B rows (the same architecture).
TEMPLATE_MODELS = {"meta-llama/Llama-3.1-70B": "70b"}
TEMPLATE = ".github/workflows/{prefix}-tmpl.yml"
BENCHMARK_TEMPLATE = ".github/workflows/benchmark-tmpl.yml"
#: TensorRT-LLM's batch wait in an extra-options file (top-level keys).
BATCH_WAIT_FLAGS = (
    ("batch_wait_iters", re.compile(r"^batch_wait_timeout_iters:\s*(\d+)\s*$")),
    ("batch_wait_max_tokens_ratio", re.compile(r"^batch_wait_max_tokens_ratio:\s*([\d.]+)\s*$")),
)
#: One clause of a bash test on a run variable: ``"$ISL" == "1024"``, ``${TP} -lt 8``.
BASH_CLAUSE = re.compile(
    r'^"?\$\{?(ISL|OSL|TP|CONC)\}?"?\s*(==|!=|-eq|-ne|-lt|-le|-gt|-ge)\s*"?(\d+)"?$'
)
BASH_COMPARE = {"==": "==", "!=": "!=", "-eq": "==", "-ne": "!=", "-lt": "<", "-le": "<=",
                "-gt": ">", "-ge": ">="}  # fmt: skip
KV_FLAGS = (
    re.compile(r"--kv-cache-dtype[ =]+\"?([\w$]+)"),
    re.compile(r"kv-cache-dtype:\s*([\w$]+)"),
    re.compile(r"kv_cache_config:\s*\n(?:\s+\w+:.*\n)*?\s+dtype:\s*([\w$]+)"),
)
MEMORY_FLAGS = (
    re.compile(r"--mem-fraction-static[ =]+\"?([\w.$]+)"),
    re.compile(r"--gpu-memory-utilization[ =]+\"?([\w.$]+)"),
    re.compile(r"gpu-memory-utilization:\s*([\w.$]+)"),
    re.compile(r"free_gpu_memory_fraction:\s*\"?([\w.$]+)"),
)
#: The scheduling and streaming settings (SGLang, vLLM and TensorRT-LLM spellings), each read
#: as the script passes it: a number, ``conc`` (the run's concurrency, ``$CONC``), a CONC rule
#: ``10;30@16`` (10, or 30 when CONC >= 16: a ``if [[ $CONC -ge 16 ]]`` assignment), or the
#: script's expression when it is none of these.
EXTRA_FLAGS: dict[str, tuple[re.Pattern[str], ...]] = {
    "scheduler_recv_interval": (re.compile(r"--scheduler-recv-interval[ =]+\"?(\$\(|[\w${}]+)"),),
    "stream_interval": (
        re.compile(r"--stream-interval[ =]+\"?([\w${}]+)"),
        re.compile(r"^stream_interval:\s*([\w$]+)", re.MULTILINE),
    ),
    "max_running_requests": (
        re.compile(r"--max-running-requests[ =]+\"?([\w${}]+)"),
        re.compile(r"--max-num-seqs[ =]+\"?([\w${}]+)"),
        re.compile(r"--max_batch_size[ =]+\"?([\w${}]+)"),
        # top level only: an indented one is ``cuda_graph_config``'s
        re.compile(r"^max_batch_size:\s*([\w$]+)", re.MULTILINE),
    ),
    "chunked_prefill_size": (
        re.compile(r"--chunked-prefill-size[ =]+\"?([\w${}]+)"),
        re.compile(r"--max-num-batched-tokens[ =]+\"?(\$\(\(|[\w${}]+)"),
        re.compile(r"^\s*max-num-batched-tokens:\s*([\w$]+)", re.MULTILINE),
        re.compile(r"--max_num_tokens[ =]+\"?([\w${}]+)"),
    ),
}
#: vLLM's MXFP4 MoE backend switches (``vllm/model_executor/layers/quantization/mxfp4.py``,
#: ``get_mxfp4_backend`` / ``select_mxfp4_moe_backend``) a launch script exports: FlashInfer's
#: TensorRT-LLM MoE with MXFP8 activations, or Marlin (BF16 activations); ``default`` when it
#: exports neither (the engine's own choice).
MXFP4_MOE_EXPORTS = (
    ("mxfp8", re.compile(r"^\s*export\s+VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1\b", re.MULTILINE)),
    ("marlin", re.compile(r"^\s*export\s+VLLM_MXFP4_USE_MARLIN=1\b", re.MULTILINE)),
)
#: ``if [[ $CONC -ge N ]]; then X=a else X=b fi`` -> X is the rule ``b;a@N``.
CONC_BRANCH = re.compile(r"^(?:if|elif) \[\[ \$CONC -ge (\d+) \]\]")
TP_BRANCH = re.compile(r"^(?:if|elif) \[\[ \$TP -eq (\d+) \]\]")
Entry = tuple[str, str]  # (config key, image)


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=False
    ).stdout


def config_history(repo: Path) -> dict[Entry, list[str]]:
    """Every (entry, image) pair of the config's history and the commits (oldest first)."""
    found: dict[Entry, list[str]] = defaultdict(list)
    for commit in reversed(git(repo, "log", "--format=%H", "--", *CONFIGS).split()):
        for path in CONFIGS:
            text = git(repo, "show", f"{commit}:{path}")
            if not text:
                continue
            data = yaml.safe_load(text)
            for key, entry in (data or {}).items():
                if isinstance(entry, dict) and "image" in entry:
                    found[(key, str(entry["image"]))].append(commit)
    return found


Sweep = set[tuple[int, int]]  # (tp, concurrency) pairs an entry's jobs ran


def template_history(
    repo: Path, prefix: str
) -> tuple[dict[Entry, list[str]], dict[tuple[str, str], Sweep]]:
    """Every (entry, image) pair of a workflow template's history (entries named as in
    ``nvidia-master.yaml``: ``70b-fp8-b200-trt``) and its commits (oldest first); the (TP,
    concurrency) pairs each (entry, commit) swept."""
    path = TEMPLATE.format(prefix=prefix)
    found: dict[Entry, list[str]] = defaultdict(list)
    sweeps: dict[tuple[str, str], Sweep] = defaultdict(set)
    for commit in reversed(git(repo, "log", "--first-parent", "--format=%H", "--", path).split()):
        data = _workflow(git(repo, "show", f"{commit}:{path}"))
        base = _workflow(git(repo, "show", f"{commit}:{BENCHMARK_TEMPLATE}"))
        inputs = (base.get("on") or base.get(True) or {}).get("workflow_call", {}).get("inputs", {})
        default_conc = (inputs.get("conc-list") or {}).get("default", "[]")
        for job in (data.get("jobs") or {}).values():
            given = job.get("with") or {} if isinstance(job, dict) else {}
            if not {"image", "precision", "runner", "framework", "tp-list"} <= set(given):
                continue
            hardware = str(given["runner"]).split("-")[0]
            key = f"{prefix}-{given['precision']}-{hardware}-{given['framework']}"
            image = str(given["image"]).replace("#", "/")
            found[(key, image)].append(commit)
            tps = _numbers(given["tp-list"])
            concs = _numbers(given.get("conc-list", default_conc))
            sweeps[(key, commit)] |= {(t, c) for t in tps for c in concs}
    return found, sweeps


def _workflow(text: str) -> dict[Any, Any]:
    """A workflow file's mapping ({} for none, or for a version that does not parse: a workflow
    GitHub cannot read runs nothing)."""
    try:
        data = yaml.safe_load(text or "{}")
    except yaml.YAMLError:
        return {}
    return data if isinstance(data, dict) else {}


def _numbers(text: object) -> list[int]:
    """A job's literal list of whole numbers (``'[1, 2, 4, 8]'``); none when it is anything
    else (``${{ inputs.tp-list }}``: a sweep this file does not state)."""
    try:
        values = yaml.safe_load(str(text))
    except yaml.YAMLError:
        return []
    if not isinstance(values, list) or not all(isinstance(v, int) for v in values):
        return []
    return values


def covering_entries(
    key: str,
    found: dict[Entry, list[str]],
    sweeps: dict[tuple[str, str], Sweep],
    ran: Sweep,
) -> dict[Entry, list[str]]:
    """An entry's commits whose sweep ran every (TP, concurrency) of a version-blank group's
    rows, by image: the runs the group's measurements can have come from as one sweep."""
    out: dict[Entry, list[str]] = {}
    for (k, image), commits in found.items():
        covering = [c for c in commits if k == key and ran <= sweeps[(key, c)]]
        if covering:
            out[(k, image)] = covering
    return out


def tag_matches(image: str, build: str) -> bool:
    """Whether an image's tag is the row's build (``v0.5.9-cu130`` for ``0.5.9``; ``1.3.0rc14``
    is not ``1.3.0rc1``; a bare ``nightly-dev`` is any nightly)."""
    tag = image.rsplit(":", 1)[-1]
    if build == "nightly-dev":
        return tag.startswith("nightly-dev")
    if build.startswith("nightly-dev-"):
        return tag.replace("-cu13", "") == build
    return tag in (build, f"v{build}") or tag.startswith((f"v{build}-", f"{build}-"))


def settings_of(script: str) -> tuple[set[str], dict[str, set[str]]]:
    """A launch script's KV-cache dtypes (``default`` when it passes none) and memory
    fractions by TP (``""``: any TP), resolving ``$NAME`` through the script's assignments."""
    kv = {v for flag in KV_FLAGS for v in flag.findall(script)}
    memory = {v for flag in MEMORY_FLAGS for v in flag.findall(script)}
    assigned: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    branch = ""
    for line in script.splitlines():
        stripped = line.strip()
        if match := TP_BRANCH.match(stripped):
            branch = match.group(1)
        elif line.startswith(("else", "fi")):
            branch = ""
        elif match := re.match(r"([A-Z_]+)=\"?([\w.]+)\"?$", stripped):
            assigned[match.group(1)][branch].add(match.group(2))

    def resolve(values: Iterable[str]) -> dict[str, set[str]]:
        out: dict[str, set[str]] = defaultdict(set)
        for value in values:
            name = value.lstrip("$").strip("{}")
            for tp, found in (assigned.get(name, {}) if value.startswith("$") else {}).items():
                out[tp] |= found
            if not value.startswith("$"):
                out[""].add(value)
        return out

    kv_values = {v for vs in resolve(kv).values() for v in vs} or {"default"}
    named = {"fp8" if v.startswith("fp8") else "default" if v == "auto" else v for v in kv_values}
    return named, resolve(memory)


def mxfp4_moe_of(script: str) -> set[str]:
    """The MXFP4 MoE backends a launch script exports (:data:`MXFP4_MOE_EXPORTS`)."""
    return {name for name, flag in MXFP4_MOE_EXPORTS if flag.search(script)} or {"default"}


def _assignments(script: str) -> dict[str, dict[str, set[str]]]:
    """Numeric ``NAME=value`` assignments by the ``$TP`` branch they are in (``""``: any TP,
    as :func:`settings_of` reads them); an ``if [[ $CONC -ge N ]]; then NAME=a; else NAME=b``
    pair is the rule ``b;a@N``."""
    out: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    conc: list[str] | None = None  # [threshold, "then" | "else"] inside a CONC branch
    halves: dict[tuple[str, str], dict[str, str]] = defaultdict(dict)
    branch = ""
    for line in script.splitlines():
        stripped = line.strip()
        if match := TP_BRANCH.match(stripped):
            branch = match.group(1)
        elif match := CONC_BRANCH.match(stripped):
            conc = [match.group(1), "then"]
        elif conc is not None and stripped == "else":
            conc[1] = "else"
        elif conc is not None and stripped == "fi":
            conc = None
        elif line.startswith(("else", "fi")):
            branch = ""
        elif match := re.match(r"([A-Z_]+)=\"?(\d+)\"?$", stripped):
            if conc is None:
                out[match.group(1)][branch].add(match.group(2))
            else:
                half = halves[(match.group(1), branch)]
                half[conc[1]], half["at"] = match.group(2), conc[0]
    for (name, tp), half in halves.items():
        if "then" in half and "else" in half:
            out[name][tp].add(f"{half['else']};{half['then']}@{half['at']}")
        else:  # one side only: the other keeps whatever came before (both are in play)
            out[name][tp] |= {half[k] for k in ("then", "else") if k in half}
    return out


def extra_settings_of(script: str) -> dict[str, dict[str, set[str]]]:
    """The scheduling and streaming settings a launch script passes (:data:`EXTRA_FLAGS`), by
    the ``$TP`` branch that sets them (``""``: any TP; ``{"": {"default"}}``: none passed,
    the engine's default); commented-out lines are skipped."""
    script = "\n".join(line for line in script.splitlines() if not line.lstrip().startswith("#"))
    assigned = _assignments(script)
    out: dict[str, dict[str, set[str]]] = {}
    for name, flags in EXTRA_FLAGS.items():
        values: dict[str, set[str]] = defaultdict(set)
        for flag in flags:
            for raw in flag.findall(script):
                var = raw.lstrip("$").strip("{}")
                if raw in ("$CONC", "${CONC}"):
                    values[""].add("conc")
                elif raw.startswith("$") and var in assigned:
                    for tp, found in assigned[var].items():
                        values[tp] |= found
                else:
                    values[""].add(raw if raw.isdigit() else f"expr:{raw}")
        out[name] = dict(values) or {"": {"default"}}
    return out


def bash_condition(test: str) -> str | None:
    """An ``if [[ A && B ]]`` test on the run variables as a recipe ``condition``
    (``isl==1024&tp<8``), or None when a clause is anything else."""
    clauses = []
    for part in test.split("&&"):
        match = BASH_CLAUSE.match(part.strip())
        if match is None:
            return None
        name, compare, number = match.groups()
        clauses.append(f"{name.lower()}{BASH_COMPARE[compare]}{number}")
    return "&".join(clauses)


def batch_wait_of(script: str) -> tuple[tuple[str, str, str], ...]:
    """The batch wait a launch script writes, as ``(condition, iters, ratio)`` in the script's
    order (``""``: outside any test, or in an ``else``; ``"?"``: under a test that is not on the
    run variables), each branch's values; empty when it writes none."""
    branches: list[str] = []  # the condition of each enclosing if / elif / else
    found: dict[str, dict[str, str]] = {}
    for line in script.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            continue
        if match := re.match(r"^(if|elif) \[\[ (.*) \]\]; then$", stripped):
            condition = bash_condition(match.group(2))
            if match.group(1) == "elif" and branches:
                branches.pop()
            branches.append("?" if condition is None else condition)
        elif stripped == "else" and branches:
            branches[-1] = ""
        elif stripped == "fi" and branches:
            branches.pop()
        for name, flag in BATCH_WAIT_FLAGS:
            if match := flag.match(line):
                where = "&".join(c for c in branches if c)
                found.setdefault(where, {})[name] = match.group(1)
    return tuple(
        (where, got.get("batch_wait_iters", ""), got.get("batch_wait_max_tokens_ratio", ""))
        for where, got in found.items()
    )


def _for_tp(by_tp: dict[str, set[str]], tp: str) -> set[str]:
    """A setting's values for the row's TP (``""``: every TP's)."""
    if not tp:
        return set().union(*by_tp.values()) if by_tp else set()
    return by_tp.get(tp, set()) | by_tp.get("", set())


def script_paths(repo: Path, commit: str, entry_key: str) -> list[str]:
    """The non-agentic launch scripts of an entry at a commit."""
    prefix, precision, runner, framework = entry_key.split("-", 3)
    suffix = "_trt" if framework == "trt" else ""
    name = re.compile(rf"/{re.escape(prefix)}_{precision}_{runner}{suffix}(_docker|_slurm)?\.sh$")
    files = git(repo, "ls-tree", "-r", "--name-only", commit, "benchmarks").split("\n")
    return [f for f in files if "/agentic/" not in f and name.search(f)]


def table_rows(repo: Path, cases: Path) -> list[dict[str, str]]:
    with cases.open(encoding="utf-8", newline="") as handle:  # read first: fails fast
        rows = list(csv.DictReader(handle))
    measured = rows[AICONFIGURATOR_ROWS:] + [
        r for r in rows[:AICONFIGURATOR_ROWS] if r["model"] in TEMPLATE_MODELS
    ]
    history = config_history(repo)
    templates = {prefix: template_history(repo, prefix) for prefix in TEMPLATE_MODELS.values()}
    combos = Counter((r["engine"], r["model"], r["hardware"], r["gemm_quant"]) for r in measured)
    ran: dict[tuple[str, str, str, str], Sweep] = defaultdict(set)
    for r in measured:
        ran[(r["engine"], r["model"], r["hardware"], r["gemm_quant"])].add(
            (int(r["tp"]), int(r["concurrency"]))
        )
    out: list[dict[str, str]] = []
    for combo in sorted(combos):
        engine, model, hardware, quant = combo
        family, build = engine.split(" ", 1)
        prefix = TEMPLATE_MODELS.get(model) or MODEL_PREFIX.get(model)
        if prefix is None:
            continue
        key = f"{prefix}-{PRECISION[quant]}-{RUNNER[hardware]}-{FRAMEWORK[family]}"
        entries, sweeps = templates[prefix] if model in TEMPLATE_MODELS else (history, {})
        blank = ""
        if build != "(version blank)":
            images = sorted(img for (k, img) in entries if k == key and tag_matches(img, build))
        elif model in TEMPLATE_MODELS:
            entries = covering_entries(key, entries, sweeps, ran[combo])
            images = sorted(img for (_, img) in entries)
            blank = "version blank: the runs whose sweep had every TP and concurrency of the rows"
        else:
            continue
        if images:
            out.extend(recipe_rows(repo, entries, key, images, combo, blank))
    return out


def recipe_rows(
    repo: Path,
    entries: dict[Entry, list[str]],
    key: str,
    images: list[str],
    combo: tuple[str, str, str, str],
    blank: str,
) -> list[dict[str, str]]:
    """The table rows of one (engine, model, hardware, quantization): the settings of the
    entry's launch scripts at every commit that paired it with one of ``images`` (``blank``:
    how a version-blank group's images were chosen, for the note)."""
    engine, model, hardware, quant = combo
    kv: set[str] = set()
    moe: set[str] = set()
    memory: dict[str, set[str]] = defaultdict(set)
    extra: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    waits: set[tuple[tuple[str, str, str], ...]] = set()
    sources: list[str] = []
    for image in images:
        for commit in entries[(key, image)]:
            for path in script_paths(repo, commit, key):
                script = git(repo, "show", f"{commit}:{path}")
                got_kv, got_memory = settings_of(script)
                got_extra = extra_settings_of(script)
                got_moe = mxfp4_moe_of(script)
                got_wait = batch_wait_of(script)
                if not (
                    got_kv <= kv
                    and got_moe <= moe
                    and got_wait in waits
                    and all(v <= memory[t] for t, v in got_memory.items())
                    and all(
                        v <= extra[n][t] for n, by_tp in got_extra.items() for t, v in by_tp.items()
                    )
                ):
                    sources.append(f"{path}@{commit[:10]}")
                for name, by_tp in got_extra.items():
                    for tp, values in by_tp.items():
                        extra[name][tp] |= values
                kv |= got_kv
                moe |= got_moe
                waits.add(got_wait)
                for tp, values in got_memory.items():
                    memory[tp] |= values
    tags = " ".join(image.rsplit(":", 1)[-1] for image in images)
    mtp = [img for img in images if img in {i for (k, i) in entries if k == f"{key}-mtp"}]
    # One row per TP the memory fraction or another setting depends on.
    tps = sorted({*memory, *(t for by_tp in extra.values() for t in by_tp)} - {""})
    # The batch wait's branches in the script's order, each a row ahead of the unconditional
    # one; several versions or a test on anything but the run's values: no wait, a note.
    (wait,) = waits if len(waits) == 1 else ((),)
    wait_notes = []
    if len(waits) > 1 or any("?" in where for where, _, _ in wait):
        described = {
            " / ".join(f"{w or 'any run'}: {i}, {r}" for w, i, r in v) or "none" for v in waits
        }
        wait_notes.append("batch wait: " + " or ".join(sorted(described)))
        wait = ()
    branches = [b for b in wait if b[0]] + [next((b for b in wait if not b[0]), ("", "", ""))]
    out: list[dict[str, str]] = []
    for tp in tps or [""]:
        values = memory.get(tp, set()) | memory.get("", set()) if tp else memory.get("", set())
        settings = {name: _for_tp(by_tp, tp) for name, by_tp in extra.items()}
        notes = list(wait_notes)
        if len(kv) > 1:
            notes.append("kv_cache_dtype: " + " or ".join(sorted(kv)))
        if len(moe) > 1:
            notes.append("mxfp4_moe: " + " or ".join(sorted(moe)))
        fractions = sorted({f"{float(v):g}" for v in values})
        if len(fractions) > 1:
            notes.append("memory_fraction: " + " or ".join(fractions))
        for name in EXTRA_FLAGS:
            if len(settings[name]) > 1:
                notes.append(f"{name}: " + " or ".join(sorted(settings[name])))
        note = (
            "; ".join(notes) + f" across the recipe versions of image {tags}"
            if notes
            else f"image {tags}"
        )
        if blank:
            note += f" ({blank})"
        if tp:
            note += f"; the script's settings for TP{tp}"
        if mtp:
            note += (
                f"; the entry {key}-mtp (MTP speculative decoding) ran the same image,"
                " so the row may be a speculative run"
            )
        for condition, iters, ratio in branches:
            out.append(
                {
                    "engine": engine,
                    "model": model,
                    "hardware": hardware,
                    "gemm_quant": quant,
                    "tp": tp,
                    "condition": condition,
                    "kv_cache_dtype": kv.copy().pop() if len(kv) == 1 else "",
                    "memory_fraction": fractions[0] if len(fractions) == 1 else "",
                    **{
                        name: next(iter(settings[name])) if len(settings[name]) == 1 else ""
                        for name in EXTRA_FLAGS
                    },
                    "mxfp4_moe": moe.copy().pop() if len(moe) == 1 else "",
                    "batch_wait_iters": iters,
                    "batch_wait_max_tokens_ratio": ratio,
                    "settings": "ambiguous" if notes or mtp else "recipe",
                    "note": note
                    + (f"; the script's settings when {condition}" if condition else ""),
                    "source": " ".join(sources),
                }
            )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", type=Path, required=True, help="a clone of InferenceX")
    parser.add_argument("--cases", type=Path, default=CASES, help="the measured agg file")
    parser.add_argument("--write", action="store_true", help=f"write {TABLE}")
    args = parser.parse_args()
    emit(table_rows(args.repo, args.cases), COLUMNS, TABLE, write=args.write)


def emit(rows: list[dict[str, str]], columns: tuple[str, ...], table: Path, *, write: bool) -> None:
    """Write the table's ``rows`` to ``table`` (``write``), or print them."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    if write:
        table.write_text(buffer.getvalue(), encoding="utf-8")
        print(f"wrote {table}")
    else:
        print(buffer.getvalue(), end="")


if __name__ == "__main__":
    main()
