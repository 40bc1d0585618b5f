"""README's commands say where they run: those that name the repository's own folders
(`examples.*`, `benchmarks/`, `pip install -e .`) run from the repository root and say so;
program files work from any folder."""
import os
import re
import shlex
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _readme():
    with open(os.path.join(ROOT, "README.md")) as f:
        return f.read()


def _blocks_with_context(text):
    """(the prose since the previous heading, the bash block) for every ```bash block."""
    out = []
    for m in re.finditer(r"```bash\n(.*?)```", text, re.S):
        before = text[:m.start()]
        heading = before.rfind("\n#")
        out.append((before[heading:], m.group(1)))
    return out


def test_commands_that_need_the_repository_root_say_so():
    needs_root = re.compile(r"python -m examples\.|examples\.\w+:|benchmarks/|pip install -e \"?\.")
    checked = 0
    for prose, block in _blocks_with_context(_readme()):
        if needs_root.search(block):
            checked += 1
            assert "from the repository root" in prose, block
    assert checked >= 4   # the demo, the tests, the benchmarks, the command line


def _eagerc_only(tmp_path):
    """A PYTHONPATH that has eagerc but not the repository's other folders, as after an install."""
    site = tmp_path / "site"
    site.mkdir()
    os.symlink(os.path.join(ROOT, "eagerc"), site / "eagerc")
    return dict(os.environ, PYTHONPATH=str(site))


def test_the_readme_viz_of_an_example_runs_from_the_root_only(tmp_path):
    line = next(ln for ln in _readme().splitlines() if ln.startswith("eagerc viz examples."))
    args = shlex.split(line.split("#")[0])[1:]
    args[args.index("-o") + 1] = str(tmp_path / "digits.dot")        # keep the checkout clean
    args = [a for a in args if a != "--profile"]                     # where it runs is the point, not timings
    env = _eagerc_only(tmp_path)
    run = [sys.executable, "-m", "eagerc", *args]
    r = subprocess.run(run, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "digits.dot").read_text().startswith("digraph")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    r = subprocess.run(run, cwd=elsewhere, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "No module named 'examples'" in r.stderr
