"""The Python examples (examples/python/) run and pass, as a user runs them."""
import os
import subprocess
import sys

import pytest

from conftest import BUILD, Ptod

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "python")


def run(script, env=None):
    out = subprocess.run([sys.executable, os.path.join(EXAMPLES, script), str(BUILD)], capture_output=True,
                         text=True, timeout=120, env={**os.environ, **(env or {})})
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def test_vector_on_one_chip():
    assert "f: PASS (16384/16384 elements matched)" in run("vector_chip.py")


def test_paged_attention_through_a_worker_checked_by_a_python_sub_callable():
    assert "out: PASS (256/256 elements matched)" in run("paged_attention_worker.py")


def test_a_client_script_against_ptod(tmp_path):
    d = Ptod(str(tmp_path))
    try:
        out = run("ptod_client.py", {"PTOD_ADDRESS": d.address})
        assert "SUCCEEDED" in out and "f: PASS" in out
    finally:
        assert d.stop() == 0
