"""`[dispatch]`: the durable queues, their workers, the channel leases and the outbox.

Every key's `Field(description=...)` is its documentation (`core/config/template.py` writes the
starter file and the README's reference from it).
"""

from __future__ import annotations

from pydantic import Field

from persyn.core.section import Section

__all__ = ["DispatchConfig"]


class DispatchConfig(Section):
    """The durable queues (DBOS), their workers and the outbox."""

    # Each look is a claim query (~2 ms CPU), idle or not; an enqueue in this process wakes
    # its worker at once (runtime/durable/_wake.py).
    queue_polling_seconds: float = Field(
        default=0.25,
        gt=0,
        le=10,
        description="How often a worker looks for events other processes enqueued (`persyn send`, other workers).",
    )
    # Idle, the claims were most of 3.7% of a core (bench/idle.py); in-process enqueues wake the
    # worker at once whatever this is.
    quiet_polling_seconds: float = Field(
        default=3.0,
        ge=0,
        le=60,
        description=(
            "After 10 s with nothing enqueued or run in this process, a worker looks for events other processes "
            "enqueued this often instead (0 = always `queue_polling_seconds`)."
        ),
    )
    marker_ttl_seconds: float = Field(
        default=3600.0, gt=0, description="How long completion markers are kept."
    )
    worker_concurrency: int = Field(
        default=16, ge=1, le=1000, description="Activations one worker process runs at once (one per agent)."
    )
    executor_id: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        description=(
            "DBOS executor id; unset = a slot of its own per process (<role>-<n>@<host>). If set, give each "
            "worker sharing one database its own."
        ),
        examples=["worker-1"],
    )
    dead_executor_seconds: float = Field(
        default=5.0,
        gt=0,
        le=3600,
        description=(
            "How often a worker looks for workers that died mid-turn (kill -9, a lost host) and takes over "
            "their unfinished turns."
        ),
    )
    channel_lease_seconds: float = Field(
        default=30.0,
        ge=1,
        le=3600,
        description=(
            "A chat network (IRC, Telegram, Matrix, the agent link) is connected by one process of the "
            "deployment, which renews its lease in the store every third of this; if that process dies, "
            "another `persyn run` connects it within this and a third. Hosts sharing a store keep their "
            "clocks well within it of each other."
        ),
    )
    housekeeping_seconds: float = Field(
        default=60.0,
        gt=0,
        description="How often the scheduler closes idle conversations, sweeps consolidation and purges markers.",
    )
    outbox_poll_seconds: float = Field(
        default=1.0,
        gt=0,
        le=60,
        description=(
            "How soon a message another process sent shows in a connected channel, and a web key "
            "revoked by another process ends its open streams."
        ),
    )
    outbox_keep_days: float = Field(
        default=30.0, gt=0, description="Messages for a channel never connected are dropped after this."
    )
    debug_transmit_delay_seconds: float = Field(
        default=0.0,
        ge=0,
        description="Crash-recovery drills: sleep this long between respond and transmit, to kill the process there.",
    )
