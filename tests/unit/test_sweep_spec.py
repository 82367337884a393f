"""The sweep spec (app/core/sweep.py): grid expansion, exclude rules, CSV rows, the bound."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.core.errors import InvalidParameterError
from app.core.limits import MAX_SWEEP_SCENARIOS
from app.core.sweep import expand_csv, expand_grid, grid_count, set_field

BASE = {"model": "Qwen/Qwen3-0.6B", "device": "TEST_DEVICE", "output_length": 16}


def test_a_2x3_grid_is_6_scenarios_with_their_values() -> None:
    points = expand_grid(
        {
            "operation": "simulate",
            "base": BASE,
            "grid": {"input_length": [128, 256], "concurrency": [1, 2, 4]},
        }
    )
    assert [(p.body["input_length"], p.body["concurrency"]) for p in points] == [
        (128, 1),
        (128, 2),
        (128, 4),
        (256, 1),
        (256, 2),
        (256, 4),
    ]
    assert all(p.body["model"] == "Qwen/Qwen3-0.6B" and p.operation == "simulate" for p in points)
    assert points[4].values == (("input_length", 256), ("concurrency", 2))


def test_an_exclude_rule_drops_every_point_matching_all_its_pairs() -> None:
    points = expand_grid(
        {
            "operation": "simulate",
            "base": BASE,
            "grid": {"input_length": [128, 256], "concurrency": [1, 2, 4]},
            "exclude": [{"input_length": 256, "concurrency": 4}, {"concurrency": 1}],
        }
    )
    assert [dict(p.values) for p in points] == [
        {"input_length": 128, "concurrency": 2},
        {"input_length": 128, "concurrency": 4},
        {"input_length": 256, "concurrency": 2},
    ]


def test_a_dotted_name_sets_a_nested_field_without_touching_the_base() -> None:
    base = {"engine_options": {"max_num_seqs": 8}}
    points = expand_grid(
        {"operation": "plan", "base": base, "grid": {"engine_options.arrival_spread": [0.5]}}
    )
    assert points[0].body["engine_options"] == {"max_num_seqs": 8, "arrival_spread": 0.5}
    assert base == {"engine_options": {"max_num_seqs": 8}}
    body = {"a": 1}
    with pytest.raises(InvalidParameterError, match=r"^a\.b="):
        set_field(body, "a.b", 2)


def test_csv_rows_are_one_scenario_each_cells_as_text_lists_as_json() -> None:
    text = (
        "operation,model,input_length,tp_sizes,engine_options.arrival_spread\n"
        "simulate,Qwen/Qwen3-0.6B,128,,0.5\n"
        'optimize,Qwen/Qwen3-0.6B,256,"[1, 2]",\n'
    )
    first, second = expand_csv(text)
    assert first.operation == "simulate"
    assert first.body == {
        "model": "Qwen/Qwen3-0.6B",
        "input_length": "128",
        "engine_options": {"arrival_spread": "0.5"},
    }
    assert second.operation == "optimize"
    assert second.body == {"model": "Qwen/Qwen3-0.6B", "input_length": "256", "tp_sizes": [1, 2]}


@pytest.mark.parametrize(
    ("document", "field"),
    [
        ({"operation": "forward", "grid": {"a": [1]}}, "operation"),
        ({"operation": "simulate", "grid": {}}, "grid"),
        ({"operation": "simulate"}, "grid"),
        ({"operation": "simulate", "grid": {"input_length": []}}, "grid.input_length"),
        ({"operation": "simulate", "grid": {"input_length": 5}}, "grid.input_length"),
        ({"operation": "simulate", "grid": {"a": [1]}, "exclude": [{"b": 1}]}, "exclude.b"),
        ({"operation": "simulate", "grid": {"a": [1]}, "basis": {}}, "basis"),
        ({"operation": "simulate", "base": [], "grid": {"a": [1]}}, "base"),
    ],
)
def test_a_bad_grid_document_is_an_error_naming_the_field(
    document: dict[str, object], field: str
) -> None:
    with pytest.raises(InvalidParameterError) as caught:
        expand_grid(document)
    assert caught.value.field == field


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("model,input_length\nQwen/Qwen3-0.6B,128\n", "operation"),
        ("operation,model\n", "rows"),
        ("operation,model\nforward,Qwen/Qwen3-0.6B\n", "row 2: operation"),
        ("operation,model\nsimulate,a,b\n", "row 2"),
    ],
)
def test_a_bad_csv_is_an_error_naming_the_field(text: str, field: str) -> None:
    with pytest.raises(InvalidParameterError) as caught:
        expand_csv(text)
    assert caught.value.field == field


def test_a_grid_over_the_bound_is_refused_naming_its_count() -> None:
    side = math.isqrt(MAX_SWEEP_SCENARIOS) + 1
    grid = {"input_length": list(range(side)), "concurrency": list(range(side))}
    with pytest.raises(InvalidParameterError, match=f"{side * side} scenarios"):
        expand_grid({"operation": "simulate", "grid": grid})
    rows = "operation\n" + "simulate\n" * (MAX_SWEEP_SCENARIOS + 1)
    with pytest.raises(InvalidParameterError, match=f"{MAX_SWEEP_SCENARIOS + 1} scenarios"):
        expand_csv(rows)


@settings(max_examples=60, deadline=None)
@given(
    lengths=st.lists(st.integers(min_value=1, max_value=4), min_size=1, max_size=3),
    picks=st.lists(st.tuples(st.integers(0, 2), st.integers(0, 3)), max_size=3),
)
def test_count_is_the_product_of_the_lists_minus_the_excluded(
    lengths: list[int], picks: list[tuple[int, int]]
) -> None:
    grid = {f"f{i}": list(range(n)) for i, n in enumerate(lengths)}
    rules = [{f"f{i}": v} for i, v in picks if i < len(lengths)]
    points = expand_grid({"operation": "simulate", "grid": grid, "exclude": rules})
    excluded = sum(
        1
        for point in expand_grid({"operation": "simulate", "grid": grid})
        if any(all(dict(point.values)[k] == v for k, v in r.items()) for r in rules)
    )
    kept = grid_count(grid) - excluded
    assert len(points) == kept == math.prod(lengths) - excluded
    assert len({p.values for p in points}) == len(points)
    assert not any(any(dict(p.values)[k] == v for r in rules for k, v in r.items()) for p in points)
