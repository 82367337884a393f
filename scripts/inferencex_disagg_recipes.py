"""Regenerate ``app/core/catalog/data/inferencex_disagg_recipe_settings.csv``: the engine
settings of each row of the measured disaggregated file, read from the InferenceX Dynamo
recipes its provenance names (``app/core/validation/disagg_recipes.py`` says how they are
used).

    python -m scripts.inferencex_disagg_recipes --repo PATH/TO/InferenceX \
        --recipes PATH/TO/srt-slurm [--write]

``PATH/TO/InferenceX`` is a clone of ``SemiAnalysisAI/InferenceX`` (full history),
``PATH/TO/srt-slurm`` a clone of ``NVIDIA/srt-slurm`` (the recipes InferenceX's runners check
out, ``runners/launch_*-slurm.sh``). For each row (engine build, model, hardware, quantization,
lengths, concurrency, the two pools' layouts as recorded) it walks the history of
``configs/nvidia-master.yaml`` from 2025-11-15 to 2026-04-30 (the rows were measured from
2026-01 to 2026-03), takes every search-space item of the entries
``dsr1-<precision>-<hardware>-dynamo-<trt|sglang>[-mtp]`` whose image tag is the row's build,
with the row's lengths and its concurrency in ``conc-list``, and reads the recipe each names
(``CONFIG_FILE=``) at ``--branch``. Items whose layout is the row's are preferred; without one
(the sample records many rows with one worker per pool) every item at that concurrency counts
and the row is ``ambiguous`` at best. One value across the items -> ``recipe``; several ->
``ambiguous`` with the values in the note; no item -> no table row (the profile's defaults).
"""

from __future__ import annotations

import argparse
import csv
import re
from collections.abc import Iterable, Mapping
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from app.core.errors import ChunkwiseError
from app.core.validation.case_file import check_expert_split
from scripts.inferencex_recipes import emit, git, tag_matches

ROOT = Path(__file__).resolve().parents[1]
TABLE = ROOT / "app" / "core" / "catalog" / "data" / "inferencex_disagg_recipe_settings.csv"
CASES = ROOT.parent / "shared" / "validation" / "measured_disagg_serving_cases.csv"
CONFIGS = (".github/configs/nvidia-master.yaml", "configs/nvidia-master.yaml")
SINCE, UNTIL = "2025-11-15", "2026-04-30"
BRANCH = "sa-submission-q2-2026"
#: ``NVIDIA/srt-slurm`` "Merge sa-submission-q1-2026 into main (#202)", 2026-03-03: the
#: recipes of the branch InferenceX's runners checked out during the period
#: (``runners/launch_*-slurm.sh``), before #206 (2026-03-04) merged the B200 per-variant
#: STP/MTP files into four consolidated files; read where ``--branch`` lacks a file.
Q1_MERGE = "5063eb432640574bd93410ae2697591a7d15f57c"
KEY_COLUMNS = (
    "engine",
    "model",
    "hardware",
    "gemm_quant",
    "isl",
    "osl",
    "concurrency",
    "prefill",
    "decode",
)
#: The settings read from a recipe (the table's value columns, in order).
SETTINGS = (
    "num_mtp_tokens",
    "kv_cache_dtype",
    "prefill_memory_fraction",
    "decode_memory_fraction",
    "decode_max_batch_size",
    "decode_max_total_tokens",
    "prefill_max_num_tokens",
    "unmodelled",
)
#: The recipe's pools (``workers x tp/attn_dp/moe_ep``) where the row records another layout and
#: the recipes at its concurrency ran one the product models.
LAYOUT = ("recipe_prefill", "recipe_decode")
#: Per candidate recipe (an item that could have run the row): its pools and its own settings,
#: ``prefill+decode,<SETTINGS...>,<recipe>``, candidates joined by `` | ``.
CANDIDATE_FIELDS = ("pools", *SETTINGS, "recipe")
COLUMNS = (
    *KEY_COLUMNS,
    *SETTINGS,
    *LAYOUT,
    "settings",
    "recipe",
    "note",
    "source",
    "candidates",
)
PRECISION = {"nvfp4": "fp4", "fp8": "fp8"}
RUNNER = {
    "B200 180GB": "b200",
    "B300 SXM 288GB": "b300",
    "H100 SXM 80GB": "h100",
    "H200 SXM 141GB": "h200",
}
FRAMEWORK = {"trtllm": "trt", "sglang": "sglang"}
DEEPSEEK = ("deepseek-ai/DeepSeek-R1", "deepseek-ai/DeepSeek-V3")
Item = dict[str, Any]


