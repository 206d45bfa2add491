"""--print-record output, as TileGym perf tests print it, parsed per test id."""
from pathlib import Path

import pytest

from cutile_diag.loop.errors import BackendError
from cutile_diag.loop.records import latencies, parse_records, require_records

PYTEST_V = """\
============================= test session starts ==============================
collected 12 items / 8 deselected / 4 selected

tests/ops/test_softmax.py::Test_Softmax::test_perf[4096-4096-float16-cutile]
Cutile: {'forward': {'mean': 3.7901, 'std': 0.0017, 'rel_std': 0.0447, 'median': 3.7899, 'min': 3.7881, 'max': 3.7952, 'nrep': 13, 'peak_mem_mb': 913}} ms
PASSED
tests/ops/test_softmax.py::Test_Softmax::test_perf[4096-4096-float16-torch] Torch: {'forward': {'mean': 4.1, 'median': 4.0, 'nrep': 12}} ms PASSED
tests/ops/test_softmax.py::Test_Softmax::test_perf[8192-1024-bfloat16-cutile] Cutile: {'forward': {'mean': 1.25, 'std': 0.01, 'rel_std': 0.8, 'median': 1.2468, 'min': 1.23, 'max': 1.29, 'nrep': 40, 'peak_mem_mb': 64}, 'backward': {'median': 2.5, 'nrep': 20}} ms PASSED
CUTILE_DIAG_RECORD {"nodeid": "tests/ops/test_softmax.py::Test_Softmax::test_perf[1-2-float32-cutile]", "benchmark": {"cutile": {"forward": {"median": 0.5, "rel_std": 1.0, "nrep": 100}}}}
========================= 4 passed, 8 deselected in 12.3s =========================
"""


def test_records_per_test_id():
    recs = latencies(parse_records(PYTEST_V))
    assert sorted(recs) == sorted([
        "tests/ops/test_softmax.py::Test_Softmax::test_perf[4096-4096-float16-cutile]",
        "tests/ops/test_softmax.py::Test_Softmax::test_perf[8192-1024-bfloat16-cutile]",
        "tests/ops/test_softmax.py::Test_Softmax::test_perf[1-2-float32-cutile]"])
    r = recs["tests/ops/test_softmax.py::Test_Softmax::test_perf[4096-4096-float16-cutile]"]
    assert (r.median, r.nrep, r.rel_std, r.peak_mem_mb) == (3.7899, 13, 0.0447, 913)
    assert recs["tests/ops/test_softmax.py::Test_Softmax::test_perf[1-2-float32-cutile]"].median == 0.5


def test_directions_and_frameworks():
    both = latencies(parse_records(PYTEST_V), direction="both")
    assert both["tests/ops/test_softmax.py::Test_Softmax::test_perf[8192-1024-bfloat16-cutile]"].median == \
        pytest.approx(1.2468 + 2.5)
    bwd = latencies(parse_records(PYTEST_V), direction="backward")
    assert list(bwd) == ["tests/ops/test_softmax.py::Test_Softmax::test_perf[8192-1024-bfloat16-cutile]"]
    torch = latencies(parse_records(PYTEST_V, framework="torch"))
    assert [r.median for r in torch.values()] == [4.0]


def test_records_without_node_ids_are_numbered():
    text = "Cutile: {'median': 1.0, 'mean': 1.1} ms\nCutile: {'forward': {'median': 2.0}} ms\n"
    assert [(k, r.median) for k, r in latencies(parse_records(text)).items()] == [("record-1", 1.0),
                                                                                 ("record-2", 2.0)]


def test_no_record_is_a_clear_error():
    with pytest.raises(BackendError, match="no cutile benchmark record") as e:
        require_records("1 passed in 0.1s\n")
    assert "--print-record" in e.value.one_line()
    with pytest.raises(BackendError) as e:
        require_records("t.py::test_perf[x] Torch: {'median': 1.0} ms\n")
    assert "records were printed for Torch" in e.value.one_line()


def test_records_printed_by_the_cutile_diag_pytest_plugin():
    from cutile_diag import pytest_plugin as plugin
    from cutile_diag.loop.records import parse_records
    rec = {"cutile": {"forward": {"mean": 1.01, "std": 0.01, "rel_std": 0.99, "median": 1.0, "min": 0.99,
                                  "max": 1.05, "nrep": 48, "peak_mem_mb": 40}}}
    ok = "tests/ops/test_rms_norm.py::Test_RMSNorm::test_perf[4096-bfloat16-cutile]"
    bad = "tests/ops/test_rms_norm.py::Test_RMSNorm::test_perf[8192-bfloat16-cutile]"
    text = "\n".join([f"{plugin.HEADER}: {ok}", *plugin.format_record_lines(rec, ok),
                      f"{plugin.HEADER}: {bad} (failed)", *plugin.format_record_lines(rec, bad),
                      "==== 1 passed, 1 failed in 3.2s ===="])
    recs = latencies(parse_records(text))
    assert list(recs) == [ok]                      # a failed perf test's record is not a latency
    assert (recs[ok].median, recs[ok].nrep) == (1.0, 48)
    # node ids with spaces (TileGym's geglu prints its shape tuple): one configuration each
    ids = [f"tests/ops/activation/test_geglu.py::Test_GEGLU::test_perf[cutile-(256, 64, 16, 128)-3-torch.float16-{a}]"
           for a in ("none", "tanh")]
    text = "\n".join([f"{plugin.HEADER}: {ids[0]}", "Cutile: {'forward': {'median': 1.0}} ms",
                      f"{plugin.HEADER}: {ids[1]}", "Cutile: {'forward': {'median': 2.0}} ms",
                      f"{plugin.HEADER}: {ids[1][:-1]}-x] (failed)", "Cutile: {'forward': {'median': 3.0}} ms"])
    assert {k: r.median for k, r in latencies(parse_records(text)).items()} == {ids[0]: 1.0, ids[1]: 2.0}


def test_a_gzipped_ledger_reads_like_the_plain_one_and_is_never_written(tmp_path):
    """Committed results keep ledgers gzipped (the device carry limit): the one ledger reader
    reads them, finds them in folders (a plain ledger beside one wins) and refuses to append."""
    import gzip
    import shutil

    from cutile_diag.ledger import Ledger, LedgerError, find_ledgers
    src = Path(__file__).parents[2] / "bench" / "results" / "optimize-h200" / "gather_scale"
    state = tmp_path / "gather_scale"
    shutil.copytree(src, state)
    led = Ledger.load(state)
    assert led.path.name == "ledger.jsonl.gz" and led.iterations and led.records[0]["type"] == "setup"
    with pytest.raises(LedgerError, match="read-only"):
        led.append({"type": "note", "text": "x"})
    assert gzip.decompress((state / "ledger.jsonl.gz").read_bytes()).count(b"\n") == len(led.records)
    assert find_ledgers(tmp_path) == [state / "ledger.jsonl.gz"]
    (state / "ledger.jsonl").write_bytes(gzip.decompress((state / "ledger.jsonl.gz").read_bytes()))
    assert find_ledgers(tmp_path) == [state / "ledger.jsonl"]
    (state / "ledger.jsonl").unlink()
    (state / "ledger.jsonl.gz").write_bytes(b"not gzip")
    with pytest.raises(LedgerError, match="not a gzipped ledger"):
        Ledger.load(state)
