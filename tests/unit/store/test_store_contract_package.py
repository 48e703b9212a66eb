"""The storage contract ships in the library (`persyn.testing.store_contract`) so a backend
outside this repository proves itself with it: a third party's test file, run by pytest in a
process of its own, subclasses contract groups with a factory of its store; a store without an
optional capability skips that capability's group, naming it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import persyn.testing.store_contract as contract_package
from persyn.testing.store_contract import (
    CONTRACT_GROUPS,
    GROUP_PORTS,
    GraphContract,
    LeasesContract,
    StoreContract,
)

THIRD_PARTY_TESTS = """
import functools
from pathlib import Path

import pytest

from persyn.store.base import Store
from persyn.store.sqlite.store import SQLiteStore
from persyn.testing.core_store import core_only_store
from persyn.testing.store_contract import GraphContract, LeasesContract, StoreFactory


def open_whole(path: Path) -> Store:
    return SQLiteStore(path)


def open_core_only(path: Path) -> Store:
    return core_only_store(SQLiteStore(path))  # the required core, no capability


class TestWholeStore(LeasesContract, GraphContract):
    @pytest.fixture
    def store_factory(self, tmp_path: Path) -> StoreFactory:
        return functools.partial(open_whole, tmp_path / "whole.db")


class TestCoreOnlyStore(GraphContract):
    @pytest.fixture
    def store_factory(self, tmp_path: Path) -> StoreFactory:
        return functools.partial(open_core_only, tmp_path / "core.db")
"""


def _tests(contract: type) -> set[str]:
    return {name for name in dir(contract) if name.startswith("test_")}


def test_a_third_party_runs_contract_groups_on_its_store_and_lacking_a_capability_skips_its_group(
    tmp_path: Path,
) -> None:
    (tmp_path / "test_my_store.py").write_text(THIRD_PARTY_TESTS, encoding="utf-8")
    ran = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-rs",
            "-p",
            "no:cacheprovider",
            "-o",
            "asyncio_mode=auto",
            "--rootdir",
            str(tmp_path),
            str(tmp_path / "test_my_store.py"),
        ],
        cwd=tmp_path,
        env=os.environ.copy(),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    graph, leases = _tests(GraphContract), _tests(LeasesContract)
    needing_the_graph = len(graph) - 1  # all but the one on entity keys, which needs no store
    passed = len(leases) + len(graph) + 1
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert f"{passed} passed, {needing_the_graph} skipped" in ran.stdout, ran.stdout
    skips = [line for line in ran.stdout.splitlines() if line.startswith("SKIPPED")]
    assert len(skips) == needing_the_graph, skips  # one line per skipped test, at the test
    assert all("store_contract/graph.py" in line for line in skips), skips
    assert all(line.endswith("this store offers no contact directory, knowledge graph") for line in skips), (
        skips
    )


def test_a_missing_test_dependency_is_named_with_the_install_hint() -> None:
    blocked = "import sys; sys.modules['hypothesis'] = None; import persyn.testing.store_contract"
    ran = subprocess.run(
        [sys.executable, "-c", blocked], env=os.environ.copy(), capture_output=True, text=True, check=False
    )
    assert ran.returncode != 0
    assert (
        "needs the test dependency 'hypothesis': pip install pytest pytest-asyncio hypothesis" in ran.stderr
    )


def test_every_group_is_in_the_table_and_in_the_whole_contract_once() -> None:
    package = Path(contract_package.__file__).parent
    modules = {path.stem for path in package.glob("*.py")} - {"__init__", "_needs", "base"}
    assert set(GROUP_PORTS) == modules
    assert {group.__module__.rsplit(".", 1)[-1] for group in CONTRACT_GROUPS} == modules
    assert set(StoreContract.__mro__) >= set(CONTRACT_GROUPS)
    # No two groups share a test name, or the whole contract would run only one of them.
    names = [name for group in CONTRACT_GROUPS for name in vars(group) if name.startswith("test_")]
    assert len(names) == len(set(names)) == len(_tests(StoreContract))
