"""The dashboard at ``/`` in a real browser: form -> optimize -> table, charts, chunk plan and
step timeline; validation errors next to their fields; "Copy as CLI" runs through the CLI."""

from __future__ import annotations

import csv
import io
import json
import re
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, Page, expect

from app import cli
from app.core.limits import DEFAULT_TOP_K, MAX_MTP_TOKENS, MODES
from app.core.optimizer.agg import SEARCHED_WORKLOADS
from app.core.profiles import PROFILES
from app.core.scheduler import MIXED_LATENCIES, SCHEDULERS
from app.models.optimize import OptimizeRequest
from app.services import optimize as optimize_service
from tests.e2e.conftest import PageErrors, open_page

pytestmark = pytest.mark.e2e

MODEL = "Qwen/Qwen3-32B"
DEVICE = "ATLAS_800_A2_376T_64G"


def load(page: Page) -> None:
    page.goto("/")
    page.wait_for_selector("body[data-ready=true]")


def fill(page: Page, **values: str) -> None:
    """Fill fields by their accessible labels' ids (``f-<api field name>``)."""
    for name, value in values.items():
        field = page.locator(f"#f-{name}")
        field.evaluate("el => { const d = el.closest('details'); if (d) d.open = true; }")
        if field.evaluate("el => el.tagName") == "SELECT":
            field.select_option(value)
        else:
            field.fill(value)


def fill_standard(page: Page) -> None:
    fill(
        page,
        model=MODEL,
        device=DEVICE,
        num_devices="8",
        input_length="3500",
        output_length="1500",
        max_batched_tokens="2048",
        tpot_limit_ms="50",
        tp_sizes="2 4 8",
    )


def run_optimize(page: Page) -> None:
    page.evaluate(
        """() => {
          window.__sawProgress = false;
          const el = document.getElementById("progress");
          new MutationObserver(() => { if (!el.hidden) window.__sawProgress = true; })
            .observe(el, { attributes: true });
        }"""
    )
    page.get_by_role("button", name="Optimize").click()
    expect(page.locator("#results-table tbody tr").first).to_be_visible()
    expect(page.locator("#progress")).to_be_hidden()
    assert page.evaluate("window.__sawProgress"), "no progress indication while the request ran"


def chart_points(page: Page, canvas_id: str) -> list[int]:
    """Plotted points per dataset of a Chart.js chart (gaps between lane segments excluded)."""
    counts = page.evaluate(
        "id => Chart.getChart(id).data.datasets.map(d => d.data.filter(p => p.y !== null).length)",
        canvas_id,
    )
    return [int(n) for n in counts]


def chart_series(page: Page, canvas_id: str) -> dict[str, int]:
    labels = page.evaluate("id => Chart.getChart(id).data.datasets.map(d => d.label)", canvas_id)
    return dict(zip(labels, chart_points(page, canvas_id), strict=True))


