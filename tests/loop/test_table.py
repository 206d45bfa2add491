"""perf_results.md: exactly the recipe's five-column table, parsed back."""
import pytest

from cutile_diag.ledger import COLUMNS, Ledger, LedgerError, parse_table, render_table

ROWS = [
    {"iteration": 0, "optimization": "baseline", "latency_ms": 3.7899, "correctness": "PASS", "status": "keep"},
    {"iteration": 1, "optimization": "E latency_hints: a|b", "latency_ms": 3.5, "correctness": "PASS",
     "status": "keep"},
    {"iteration": 2, "optimization": "D tf32", "latency_ms": None, "correctness": "FAIL", "status": "revert"},
    {"iteration": 3, "optimization": "B persistent", "latency_ms": None, "correctness": "PASS", "status": "crash"},
]


def test_render_exact_format():
    text = render_table(ROWS[:1])
    lines = text.splitlines()
    assert [c.strip() for c in lines[0].strip("|").split("|")] == list(COLUMNS)
    assert set(lines[1].replace("|", "")) == {"-"}
    assert lines[2].split("|")[3].strip() == "3.789900"        # six decimals
    assert text.endswith("\n") and len(lines) == 3


def test_round_trip_with_escapes_and_missing_latency():
    back = parse_table(render_table(ROWS))
    assert back == [{**r, "latency_ms": r["latency_ms"]} for r in ROWS]
    assert back[1]["optimization"] == "E latency_hints: a|b"
    assert "\\|" in render_table(ROWS)


@pytest.mark.parametrize("bad", [
    "| iteration | optimisation | latency_ms | correctness | status |\n|---|---|---|---|---|\n",
    "| iteration | optimization | latency_ms | correctness | status |\n|---|---|---|---|---|\n| 0 | b | 1.5 | PASS | keep |\n",
    "| iteration | optimization | latency_ms | correctness | status |\n|---|---|---|---|---|\n| 0 | b | 1.500000 | ok | keep |\n",
    "| iteration | optimization | latency_ms | correctness | status |\n|---|---|---|---|---|\n| 0 | b | 1.500000 | PASS | kept |\n",
    "some prose\n| iteration | optimization | latency_ms | correctness | status |\n|---|---|---|---|---|\n",
])
def test_parse_rejects_anything_but_the_table(bad):
    with pytest.raises(LedgerError):
        parse_table(bad)


def test_ledger_append_is_atomic_and_regenerates_table(tmp_path):
    led = Ledger(tmp_path)
    led.create({"kernel": "k"})
    led.append({"type": "begin", "iteration": 0})
    assert led.pending()["iteration"] == 0
    led.append({"type": "iteration", **ROWS[0], "commits": {"kept": "abc"}})
    assert led.pending() is None
    assert parse_table((tmp_path / "perf_results.md").read_text()) == ROWS[:1]
    assert not list(tmp_path.glob(".*.tmp"))
    again = Ledger.load(tmp_path)
    assert again.kept_commit() == "abc" and again.next_iteration() == 1
    with pytest.raises(LedgerError):
        led.append({"type": "iteration", **ROWS[0]})           # twice the same iteration
    with pytest.raises(LedgerError):
        led.append({"type": "iteration", **ROWS[1], "status": "kept"})


def test_ledger_is_strict_json(tmp_path):
    led = Ledger(tmp_path)
    led.create({"kernel": "k"})
    led.append({"type": "note", "value": float("nan")})
    assert "NaN" not in led.path.read_text()
    (tmp_path / "ledger.jsonl").write_text("{not json\n")
    with pytest.raises(LedgerError, match="not JSON"):
        Ledger.load(tmp_path)
