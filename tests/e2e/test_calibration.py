"""The dashboard's "Calibrate" panel in a real browser: a CSV of measured runs -> the fit
(parameters next to the catalog's, errors in and out of sample); "Apply" -> every request of the
form carries the calibration; the probe charts draw the 80 % intervals; a bad CSV shows the
problem's detail."""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.e2e.conftest import PageErrors
from tests.e2e.test_dashboard import fill, load

pytestmark = pytest.mark.e2e

CASES = Path(__file__).resolve().parents[2] / "app/core/catalog/data/measured_agg_serving_cases.csv"
HARDWARE = "H100 SXM 80GB"
MODEL = "Qwen/Qwen3-32B"


def measured_csv(count: int = 8) -> str:
    """The first ``count`` shipped runs of Qwen3-32B on H100 at TP2 (engine trtllm), as CSV."""
    lines = CASES.read_text(encoding="utf-8").splitlines()
    header = lines[0].split(",")
    rows = [
        line
        for line in lines[1:]
        if (row := dict(zip(header, line.split(","), strict=True)))["hardware"] == HARDWARE
        and row["model"] == MODEL
        and row["tp"] == "2"
    ][:count]
    assert len(rows) == count
    assert all(",trtllm " in r for r in rows)
    return "\n".join([lines[0], *rows]) + "\n"


def fmt(value: float, digits: int) -> str:
    """The page's number format (en-US, fixed decimals)."""
    return f"{value:,.{digits}f}"


def parameter(value: float) -> str:
    """A parameter as the panel shows it (3 decimals below 100, else 1)."""
    return fmt(value, 1 if abs(value) >= 100 else 3)


def fit_in_page(page: Page, tmp_path: Path) -> dict[str, object]:
    """Choose the CSV file, fit it, return the stored calibration (read back from the API)."""
    path = tmp_path / "runs.csv"
    path.write_text(measured_csv(), encoding="utf-8")
    page.get_by_label("CSV file").set_input_files(str(path))
    expect(page.locator("#cal-status")).to_contain_text("Read runs.csv: 8 runs")
    expect(page.get_by_label("CSV text")).to_have_value(re.compile(r"^case_id,model,hardware"))
    with page.expect_response("**/v1/calibrations") as info:
        page.get_by_role("button", name="Fit calibration").click()
    assert info.value.status == 201
    created = info.value.json()
    expect(page.locator("#cal-id")).to_have_text(created["id"])
    return dict(created)


