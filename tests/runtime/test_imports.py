"""The runtime consumes a Plan: it never imports the parser or the compiler (DESIGN: one direction)."""

import subprocess
import sys


def test_runtime_imports_neither_spec_nor_compiler():
    code = (
        "import sys, rlgraph.runtime.loop\n"
        "bad = sorted(m for m in sys.modules if m.startswith(('rlgraph.spec', 'rlgraph.compiler')))\n"
        "assert not bad, bad\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_importing_the_error_classes_is_cheap():
    code = "import sys, rlgraph.runtime\nassert not {'torch', 'ray'} & set(sys.modules), sorted(sys.modules)\n"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
