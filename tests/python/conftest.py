"""Where the build tree's examples are (CTest sets PTO_BUILD_DIR), and a real
ptod for the client's tests."""
import os
import pathlib
import signal
import subprocess
import time

import pytest

BUILD = pathlib.Path(os.environ.get("PTO_BUILD_DIR", pathlib.Path(__file__).resolve().parents[2] / "build"))


@pytest.fixture
def example():
    def path(name: str) -> str:
        p = BUILD / "examples" / name / "kernels.toml"
        assert p.exists(), f"{p} is missing: build the project first"
        return str(p)

    return path


@pytest.fixture
def native_subs():
    p = BUILD / "tests" / "worker" / "libpto_test_native_subs.so"
    assert p.exists(), f"{p} is missing: build the project first"
    return str(p)


class Ptod:
    def __init__(self, tmp, *extra, metrics="off"):
        self.dir = tmp
        self.socket = f"{tmp}/ptod.sock"
        ready = f"{tmp}/ready"
        self.log = open(f"{tmp}/ptod.log", "w")
        self.proc = subprocess.Popen([str(BUILD / "daemon" / "ptod"), "--state-dir", f"{tmp}/state", "--socket",
                                      self.socket, "--metrics", metrics, "--ready-file", ready, *extra],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while not os.path.exists(ready):
            assert self.proc.poll() is None, open(f"{tmp}/ptod.log").read()
            assert time.monotonic() < deadline, "ptod did not start"
            time.sleep(0.01)
        self.address = f"unix:{self.socket}"
        # The ready file's key=value lines (written whole: renamed into place),
        # metrics_port among them when metrics are on.
        info = dict(line.split("=", 1) for line in open(ready).read().splitlines() if "=" in line)
        self.metrics_port = int(info.get("metrics_port", 0))

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=60)