def config_items(repo: Path) -> list[Item]:
    """Every search-space item of every Dynamo entry in the config's history (the period)."""
    items: list[Item] = []
    log = git(repo, "log", "--format=%H", f"--since={SINCE}", f"--until={UNTIL}", "--", *CONFIGS)
    for commit in reversed(log.split()):
        for path in CONFIGS:
            text = git(repo, "show", f"{commit}:{path}")
            if not text:
                continue
            data = yaml.load(text, Loader=yaml.CSafeLoader) or {}
            for key, entry in data.items():
                if not (isinstance(entry, dict) and "-dynamo-" in key and entry.get("disagg")):
                    continue
                # ``seq-len-configs`` until the config grew ``scenarios`` (2026-03)
                scenarios = [entry.get("seq-len-configs") or []]
                scenarios += (entry.get("scenarios") or {}).values()
                for scenario in scenarios:
                    for lengths in scenario:
                        for space in lengths.get("search-space", []):
                            items.append(
                                {
                                    "commit": commit,
                                    "key": key,
                                    "image": str(entry.get("image")),
                                    "isl": lengths.get("isl"),
                                    "osl": lengths.get("osl"),
                                    **space,
                                }
                            )
    return items


def pool_text(workers: int, tp: int, dp: int, ep: int) -> str:
    """A pool's layout as the table keys it: ``workers x tp/attn_dp/moe_ep``."""
    return f"{workers}x{tp}/{dp}/{ep}"


def item_pool(item: Item, pool: str) -> str:
    """An item's pool in the row's terms: ``dp-attn`` makes the ``tp`` ranks attention-DP."""
    side = item[pool]
    tp = int(side["tp"])
    dp_attn = bool(side.get("dp-attn"))
    return pool_text(
        int(side["num-worker"]), 1 if dp_attn else tp, tp if dp_attn else 1, side["ep"]
    )


def row_pool(row: Mapping[str, str], pool: str) -> str:
    return pool_text(
        *(int(row[f"{pool}_{c}"] or 1) for c in ("workers", "tp", "attn_dp", "moe_ep"))
    )