def test_calibrate_apply_and_optimize_with_intervals(
    page: Page, base_url: str, tmp_path: Path, artifacts: Path
) -> None:
    load(page)
    expect(page.locator("#active-calibration")).to_be_hidden()
    expect(page.get_by_role("button", name="Apply to the form")).to_be_disabled()
    created = fit_in_page(page, tmp_path)
    cal_id = str(created["id"])
    assert re.fullmatch(r"cal-[0-9a-f]{32}", cal_id)
    stored = httpx.get(f"{base_url}/v1/calibrations/{cal_id}").json()
    profile = stored["profile"]
    assert profile == created["profile"]

    # The fit: every fitted parameter next to its catalog value, the others with the reason.
    fitted, defaults, fixed = profile["parameters"], profile["defaults"], profile["fixed"]
    assert fitted and fixed
    table = page.locator("#cal-params")
    expect(table.locator("tbody tr")).to_have_count(len(set(fitted) | set(fixed) | set(defaults)))
    for name, value in fitted.items():
        row = table.locator(f"tr[data-parameter={name}]")
        expect(row).to_have_attribute("data-fitted", "true")
        expect(row.locator("td[data-key=value]")).to_have_text(parameter(value))
        expect(row.locator("td[data-key=catalog]")).to_have_text(parameter(defaults[name]))
    for name, reason in fixed.items():
        row = table.locator(f"tr[data-parameter={name}]")
        expect(row).to_have_attribute("data-fitted", "false")
        expect(row.locator("td[data-key=value]")).to_have_text(parameter(defaults[name]))
        expect(row.locator("td[data-key=note]")).to_have_text(f"catalog value kept: {reason}")
    fit = profile["fit"]
    stats = page.locator("#cal-fit")
    for label, key in (
        ("TTFT error, in sample", "ttft_fit_median_ape_pct"),
        ("TPOT error, in sample", "tpot_fit_median_ape_pct"),
        ("TTFT error, held out (leave-one-out)", "ttft_cv_median_ape_pct"),
        ("TPOT error, held out (leave-one-out)", "tpot_cv_median_ape_pct"),
    ):
        stat = stats.locator(".stat").filter(has_text=label)
        expect(stat.locator("dd")).to_have_text(f"{fmt(fit[key], 1)} %")
    converged = "yes" if fit["converged"] else "no"
    expect(stats.locator(".stat").filter(has_text="converged").locator("dd")).to_have_text(
        f"{converged} · {fit['iterations']} iterations"
    )
    ranges = profile["ranges"]
    expect(page.locator("#cal-ranges")).to_contain_text(
        f"input {fmt(ranges['isl'][0], 0)} – {fmt(ranges['isl'][1], 0)} tokens"
    )
    expect(page.locator("#cal-ranges")).to_contain_text(", ".join(ranges["layouts"]))
    expect(page.locator("#cal-result .sub")).to_contain_text(
        f"{MODEL} on {profile['device']} · {profile['engine']} · {profile['quantization']} · 8 runs"
    )

    # Apply: the form shows it and offers the calibration's own deployment.
    page.get_by_role("button", name="Apply to the form").click()
    active = page.get_by_role("group", name="Calibration")
    expect(active).to_be_visible()
    expect(active.locator("#active-cal-id")).to_have_text(cal_id)
    use = page.get_by_role("button", name="Use its deployment")
    expect(use).to_be_visible()  # the form's device is another
    use.click()
    expect(use).to_be_hidden()
    expect(page.get_by_label("Device", exact=True)).to_have_value(profile["device"])
    expect(page.locator("#f-engine")).to_have_value(profile["engine"])
    expect(page.locator("#f-quantize_linear_action")).to_have_value(profile["quantization"])
    fill(page, num_devices="2", input_length="2048", output_length="256", tpot_limit_ms="60")
    page.get_by_role("button", name="Optimize").click()
    expect(page.locator("#results-table tbody tr").first).to_be_visible()
    expect(page.locator("#timeline-text")).to_contain_text("makespan")
    response = page.evaluate("window.chunkwise.response")
    assert response["input"]["calibration"] == cal_id
    note = response["calibration"]
    assert note["id"] == cal_id and note["applicable"] is True, note
    expect(page.locator("#summary")).to_contain_text(f"calibrated ({cal_id})")
    assert f"calibration={cal_id}" in page.url

    # The probe charts draw an interval for every plotted probe, from the response's own.
    feasible = [p for p in response["probes"] if p["feasible"]]
    assert feasible
    for probe in feasible:
        low, high = probe["throughput_interval"]
        assert low <= probe["throughput_tokens_s"] <= high
        low, high = probe["tpot_ms_interval"]
        assert low <= probe["tpot_ms"] <= high
    plotted = page.evaluate(
        """id => Chart.getChart(id).data.datasets.filter(d => d.label !== "best")
             .flatMap(d => d.data.map(p => [p.probe.concurrency, p.yInterval, p.xInterval]))""",
        "chart-latency",
    )
    assert sorted(map(json.dumps, plotted)) == sorted(
        json.dumps([p["concurrency"], p["throughput_interval"], p["tpot_ms_interval"]])
        for p in feasible
    )
    for chart in ("chart-concurrency", "chart-latency"):
        assert page.evaluate(f"Chart.getChart('{chart}').$intervals") == len(feasible)
    expect(page.locator("#chart-conc-caption")).to_contain_text(
        f"80 % intervals of the throughput of {len(feasible)} points, from calibration {cal_id}"
    )
    expect(page.locator("#chart-lat-caption")).to_contain_text("and TPOT (horizontal)")
    page.get_by_label("80 % intervals").first.uncheck()
    expect(page.locator("#chart-conc-caption")).to_have_text("")
    assert page.evaluate("Chart.getChart('chart-concurrency').$intervals") == 0
    assert page.evaluate("Chart.getChart('chart-latency').$intervals") == len(feasible)
    page.get_by_label("80 % intervals").first.check()
    assert page.evaluate("Chart.getChart('chart-concurrency').$intervals") == len(feasible)

    page.evaluate("window.scrollTo(0, 0)")
    page.screenshot(path=str(artifacts / "dashboard-calibrated.png"), full_page=True)

    # The row's timeline is simulated with the calibration too.
    sim = page.evaluate("window.chunkwise.simulation")
    assert sim["input"]["calibration"] == cal_id
    assert sim["calibration"]["id"] == cal_id
    expect(page.locator("#timeline-text")).to_contain_text(f"calibration {cal_id}")
    expect(page.locator("#timeline-text")).to_contain_text("(80 %: ")

    # CSV export: the intervals as lo/hi columns.
    with page.expect_download() as download_info:
        page.get_by_role("button", name="Export CSV").click()
    text = Path(download_info.value.path()).read_text(encoding="utf-8")
    exported = list(csv.DictReader(io.StringIO(text)))
    assert len(exported) == len(response["rows"])
    assert not any(name.endswith("_interval") for name in exported[0])
    for line, row in zip(exported, response["rows"], strict=True):
        for base, key in (
            ("ttft_ms", "ttft_ms_interval"),
            ("tpot_ms", "tpot_ms_interval"),
            ("throughput_tokens_s", "throughput_interval"),
        ):
            assert float(line[f"{base}_lo"]) == pytest.approx(row[key][0])
            assert float(line[f"{base}_hi"]) == pytest.approx(row[key][1])
        assert float(line["ttft_ms"]) == pytest.approx(row["ttft_ms"])

    # Copy as curl sends it; the CLI command says how the CLI applies one.
    page.get_by_role("button", name="Copy as curl").click()
    expect(page.locator("#copy-text")).to_have_value(re.compile(f'"calibration":"{cal_id}"'))
    page.get_by_role("button", name="Copy as CLI").click()
    expect(page.locator("#copy-status")).to_contain_text("--calibration PROFILE.json")

    # A reload keeps it (the URL): read back, shown, applied, and the request run with it.
    page.reload()
    page.wait_for_selector("body[data-ready=true]")
    expect(page.locator("#active-cal-id")).to_have_text(cal_id)
    expect(page.locator("#cal-id")).to_have_text(cal_id)
    expect(page.locator("#summary")).to_contain_text(f"calibrated ({cal_id})")
    assert page.evaluate("window.chunkwise.response.input.calibration") == cal_id

    # Clear: the next request has none.
    page.get_by_role("button", name="Clear calibration").click()
    expect(page.locator("#active-calibration")).to_be_hidden()
    expect(page.get_by_role("button", name="Optimize")).to_be_focused()
    page.get_by_role("button", name="Optimize").click()
    page.wait_for_function("() => window.chunkwise.response.input.calibration === null")
    assert page.evaluate("window.chunkwise.response.calibration") is None
    expect(page.locator("#chart-conc-caption")).to_contain_text("validation errors")
    assert "calibration=" not in page.url


