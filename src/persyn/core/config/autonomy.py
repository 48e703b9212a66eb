"""`[autonomy]`: what the agent does without being spoken to (the heartbeat, reminders) and its budgets.

Every key's `Field(description=...)` is its documentation (`core/config/template.py` writes the
starter file and the README's reference from it).
"""

from __future__ import annotations

from pydantic import Field

from persyn.core.section import Section

__all__ = ["AutonomyConfig"]


class AutonomyConfig(Section):
    """What the agent does without being spoken to (SPEC §4.7): the heartbeat, reminders, and
    the budgets that keep self-initiated activity from burning tokens unbounded."""

    heartbeat_minutes: float = Field(
        default=60.0,
        ge=1,
        description=(
            "The heartbeat's interval: each beat the agent reviews its recent memories and goals, then acts "
            "or rests. `persyn heartbeat delete` puts it to sleep (durably); `restore` wakes it."
        ),
    )
    tick_seconds: int = Field(
        default=60,
        ge=0,
        le=60,
        description=(
            "The safety tick: how often a DBOS schedule looks for due reminders the timer missed (every "
            "process may; each firing happens once). 0 = none: the timer alone."
        ),
    )
    watch_seconds: float = Field(
        default=5.0,
        ge=0,
        le=60,
        description=(
            "The reminder timer sleeps until the next due reminder and re-reads the earliest due time from "
            "the store this often (one small query), so a reminder set or changed by another process fires "
            "on time if set this much ahead, and at most this late otherwise. 0 = no timer: the safety tick "
            "alone."
        ),
    )
    schedule: bool = Field(
        default=True, description="Fire reminders in this process; false leaves it to another one."
    )
    daily_token_budget: int = Field(
        default=200_000,
        ge=0,
        description=(
            "Tokens (input + output) an agent's self-initiated runs may use in any rolling 24 hours; past it "
            "runs are skipped, and recorded, until the window moves on. 0 = no autonomous runs."
        ),
    )
    tokens_per_audio_second: int = Field(
        default=10,
        ge=0,
        le=10_000,
        description=(
            "What a second of audio a self-initiated run has transcribed counts against daily_token_budget "
            "(a hosted speech model bills about 10 tokens per second of audio). A voice note that would take "
            "the run past the budget is refused before the call. 0 = audio is free."
        ),
    )
    max_runs_per_hour: int = Field(
        default=12,
        ge=0,
        description="Self-initiated runs per agent per hour (a loop breaker); the excess is skipped and recorded.",
    )
    review_records: int = Field(
        default=20, ge=1, le=200, description="How many recent memories the heartbeat reviews."
    )
    max_messages_per_run: int = Field(
        default=2,
        ge=0,
        le=20,
        description="Messages the agent may send to contacts in one self-initiated run.",
    )
    channel_message_tokens: int = Field(
        default=2000,
        ge=0,
        description=(
            "Tokens (estimated, 4 characters a token) the agent may initiate per channel in a rolling 24 hours "
            "with its message tool; beyond it sending is refused, saying why."
        ),
    )
    # SPEC §4.5: what stops two agents talking forever.
    channel_reply_tokens: int = Field(
        default=100_000,
        ge=1,
        description=(
            "Tokens (estimated likewise) of replies per channel in a rolling 24 hours; past it the channel "
            "gets no generated reply until the window moves on. A person chatting all day stays far below."
        ),
    )
    run_keep_days: float = Field(
        default=30.0,
        ge=1,
        description=(
            "How long each run's budget state, provenance and sent messages, what caused each "
            "self-initiated conversation, and the channels' sent and replied ledgers are kept; "
            "the housekeeping purges older ones daily. At least 1: the channel budgets' window "
            "is 24 hours."
        ),
    )
