"""The continuity eval's verdicts shown: a terminal table (rich), the full JSON, and a
self-contained HTML page (the week as a timeline, each criterion linked to its evidence)."""

from __future__ import annotations

import html
import json
from collections.abc import Sequence

from rich.console import Console
from rich.table import Table

from persyn.evals.checks import Verdict
from persyn.evals.runner import RunLog

__all__ = ["render_html", "render_json", "render_table"]


def render_table(verdicts: Sequence[Verdict], log: RunLog, console: Console) -> None:
    table = Table(title=f"Continuity ({log.scenario}, {log.mode} mode): SPEC §9", show_lines=False)
    table.add_column("#", justify="right")
    table.add_column("criterion")
    table.add_column("result")
    table.add_column("evidence")
    for verdict in verdicts:
        mark = "[green]pass[/green]" if verdict.passed else "[red]FAIL[/red]"
        table.add_row(str(verdict.number), verdict.criterion, mark, verdict.summary)
    console.print(table)
    passed = sum(v.passed for v in verdicts)
    console.print(
        f"{passed} of {len(verdicts)} pass; the week took {log.wall_seconds:.0f} s; "
        f"its deployment: {log.home} (`--json` shows every criterion's evidence in full)"
    )


def render_json(verdicts: Sequence[Verdict], log: RunLog) -> str:
    return json.dumps(
        {
            "scenario": log.scenario,
            "mode": log.mode,
            "home": log.home,
            "agent_id": log.agent_id,
            "wall_seconds": log.wall_seconds,
            "passed": all(v.passed for v in verdicts),
            "criteria": [v.as_json() for v in verdicts],
            "week": [h.model_dump(mode="json", exclude_none=True) for h in log.happenings],
        },
        indent=2,
        ensure_ascii=False,
    )


_STYLE = """body{font:15px/1.5 system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem}
table{border-collapse:collapse;width:100%}td,th{border-bottom:1px solid #ddd;padding:.3rem;text-align:left;
vertical-align:top}.pass{color:#070}.fail{color:#b00}li{margin:.2rem 0}code{font-size:90%}"""


def render_html(verdicts: Sequence[Verdict], log: RunLog) -> str:
    """One page, no external resources: the table, each criterion's evidence, the timeline."""
    e = html.escape
    rows = "".join(
        f'<tr><td>{v.number}</td><td><a href="#c{v.number}">{e(v.criterion)}</a></td>'
        f'<td class="{"pass" if v.passed else "fail"}">{"pass" if v.passed else "FAIL"}</td>'
        f"<td>{e(v.summary)}</td></tr>"
        for v in verdicts
    )
    details = "".join(
        f'<h3 id="c{v.number}">{v.number}. {e(v.criterion)}</h3><p>{e(v.summary)}</p><ul>'
        + "".join(f"<li>{e(line)}</li>" for line in v.evidence)
        + "</ul>"
        for v in verdicts
    )
    timeline = "".join(
        f"<li><code>day {h.day} {h.at:%a %d %b %H:%M:%S}</code> {e(h.action)}"
        + (
            f" — {e(h.who or '')} on {e(h.channel or '')}: “{e(h.text or '')}” → “{e(h.reply or '')}”"
            if h.text
            else ""
        )
        + (f" — {e(h.detail)}" if h.detail else "")
        + "</li>"
        for h in log.happenings
    )
    return (
        f"<!doctype html><html lang=en><meta charset=utf-8><title>Persyn continuity: {e(log.scenario)}</title>"
        f"<style>{_STYLE}</style><h1>Continuity eval: {e(log.scenario)}</h1>"
        f"<p>{sum(v.passed for v in verdicts)} of {len(verdicts)} criteria pass (SPEC §9); the week took "
        f"{log.wall_seconds:.0f} s of wall time.</p><table><tr><th>#</th><th>criterion</th><th>result</th>"
        f"<th>evidence</th></tr>{rows}</table><h2>Evidence</h2>{details}<h2>The week</h2><ol>{timeline}</ol></html>"
    )
