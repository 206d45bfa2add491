"""Several loops in one repository: the state folder of one never makes the next one's tree dirty."""
import shutil

from cutile_diag.examples import EXAMPLES_DIR
from looptools import FakeTransform, dirty, git, head, make_loop, rec, table_rows, untouched


def run_one(repo, **kw):
    ts = {"fast": FakeTransform("fast", "A")}
    r = make_loop(repo, {"effects": {"fast": 0.9}}, recs=[rec("A", "fast")], transforms=ts, max_iterations=1, **kw)
    r.start()
    return r


def test_another_kernel_then_the_same_kernel_on_a_new_branch(repo):
    shutil.copy(EXAMPLES_DIR / "gather_scale.py", repo / "gather_scale.py")
    git(repo, "add", "gather_scale.py")
    git(repo, "commit", "-qm", "second kernel")
    first = run_one(repo)
    assert "/cutile-diag-out/" in (repo / ".git" / "info" / "exclude").read_text().splitlines()
    assert dirty(repo) == [] and git(repo, "status", "--porcelain", "--untracked-files=all") == ""
    # another kernel, while the first loop's state exists: its state folder is not a change in the tree
    second = run_one(repo, ref=f"{repo / 'gather_scale.py'}::gather_scale")
    assert second.s.state_dir.name == "gather_scale" and second.s.branch.startswith("cutile-perf-gather_scale-")
    assert [x["status"] for x in table_rows(second)] == ["keep", "keep"]
    # the same kernel again, on a new branch from main: its own state folder and worktree next to the first one
    third = run_one(repo, branch="cutile-perf-vector_add-again")
    assert third.s.state_dir.name == "vector_add@cutile-perf-vector_add-again"
    assert third.s.worktree != first.s.worktree
    assert first.led.path.exists() and len(table_rows(third)) == 2
    assert head(third.s.worktree) == third.led.kept_commit() and dirty(third.s.worktree) == []
    assert head(first.s.worktree) == first.led.kept_commit() and dirty(first.s.worktree) == []
    assert git(repo, "rev-parse", "--abbrev-ref", "HEAD") == "main" and untouched(repo, first)
    # a loop command names the loop by its worktree: run from it, or a kernel path in it
    import pytest
    from cutile_diag.loop.errors import LoopError
    from cutile_diag.loop.session import find_state_dir
    ref = f"{repo / 'vector_add.py'}::vector_add"
    with pytest.raises(LoopError, match="several loops for vector_add") as e:
        find_state_dir(ref)
    assert str(first.s.worktree) in e.value.one_line() and "inside its worktree" in e.value.one_line()
    assert find_state_dir(f"{third.s.worktree / 'vector_add.py'}::vector_add") == third.s.state_dir
    assert find_state_dir(f"{first.s.worktree / 'vector_add.py'}::vector_add") == first.s.state_dir
    assert find_state_dir(cwd=first.s.worktree / "tests") == first.s.state_dir


def test_the_same_branch_twice_is_refused(repo):
    import pytest
    from cutile_diag.loop.errors import LoopError
    run_one(repo)
    with pytest.raises(LoopError, match="on branch cutile-perf-vector_add-.* already exists") as e:
        run_one(repo)
    assert "--branch NAME" in e.value.one_line()
