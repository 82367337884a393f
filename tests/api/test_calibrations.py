"""``/v1/calibrations`` and ``calibration`` on simulate / optimize, through the real ASGI app;
``chunkwise calibrate`` and ``--calibration`` through the real CLI."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.cli import main
from app.core.validation import CASE_COLUMNS
from app.core.validation.cases import SERVING_CASES


def _rows(count: int = 8) -> list[dict[str, str]]:
    with SERVING_CASES.open(encoding="utf-8", newline="") as handle:
        rows = [
            r
            for r in csv.DictReader(handle)
            if (r["hardware"], r["model"]) == ("H100 SXM 80GB", "Qwen/Qwen3-32B") and r["tp"] == "2"
        ]
    return sorted(rows, key=lambda r: (int(r["isl"]), int(r["osl"]), int(r["concurrency"])))[
        :: max(1, len(rows) // count)
    ][:count]


def _csv(rows: list[dict[str, str]]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, CASE_COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


SIMULATE = {
    "model": "Qwen/Qwen3-32B",
    "device": "NVIDIA_H100_SXM_80G",
    "num_devices": 2,
    "tp_size": 2,
    "input_length": 2048,
    "output_length": 512,
    "concurrency": 16,
    "quantize_linear_action": "FP8",
    "engine": "trtllm",
}


def test_fit_store_apply_delete(client: TestClient) -> None:
    created = client.post("/v1/calibrations", json={"points": _rows()})
    assert created.status_code == 201, created.text
    body = created.json()
    cid = body["id"]
    assert body["profile"]["fit"]["points"] == 8 and body["profile"]["id"] == cid
    assert client.get(f"/v1/calibrations/{cid}").json()["profile"] == body["profile"]

    plain = client.post("/v1/simulate", json=SIMULATE).json()
    tuned = client.post("/v1/simulate", json={**SIMULATE, "calibration": cid}).json()
    assert plain["calibration"] is None and tuned["calibration"]["id"] == cid
    assert tuned["calibration"]["applicable"] is True
    assert tuned["engine"]["step_sync_ms"] == pytest.approx(
        body["profile"]["parameters"].get("step_host_ms", tuned["engine"]["step_sync_ms"])
    )
    for result in (plain, tuned):
        low, high = result["ttft_ms_interval"]
        assert 0 < low < high
        assert result["tpot_ms_interval"][0] < result["tpot_ms_interval"][1]
    inline = client.post("/v1/simulate", json={**SIMULATE, "calibration": body["profile"]})
    assert inline.json()["ttft_ms"] == tuned["ttft_ms"]

    far = client.post("/v1/simulate", json={**SIMULATE, "calibration": cid, "concurrency": 512})
    note = far.json()["calibration"]
    assert note["applicable"] is False and "concurrency 512" in note["reason"]

    search = {k: v for k, v in SIMULATE.items() if k not in ("concurrency", "tp_size")}
    optimized = client.post(
        "/v1/optimize",
        json={**search, "calibration": cid, "ttft_limit_ms": 5000, "tpot_limit_ms": 100},
    ).json()
    assert optimized["calibration"]["id"] == cid
    assert all(row["ttft_ms_interval"] and row["throughput_interval"] for row in optimized["rows"])

    assert client.delete(f"/v1/calibrations/{cid}").status_code == 204
    gone = client.get(f"/v1/calibrations/{cid}")
    assert gone.status_code == 404 and gone.headers["content-type"] == "application/problem+json"
    assert client.delete(f"/v1/calibrations/{cid}").status_code == 404
    stale = client.post("/v1/simulate", json={**SIMULATE, "calibration": cid})
    assert stale.status_code == 422 and "stored calibration" in stale.json()["detail"]


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ({"points": _rows(1)}, "at least 2 measured points"),
        ({"points": [{**_rows(2)[0], "colour": "red"}, _rows(2)[1]]}, "points[0].colour"),
        ({"points": [_rows(2)[0], {**_rows(2)[1], "tpot_ms": "-3"}]}, "tpot_ms"),
        # N1: measurements outside their physical range (1e-306 overflowed the fit: a 500).
        ({"points": [{**_rows(2)[0], "ttft_ms": 1e-306}, _rows(2)[1]]}, "].ttft_ms"),
        ({"points": [{**_rows(2)[0], "ttft_ms": "5e-324"}, _rows(2)[1]]}, "].ttft_ms"),
        ({"points": [_rows(2)[0], {**_rows(2)[1], "tpot_ms": 1e-4}]}, "].tpot_ms"),
        ({"points": [_rows(2)[0], {**_rows(2)[1], "tpot_ms": 1e12}]}, "].tpot_ms"),
        ({"csv": "case_id,model\nx,y\n"}, "missing hardware"),
        ({"points": _rows(2), "csv": "x"}, "exactly one of points and csv"),
        ({"points": _rows(3), "free": ["warp_speed"]}, "free"),
        # A lone CR (found by the fuzz run: a 500 from the csv module) and a field the csv
        # module refuses are 422s naming the file.
        ({"csv": "\r0"}, "missing case_id"),
        ({"csv": '"' + "x" * 140_000 + '"\n'}, "field larger than field limit"),
    ],
)
def test_bad_calibration_input_is_a_422_naming_it(
    client: TestClient, body: dict[str, object], needle: str
) -> None:
    response = client.post("/v1/calibrations", json=body)
    assert response.status_code == 422, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert needle in response.text


def test_a_file_with_cr_line_ends_is_read(client: TestClient) -> None:
    created = client.post("/v1/calibrations", json={"csv": _csv(_rows()).replace("\n", "\r")})
    assert created.status_code == 201, created.text
    assert created.json()["profile"]["fit"]["points"] == 8


@pytest.mark.parametrize(
    "calibration", ["cal-nothex", {"version": 1}, {"id": "x"}, "cal-" + "0" * 32]
)
def test_a_bad_calibration_reference_is_a_422(client: TestClient, calibration: object) -> None:
    response = client.post("/v1/simulate", json={**SIMULATE, "calibration": calibration})
    assert response.status_code == 422, response.text


def test_cli_calibrate_then_apply(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    points = tmp_path / "mine.csv"
    points.write_text(_csv(_rows()), encoding="utf-8")
    profile = tmp_path / "profile.json"
    assert main(["calibrate", str(points), "--out", str(profile)]) == 0
    printed = capsys.readouterr().out
    assert "held out" in printed and "memory_efficiency" in printed
    saved = json.loads(profile.read_text(encoding="utf-8"))
    assert saved["id"].startswith("cal-")
    out = tmp_path / "out.csv"
    args = ["validate", "--cases", str(points), "--calibration", str(profile), "--csv", str(out)]
    assert main(args) == 0
    capsys.readouterr()
    rows = list(csv.DictReader(io.StringIO(out.read_text(encoding="utf-8"))))
    assert all(float(r["tpot_ms_lo"]) < float(r["tpot_ms_hi"]) for r in rows)
    simulate = [
        "simulate", "Qwen/Qwen3-32B", "--device", "NVIDIA_H100_SXM_80G", "--num-devices", "2",
        "--tp-size", "2", "--input-length", "2048", "--output-length", "512",
        "--concurrency", "16", "--quantize-linear-action", "FP8", "--engine", "trtllm",
        "--calibration", str(profile),
    ]  # fmt: skip
    assert main(simulate) == 0
    assert f"calibration {saved['id']}" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("content", "needle"),
    [("case_id,model\nx,y\n", "missing hardware"), (None, "No such file")],
)
def test_cli_calibrate_refuses_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None, needle: str
) -> None:
    points = tmp_path / "mine.csv"
    if content is not None:
        points.write_text(content, encoding="utf-8")
    code = main(["calibrate", str(points), "--out", str(tmp_path / "p.json")])
    err = capsys.readouterr().err
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1


def test_cli_refuses_a_malformed_profile(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json", encoding="utf-8")
    args = [
        "simulate", "Qwen/Qwen3-32B", "--device", "NVIDIA_H100_SXM_80G", "--input-length",
        "128", "--output-length", "16", "--concurrency", "1", "--calibration", str(bad),
    ]  # fmt: skip
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "calibration" in err and len(err.strip().splitlines()) == 1


def test_a_fit_past_the_request_deadline_is_a_504_promptly() -> None:
    """N2: the fit runs under APP_REQUEST_DEADLINE_S (40 points take seconds; 150 took 73 s
    whatever the deadline)."""
    import time

    from app.main import create_app
    from app.settings import Settings

    settings = Settings(cache_backend="memory", request_deadline_s=0.2, log_level="warning")
    with TestClient(create_app(settings)) as client:
        started = time.monotonic()
        response = client.post("/v1/calibrations", json={"points": _rows(40)})
        waited = time.monotonic() - started
    assert response.status_code == 504, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert response.headers["retry-after"] == "1"
    assert "calibration fit ran past its deadline" in response.json()["detail"]
    assert waited < 2.0