def test_optimize_shows_summary_table_charts_plan_and_timeline(page: Page, artifacts: Path) -> None:
    load(page)
    expect(page.get_by_label("Model")).to_have_value(MODEL)
    fill_standard(page)
    fill(page, engine="msmodeling")  # the RFC's burst: every request of the row at t = 0
    run_optimize(page)

    summary = page.locator("#summary")
    expect(summary).to_contain_text("Best: TP")
    expect(summary).to_contain_text("prefill chunks")
    expect(summary).to_contain_text("engine msmodeling")
    rows = page.locator("#results-table tbody tr")
    response = page.evaluate("window.chunkwise.response")
    assert rows.count() == len(response["rows"]) >= 1
    first = response["rows"][0]
    expect(rows.first.locator("th")).to_have_text(first["parallel"])
    headers = page.locator("#results-table thead th").all_inner_texts()
    for column in ("chunks", "eff. input", "KV GiB", "mem left GiB"):
        assert any(column in h for h in headers), headers
    # Memory in GiB, as the device's name counts it: 64G is 64 GiB (68.7 GB).
    left_gib = first["memory_left_gb"] * 1e9 / 2**30
    expect(rows.first.locator("td[data-key=memory_left_gib]")).to_have_text(f"{left_gib:,.2f}")
    expect(page.locator(f"#f-device option[value={DEVICE}]")).to_have_text(f"{DEVICE} (64 GiB)")
    expect(page.locator("#hint-device")).to_contain_text("64.0 GiB HBM")
    expect(rows.first.locator("td[data-key=prefill_num_chunks]")).to_have_text("2")
    expect(rows.first.locator("td[data-key=effective_input_length]")).to_have_text("3,500")

    # Both charts plot every feasible probe, one series per layout, and star the best one.
    feasible = [p for p in response["probes"] if p["feasible"]]
    layouts = {p["parallel"] for p in feasible}
    for chart in ("chart-concurrency", "chart-latency"):
        series = chart_series(page, chart)
        assert series.pop("best") == 1
        assert set(series) == layouts
        assert sum(series.values()) == len(feasible) > 0

    # Chunk plan: 3500 tokens in chunks of at most 2048.
    expect(page.locator("#chunk-plan")).to_contain_text("in 2 chunks of at most 2,048 tokens")
    expect(page.locator("#chunk-plan .plan-seg.chunk")).to_have_count(2)

    # The best row is simulated: lanes and markers; every request gets a first token.
    expect(page.locator("#timeline-text")).to_contain_text("makespan")
    sim = page.evaluate("window.chunkwise.simulation")
    assert sim["concurrency"] == first["concurrency"]
    lanes = chart_points(page, "chart-timeline")
    assert lanes[0] > 0 and lanes[1] > 0  # prefill and decode segments
    counts = page.evaluate(
        "[2, 3].map(i => Chart.getChart('chart-timeline').data.datasets[i].data"
        ".reduce((n, p) => n + p.count, 0))"
    )
    assert counts == [sim["batch_size"], sim["batch_size"]]
    page.evaluate("window.scrollTo(0, 0)")
    page.screenshot(path=str(artifacts / "dashboard-1280x800.png"), full_page=True)

    # Zoom into 1% of the run: single decode steps become separate bars.
    bars_whole = chart_points(page, "chart-timeline")[1]
    page.get_by_label("Zoom").select_option("0.01")
    page.get_by_label("from").fill("30")
    scale = page.evaluate(
        "(() => { const x = Chart.getChart('chart-timeline').scales.x; return [x.min, x.max]; })()"
    )
    assert scale[1] - scale[0] == pytest.approx(0.01 * sim["makespan_ms"], rel=0.01)
    assert scale[0] == pytest.approx(0.3 * sim["makespan_ms"], rel=0.01)
    assert chart_points(page, "chart-timeline")[1] > 0
    assert bars_whole > 0
    # The form, where it differs (the budget's default is blank: the engine's for the device).
    assert page.url.endswith("#max_batched_tokens=2048&tp_sizes=2+4+8&engine=msmodeling")

    # Sorting: tokens/s descending, then ascending.
    header = page.locator("#results-table thead th[data-key=throughput_tokens_s]")
    header.get_by_role("button").click()
    expect(header).to_have_attribute("aria-sort", "descending")
    ordered = [r["throughput_tokens_s"] for r in response["rows"]]
    ranks = [
        int(x)
        for x in page.locator("#results-table tbody tr").evaluate_all(
            "trs => trs.map(tr => tr.dataset.rank)"
        )
    ]
    assert [response["rows"][r - 1]["throughput_tokens_s"] for r in ranks] == sorted(
        ordered, reverse=True
    )
    header.get_by_role("button").click()
    expect(header).to_have_attribute("aria-sort", "ascending")

    # Another row's timeline.
    if len(response["rows"]) > 1:
        page.locator("#results-table tbody tr[data-rank='2']").get_by_role(
            "button", name=re.compile("^Simulate")
        ).click()
        expect(page.locator("#timeline-text")).to_contain_text("Rank 2")
        expect(page.locator("#results-table tbody tr[data-rank='2']")).to_have_class("selected")

    # A data-parallel row is simulated at its total concurrency (batch_size on each replica).
    dp_rank = next(i for i, r in enumerate(response["rows"], start=1) if r["dp"] > 1)
    row = response["rows"][dp_rank - 1]
    page.locator(f"#results-table tbody tr[data-rank='{dp_rank}']").get_by_role(
        "button", name=re.compile("^Simulate")
    ).click()
    expect(page.locator("#timeline-text")).to_contain_text(f"Rank {dp_rank}: {row['parallel']}")
    expect(page.locator("#timeline-text")).to_contain_text(f"{row['batch_size']} per replica")
    sim = page.evaluate("window.chunkwise.simulation")
    assert sim["input"]["concurrency"] == row["concurrency"] == row["batch_size"] * row["dp"]
    assert (sim["input"]["dp_size"], sim["batch_size"]) == (row["dp"], row["batch_size"])
    assert sim["ttft_ms"] == pytest.approx(row["ttft_ms"])
    assert sim["output_throughput"] == pytest.approx(row["throughput_tokens_s"])

    # Exports.
    with page.expect_download() as download_info:
        page.get_by_role("button", name="Export CSV").click()
    text = Path(download_info.value.path()).read_text(encoding="utf-8")
    table = list(csv.DictReader(io.StringIO(text)))
    assert len(table) == len(response["rows"])
    assert table[0]["prefill_num_chunks"] == "2"
    assert {"effective_input_length", "memory_gb.kv_cache_gb"} <= set(table[0])
    with page.expect_download() as download_info:
        page.get_by_role("button", name="Export JSON").click()
    exported = json.loads(Path(download_info.value.path()).read_text(encoding="utf-8"))
    assert exported["rows"] == response["rows"]


