"""The surveyed tests' pytorch twins, timed (issue #31 item 4): TileGym-style perf tests that run
every framework at the same parameters; the plan sets each kernel's time against pytorch's."""
from __future__ import annotations

import sys
from dataclasses import replace

import pytest

from cutile_diag.campaign.reference import reference_id, time_reference


def test_reference_id_swaps_the_backend_word_of_the_parameters():
    assert reference_id("t.py::T::test_perf[4096-f16-cutile]") == "t.py::T::test_perf[4096-f16-pytorch]"
    assert reference_id("t.py::test_perf[cutile-(256, 64)-bf16]") == "t.py::test_perf[pytorch-(256, 64)-bf16]"
    assert reference_id("t.py::test_perf[4096-cutile-rs]") is None          # another backend
    assert reference_id("t.py::test_perf_cutile[4096]") is None             # not a parameter
    assert reference_id("t.py::test_perf") is None


TESTS = '''import pytest

MS = {"cutile": 0.5, "pytorch": 2.0}


@pytest.mark.parametrize("framework", ["cutile", "pytorch"])
@pytest.mark.parametrize("n", [1024, 4096])
def test_perf(n, framework, record_property):
    record_property("benchmark", {framework: {"forward": {"median": MS[framework] * n / 1024, "nrep": 10}}})


@pytest.mark.parametrize("framework", ["cutile"])
def test_perf_alone(framework, record_property):
    record_property("benchmark", {framework: {"forward": {"median": 1.0, "nrep": 10}}})
'''


def test_time_reference_runs_the_existing_twins_and_keys_them_by_the_surveyed_test(tmp_path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_ops.py").write_text(TESTS)
    surveyed = ["tests/test_ops.py::test_perf[1024-cutile]", "tests/test_ops.py::test_perf[4096-cutile]",
                "tests/test_ops.py::test_perf_alone[cutile]"]          # the last one has no pytorch twin
    ref = time_reference([sys.executable, "-m", "pytest"], surveyed, cwd=str(tmp_path), timeout=120)
    assert ref.times == {
        "tests/test_ops.py::test_perf[1024-cutile]": {"framework": "pytorch", "ms": 2.0,
                                                      "test": "tests/test_ops.py::test_perf[1024-pytorch]"},
        "tests/test_ops.py::test_perf[4096-cutile]": {"framework": "pytorch", "ms": 8.0,
                                                      "test": "tests/test_ops.py::test_perf[4096-pytorch]"}}
    assert ref.warnings == []


def test_plan_sets_the_kernel_against_the_reference(tmp_path, monkeypatch):
    """The demo repository's vector_add surveyed (two perf tests, one configuration each), its launches
    timed and its tests' pytorch medians given: each configuration's reference_ms, the kernel's
    geometric means and its time ratio against pytorch; a survey without them has none."""
    from cutile_diag.campaign.demo import make_repo, survey_command
    from cutile_diag.campaign.plan import build_plan
    from cutile_diag.campaign.survey import survey
    repo = make_repo(tmp_path, ("vector_add",))
    monkeypatch.chdir(repo)
    sv = survey(survey_command(), tmp_path / "out", execute=False)
    assert sv.reference == {}                                   # a dry run times no reference
    tests = sorted({r.extra["test"] for r in sv.records})
    ms = dict(zip(tests, (0.01, 0.04)))
    sv.records = [replace(r, device_ms=ms[r.extra["test"]], extra={**r.extra, "first": False}) for r in sv.records]
    assert build_plan(sv, repo).kernels[0].reference is None
    sv.reference = {t: {"framework": "pytorch", "ms": m, "test": t + "~"} for t, m in zip(tests, (0.02, 0.05))}
    k = build_plan(sv, repo).kernels[0]
    assert sorted(c["reference_ms"] for c in k.configs) == [0.02, 0.05]
    assert k.reference["framework"] == "pytorch" and k.reference["ms"] == pytest.approx((0.02 * 0.05) ** 0.5)
    assert k.reference["ratio"] == pytest.approx(((0.01 / 0.02) * (0.04 / 0.05)) ** 0.5)
    assert sorted(k.reference["tests"].values()) == [0.02, 0.05]
