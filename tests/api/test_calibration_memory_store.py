"""Without a durable store a process keeps its calibrations in a store of their own: the
latency cache's LRU never evicts one, and the store is bounded (a new profile past the bound
is refused, never an older one dropped)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from app.services.calibration_store import MemoryCalibrationStore, StoreFullError
from app.settings import Settings
from tests.api.test_calibrations import SIMULATE, _rows


def test_latency_traffic_never_evicts_a_calibration() -> None:
    """A one-entry latency cache: every simulation evicts the last entry, not the profile."""
    settings = Settings(cache_backend="memory", cache_max_entries=1, log_level="warning")
    with TestClient(create_app(settings)) as client:
        created = client.post("/v1/calibrations", json={"points": _rows()})
        assert created.status_code == 201, created.text
        cid = created.json()["id"]
        for concurrency in (1, 4):
            simulated = client.post("/v1/simulate", json={**SIMULATE, "concurrency": concurrency})
            assert simulated.status_code == 200
        applied = client.post("/v1/simulate", json={**SIMULATE, "calibration": cid})
        assert applied.status_code == 200 and applied.json()["calibration"]["id"] == cid


def test_a_full_store_refuses_a_new_profile_and_drops_expired_ones_first() -> None:
    store = MemoryCalibrationStore(max_items=2)
    store.put("cal-a", {"id": "cal-a"}, ttl_s=3600)
    store.put("cal-b", {"id": "cal-b"}, ttl_s=3600)
    with pytest.raises(StoreFullError, match="at most 2 profiles"):
        store.put("cal-c", {"id": "cal-c"}, ttl_s=3600)
    assert store.get("cal-a") == {"id": "cal-a"}  # nothing evicted
    store.delete("cal-a")
    store.put("cal-c", {"id": "cal-c"}, ttl_s=0)  # expired at once: read as absent
    assert store.get("cal-c") is None
    store.put("cal-d", {"id": "cal-d"}, ttl_s=3600)  # the expired one made room
    assert len(store) == 2 and store.get("cal-d") == {"id": "cal-d"}


def test_a_full_store_is_a_503_naming_the_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("app.services.calibration_store.MAX_MEMORY_CALIBRATIONS", 1)
    with TestClient(create_app(Settings(cache_backend="memory", log_level="warning"))) as client:
        assert client.post("/v1/calibrations", json={"points": _rows()}).status_code == 201
        refused = client.post("/v1/calibrations", json={"points": _rows()})
        assert refused.status_code == 503 and "retry-after" not in refused.headers
        assert refused.json()["title"] == "Calibration not stored"
        assert "at most 1 profiles" in refused.json()["detail"]