def test_validation_errors_are_shown_next_to_their_fields(
    page: Page, base_url: str, page_errors: PageErrors, artifacts: Path
) -> None:
    page_errors.allowed.append("status of 422")  # the unknown model below
    load(page)
    fill_standard(page)
    fill(page, max_batched_tokens="0", input_length="35.5")
    page.get_by_role("button", name="Optimize").click()
    # The same message the API gives for this field.
    body = {
        "model": MODEL,
        "device": DEVICE,
        "num_devices": 8,
        "input_length": 3500,
        "output_length": 1500,
        "max_batched_tokens": 0,
    }
    problem = httpx.post(f"{base_url}/v1/optimize", json=body).json()
    (api_error,) = problem["errors"]
    assert api_error["loc"] == ["body", "max_batched_tokens"]
    expect(page.locator("#err-max_batched_tokens")).to_have_text(api_error["msg"])
    expect(page.get_by_label("Max batched tokens")).to_have_attribute("aria-invalid", "true")
    expect(page.locator("#err-input_length")).to_contain_text("valid integer")
    expect(page.locator("#banner")).to_contain_text("fix the marked fields")
    expect(page.locator("#output")).to_be_hidden()
    page.screenshot(path=str(artifacts / "dashboard-validation.png"))

    # Fixed fields clear their error; an error only the API can find (an unknown model) comes
    # back as problem+json and is shown next to the model field with the valid names.
    fill(page, max_batched_tokens="2048", input_length="3500", model="Qwen/Qwen3-33B")
    expect(page.locator("#err-max_batched_tokens")).to_have_text("")
    page.get_by_role("button", name="Optimize").click()
    expect(page.locator("#err-model")).to_contain_text("unknown model 'Qwen/Qwen3-33B'")
    expect(page.locator("#err-model")).to_contain_text("Valid: ")
    expect(page.locator("#banner")).to_contain_text("Unknown model (422)")
    expect(page.locator("#f-model")).to_be_focused()


