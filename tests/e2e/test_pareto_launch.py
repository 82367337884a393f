"""The Pareto view and the launch-config panel in a real browser: the front of the optimize
response plotted with its SLA region, a point picked on the canvas (and from the list), its
launch from /v1/deploy for each engine, and a ranked row's "Launch"."""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.e2e.test_dashboard import fill, fill_standard, load, run_optimize

pytestmark = pytest.mark.e2e


def _click_isolated_point(page: Page) -> int:
    """Click the point inside the limits farthest (in pixels) from every other plotted point,
    where Chart.js drew it; its index in the "meets the limits" dataset."""
    page.locator("#chart-pareto").scroll_into_view_if_needed()
    index, x, y = page.evaluate(
        """() => {
          const chart = Chart.getChart("chart-pareto");
          const met = chart.getDatasetMeta(1).data;
          const all = [1, 2].flatMap((d) => chart.getDatasetMeta(d).data);
          let best = [0, -1];
          met.forEach((el, i) => {
            const others = all.filter((o) => o !== el);
            const gap = Math.min(...others.map((o) => Math.hypot(o.x - el.x, o.y - el.y)));
            if (gap > best[1]) best = [i, gap];
          });
          const box = chart.canvas.getBoundingClientRect();
          const el = met[best[0]];
          return [best[0], box.left + el.x, box.top + el.y];
        }"""
    )
    page.mouse.click(x, y)
    return int(index)


def test_pareto_front_pick_a_point_and_launch_it(
    page: Page, base_url: str, artifacts: Path
) -> None:
    load(page)
    fill_standard(page)
    fill(page, engine="vllm")
    run_optimize(page)
    response = page.evaluate("window.chunkwise.response")
    front = response["pareto"]
    assert len(front) >= 2

    # Every point of the front is plotted: filled inside the limits, hollow outside.
    plotted = page.evaluate(
        "() => Object.fromEntries(Chart.getChart('chart-pareto').data.datasets"
        ".map(d => [d.label, d.data.length]))"
    )
    met = [p for p in front if p["feasible"]]
    assert plotted["front"] == len(front)
    assert plotted["meets the limits"] == len(met) >= 1
    assert plotted["misses a limit"] == len(front) - len(met)
    sla = page.evaluate("Chart.getChart('chart-pareto').options.plugins.slaRegion")
    assert sla["from"] == pytest.approx(1000 / 50)
    assert "TPOT ≤ 50 ms" in sla["label"]
    expect(page.locator("#pareto-caption")).to_contain_text(f"{len(front)} points")

    # Clicking a point inside the limits launches it with vLLM.
    point = met[_click_isolated_point(page)]
    status = page.locator("#launch-status")
    expect(status).to_contain_text("vllm:")
    expect(page.locator("#launch-what")).to_contain_text(
        f"{point['parallel']} at {point['concurrency']:,} requests"
    )
    command = page.locator("#launch-command").input_value()
    assert command.startswith("vllm serve Qwen/Qwen3-32B")
    assert f"--tensor-parallel-size {point['tp']}" in command
    assert f"--max-num-seqs {point['batch_size']}" in command
    assert "--max-num-batched-tokens 2048" in command
    picked = page.evaluate(
        "Chart.getChart('chart-pareto').data.datasets.find(d => d.label === 'picked').data[0]"
    )
    assert picked["point"] == point

    # The link is GET /v1/deploy of the same fields, and answers the same launch.
    href = page.locator("#launch-link").get_attribute("href")
    assert href and href.startswith("/v1/deploy?")
    linked = httpx.get(base_url + href, timeout=30).json()
    assert linked == page.evaluate("window.chunkwise.launch")
    assert linked["replicas"] * linked["devices_per_replica"] == point["num_devices"]

    # Another engine relaunches the same point: SGLang on its NPU backend, with the Ascend
    # device plugin's resource (TensorRT-LLM does not run on an Ascend NPU).
    page.locator("#launch-engine").select_option("sglang")
    expect(status).to_contain_text("sglang:")
    command = page.locator("#launch-command").input_value()
    assert command.startswith("python3 -m sglang.launch_server") and "--device npu" in command
    expect(page.locator("#launch-k8s")).to_contain_text("kind: Deployment")
    expect(page.locator("#launch-k8s")).to_contain_text("huawei.com/Ascend910")
    page.locator("#launch-panel").scroll_into_view_if_needed()
    page.screenshot(path=str(artifacts / "pareto-launch.png"), full_page=True)

    # The keyboard way: the list of the front's points, each with a "Launch" button.
    page.locator("#pareto-points summary").click()
    last = front[0]  # the list runs from the most tokens/s per user
    page.locator("#pareto-points li").last.get_by_role("button").click()
    expect(page.locator("#launch-what")).to_contain_text(
        f"{last['parallel']} at {last['concurrency']:,} requests"
    )

    # A ranked row launches too, with SGLang.
    page.locator("#launch-engine").select_option("sglang")
    row = response["rows"][0]
    page.locator("#results-table tbody tr[data-rank='1']").get_by_role(
        "button", name=re.compile("^Launch")
    ).click()
    expect(page.locator("#launch-what")).to_contain_text("rank 1")
    expect(status).to_contain_text("sglang:")
    command = page.locator("#launch-command").input_value()
    assert "sglang.launch_server" in command and f"--tp-size {row['tp']}" in command


def test_the_prefill_search_has_no_front(page: Page) -> None:
    load(page)
    fill_standard(page)
    fill(page, mode="disagg_prefill", ttft_limit_ms="5000")
    run_optimize(page)
    assert page.evaluate("window.chunkwise.response.pareto") == []
    expect(page.locator("#chart-pareto ~ .chart-note")).to_contain_text("No point with a decode")
    expect(page.locator("#pareto-points")).to_be_hidden()


