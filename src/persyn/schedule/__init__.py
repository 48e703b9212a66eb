"""The schedule (SPEC §4.7, §4.8): reminders, the heartbeat's row, goals.

The row types live with the storage port (`persyn.store.base`), which keeps them as data;
this package adds the trigger math (`triggers`), the operations built on it (`reminders`)
and the heartbeat's bootstrap, deletion and restoration (`heartbeat`).
"""

from __future__ import annotations

from persyn.schedule.heartbeat import (
    bootstrap_heartbeat,
    delete_heartbeat,
    heartbeat_id,
    heartbeat_status,
    restore_heartbeat,
)
from persyn.schedule.reminders import (
    HEARTBEAT_KIND,
    REMINDER_KIND,
    close_goal,
    create_goal,
    drop_recurrence,
    edit_reminder,
    fire_key,
    mark_fired,
    open_goals,
    reschedule_reminder,
    set_reminder,
)
from persyn.schedule.triggers import (
    at_trigger,
    cron_trigger,
    describe_trigger,
    first_fire_at,
    interval_trigger,
    is_recurring,
    next_fire_after,
)
from persyn.store.base import (
    AtTrigger,
    CronTrigger,
    FireResult,
    Goal,
    GoalStatus,
    IntervalTrigger,
    Reminder,
    ReminderAction,
    ReminderStatus,
    Trigger,
)

__all__ = [
    "HEARTBEAT_KIND",
    "REMINDER_KIND",
    "AtTrigger",
    "CronTrigger",
    "FireResult",
    "Goal",
    "GoalStatus",
    "IntervalTrigger",
    "Reminder",
    "ReminderAction",
    "ReminderStatus",
    "Trigger",
    "at_trigger",
    "bootstrap_heartbeat",
    "close_goal",
    "create_goal",
    "cron_trigger",
    "delete_heartbeat",
    "describe_trigger",
    "drop_recurrence",
    "edit_reminder",
    "fire_key",
    "first_fire_at",
    "heartbeat_id",
    "heartbeat_status",
    "interval_trigger",
    "is_recurring",
    "mark_fired",
    "next_fire_after",
    "open_goals",
    "reschedule_reminder",
    "restore_heartbeat",
    "set_reminder",
]