def test_errors_without_a_field_are_shown_never_a_blank_page(
    browser: Browser, base_url: str, page_errors: PageErrors
) -> None:
    page = open_page(browser, base_url, page_errors)
    page_errors.allowed.append("Failed to load resource")
    try:
        # The catalogs fail: the form still renders (typed names) and says why.
        page.route("**/v1/models", lambda route: route.abort())
        load(page)
        expect(page.locator("#banner")).to_contain_text("could not be reached")
        expect(page.get_by_role("button", name="Optimize")).to_be_visible()
        expect(page.get_by_label("Device", exact=True)).to_have_value(DEVICE)
        # A deadline problem from the service lands in the banner.
        problem = {
            "type": "urn:chunkwise:problem:deadline",
            "title": "Computation deadline exceeded",
            "status": 504,
            "detail": "the search took longer than 30 s",
        }
        page.route(
            "**/v1/optimize",
            lambda route: route.fulfill(
                status=504, content_type="application/problem+json", body=json.dumps(problem)
            ),
        )
        page.get_by_role("button", name="Optimize").click()
        expect(page.locator("#banner")).to_contain_text("Computation deadline exceeded (504)")
        expect(page.locator("#banner")).to_contain_text("longer than 30 s")
        expect(page.get_by_role("button", name="Optimize")).to_be_enabled()
    finally:
        page.context.close()
    assert not page_errors.unexpected(), page_errors.unexpected()


def test_a_running_optimize_shows_progress_and_can_be_cancelled(page: Page) -> None:
    load(page)
    # Hold /v1/optimize in the page for a minute (released by its abort signal).
    page.evaluate(
        """() => {
          const real = window.fetch;
          window.fetch = (url, options) => !String(url).includes("/v1/optimize")
            ? real(url, options)
            : new Promise((resolve, reject) => {
                options.signal.addEventListener("abort", () =>
                  reject(new DOMException("aborted", "AbortError")));
                setTimeout(() => resolve(real(url, options)), 60000);
              });
        }"""
    )
    page.get_by_role("button", name="Optimize").click()
    progress = page.get_by_role("status").filter(has_text="Optimizing")
    expect(progress).to_contain_text(f"Optimizing {MODEL} on 8 × {DEVICE}")
    expect(page.locator("#results")).to_have_attribute("aria-busy", "true")
    expect(page.get_by_role("button", name="Optimize")).to_be_disabled()
    page.get_by_role("button", name="Cancel").click()
    expect(page.locator("#progress")).to_be_hidden()
    expect(page.locator("#banner")).to_contain_text("Cancelled.")
    expect(page.get_by_role("button", name="Optimize")).to_be_enabled()
    expect(page.locator("#results")).to_have_attribute("aria-busy", "false")


def test_a_page_whose_scripts_fail_says_so(
    browser: Browser, base_url: str, page_errors: PageErrors
) -> None:
    page = open_page(browser, base_url, page_errors)
    page_errors.allowed.append("Failed to load resource")
    try:
        page.clock.install()
        page.route("**/static/js/main.js", lambda route: route.abort())
        page.goto("/")
        expect(page.locator("#form-loading")).to_have_text("Loading the form…")
        page.clock.run_for(11_000)
        expect(page.locator("#form-loading")).to_contain_text("The dashboard did not start")
    finally:
        page.context.close()
    assert not page_errors.unexpected(), page_errors.unexpected()


def _copied(page: Page, button: str) -> str:
    page.get_by_role("button", name=button).click()
    expect(page.locator("#copy-status")).to_contain_text("Copied")
    text = page.locator("#copy-text").input_value()
    assert page.evaluate("navigator.clipboard.readText()") == text
    return text


def shell_words(command: str) -> list[str]:
    """The words bash passes to the command (quotes, escapes and line continuations)."""
    program = command.split(maxsplit=1)[0]
    script = f'{program}() {{ printf "%s\\0" "$@"; }}\n{command}\n'
    out = subprocess.run(
        ["bash", "-c", script], capture_output=True, check=True, timeout=10
    ).stdout.decode()
    return [program, *out.split("\0")[:-1]]


