"""The storage contract (ARCHITECTURE §4): what every backend of the `Store` port must do,
as pytest test classes a backend runs against itself. Persyn's SQLite and PostgreSQL stores
pass it from tests/contract/; a third backend proves itself the same way:

    import functools, pytest
    from persyn.testing.store_contract import StoreContract, StoreFactory

    class TestMyStore(StoreContract):
        @pytest.fixture
        def store_factory(self, tmp_path) -> StoreFactory:
            return functools.partial(MyStore, tmp_path / "my.db")  # a new connection per call

`StoreContract` is every group at once; each group is also a class of its own
(`MemoryContract`, `GraphContract`, ...) to run alone. A group whose port is an optional
capability skips on a store without it (`GROUP_PORTS` in `base.py` is the table). The suite
needs pytest, pytest-asyncio (`asyncio_mode = "auto"`) and hypothesis, Persyn's dev dependencies
(`_needs.py` names one that is missing); nothing in production imports this package.
"""

from persyn.testing.store_contract import _needs  # noqa: F401  (first: the install hint)
from persyn.testing.store_contract.activity import ActivityContract
from persyn.testing.store_contract.artifacts import ArtifactsContract
from persyn.testing.store_contract.base import GROUP_PORTS, Contract, StoreFactory
from persyn.testing.store_contract.core import CoreContract
from persyn.testing.store_contract.dialog import DialogContract
from persyn.testing.store_contract.directory import DirectoryContract
from persyn.testing.store_contract.graph import GraphContract
from persyn.testing.store_contract.guardrail_slots import GuardrailSlotsContract
from persyn.testing.store_contract.guardrails import GuardrailsContract
from persyn.testing.store_contract.jobs import JobsContract
from persyn.testing.store_contract.leases import LeasesContract
from persyn.testing.store_contract.memory import MemoryContract
from persyn.testing.store_contract.model_calls import ModelCallsContract
from persyn.testing.store_contract.outbox import OutboxContract
from persyn.testing.store_contract.people import PeopleContract
from persyn.testing.store_contract.recall import RecallContract
from persyn.testing.store_contract.runs import RunsContract
from persyn.testing.store_contract.schedule import ScheduleContract
from persyn.testing.store_contract.web_keys import WebKeysContract

__all__ = [
    "CONTRACT_GROUPS",
    "GROUP_PORTS",
    "ActivityContract",
    "ArtifactsContract",
    "Contract",
    "CoreContract",
    "DialogContract",
    "DirectoryContract",
    "GraphContract",
    "GuardrailSlotsContract",
    "GuardrailsContract",
    "JobsContract",
    "LeasesContract",
    "MemoryContract",
    "ModelCallsContract",
    "OutboxContract",
    "PeopleContract",
    "RecallContract",
    "RunsContract",
    "ScheduleContract",
    "StoreContract",
    "StoreFactory",
    "WebKeysContract",
]


class StoreContract(
    CoreContract,
    DialogContract,
    MemoryContract,
    RecallContract,
    GraphContract,
    PeopleContract,
    DirectoryContract,
    ActivityContract,
    RunsContract,
    JobsContract,
    ScheduleContract,
    GuardrailsContract,
    GuardrailSlotsContract,
    LeasesContract,
    OutboxContract,
    ModelCallsContract,
    ArtifactsContract,
    WebKeysContract,
):
    """The whole contract: every group's tests in one class (no two groups share a test name)."""


CONTRACT_GROUPS: tuple[type[Contract], ...] = StoreContract.__bases__
"""Every contract group, one class each: the bases of `StoreContract`."""
