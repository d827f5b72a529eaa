"""Where the build tree's examples are (CTest sets PTO_BUILD_DIR)."""
import os
import pathlib

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
