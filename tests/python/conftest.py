"""Shared fixtures of the Python module's tests (run by ctest as python_test: see python/CMakeLists.txt)."""
import os
import pathlib
import subprocess

import pytest

SOURCE_DIR = pathlib.Path(os.environ.get("DTENSOR_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2]))


def _cli_path():
    cli = os.environ.get("DTENSOR_CLI")
    if cli:
        return pathlib.Path(cli)
    return SOURCE_DIR / "build" / "dtensor"


@pytest.fixture(scope="session")
def source_dir():
    return SOURCE_DIR


@pytest.fixture(scope="session")
def cli():
    """Runs the dtensor CLI; returns its stdout (fails the test on a non-zero exit)."""
    path = _cli_path()
    if not path.exists():
        pytest.fail(f"the dtensor CLI is not built at {path} (ctest sets DTENSOR_CLI)")

    def run(*args, check=True):
        p = subprocess.run([str(path), *map(str, args)], capture_output=True, text=True)
        if check and p.returncode != 0:
            raise AssertionError(f"dtensor {' '.join(map(str, args))} exited {p.returncode}: {p.stderr}")
        return p.stdout

    return run
