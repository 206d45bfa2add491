"""`cutile-diag optimize` and `cutile-diag loop ...` through the CLI (real transforms, simulated GPU)."""
import json
import re
from pathlib import Path

import pytest

from cutile_diag.cli import main
from looptools import dirty, git, head


def run(capsys, *argv):
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.fixture
def spec(tmp_path):
    p = tmp_path / "sim.json"
    p.write_text(json.dumps({"configs": {"1M": 0.012, "16M": 0.06},
                             "effects": {"persistent_grid": {"1M": 0.98, "16M": 0.85}, "latency_hints": 0.93,
                                         "store_allow_tma_false": 0.96},
                             "bytes": {"1M": 12582912, "16M": 201326592}}))
    return p


def test_optimize_with_real_transforms_on_a_simulated_gpu(repo, spec, capsys, monkeypatch):
    from looptools import checkout_state
    before = checkout_state(repo)
    ref = f"{repo / 'vector_add.py'}::vector_add"
    rc, out, err = run(capsys, "optimize", ref, "--simulate", str(spec), "--no-capture", "--rounds", "2",
                       "--continue", "--max-iterations", "4", "--skip", "C,G", "--json")
    assert rc == 0, err
    res = json.loads(out)
    assert res["iterations"] >= 2 and res["speedup"] is None and res["simulated_speedup"] > 1.1
    from cutile_diag.ledger import Ledger, parse_table
    led = Ledger.load(res["state_dir"])
    rows = parse_table(open(res["table"]).read())
    assert rows[0]["optimization"] == "baseline"
    entries = [it["entry"]["transform"] for it in led.iterations[1:]]
    assert "persistent_grid" in entries and "latency_hints" in entries
    wt = led.setup["worktree"]
    assert res["worktree"] == wt and res["branch"] == git(wt, "rev-parse", "--abbrev-ref", "HEAD")
    src = open(f"{wt}/vector_add.py").read()
    assert "ct.num_blocks(0)" in src and "latency=" in src            # libcst rewrites, committed
    assert head(wt) == res["kept_commit"] and dirty(wt) == []
    assert checkout_state(repo) == before                            # the user's checkout: not touched
    # how to take the result: merge, cherry-pick or apply the diff (nothing is taken by itself)
    assert any(f"merge {res['branch']}" in c for c in res["take"]) and any("apply" in c for c in res["take"])
    # status and next read the same session
    rc, out, _ = run(capsys, "loop", "status", ref, "--json")
    st = json.loads(out)
    assert rc == 0 and st["kept_commit"] == res["kept_commit"] and len(st["rows"]) == len(rows)
    rc, out, _ = run(capsys, "loop", "next", ref, "--json")
    assert rc == 0 and "recipe" in json.loads(out)
    assert st["take"] == res["take"] and st["worktree"] == wt
    rc, out, _ = run(capsys, "loop", "status", ref)
    assert rc == 0 and re.search(r"it +optimization +latency_ms +correctness +status", out)
    assert "not checked (simulated)" in out          # a simulated table says its correctness was not checked
    assert f"git -C {repo} merge {res['branch']}" in out and "loop clean" in out
    # in a 100-column terminal: every row's figures on its first line, the optimization text
    # wrapping inside its own column
    from rich.console import Console
    from cutile_diag.commands import loop as loop_cmd
    narrow = Console(width=100, record=True, color_system=None)
    monkeypatch.setattr(loop_cmd, "console", narrow)
    assert main(["loop", "status", ref]) == 0
    lines = narrow.export_text().splitlines()
    top = next(i for i, ln in enumerate(lines) if re.match(r"\s*it +optimization", ln))
    end = next(i for i in range(top + 2, len(lines)) if not lines[i].strip())
    table = lines[top + 2:end]
    firsts = [ln for ln in table if re.match(r"\s*\d+ ", ln)]
    assert len(firsts) == len(rows) and all(re.search(r"(\d\.\d{6}|-) +\S.* +(keep|revert|crash) *$", ln)
                                            for ln in firsts), lines
    # the result taken as the report says, by the user's own git
    git(repo, "merge", "-q", res["branch"])
    assert open(repo / "vector_add.py").read() == src
    # clean: the worktree goes, the branch stays unless asked; the ledger always stays
    rc, out, err = run(capsys, "loop", "clean", ref)
    assert rc == 0, err
    assert not Path(wt).exists() and git(repo, "branch", "--list", res["branch"]) and Path(res["ledger"]).exists()
    rc, out, _ = run(capsys, "loop", "status", ref)
    # the hint names the loop (--out STATE) where a bare command run here would not find it
    assert rc == 0 and re.search(r"optimize --resume( --out \S+)?` makes it again", "".join(out.split("\n")))
    rc, out, err = run(capsys, "loop", "clean", ref, "--delete-branch")
    assert rc == 0 and not git(repo, "branch", "--list", res["branch"])
    assert not git(repo, "for-each-ref", f"refs/cutile-diag/{res['branch']}/")


