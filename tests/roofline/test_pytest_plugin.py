"""The --print-record plugin, run through pytester with fake TileGym-style records."""
import pytest

from cutile_diag.pytest_plugin import format_record_lines, parse_record_lines

RECORD = {"cutile": {"forward": {"mean": 3.79, "std": 0.0017, "rel_std": 0.0447, "median": 3.7899, "min": 3.78,
                                 "max": 3.80, "nrep": 13, "peak_mem_mb": 913}}}

TEST_FILE = f'''
import pytest

@pytest.mark.parametrize("framework", ["cutile", "pytorch"])
def test_perf(framework, record_property):
    rec = {RECORD!r}["cutile"]
    record_property("benchmark", {{framework: rec}})

def test_op_without_record():
    pass

def test_perf_phase_only_record_cutile(record_property):
    record_property("benchmark", {{"forward": {{"median": 1.5}}}})
'''

# TileGym's tests/conftest.py registers its options in ONE try block: if --print-record were
# already registered, --run-full would be lost and pytest_configure would fail.
TILEGYM_CONFTEST = '''
import os

def pytest_configure(config):
    if config.getoption("--run-full"):
        os.environ["RUN_FULL_TEST"] = "1"

def pytest_addoption(parser):
    try:
        parser.addoption("--arch", type=str, default="sm90")
        parser.addoption("--quick-run", action="store_true", default=False)
        parser.addoption("--print-record", action="store_true", default=False, help="Print record_property")
        parser.addoption("--run-full", action="store_true", default=False)
    except ValueError:
        pass
'''


def _plugin_args(pytestconfig):
    # the entry point autoloads the plugin in every pytest run; load it by module only if it is off
    if pytestconfig.pluginmanager.has_plugin("cutile_diag"):
        return []
    return ["-p", "cutile_diag.pytest_plugin"]


def test_prints_records_with_a_tilegym_style_conftest(pytester, pytestconfig):
    pytester.makeconftest(TILEGYM_CONFTEST)
    pytester.makepyfile(test_perf_x=TEST_FILE)
    r = pytester.runpytest("--print-record", "--run-full", *_plugin_args(pytestconfig))
    r.assert_outcomes(passed=4)
    out = r.stdout.str()
    expected = f"Cutile: {RECORD['cutile']!r} ms"
    assert expected in out
    assert f"Pytorch: {RECORD['cutile']!r} ms" in out
    # phase-only record: framework taken from the test id
    assert "Benchmark: {'forward': {'median': 1.5}} ms" in out
    assert out.count("Performance Test Results:") == 3          # one header per test with a record
    r.stdout.fnmatch_lines(["*Performance Test Results: test_perf_x.py::test_perf[[]cutile[]]*",
                            "Cutile: {'forward': {'mean': 3.79*} ms"])
    parsed = parse_record_lines(out)
    assert ("cutile", RECORD["cutile"]) in parsed and ("pytorch", RECORD["cutile"]) in parsed


def test_silent_without_the_flag(pytester, pytestconfig):
    pytester.makeconftest(TILEGYM_CONFTEST)
    pytester.makepyfile(test_perf_x=TEST_FILE)
    r = pytester.runpytest(*_plugin_args(pytestconfig))
    r.assert_outcomes(passed=4)
    assert "Cutile:" not in r.stdout.str() and "Performance Test Results" not in r.stdout.str()


def test_registers_the_option_when_no_conftest_does(pytester, pytestconfig):
    pytester.makepyfile(test_perf_x=TEST_FILE)
    r = pytester.runpytest("--print-record", *_plugin_args(pytestconfig))
    r.assert_outcomes(passed=4)
    assert f"Cutile: {RECORD['cutile']!r} ms" in r.stdout.str()
    h = pytester.runpytest("--help", *_plugin_args(pytestconfig))
    assert "--print-record" in h.stdout.str()


def test_conftest_option_help_is_kept(pytester, pytestconfig):
    """The conftest's own --print-record is reused, not shadowed."""
    pytester.makeconftest(TILEGYM_CONFTEST)
    h = pytester.runpytest("--help", *_plugin_args(pytestconfig))
    assert "Print record_property" in h.stdout.str()
    assert "cutile-diag" not in h.stdout.str().split("--print-record", 1)[1].split("\n")[0]


def test_failed_test_record_is_marked(pytester, pytestconfig):
    pytester.makepyfile(test_f='''
def test_perf_fail(record_property):
    record_property("benchmark", {"triton": {"forward": {"median": 2.0}}})
    assert False
''')
    r = pytester.runpytest("--print-record", *_plugin_args(pytestconfig))
    r.assert_outcomes(failed=1)
    r.stdout.fnmatch_lines(["*Performance Test Results: test_f.py::test_perf_fail (failed)*",
                            "Triton: {'forward': {'median': 2.0}} ms"])


@pytest.mark.parametrize("nodeid,fw", [
    ("t.py::test_perf[cutile-4096-f16]", "Cutile"), ("t.py::test_perf[1024_triton]", "Triton"),
    ("t.py::test_perf[cutile-rs-128]", "Cutile-rs"), ("t.py::test_perf[128]", "Benchmark"),
    ("t.py::test_perf", "Benchmark")])
def test_format_phase_only_records(nodeid, fw):
    lines = format_record_lines({"forward": {"median": 1.0}, "backward": {"median": 2.0}}, nodeid)
    assert lines == [f"{fw}: {{'forward': {{'median': 1.0}}, 'backward': {{'median': 2.0}}}} ms"]


def test_format_and_parse_roundtrip():
    lines = format_record_lines({"cutile": {"forward": {"median": 1.0}}, "pytorch": {"forward": {"median": 2.0}}})
    assert lines == ["Cutile: {'forward': {'median': 1.0}} ms", "Pytorch: {'forward': {'median': 2.0}} ms"]
    assert parse_record_lines("noise\n" + "\n".join(lines) + "\nCutile: {broken ms\n") == [
        ("cutile", {"forward": {"median": 1.0}}), ("pytorch", {"forward": {"median": 2.0}})]
