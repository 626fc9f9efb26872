"""The README's quick start and .ci/run must stay the same commands."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _commands(text):
    return [c.strip() for line in text.splitlines() if line.startswith("python3 ")
            for c in line.split("&&")]


def test_ci_runs_the_readme_quick_start():
    readme = (ROOT / "README.md").read_text()
    quick = re.search(r"## Quick start.*?```bash\n(.*?)```", readme, re.S).group(1)
    expected = _commands(quick)
    assert expected == ['python3 -m pip install torch==2.13.0', 'python3 -m pip install -e ".[test,tools]"',
                        "python3 -m fused demo", 'python3 -m pytest -q -n 2 --dist loadfile tests -m "not slow"']
    ci = (ROOT / ".ci" / "run").read_text().replace("pip install -q ", "pip install ")
    # the README's commands first, in order; then the CPU tests under other ISA levels and the slow tests
    assert _commands(ci) == expected + ["python3 -m pytest -q -n 2 --dist loadfile tests -m slow"]
    assert "ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2" in ci and "ATEN_CPU_CAPABILITY=default" in ci
    assert "PYTHONPATH=tests/hide_triton" in ci
    # beside them CI side-installs triton 3.6 for tests/test_triton36_compile.py, as the README says
    assert "--target /tmp/fused_triton36 triton==3.6.0" in ci and "FUSED_TRITON36" in readme
