"""Regenerate ``app/core/catalog/data/inferencex_recipe_layouts.csv``: the deployment the
InferenceX recipe ran for the measured agg file's rows whose recorded layout no engine runs
(``app/core/validation/recipe_layouts.py`` says how they are replayed).

    python -m scripts.inferencex_recipe_layouts --repo PATH/TO/InferenceX [--write]

``PATH/TO/InferenceX`` is a git clone of ``SemiAnalysisAI/InferenceX`` (full history). Two
sources, both read at the commit in force when the rows were measured:

- the GB200 DeepSeek-R1 rows (measured 2025-11-16/17, engine build blank): GB200 ran only
  multi-node Dynamo deployments, launched by ``runners/launch_gb200-nv.sh`` (at
  :data:`GB200_COMMIT`). TensorRT-LLM: one ``./submit_disagg.sh "mtp=on|off" "tep|dep" CTX GEN
  GEN_TP BATCH MAX_TOKENS FRACTION MTP EPLB "CONCURRENCIES"`` line per deployment: CTX context
  workers of 4 GPUs and GEN generation workers of GEN_TP GPUs (``tep``: tensor-parallel
  attention, ``dep``: attention data-parallel; experts over all ranks); Dynamo's ``bench.sh``
  runs each listed concurrency times GEN clients. SGLang: ``submit_disagg.sh PREFILL_NODES
  PREFILL_WORKERS DECODE_NODES DECODE_WORKERS FRONTENDS ISL OSL CONCURRENCIES`` on 4-GPU
  nodes, every worker ``--tp N --dp N --enable-dp-attention`` with DeepEP experts over its N
  GPUs and ``--ep-num-redundant-experts 32`` (Dynamo's ``slurm_jobs/scripts/gb200-fp8.sh``).
  The row's ``tp`` is the deployment's GPU total.
- the rows of single-node entries whose ``tp`` is the entry's ``tp x ep`` (:data:`SINGLE_NODE`:
  Qwen3.5 SGLang on H200 and B200, gpt-oss-120b and DeepSeek-R1 TensorRT-LLM on H200): the
  entry's search space, the union over the listed commits of the period its image was in use.
"""

from __future__ import annotations

import argparse
import csv
import re
from collections import defaultdict
from pathlib import Path

import yaml

from scripts.inferencex_disagg_recipes import SETTINGS, pool_text
from scripts.inferencex_recipes import emit, git