def test_a_bad_csv_shows_the_problem_detail(
    page: Page, base_url: str, page_errors: PageErrors
) -> None:
    page_errors.allowed.append("status of 422")
    load(page)
    # Nothing to fit: said in the panel, no request.
    page.get_by_role("button", name="Fit calibration").click()
    alert = page.locator("#calibrate").get_by_role("alert")
    expect(alert).to_contain_text("choose a CSV file or paste its text first")
    expect(page.get_by_label("CSV text")).to_be_focused()

    # Two runs, one with a negative TTFT: the API's 422 detail, word for word.
    runs = measured_csv(2).splitlines()
    cells = runs[2].split(",")
    cells[-2] = "-5"
    bad = "\n".join([runs[0], runs[1], ",".join(cells)]) + "\n"
    answer = httpx.post(f"{base_url}/v1/calibrations", json={"csv": bad})
    assert answer.status_code == 422
    detail = answer.json()["detail"]
    assert detail
    page.get_by_label("CSV text").fill(bad)
    page.get_by_role("button", name="Fit calibration").click()
    expect(alert).to_contain_text(f"(422): {detail}")
    expect(page.locator("#cal-result")).to_be_hidden()
    expect(page.get_by_role("button", name="Apply to the form")).to_be_disabled()
    expect(page.get_by_role("button", name="Fit calibration")).to_be_enabled()

    # Missing columns: the same.
    page.get_by_label("CSV text").fill("isl,osl\n1024,128\n")
    page.get_by_role("button", name="Fit calibration").click()
    expect(alert).to_contain_text("must be exactly the columns case_id, model, hardware")
    expect(page.locator("#active-calibration")).to_be_hidden()


def test_a_link_with_an_unknown_calibration_is_not_run_without_it(
    page: Page, page_errors: PageErrors
) -> None:
    page_errors.allowed.append("status of 404")
    page.goto("/#calibration=cal-0123456789abcdef0123&top_k=2")
    page.wait_for_selector("body[data-ready=true]")
    alert = page.locator("#calibrate").get_by_role("alert")
    expect(alert).to_contain_text("calibration cal-0123456789abcdef0123 is not available")
    expect(alert).to_contain_text("(404)")
    expect(page.locator("#active-calibration")).to_be_hidden()
    expect(page.locator("#f-top_k")).to_have_value("2")
    expect(page.locator("#output")).to_be_hidden()