@pytest.mark.parametrize(
    ("mode", "extra"),
    [
        (
            "agg",
            {
                "prefix_cache_hit_rate": "0.25",
                "ttft_limit_ms": "4000",
                "quantize_linear_action": "W8A8_DYNAMIC",
                "num_mtp_tokens": "1",
                "mtp_acceptance_rates": "0.7",
                "engine": "msmodeling",
                "scheduler_name": "decode_first_with_slack",
                "slack_ratio": "1.2",
                "prefill_order": "fifo",
                "top_k": "5",
            },
        ),
        (
            "agg",
            {
                "scheduler_name": "vllm",
                "max_num_seqs": "64",
                "mixed_latency": "sum",
                "workload": "closed_loop",
                "window": "steady_state",
                "requests_per_client": "3",
            },
        ),
        ("agg", {"scheduler_name": "sglang_mixed_chunk", "mixed_latency": "fused"}),
        ("agg", {"engine": "sglang", "workload": "burst"}),
        ("pd_ratio", {"prefill_devices_per_instance": "4", "decode_devices_per_instance": "4"}),
        ("disagg_decode", {}),
    ],
)
def test_copy_as_cli_round_trips_through_the_cli(
    page: Page,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    mode: str,
    extra: dict[str, str],
) -> None:
    load(page)
    fill_standard(page)
    fill(page, mode=mode, **extra)
    command = _copied(page, "Copy as CLI")
    curl = shell_words(_copied(page, "Copy as curl"))
    assert curl[:2] == ["curl", "-sS"] and curl[2].endswith("/v1/optimize")
    sent = OptimizeRequest.model_validate(json.loads(curl[curl.index("-d") + 1]))
    assert sent.mode == mode

    # The copied words run through the real CLI; the request it builds is the page's.
    words = shell_words(command)
    assert words[:2] == ["chunkwise", "optimize"]
    seen: list[OptimizeRequest] = []
    real = optimize_service.optimize

    def spy(context: Any, request: OptimizeRequest, **kwargs: Any) -> Any:
        seen.append(request)
        return real(context, request, **kwargs)

    monkeypatch.setattr(optimize_service, "optimize", spy)
    monkeypatch.setenv("APP_CACHE_BACKEND", "memory")
    assert cli.main(words[1:]) == 0, capsys.readouterr().err
    assert len(seen) == 1
    ignore = {"include_probes"}
    assert seen[0].model_dump(exclude=ignore) == sent.model_dump(exclude=ignore)


def test_narrow_window(browser: Browser, base_url: str, artifacts: Path) -> None:
    errors = PageErrors()
    page = open_page(browser, base_url, errors, width=400, height=800)
    try:
        load(page)
        fill_standard(page)
        run_optimize(page)
        expect(page.locator("#timeline-text")).to_contain_text("makespan")
        width = page.evaluate("document.documentElement.scrollWidth")
        assert width <= 400, f"the page scrolls sideways ({width} px)"
        expect(page.locator("#summary")).to_be_in_viewport()
        page.screenshot(path=str(artifacts / "dashboard-400x800.png"), full_page=True)
    finally:
        page.context.close()
    assert not errors.unexpected(), errors.unexpected()


def test_assets_are_local_and_served(base_url: str) -> None:
    """Nothing is loaded from a CDN: every script, stylesheet and module import is ours."""
    page = httpx.get(f"{base_url}/")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    html = page.text
    assert "http://" not in html and "https://" not in html
    web = Path(__file__).resolve().parents[2] / "app" / "web"
    for path in sorted(web.rglob("*")):
        if path.is_dir() or path.suffix not in {".js", ".css", ".html"}:
            continue
        rel = path.relative_to(web).as_posix()
        if rel != "index.html":
            served = httpx.get(f"{base_url}/static/{rel}")
            assert served.status_code == 200, rel
        if not rel.startswith("vendor/"):
            text = path.read_text(encoding="utf-8")
            for spec in re.findall(r"""(?:from|import)\s*["']([^"']+)["']""", text):
                assert spec.startswith("./"), f"{rel}: non-local import {spec!r}"
    assert (web / "vendor" / "chartjs" / "LICENSE.md").is_file()