def modelled(*pools: str) -> bool:
    """Whether the product runs these pools (experts tensor-parallel across attention-DP ranks
    without EP is refused: such a recipe layout is not substituted for the recorded one)."""
    for text in pools:
        tp, dp, ep = (int(v) for v in text.split("x", 1)[1].split("/"))
        try:
            check_expert_split(tp, dp, tp * dp // ep, ep)
        except ChunkwiseError:
            return False
    return True


def recipe_path(item: Item) -> str | None:
    for setting in item["prefill"].get("additional-settings") or []:
        if setting.startswith("CONFIG_FILE="):
            return str(setting.split("=", 1)[1]).replace("recipies/", "recipes/")
    return None


def _section(data: Mapping[str, Any], *names: str) -> Mapping[str, Any]:
    for name in names:
        data = data.get(name) or {}
    return data


def _get(section: Mapping[str, Any], *names: str) -> Any:
    for name in names:
        if name in section:
            return section[name]
    return None


def _fraction(value: Any) -> str:
    return "" if value is None else f"{float(value):g}"


def trtllm_settings(data: Mapping[str, Any]) -> dict[str, str]:
    prefill = _section(data, "backend", "trtllm_config", "prefill")
    decode = _section(data, "backend", "trtllm_config", "decode")
    spec = decode.get("speculative_config") or {}
    unmodelled = []
    if spec and str(spec.get("decoding_type", "")).upper() != "MTP":
        unmodelled.append(f"speculative_config.decoding_type={spec.get('decoding_type')}")
    slots = _section(decode, "moe_config", "load_balancer").get("num_slots")
    if slots:
        unmodelled.append(f"moe_config.load_balancer.num_slots={slots}")
    kv = _section(decode, "kv_cache_config").get("dtype")
    return {
        "num_mtp_tokens": str(spec.get("num_nextn_predict_layers", 0) if spec else 0),
        "kv_cache_dtype": "fp8" if str(kv).startswith("fp8") else "default",
        "prefill_memory_fraction": _fraction(
            _section(prefill, "kv_cache_config").get("free_gpu_memory_fraction")
        ),
        "decode_memory_fraction": _fraction(
            _section(decode, "kv_cache_config").get("free_gpu_memory_fraction")
        ),
        # TensorRT-LLM's max_batch_size is per rank, attention DP or not.
        "decode_max_batch_size": str(decode.get("max_batch_size") or ""),
        "decode_max_total_tokens": "",
        # the context server's token budget per iteration (per rank with attention DP)
        "prefill_max_num_tokens": str(prefill.get("max_num_tokens") or ""),
        "unmodelled": " ".join(unmodelled),
    }


def sglang_settings(data: Mapping[str, Any]) -> dict[str, str]:
    prefill = _section(data, "backend", "sglang_config", "prefill")
    decode = _section(data, "backend", "sglang_config", "decode")
    algorithm = decode.get("speculative-algorithm")
    unmodelled = []
    steps = 0
    if algorithm:
        steps = int(decode.get("speculative-num-steps") or 0)
        topk = int(decode.get("speculative-eagle-topk") or 1)
        # DeepSeek's MTP head runs as SGLang's EAGLE (NEXTN) drafter: a chain of ``steps``
        # drafts; a tree (topk > 1) verifies more than it emits and is not modelled.
        if str(algorithm).upper() not in ("EAGLE", "NEXTN"):
            unmodelled.append(f"speculative-algorithm={algorithm}")
        if topk > 1:
            unmodelled.append(f"speculative-eagle-topk={topk}")
    if decode.get("ep-num-redundant-experts"):
        unmodelled.append(f"ep-num-redundant-experts={decode['ep-num-redundant-experts']}")
    kv = decode.get("kv-cache-dtype")
    running = decode.get("max-running-requests")
    dp = int(_get(decode, "data-parallel-size", "dp-size") or 1)
    if running and decode.get("enable-dp-attention") and dp > 1:
        running = int(running) // dp  # SGLang splits it over the attention-DP ranks
    return {
        "num_mtp_tokens": str(steps),
        "kv_cache_dtype": "fp8" if str(kv).startswith("fp8") else "default",
        "prefill_memory_fraction": _fraction(prefill.get("mem-fraction-static")),
        "decode_memory_fraction": _fraction(decode.get("mem-fraction-static")),
        "decode_max_batch_size": str(running or ""),
        "decode_max_total_tokens": str(decode.get("max-total-tokens") or ""),
        "prefill_max_num_tokens": sglang_prefill_budget(prefill),
        "unmodelled": " ".join(unmodelled),
    }


def sglang_prefill_budget(prefill: Mapping[str, Any]) -> str:
    """One prefill rank's token budget per forward: ``--chunked-prefill-size``, divided by the
    attention-DP ranks with ``--enable-dp-attention`` (SGLang ``ServerArgs.
    _handle_data_parallelism``: ``self.chunked_prefill_size = self.chunked_prefill_size //
    self.dp_size``, "DP attention is enabled. The chunked prefill size is adjusted to ..."),
    and at most ``--max-prefill-tokens`` (each rank's scheduler keeps the whole value, the
    prefill batch's input-token limit); ``""`` when the recipe sets neither (the profile's
    budget)."""
    chunk = prefill.get("chunked-prefill-size")
    dp = int(_get(prefill, "data-parallel-size", "dp-size") or 1)
    if chunk and prefill.get("enable-dp-attention") and dp > 1:
        chunk = int(chunk) // dp
    limits = [int(v) for v in (chunk, prefill.get("max-prefill-tokens")) if v]
    return str(min(limits)) if limits else ""


def _deep_merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``override`` laid over it (mappings merge, other values replace)."""
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def _zip_index(value: Any, index: int) -> Any:
    """A ``zip_override_*`` section's ``index``-th variant: every list picks its element."""
    if isinstance(value, Mapping):
        return {k: _zip_index(v, index) for k, v in value.items()}
    if isinstance(value, list):
        return value[index]
    return value


def variant(data: Mapping[str, Any], selector: str) -> dict[str, Any]:
    """One variant of a consolidated recipe (srt-slurm's ``base:`` plus ``override_<name>:`` or
    ``zip_override_<name>:`` sections, selected as ``FILE.yaml:override_<name>`` or
    ``FILE.yaml:zip_override_<name>[i]``, as ``srtctl apply -f`` takes them): the base with the
    section laid over it. A plain recipe (no ``base``) is itself; a file without a selector is
    its base."""
    if "base" not in data:
        return dict(data)
    base = data["base"] or {}
    if not selector:
        return dict(base)
    found = re.fullmatch(r"(zip_override_\w+)\[(\d+)\]", selector)
    if found:
        section = _zip_index(data.get(found.group(1)) or {}, int(found.group(2)))
    else:
        section = data.get(selector) or {}
    return _deep_merge(base, section)


def recipe_text(recipes: Path, branch: str, path: str) -> str:
    """A recipe file at ``branch``, else as the ``sa-submission-q1-2026`` branch left it
    (:data:`Q1_MERGE`; InferenceX's runners of the period checked out that branch, and the
    later branch consolidated many per-variant files into one), else empty."""
    for ref in (branch, Q1_MERGE):
        if text := git(recipes, "show", f"{ref}:{path}"):
            return text
    return ""


def recipe_settings(recipes: Path, branch: str, path: str) -> dict[str, str] | None:
    """A recipe's settings (``path`` may select a consolidated file's variant,
    ``FILE.yaml:zip_override_mtp_lowlat[0]``), or None when no ref holds the file."""
    file, _, selector = path.partition(":")
    text = recipe_text(recipes, branch, file)
    if not text:
        return None
    data = variant(yaml.load(text, Loader=yaml.CSafeLoader) or {}, selector)
    backend = str(_section(data, "backend").get("type") or "")
    if backend == "trtllm" or "trtllm_config" in _section(data, "backend"):
        return trtllm_settings(data)
    return sglang_settings(data)


def name_settings(path: str) -> dict[str, str]:
    """What a recipe's path alone says (its file is not on the branch): ``stp`` is no
    speculation, ``mtpN`` N draft tokens; the rest unknown."""
    found = re.search(r"_mtp(\d+)", path)
    mtp = "0" if "/stp/" in path or "_stp_" in path else found.group(1) if found else ""
    return dict.fromkeys(SETTINGS, "") | {"num_mtp_tokens": mtp}


def merge(values: Iterable[dict[str, str]]) -> tuple[dict[str, str], list[str]]:
    """One value per setting when every recipe agrees, else blank and a note."""
    merged: dict[str, str] = {}
    notes: list[str] = []
    listed = list(values)
    for name in SETTINGS:
        found = sorted({v[name] for v in listed})
        if len(found) == 1:
            merged[name] = found[0]
        else:
            merged[name] = ""
            notes.append(f"{name}: " + " or ".join(f or "unknown" for f in found))
    return merged, notes


def _counts(value: Any) -> set[int]:
    """A recipe's ``benchmark.concurrencies``: ``"144"``, ``"32x64x128"`` or a list."""
    if isinstance(value, list):
        return {int(v) for v in value}
    return {int(v) for v in str(value or "").split("x") if v.strip().isdigit()}


@cache
def _recipe_file(recipes: Path, branch: str, path: str) -> dict[str, Any]:
    return yaml.load(git(recipes, "show", f"{branch}:{path}"), Loader=yaml.CSafeLoader) or {}


def recipe_items(
    recipes: Path, branch: str, items: list[Item], entry: str, build: str, row: Mapping[str, str]
) -> list[Item]:
    """Items for a row no config item lists: the recipes in the folders the entry's items
    name (on ``branch``) whose benchmark has the row's lengths and client count, with the
    pools their resources and engine settings give."""
    folders = {
        p.rsplit("/", 1)[0]
        for i in items
        if i["key"] in (entry, f"{entry}-mtp") and tag_matches(i["image"], build)
        if (p := recipe_path(i)) and ":" not in p
    }
    out: list[Item] = []
    for folder in sorted(folders):
        for path in git(recipes, "ls-tree", "--name-only", f"{branch}:{folder}").split():
            full = f"{folder}/{path}"
            data = _recipe_file(recipes, branch, full)
            bench = _section(data, "benchmark")
            if (bench.get("isl"), bench.get("osl")) != (int(row["isl"]), int(row["osl"])):
                continue
            if int(row["concurrency"]) not in _counts(bench.get("concurrencies")):
                continue
            resources = _section(data, "resources")
            pools: dict[str, Any] = {}
            for pool in ("prefill", "decode"):
                trt = _section(data, "backend", "trtllm_config", pool)
                sgl = _section(data, "backend", "sglang_config", pool)
                pools[pool] = {
                    "num-worker": resources.get(f"{pool}_workers", 1),
                    "tp": _get(trt, "tensor_parallel_size")
                    or _get(sgl, "tensor-parallel-size", "tp-size")
                    or 1,
                    "ep": _get(trt, "moe_expert_parallel_size")
                    or _get(sgl, "expert-parallel-size", "ep-size")
                    or 1,
                    "dp-attn": bool(
                        _get(trt, "enable_attention_dp") or _get(sgl, "enable-dp-attention")
                    ),
                }
            pools["prefill"]["additional-settings"] = [f"CONFIG_FILE={full}"]
            out.append({"commit": "recipe", "key": entry, **pools})
    return out


def table_rows(repo: Path, recipes: Path, branch: str, cases: Path) -> list[dict[str, str]]:
    items = config_items(repo)
    with cases.open(encoding="utf-8", newline="") as handle:
        measured = list(csv.DictReader(handle))
    cache: dict[str, dict[str, str] | None] = {}
    keys = sorted(
        {
            (*tuple(r[c] for c in KEY_COLUMNS[:7]), row_pool(r, "prefill"), row_pool(r, "decode"))
            for r in measured
        }
    )
    out: list[dict[str, str]] = []
    for key in keys:
        row = dict(zip(KEY_COLUMNS, key, strict=True))
        family, build = row["engine"].split(" ", 1)
        if row["model"] not in DEEPSEEK or row["hardware"] not in RUNNER:
            continue
        entry = (
            f"dsr1-{PRECISION[row['gemm_quant']]}-{RUNNER[row['hardware']]}"
            f"-dynamo-{FRAMEWORK[family]}"
        )
        found = [
            i
            for i in items
            if i["key"] in (entry, f"{entry}-mtp")
            and tag_matches(i["image"], build)
            and (i["isl"], i["osl"]) == (int(row["isl"]), int(row["osl"]))
            and int(row["concurrency"]) in (i.get("conc-list") or [])
        ]
        if not found:  # the recipes' own client counts (their ``benchmark.concurrencies``)
            found = recipe_items(recipes, branch, items, entry, build, row)
        exact = [
            i
            for i in found
            if (item_pool(i, "prefill"), item_pool(i, "decode")) == (row["prefill"], row["decode"])
        ]
        chosen = exact or found
        paths = sorted({p for i in chosen if (p := recipe_path(i))})
        if not paths:
            continue
        per_path = {}
        for path in paths:
            if path not in cache:
                cache[path] = recipe_settings(recipes, branch, path)
            per_path[path] = cache[path] or name_settings(path)
        merged, notes = merge(per_path.values())
        # one candidate per (pools, settings): the same variant may be named twice (a q1 file
        # and its q2 consolidated section), its recipe names joined
        grouped: dict[tuple[str, ...], set[str]] = {}
        for i in chosen:
            if p := recipe_path(i):
                pools_settings = (
                    f"{item_pool(i, 'prefill')}+{item_pool(i, 'decode')}",
                    *(per_path[p][name] for name in SETTINGS),
                )
                grouped.setdefault(pools_settings, set()).add(
                    p.rsplit("/", 1)[-1].removesuffix(".yaml")
                )
        candidates = sorted((*k, " ".join(sorted(v))) for k, v in grouped.items())
        merged |= dict.fromkeys(LAYOUT, "")
        if not exact:
            pools = sorted({(item_pool(i, "prefill"), item_pool(i, "decode")) for i in found})
            layouts = ", ".join(" + ".join(pair) for pair in pools)
            if len(pools) == 1 and modelled(*pools[0]):
                merged |= dict(zip(LAYOUT, pools[0], strict=True))
                notes.append(
                    f"the recorded layout is not the recipe's; replayed in the recipe's ({layouts})"
                )
            else:
                notes.append(
                    "the recorded layout is none of the recipe's at this concurrency ("
                    + layouts
                    + "); its per-worker caps (decode_max_batch_size, decode_max_total_tokens) "
                    "belong to that layout and are not applied"
                )
                merged |= {"decode_max_batch_size": "", "decode_max_total_tokens": ""}
        missing = [p for p in paths if cache[p] is None]
        if missing:
            notes.append(
                "not in srt-slurm (q2 branch or the q1 merge), read from its name: "
                + " ".join(missing)
            )
        commits = sorted({i["commit"][:10] for i in chosen})
        if commits == ["recipe"]:
            notes.append("no config item lists this client count; the recipes' benchmarks do")
        out.append(
            row
            | merged
            | {
                "settings": "ambiguous" if notes else "recipe",
                "recipe": " ".join(p.rsplit("/", 1)[-1].removesuffix(".yaml") for p in paths),
                "note": "; ".join(notes),
                "source": f"{entry}[-mtp] "
                + ("recipe folders" if commits == ["recipe"] else f"@ {commits[0]}..{commits[-1]}")
                + f"; NVIDIA/srt-slurm@{branch}:"
                + " ".join(paths),
                "candidates": " | ".join(",".join(c) for c in candidates),
            }
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--repo", type=Path, required=True, help="a clone of InferenceX")
    parser.add_argument("--recipes", type=Path, required=True, help="a clone of srt-slurm")
    parser.add_argument("--branch", default=BRANCH, help="the recipes' branch")
    parser.add_argument("--cases", type=Path, default=CASES, help="the measured disagg file")
    parser.add_argument("--write", action="store_true", help=f"write {TABLE}")
    args = parser.parse_args()
    rows = table_rows(args.repo, args.recipes, args.branch, args.cases)
    emit(rows, COLUMNS, TABLE, write=args.write)


if __name__ == "__main__":
    main()
