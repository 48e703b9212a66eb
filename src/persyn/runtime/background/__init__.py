"""What runs besides turns (SPEC §4.3–§4.10): autonomy (reminders, heartbeat), outreach and its budgets, conversation jobs, housekeeping, guardrails."""