def test_the_url_keeps_the_form(page: Page) -> None:
    """A link with the form in its fragment fills the form and runs it."""
    page.goto("/#input_length=5000&max_batched_tokens=1024&mode=disagg_decode&top_k=2")
    page.wait_for_selector("body[data-ready=true]")
    expect(page.get_by_label("Input length (tokens)")).to_have_value("5000")
    expect(page.get_by_label("Mode", exact=True)).to_have_value("disagg_decode")
    expect(page.get_by_label("TTFT limit (ms)")).to_be_hidden()
    expect(page.locator("#chunk-plan")).to_contain_text("in 5 chunks of at most 1,024 tokens")
    expect(page.locator("#results-table tbody tr")).to_have_count(2)
    expect(page.locator("#results-table tbody tr").first).to_contain_text("decode")
    page.get_by_role("button", name="Reset").click()
    expect(page.get_by_label("Input length (tokens)")).to_have_value("3500")
    expect(page.get_by_label("TTFT limit (ms)")).to_be_visible()
    assert "#" not in page.url


def _choices(page: Page, name: str) -> list[str]:
    values = page.locator(f"#f-{name} option").evaluate_all("els => els.map(e => e.value)")
    return [str(v) for v in values]


def test_choices_bounds_and_defaults_come_from_the_api(
    browser: Browser, base_url: str, page_errors: PageErrors
) -> None:
    """The form has no copy of the vocabulary: it reads /openapi.json (built from core)."""
    page = open_page(browser, base_url, page_errors)
    try:
        load(page)
        # Blank: the engine profile's policy and workload.
        assert _choices(page, "scheduler_name") == ["", *SCHEDULERS]
        assert _choices(page, "engine") == ["", *PROFILES]
        assert _choices(page, "mixed_latency") == ["", *MIXED_LATENCIES]
        assert _choices(page, "mode") == list(MODES)
        assert _choices(page, "workload") == ["", *SEARCHED_WORKLOADS]
        expect(page.locator("#f-top_k")).to_have_value(str(DEFAULT_TOP_K))
        expect(page.locator("#hint-num_mtp_tokens")).to_contain_text(f"≤ {MAX_MTP_TOKENS}")
        page.context.close()

        # A schema with another policy and another bound: the form follows it.
        schema = httpx.get(f"{base_url}/openapi.json").json()
        schemas = schema["components"]["schemas"]
        schemas["SchedulerOptions"]["properties"]["name"]["enum"].append("test_policy")
        schemas["OptimizeRequest"]["properties"]["top_k"]["maximum"] = 7
        page = open_page(browser, base_url, page_errors)
        page.route(
            "**/openapi.json",
            lambda route: route.fulfill(content_type="application/json", body=json.dumps(schema)),
        )
        load(page)
        assert _choices(page, "scheduler_name") == ["", *SCHEDULERS, "test_policy"]
        expect(page.locator("#f-scheduler_name option[value=test_policy]")).to_have_text(
            "test policy"
        )
        fill(page, top_k="8")
        page.get_by_role("button", name="Optimize").click()
        expect(page.locator("#err-top_k")).to_have_text("Input should be less than or equal to 7")
    finally:
        page.context.close()
    assert not page_errors.unexpected(), page_errors.unexpected()


def test_a_device_from_the_url_describes_itself(page: Page) -> None:
    """The device hint follows a device chosen by the link, not the form's default."""
    page.goto("/#device=NVIDIA_H200_SXM_141G&model=Qwen/Qwen3-8B&num_devices=1")
    page.wait_for_selector("body[data-ready=true]")
    expect(page.get_by_label("Device", exact=True)).to_have_value("NVIDIA_H200_SXM_141G")
    expect(page.locator("#hint-device")).to_contain_text("989 BF16 TFLOPS")
    expect(page.locator("#hint-model")).to_contain_text("36 layers")


def test_a_blank_budget_is_the_engine_profiles_for_the_device(page: Page) -> None:
    """The form asks the API's question: no budget of its own (it was a fixed 2048 on every
    device, the API's vLLM default on an H200 is 8192); the chunk plan uses the budget the
    answer says it used."""
    page.goto("/#device=NVIDIA_H200_SXM_141G&model=Qwen/Qwen3-8B&num_devices=1&input_length=10000")
    page.wait_for_selector("body[data-ready=true]")
    expect(page.get_by_label("Max batched tokens (tokens)")).to_have_value("")
    expect(page.locator("#chunk-plan")).to_contain_text("in 2 chunks of at most 8,192 tokens")