def test_pd_ratio_card_table_axes_and_csv_agree(page: Page, artifacts: Path) -> None:
    """The PD-ratio card's layouts and numbers are the table's P×n and D×n rows; input and
    output tokens/s are on axes of their own; the CSV carries the split."""
    load(page)
    fill_standard(page)
    fill(
        page,
        engine="msmodeling",
        mode="pd_ratio",
        num_devices="16",
        ttft_limit_ms="3000",
        tp_sizes="1 2 4",
        prefill_devices_per_instance="4",
        decode_devices_per_instance="4",
    )
    run_optimize(page)
    response = page.evaluate("window.chunkwise.response")
    pd = response["pd_ratio"]
    split = pd["split"]
    assert split is not None
    p_label, d_label = f"P×{split['prefill_instances']}", f"D×{split['decode_instances']}"
    rows = page.locator("#results-table tbody tr")
    prefill, decode = rows.nth(0), rows.nth(1)
    expect(prefill.locator("td").first).to_have_text(p_label)
    expect(decode.locator("td").first).to_have_text(d_label)
    expect(prefill.locator("th")).to_have_text(pd["prefill_row"]["parallel"])
    expect(decode.locator("th")).to_have_text(pd["decode_row"]["parallel"])
    for row, source in ((prefill, pd["prefill_row"]), (decode, pd["decode_row"])):
        expect(row.locator("td[data-key=concurrency]")).to_have_text(f"{source['concurrency']:,}")
    expect(prefill.locator("td[data-key=ttft_ms]")).to_have_text(
        f"{pd['prefill_row']['ttft_ms']:,.1f}"
    )
    expect(decode.locator("td[data-key=tpot_ms]")).to_have_text(
        f"{pd['decode_row']['tpot_ms']:,.2f}"
    )
    summary = page.locator("#summary")
    expect(summary).to_contain_text(
        f"{pd['prefill_row']['parallel']} · {pd['prefill_row']['concurrency']:,} req"
    )
    expect(summary).to_contain_text(f"table's {p_label} and {d_label} rows")
    expect(summary).to_contain_text(pd["pd_split"])
    assert rows.count() == len(response["rows"]) + 2

    # Input tokens/s (prefill) and output tokens/s (decode) on separate axes.
    scales = page.evaluate(
        "() => Object.fromEntries(Object.entries(Chart.getChart('chart-concurrency').scales)"
        ".map(([id, s]) => [id, s.options.title?.text ?? null]))"
    )
    assert scales["y"] == "output tokens/s (decode)"
    assert scales["yIn"] == "input tokens/s (prefill)"
    axes = page.evaluate(
        "Chart.getChart('chart-concurrency').data.datasets.filter(d => d.label !== 'best')"
        ".map(d => [d.label, d.yAxisID])"
    )
    assert {axis for label, axis in axes if label.startswith("prefill")} == {"yIn"}
    assert {axis for label, axis in axes if label.startswith("decode")} == {"y"}
    page.screenshot(path=str(artifacts / "pd-ratio.png"), full_page=True)

    with page.expect_download() as download_info:
        page.get_by_role("button", name="Export CSV").click()
    text = Path(download_info.value.path()).read_text(encoding="utf-8")
    table = list(csv.DictReader(io.StringIO(text)))
    assert len(table) == len(response["rows"]) + 2
    assert [r["in_split"] for r in table[:3]] == ["true", "true", "false"]
    assert {r["pd_split"] for r in table} == {pd["pd_split"]}
    assert {r["binding_pool"] for r in table} == {pd["binding_pool"]}


def test_a_disaggregated_search_shows_both_pools_the_split_and_the_binding_pool(
    page: Page,
) -> None:
    """mode disagg: the summary names both pools, the split and the binding pool as the API's
    best row does; the table ranks the deployments; the CSV carries the split and each pool."""
    load(page)
    fill(
        page,
        model="Qwen/Qwen3-32B",
        device="NVIDIA_H100_SXM_80G",
        num_devices="8",
        input_length="2048",
        output_length="256",
        ttft_limit_ms="2000",
        tpot_limit_ms="50",
        engine="vllm",
        mode="disagg",
        max_workers="4",
    )
    run_optimize(page)
    response = page.evaluate("window.chunkwise.response")
    assert response["mode"] == "disagg"
    best = response["best"]
    summary = page.locator("#summary")
    expect(summary).to_contain_text(f"Best split: {best['pd_split']}")
    pools = page.locator("#disagg-pools")
    expect(pools).to_contain_text(f"{best['prefill']['workers']} × {best['prefill']['parallel']}")
    expect(pools).to_contain_text(f"{best['decode']['workers']} × {best['decode']['parallel']}")
    expect(pools).to_contain_text(best["binding_pool"])
    rows = page.locator("#results-table tbody tr")
    assert rows.count() == len(response["rows"]) >= 1
    expect(rows.first.locator("th")).to_have_text(best["pd_split"])
    expect(rows.first.locator("td[data-key=binding_pool]")).to_have_text(best["binding_pool"])
    assert page.evaluate("Chart.getChart('chart-concurrency').data.datasets.length") >= 1
    with page.expect_download() as download_info:
        page.get_by_role("button", name="Export CSV").click()
    text = Path(download_info.value.path()).read_text(encoding="utf-8")
    table = list(csv.DictReader(io.StringIO(text)))
    assert len(table) == len(response["rows"])
    assert table[0]["pd_split"] == best["pd_split"]
    assert table[0]["binding_pool"] == best["binding_pool"]
    assert table[0]["prefill_parallel"] == best["prefill"]["parallel"]
    assert table[0]["decode_workers"] == str(best["decode"]["workers"])
