"""Reasoning-pipeline tracing (SPEC App. D): one trace per activation, on OpenTelemetry.

`Tracing` is the process's tracer (`tracer.py`); spans leave through bounded, counted export
queues (`export.py`) to the local JSONL span store (`local.py`, read by `persyn traces`)
and/or an OTLP/HTTP collector.
"""

from persyn.tracing.base import ATTR, ContentPolicy, SpanKind, SpanRecord, TraceSummary
from persyn.tracing.export import BoundedExport, ExportCounts, LossReport, read_losses
from persyn.tracing.local import read_spans, summarize, trace_spans
from persyn.tracing.tracer import ModelCallSpan, ToolCallSpan, Tracing, TurnSpan, trace_id_of

__all__ = [
    "ATTR",
    "BoundedExport",
    "ContentPolicy",
    "ExportCounts",
    "LossReport",
    "ModelCallSpan",
    "SpanKind",
    "SpanRecord",
    "ToolCallSpan",
    "TraceSummary",
    "Tracing",
    "TurnSpan",
    "read_losses",
    "read_spans",
    "summarize",
    "trace_id_of",
    "trace_spans",
]
