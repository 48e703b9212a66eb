"""Re-binding DBOS's configured instance when a process builds a second runtime.

DBOS keeps configured instances in a process-wide registry by class and instance name and
refuses a second instance under a name already taken. Persyn's workflows run on one instance
whose name is fixed (`dispatch.WORKFLOWS_INSTANCE`: recovery in any process must find it by
that name), and a process may build several runtimes one after the other (tests, `persyn
import` then `persyn run`). DBOS 3.4 has no public way to unregister, so the previous
runtime's entry is dropped here, in one place (with the registry's link to the destroyed DBOS); `tests/unit/runtime/test_durable_steps.py`
notices when DBOS's registry changes shape.
"""

from __future__ import annotations

from dbos import _dbos as dbos_internals

__all__ = ["release_instance"]


def release_instance(class_name: str, instance_name: str) -> None:
    """Forget the instance registered as `class_name/instance_name`, if any."""
    registry = dbos_internals._get_or_create_dbos_registry()  # pyright: ignore[reportPrivateUsage]
    registry.instance_info_map.pop(f"{class_name}/{instance_name}", None)
    if dbos_internals._dbos_global_instance is None:  # pyright: ignore[reportPrivateUsage]
        # The registry still points at a destroyed DBOS, which stays marked launched: it
        # would warn that this instance came after a launch when no DBOS runs at all.
        registry.dbos = None
