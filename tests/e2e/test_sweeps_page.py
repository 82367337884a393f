"""The Sweeps page at ``/sweeps`` in a real browser against the real app (no broker: the API's
own process pool): a small grid submitted, watched to the end, its rows in the table, the chart
drawn, the CSV export; a reload watches the sweep again; the scenario count before submit and
the API's refusal over its bound; a running sweep cancelled; with API keys, the key asked for
once and sent by the exports too."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Dialog, Page, expect

from app.core.limits import MAX_SWEEP_SCENARIOS
from tests.e2e.conftest import PageErrors, open_page, serve

pytestmark = pytest.mark.e2e

#: A small model on the test device (msmodeling burst): each scenario runs in milliseconds.
MODEL = "Qwen/Qwen3-0.6B"
DEVICES = ("TEST_DEVICE", "NVIDIA_H200_SXM_141G")
API_KEY = "sweeps-page-key"


def load(page: Page) -> None:
    page.goto("/sweeps")
    page.wait_for_selector("body[data-ready=true]")


def set_base(page: Page) -> None:
    """A simulate base: the form's shared fields, the concurrency as another base field."""
    page.locator("#sweep-operation").select_option("simulate")
    page.locator("#f-model").fill(MODEL)
    page.locator("#f-input_length").fill("256")
    page.locator("#f-output_length").fill("16")
    page.locator("#f-num_devices").fill("1")
    page.locator("#scheduler").evaluate("d => { d.open = true; }")
    page.locator("#f-engine").select_option("msmodeling")
    page.locator("#base-extra").fill('{"concurrency": 1}')


def set_grid(page: Page, **grid: str) -> None:
    page.locator("#grid-rows").evaluate("el => el.replaceChildren()")
    for index, (field, values) in enumerate(grid.items(), start=1):
        page.locator("#grid-add").click()
        page.get_by_label(f"Grid field {index}", exact=True).fill(field)
        page.get_by_label(f"Values of grid field {index}", exact=True).fill(values)


def test_a_small_grid_runs_to_its_table_chart_and_csv(page: Page) -> None:
    load(page)
    expect(page.get_by_role("navigation").get_by_role("link", name="Sweeps")).to_have_attribute(
        "aria-current", "page"
    )
    set_base(page)
    set_grid(page, device=", ".join(DEVICES), concurrency="1, 2")
    expect(page.locator("#grid-count")).to_have_text("4 scenarios (2 × 2)")
    page.locator("#run").click()
    expect(page.locator("#sweep-progress")).to_have_attribute("data-state", "done", timeout=60_000)
    sweep_id = page.locator("#sweep-id").inner_text()
    assert sweep_id.startswith("swp-")
    assert page.url.endswith(f"#sweep={sweep_id}")
    expect(page.locator("#sweep-status")).to_contain_text("4 of 4 scenarios done, 0 failed")
    assert page.evaluate("document.getElementById('sweep-bar').value") == 4
    # The table: one row per scenario, its grid values first.
    expect(page.locator("#sweep-rows tbody tr")).to_have_count(4)
    headers = page.locator("#sweep-rows thead th").all_inner_texts()
    assert headers[:3] == ["device", "concurrency", "operation"]
    # The chart: devices along x, a bar per concurrency, every bar a feasible row's.
    chart = page.evaluate(
        """() => {
          const c = Chart.getChart(document.getElementById('chart-sweep'));
          return {labels: c.data.labels, series: c.data.datasets.map((d) => [d.label, d.data])};
        }"""
    )
    assert chart["labels"] == list(DEVICES)
    assert [label for label, _ in chart["series"]] == ["concurrency 1", "concurrency 2"]
    rows = page.evaluate("window.chunkwise.rows")
    for label, values in chart["series"]:
        concurrency = int(label.split()[-1])
        expected = [
            next(
                r["throughput_tokens_s"]
                for r in rows
                if r["device"] == d and r["concurrency"] == concurrency
            )
            for d in DEVICES
        ]
        assert values == pytest.approx(expected) and all(v > 0 for v in values)
    # The CSV export: the results endpoint's rows, one per scenario.
    with page.expect_download() as download_info:
        page.locator("#export-csv").click()
    text = Path(download_info.value.path()).read_text(encoding="utf-8")
    exported = list(csv.DictReader(io.StringIO(text)))
    assert len(exported) == 4
    assert {(r["device"], r["concurrency"]) for r in exported} == {
        (d, c) for d in DEVICES for c in ("1", "2")
    }
    assert download_info.value.suggested_filename == f"chunkwise-{sweep_id}.csv"
    with page.expect_download() as download_info:
        page.locator("#export-json").click()
    assert json.loads(Path(download_info.value.path()).read_text(encoding="utf-8")) == rows
    with page.expect_download() as download_info:
        page.locator("#export-parquet").click()
    assert Path(download_info.value.path()).read_bytes()[:4] == b"PAR1"
    # The same spec again (a double click, a resend): its Idempotency-Key follows the same sweep.
    with page.expect_response(lambda r: r.request.method == "POST") as answer:
        page.locator("#run").click()
    assert answer.value.status == 202 and answer.value.json()["id"] == sweep_id
    assert answer.value.request.headers["idempotency-key"] == page.evaluate(
        """async (spec) => [...new Uint8Array(await crypto.subtle.digest('SHA-256',
             new TextEncoder().encode(JSON.stringify(spec))))]
             .map((b) => b.toString(16).padStart(2, '0')).join('')""",
        page.evaluate("window.chunkwise.spec"),
    )
    # A reload watches the same sweep again.
    page.reload()
    page.wait_for_selector("body[data-ready=true]")
    expect(page.locator("#sweep-id")).to_have_text(sweep_id)
    expect(page.locator("#sweep-progress")).to_have_attribute("data-state", "done")
    expect(page.locator("#sweep-rows tbody tr")).to_have_count(4)