def test_cli_errors_are_one_line(repo, spec, capsys):
    ref = f"{repo / 'vector_add.py'}::vector_add"
    rc, _, err = run(capsys, "optimize", ref)
    assert rc == 2 and err.startswith("cutile-diag: error: no way to verify and measure")
    rc, _, err = run(capsys, "optimize", f"{repo / 'vector_add.py'}::nope", "--simulate", str(spec))
    assert rc == 2 and "no @ct.kernel named 'nope'" in err and "Traceback" not in err
    (repo / "README.md").write_text("dirty\n")
    rc, _, err = run(capsys, "optimize", ref, "--simulate", str(spec), "--no-capture")
    assert rc == 2 and "uncommitted changes: README.md" in err
    git(repo, "checkout", "-q", "README.md")
    rc, _, err = run(capsys, "optimize", ref, "--simulate", str(spec), "--max-iterations", "30")
    assert rc == 2 and "1..25" in err
    rc, _, err = run(capsys, "loop", "record", ref)
    assert rc == 2 and "no optimisation loop" in err


def test_untracked_files_do_not_block_the_loop(repo, spec, capsys):
    """A log or a notes file is not in the loop's worktree (made from HEAD): the loop starts,
    says so once, and leaves it alone; a tracked uncommitted change is still refused."""
    ref = f"{repo / 'vector_add.py'}::vector_add"
    (repo / "notes.txt").write_text("my notes\n")
    (repo / "logs").mkdir()
    (repo / "logs" / "run.log").write_text("log\n")
    rc, out, err = run(capsys, "optimize", ref, "--simulate", str(spec), "--no-capture", "--rounds", "1",
                       "--max-iterations", "1")
    assert rc == 0, err
    said = [ln for ln in (out + err).splitlines() if "untracked files" in ln]
    assert len(said) == 1 and "not in the loop's worktree" in said[0] and "logs/run.log" in said[0] \
        and "notes.txt" in said[0]
    assert (repo / "notes.txt").read_text() == "my notes\n" and (repo / "logs" / "run.log").exists()
    wt = Path(json.loads(run(capsys, "loop", "status", ref, "--json")[1])["worktree"])
    assert not (wt / "notes.txt").exists()
    (repo / "README.md").write_text("dirty\n")
    rc, _, err = run(capsys, "optimize", ref, "--simulate", str(spec), "--no-capture", "--branch", "other")
    assert rc == 2 and "uncommitted changes: README.md" in err and "notes.txt" not in err