ROOT = Path(__file__).resolve().parents[1]
TABLE = ROOT / "app" / "core" / "catalog" / "data" / "inferencex_recipe_layouts.csv"
CASES = ROOT.parent / "shared" / "validation" / "measured_agg_serving_cases.csv"
#: The last InferenceX commit before the GB200 rows were measured (2025-11-16/17).
GB200_COMMIT = "97f253b511717a021e6e539c5bbe0b1871901274"
GB200_LAUNCHER = "runners/launch_gb200-nv.sh"
CONFIG = ".github/configs/nvidia-master.yaml"
#: (model, hardware, engine family, gemm_quant) -> the single-node entry whose rows may record
#: ``tp`` as the entry's ``tp x ep``, and the commits whose search spaces it ran (the entry's
#: versions while the rows' image was in use; every listed layout runs on one 8-GPU server).
SINGLE_NODE = {
    # the last commit before the rows were measured (2026-03-04)
    ("Qwen/Qwen3.5-397B-A17B", "H200 SXM 141GB", "sglang", "fp8"): (
        "qwen3.5-fp8-h200-sglang",
        ("ade7c0015d7ab081802b603abf3ef53fa3c4b7ab",),
    ),
    # image v0.5.9-cu129 (2026-03-03) and v0.5.9-cu130 (2026-03-23); both run tp 4 / ep 4
    ("Qwen/Qwen3.5-397B-A17B", "B200 180GB", "sglang", "fp8"): (
        "qwen3.5-fp8-b200-sglang",
        ("efd49e50bc7a978febd0ea3b44e943f7495fb0fb", "6a5dad463efe03fca04526048d0027a47f7e20be"),
    ),
    # image gpt-oss-dev: the version with 1k/8k (2025-11-06) and the one of 2026-03-27 (until
    # 2026-04-13, when the entry moved to another image); both run tp = ep in 1, 2, 4, 8
    ("openai/gpt-oss-120b", "H200 SXM 141GB", "trtllm", "nvfp4"): (
        "gptoss-fp4-h200-trt",
        ("403857f6883ec5d9b06e43b76bf0696f43d06011", "626932a110a2348591e314eddb782f7a0dee104c"),
    ),
    # image 1.1.0rc2.post2, the same two versions: tp 8 / ep 8 only
    ("deepseek-ai/DeepSeek-R1", "H200 SXM 141GB", "trtllm", "fp8"): (
        "dsr1-fp8-h200-trt",
        ("403857f6883ec5d9b06e43b76bf0696f43d06011", "626932a110a2348591e314eddb782f7a0dee104c"),
    ),
    # image v0.5.9-cu130, the version of the rows' script (dsr1_fp4_b200.sh@12ba0ae072,
    # 2026-03-25): tp 4 / ep 4 and tp 8 / ep 8 (the row records the model as DeepSeek-V3)
    ("deepseek-ai/DeepSeek-V3", "B200 180GB", "sglang", "nvfp4"): (
        "dsr1-fp4-b200-sglang",
        ("12ba0ae07289e3212840f8f59913ddee97b07f73",),
    ),
    # image v0.5.10.post1-cu130, the version of the rows' script (dsr1_fp4_b300.sh@9ebeafb4e3,
    # 2026-04-17): the same two layouts
    ("deepseek-ai/DeepSeek-V3", "B300 SXM 288GB", "sglang", "nvfp4"): (
        "dsr1-fp4-b300-sglang",
        ("9ebeafb4e31afa58f87fbc36d14147ddc144edb1",),
    ),
}
#: GPUs of one GB200 context worker (one 4-GPU node: ``--ntasks 4 --nodes 1`` in Dynamo's
#: ``benchmark_disagg.slurm``) and of one GB200 node.
CONTEXT_GPUS = NODE_GPUS = 4
#: Dynamo's TensorRT-LLM sweep (``performance_sweeps``): context workers'
#: ``free_gpu_memory_fraction`` (``CTX_GPU_FRAC`` of ``benchmark_disagg.slurm``); both pools'
#: KV cache ``dtype: fp8`` (``scripts/gen_yaml.py``).
TRT_CONTEXT_FRACTION = "0.85"
DYNAMO_SOURCE = (
    "ai-dynamo/dynamo components/backends/trtllm/performance_sweeps "
    "(benchmark_disagg.slurm@0b6abc828e CTX_GPU_FRAC, scripts/gen_yaml.py@357f7dfc46 "
    "kv dtype fp8, scripts/bench.sh@0857f8c630 concurrency x gen servers)"
)
SGLANG_SOURCE = (
    "Elnifio/dynamo components/backends/sglang/slurm_jobs/scripts/gb200-fp8.sh@0bf64d4c53 "
    "(--tp-size = --dp-size = the worker's GPUs, DeepEP, --ep-num-redundant-experts 32)"
)
KEY = ("engine", "model", "hardware", "gemm_quant", "isl", "osl", "concurrency", "tp")
#: SGLang's ``--ep-num-redundant-experts`` in every worker of Dynamo's GB200 script.
SGLANG_REDUNDANT_EXPERTS = "32"
#: The aggregated layout, or both pools, the disaggregated recipe table's settings and the
#: workers' redundant expert slots.
VALUES = ("layout", "prefill", "decode", *SETTINGS, "redundant_experts")
COLUMNS = (*KEY, *VALUES, "settings", "recipe", "note", "source")
_TRT_LINE = re.compile(
    r'\./submit_disagg\.sh "mtp=(on|off)" "(tep|dep)" (\d+) (\d+) (\d+) (\d+) (\d+) '
    r'"([\d.]+)" (\d+) (\d+) "([\d ]+)"'
)
_LENGTHS = re.compile(r'"\$(?:isl|ISL)" = "(\d+)" \] && \[ "\$(?:osl|OSL)" = "(\d+)"')
_SGLANG_LIST = re.compile(r'concurrency_list="([\dx]+)"')
_SGLANG_LINE = re.compile(r"submit_disagg\.sh (\d+) (\d+) (\d+) (\d+) \d+ \$ISL")


