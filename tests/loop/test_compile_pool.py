"""The compile children and the measurement workers see a version's files at the worktree's
paths without writing them there (``source.overrides.install``): imports and cuTile's
source reading (``inspect``/``linecache``) get the version's text."""
import subprocess
import sys
import textwrap


def test_overrides_replace_a_module_text_for_import_and_inspect(tmp_path):
    mod = tmp_path / "kern.py"
    mod.write_text("def f():\n    return 'disk'\n")
    subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, {str(tmp_path)!r}); import kern"],
                   check=True)          # leaves a .pyc of the disk text behind: it must not be used
    code = textwrap.dedent(f"""
        import inspect, sys
        from cutile_diag.source.overrides import install as install_overrides
        install_overrides({{{str(mod)!r}: "def f():\\n    return 'override'\\n"}})
        sys.path.insert(0, {str(tmp_path)!r})
        import kern
        print(kern.f(), kern.__file__ == {str(mod)!r}, 'override' in inspect.getsource(kern.f))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["override", "True", "True"]
    assert "disk" in mod.read_text()            # the file itself is never written


def test_the_overrides_say_which_files_an_import_read(tmp_path):
    """A worker that imported the kernel from somewhere else (not the overridden path) is not
    taken for the version's worker: the reply lists the overridden files really read."""
    (tmp_path / "a.py").write_text("X = 1\n")
    (tmp_path / "b.py").write_text("Y = 1\n")
    code = textwrap.dedent(f"""
        import sys
        from cutile_diag.source.overrides import install as install_overrides
        read = install_overrides({{{str(tmp_path / 'a.py')!r}: "X = 2\\n", {str(tmp_path / 'b.py')!r}: "Y = 2\\n"}})
        sys.path.insert(0, {str(tmp_path)!r})
        import a
        print(a.X, sorted(read))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == f"2 {[str((tmp_path / 'a.py').resolve())]}"