def test_nothing_simulated_is_called_pass_or_a_speedup(repo, spec, capsys):
    """--simulate: optimize, loop record, loop status (text and --json), the ledger and
    perf_results.md say "not checked (simulated)" / "simulated", never PASS or a bare speedup."""
    from cutile_diag.ledger import Ledger
    ref = f"{repo / 'vector_add.py'}::vector_add"
    rc, out, err = run(capsys, "optimize", ref, "--simulate", str(spec), "--no-capture", "--rounds", "1",
                       "--max-iterations", "1", "--only", "E")
    assert rc == 0, err
    assert "PASS" not in out + err and "simulated latency" in out and "not a speedup" in out
    state = json.loads(run(capsys, "loop", "status", ref, "--json")[1])
    assert state["simulated"] is True
    wt = Path(state["worktree"])
    (wt / "vector_add.py").write_text((wt / "vector_add.py").read_text() + "# PLANTED\n")
    rc, out, err = run(capsys, "loop", "record", ref, "--note", "manual", "--max-iterations", "3")
    assert rc == 0, err
    assert "PASS" not in out + err and "not checked (simulated)" in out and "ms (simulated)" in out
    assert "ms, simulated): " in err and "reason (simulated latencies): " in out
    rc, out, err = run(capsys, "loop", "record", ref, "--json")
    assert rc == 2                                   # nothing to record: the edit was recorded
    rc, out, err = run(capsys, "loop", "status", ref)
    assert rc == 0 and "PASS" not in out and "simulated: these latencies" in out and "simulated latency" in out
    led = Ledger.load(state["state_dir"])
    assert all(r["correctness"] == "not checked (simulated)" for r in led.iterations)
    assert all(r["verification"]["passed"] is None and r["verification"]["simulated"] for r in led.iterations)
    assert all(r["passed"] is None for r in led.of_type("progress"))
    assert "PASS" not in led.table_path.read_text() and "PASS" not in led.path.read_text()


def test_loop_record_s_max_iterations_is_the_loop_s_cap_from_then_on(repo, spec, capsys):
    """Raised once in `loop record`, the cap holds for the next record and for status."""
    from cutile_diag.loop.session import load_session
    ref = f"{repo / 'vector_add.py'}::vector_add"
    rc, out, err = run(capsys, "optimize", ref, "--simulate", str(spec), "--no-capture", "--rounds", "1",
                       "--max-iterations", "1", "--only", "E", "--json")
    assert rc == 0, err
    state, wt = json.loads(out)["state_dir"], Path(json.loads(out)["worktree"])
    f = wt / "vector_add.py"
    f.write_text(f.read_text() + "# one\n")
    rc, _, err = run(capsys, "loop", "record", ref)
    assert rc == 2 and "iteration cap is reached" in err
    rc, _, err = run(capsys, "loop", "record", ref, "--max-iterations", "3", "--rounds", "1")
    assert rc == 0, err
    assert load_session(state)[0].options["max_iterations"] == 3
    f.write_text(f.read_text() + "# two\n")
    rc, _, err = run(capsys, "loop", "record", ref, "--rounds", "1")
    assert rc == 0, err


def test_resume_through_the_cli(repo, spec, capsys):
    ref = f"{repo / 'vector_add.py'}::vector_add"
    rc, out, err = run(capsys, "optimize", ref, "--simulate", str(spec), "--no-capture", "--rounds", "1",
                       "--max-iterations", "1", "--json")
    assert rc == 0, err
    first = json.loads(out)
    assert first["stop_rule"] == "max-iterations"
    rc, out, err = run(capsys, "optimize", "--resume", ref, "--max-iterations", "2", "--json")
    assert rc == 0, err
    again = json.loads(out)
    assert again["iterations"] == 2 and len(again["rows"]) == 3


def test_unknown_workload_configuration_is_a_usage_error(repo, capsys):
    ref = f"{repo / 'vector_add.py'}::vector_add"
    rc, _, err = run(capsys, "optimize", ref, "--workload", "examples:vector_add", "--configs", "nope")
    assert rc == 2 and "has no configuration 'nope'" in err and "16M-f32" in err
    assert dirty(repo) == [] and git(repo, "rev-parse", "--abbrev-ref", "HEAD") == "main"