def pool(workers: int, gpus: int, data_parallel: bool, ep: int) -> str:
    """A pool of ``workers`` workers of ``gpus`` GPUs, attention tensor- or data-parallel."""
    return pool_text(workers, 1 if data_parallel else gpus, gpus if data_parallel else 1, ep)


def trtllm_candidates(script: str) -> dict[tuple[str, ...], list[dict[str, str]]]:
    """(isl, osl, concurrency, GPUs) -> the deployments of the launcher's TensorRT-LLM lines."""
    out: dict[tuple[str, ...], list[dict[str, str]]] = defaultdict(list)
    lengths = ("", "")
    for line in script.splitlines():
        if found := _LENGTHS.search(line):
            lengths = (found.group(1), found.group(2))
        match = _TRT_LINE.search(line)
        if match is None:
            continue
        mtp_mode, mode, ctx, gen, gen_tp, batch, _tokens, fraction, mtp, eplb, concs = (
            match.groups()
        )
        dep = mode == "dep"
        gpus = int(ctx) * CONTEXT_GPUS + int(gen) * int(gen_tp)
        values = {
            "layout": "",
            "prefill": pool(int(ctx), CONTEXT_GPUS, dep, CONTEXT_GPUS),
            "decode": pool(int(gen), int(gen_tp), dep, int(gen_tp)),
            "num_mtp_tokens": mtp,
            "kv_cache_dtype": "fp8",
            "prefill_memory_fraction": TRT_CONTEXT_FRACTION,
            "decode_memory_fraction": fraction,
            "decode_max_batch_size": batch,
            "decode_max_total_tokens": "",
            # not applied (docs/engine.md, "Rows recorded with a deployment's GPU total")
            "prefill_max_num_tokens": "",
            "unmodelled": f"moe_config.load_balancer.num_slots={eplb}" if int(eplb) else "",
            "redundant_experts": "",
            "recipe": f"ctx{ctx}_gen{gen}_{mode}{gen_tp}_batch{batch}_eplb{eplb}_mtp{mtp}",
            "line": f"mtp={mtp_mode} {mode} {ctx} {gen} {gen_tp} {batch}",
        }
        for conc in concs.split():
            # Dynamo's bench.sh: ``concurrency=$((concurrency * num_gen_servers))``
            out[(*lengths, str(int(conc) * int(gen)), str(gpus))].append(values)
    return out


def sglang_candidates(script: str) -> dict[tuple[str, ...], list[dict[str, str]]]:
    """(isl, osl, concurrency, GPUs) -> the deployment of the launcher's SGLang line."""
    out: dict[tuple[str, ...], list[dict[str, str]]] = defaultdict(list)
    lengths, concs = ("", ""), ""
    for line in script.splitlines():
        if found := _LENGTHS.search(line):
            lengths = (found.group(1), found.group(2))
        if found := _SGLANG_LIST.search(line):
            concs = found.group(1)
        match = _SGLANG_LINE.search(line)
        if match is None:
            continue
        p_nodes, p_workers, d_nodes, d_workers = (int(v) for v in match.groups())
        p_gpus = p_nodes * NODE_GPUS // p_workers
        d_gpus = d_nodes * NODE_GPUS // d_workers
        values = {
            "layout": "",
            "prefill": pool(p_workers, p_gpus, True, p_gpus),
            "decode": pool(d_workers, d_gpus, True, d_gpus),
            "num_mtp_tokens": "0",
            "kv_cache_dtype": "",
            "prefill_memory_fraction": "",
            "decode_memory_fraction": "",
            "decode_max_batch_size": "",
            "decode_max_total_tokens": "",
            "prefill_max_num_tokens": "",
            "unmodelled": "",
            "redundant_experts": SGLANG_REDUNDANT_EXPERTS,
            "recipe": f"{p_workers}p{d_workers}d-dep{p_gpus}-dep{d_gpus}",
            "line": f"submit_disagg.sh {p_nodes} {p_workers} {d_nodes} {d_workers}",
        }
        for conc in concs.split("x"):
            out[(*lengths, conc, str((p_nodes + d_nodes) * NODE_GPUS))].append(values)
    return out