def test_a_link_to_an_unknown_sweep_says_so(page: Page, page_errors: PageErrors) -> None:
    page_errors.allowed.append("status of 404")
    page.goto(f"/sweeps#sweep=swp-{'0' * 32}")
    page.wait_for_selector("body[data-ready=true]")
    expect(page.locator("#banner")).to_contain_text(f"no sweep 'swp-{'0' * 32}'")
    expect(page.locator("#banner")).to_contain_text("(404)")
    assert page.locator("#sweep-progress").is_hidden()


def test_the_count_is_shown_and_a_grid_over_the_bound_is_refused(
    page: Page, page_errors: PageErrors
) -> None:
    page_errors.allowed.append("status of 422")  # the refusal is the API's answer
    load(page)
    set_base(page)
    lengths = ", ".join(str(n) for n in range(1, 1001))
    set_grid(page, input_length=lengths, concurrency=", ".join(str(n) for n in range(1, 102)))
    count = 1000 * 101
    assert count > MAX_SWEEP_SCENARIOS
    expect(page.locator("#grid-count")).to_have_text(f"{count:,} scenarios (1000 × 101)")
    page.locator("#run").click()
    # The API's own message, next to the grid and in the banner; nothing is watched.
    message = f"must be at most {MAX_SWEEP_SCENARIOS} scenarios"
    expect(page.locator("#err-grid")).to_contain_text(message)
    expect(page.locator("#banner")).to_contain_text(message)
    expect(page.locator("#banner")).to_contain_text("(422)")
    assert page.locator("#sweep-progress").is_hidden()
    assert "#sweep=" not in page.url
    # A list without values is the page's own refusal, before anything is sent.
    set_grid(page, concurrency="")
    page.locator("#grid-rows .grid-field").first.fill("concurrency")
    page.locator("#run").click()
    expect(page.locator("#err-grid")).to_have_text("concurrency: give its values, comma-separated")


def test_a_running_sweep_is_cancelled(page: Page) -> None:
    """800 closed-loop scenarios of tens of ms each (the vLLM profile, 4096 input tokens in
    512-token chunks) on one pool process, in batches of 64: seconds of work, so the cancel
    lands long before the last row (the batch running then finishes, the others are dropped)."""
    load(page)
    set_base(page)
    page.locator("#f-engine").select_option("")
    page.locator("#f-input_length").fill("4096")
    page.locator("#f-max_batched_tokens").fill("512")
    set_grid(page, concurrency=", ".join(str(n) for n in range(1, 401)), output_length="512, 1024")
    expect(page.locator("#grid-count")).to_have_text("800 scenarios (400 × 2)")
    page.locator("#run").click()
    expect(page.locator("#sweep-progress")).to_have_attribute("data-state", "running")
    page.locator("#sweep-cancel").click()
    expect(page.locator("#sweep-progress")).to_have_attribute("data-state", "cancelled")
    expect(page.locator("#sweep-cancel")).to_be_disabled()
    expect(page.locator("#sweep-status")).to_contain_text("cancelled · ")
    status = page.evaluate("window.chunkwise.sweep")
    assert status["state"] == "cancelled" and status["done"] < status["total"] == 800
    # The same spec again is a new sweep (its key returns the cancelled one), cancelled too.
    page.locator("#run").click()
    expect(page.locator("#sweep-id")).not_to_have_text(status["id"])
    expect(page.locator("#sweep-progress")).to_have_attribute("data-state", "running")
    page.locator("#sweep-cancel").click()
    expect(page.locator("#sweep-progress")).to_have_attribute("data-state", "cancelled")
    assert page.evaluate("window.chunkwise.sweep.total") == 800


@pytest.fixture(scope="module")
def keyed_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The app with one API key (APP_API_KEYS): /v1 answers 401 without it."""
    with serve(tmp_path_factory.mktemp("uvicorn-keyed"), APP_API_KEYS=API_KEY) as url:
        yield url


def test_with_api_keys_the_key_is_asked_once_and_the_export_sends_it(
    browser: Browser, keyed_url: str, page_errors: PageErrors
) -> None:
    page_errors.allowed.append("status of 401")  # the first /v1 request, before the prompt
    page = open_page(browser, keyed_url, page_errors)
    prompts: list[str] = []

    def answer(dialog: Dialog) -> None:
        prompts.append(dialog.message)
        dialog.accept(API_KEY)

    page.on("dialog", answer)
    try:
        load(page)
        set_base(page)
        set_grid(page, device=DEVICES[0], concurrency="1, 2")
        page.locator("#run").click()
        expect(page.locator("#sweep-progress")).to_have_attribute("data-state", "done")
        expect(page.locator("#sweep-rows tbody tr")).to_have_count(2)
        assert len(prompts) == 1 and "API key" in prompts[0]
        # The results link itself needs the key; the page's export sends it.
        href = page.locator("#export-csv").get_attribute("href")
        assert page.evaluate("href => fetch(href).then((r) => r.status)", href) == 401
        with page.expect_download() as download_info:
            page.locator("#export-csv").click()
        text = Path(download_info.value.path()).read_text(encoding="utf-8")
        assert len(list(csv.DictReader(io.StringIO(text)))) == 2
    finally:
        page.context.close()
    assert not page_errors.unexpected(), page_errors.unexpected()