def merged(row: dict[str, str], found: list[dict[str, str]], source: str) -> dict[str, str]:
    """One table row from the deployments that ran the row's key: the values they agree on,
    the others blank and named in the note (``ambiguous``)."""
    notes = []
    values: dict[str, str] = {}
    for name in VALUES:
        seen = sorted({f[name] for f in found})
        values[name] = seen[0] if len(seen) == 1 else ""
        if len(seen) > 1:
            notes.append(f"{name}: " + " or ".join(v or "unset" for v in seen))
    lines = "; ".join(sorted({f["line"] for f in found}))
    return {
        **{k: row[k] for k in KEY},
        **values,
        "settings": "ambiguous" if notes else "recipe",
        "recipe": " ".join(sorted({f["recipe"] for f in found})),
        "note": "; ".join([f"recorded tp={row['tp']} is the deployment's GPU total", *notes])
        + f" (launcher lines: {lines})",
        "source": source,
    }


def entry_layouts(
    repo: Path, entry: str, commits: tuple[str, ...]
) -> dict[tuple[str, str], set[tuple[int, int]]]:
    """(isl, osl) -> the (tp, ep) pairs of a single-node entry's search space at any of
    ``commits``."""
    out: dict[tuple[str, str], set[tuple[int, int]]] = defaultdict(set)
    for commit in commits:
        config = yaml.safe_load(git(repo, "show", f"{commit}:{CONFIG}"))[entry]
        for lengths in config["seq-len-configs"]:
            out[(str(lengths["isl"]), str(lengths["osl"]))].update(
                (int(s["tp"]), int(s.get("ep", 1))) for s in lengths["search-space"]
            )
    return out


def table_rows(repo: Path, cases: Path) -> list[dict[str, str]]:
    with cases.open(encoding="utf-8", newline="") as handle:
        measured = list(csv.DictReader(handle))
    script = git(repo, "show", f"{GB200_COMMIT}:{GB200_LAUNCHER}")
    families = {"trtllm": trtllm_candidates(script), "sglang": sglang_candidates(script)}
    launcher = f"SemiAnalysisAI/InferenceX {GB200_LAUNCHER}@{GB200_COMMIT[:10]}"
    sources = {
        "trtllm": f"{launcher}; {DYNAMO_SOURCE}",
        "sglang": f"{launcher}; {SGLANG_SOURCE}",
    }
    single_node = {name: entry_layouts(repo, *found) for name, found in SINGLE_NODE.items()}
    out: list[dict[str, str]] = []
    keys: set[tuple[str, ...]] = set()
    for row in measured:
        key = tuple(row[k] for k in KEY)
        if key in keys:
            continue
        family = row["engine"].split()[0]
        if row["hardware"] == "GB200 (NVL72)" and row["engine"].endswith("(version blank)"):
            found = families[family].get(
                (row["isl"], row["osl"], row["concurrency"], row["tp"]), []
            )
            if found:
                keys.add(key)
                out.append(merged(row, found, sources[family]))
        elif (name := (row["model"], row["hardware"], family, row["gemm_quant"])) in SINGLE_NODE:
            entry, commits = SINGLE_NODE[name]
            tp, moe_tp, ep = (int(row[c] or 1) for c in ("tp", "moe_tp", "moe_ep"))
            layouts = single_node[name].get((row["isl"], row["osl"]), set())
            if tp != moe_tp * ep or (moe_tp, ep) not in layouts or tp == moe_tp:
                continue
            keys.add(key)
            at = ", ".join(f"@{c[:10]}" for c in commits)
            out.append(
                {
                    **{k: row[k] for k in KEY},
                    **dict.fromkeys(VALUES, ""),
                    "layout": f"{moe_tp}/1/{ep}",
                    "settings": "recipe",
                    "recipe": entry,
                    "note": (
                        f"recorded tp={tp} is the entry's tp {moe_tp} x ep {ep}: "
                        f"one {moe_tp}-GPU server"
                    ),
                    "source": f"SemiAnalysisAI/InferenceX {CONFIG}{at} {entry} search-space",
                }
            )
    return sorted(out, key=lambda r: tuple(r[k] for k in KEY))


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--repo", type=Path, required=True, help="a clone of InferenceX")
    parser.add_argument("--cases", type=Path, default=CASES, help="the measured agg file")
    parser.add_argument("--write", action="store_true", help=f"write {TABLE}")
    args = parser.parse_args()
    emit(table_rows(args.repo, args.cases), COLUMNS, TABLE, write=args.write)


if __name__ == "__main__":
    main()
