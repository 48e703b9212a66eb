"""Usage metering (SPEC App. C): records, the meter and its adapters, pricing and the ledger."""

from persyn.usage.context import Attribution, bind, current, rebind
from persyn.usage.jsonl import JsonlAdapter
from persyn.usage.ledger import LedgerReport, LedgerRow, read_records, render_summary, summarize
from persyn.usage.meter import Meter, MeterAdapter
from persyn.usage.pricing import cost_usd, price_for
from persyn.usage.prometheus import PrometheusAdapter
from persyn.usage.records import UsageRecord

__all__ = [
    "Attribution",
    "JsonlAdapter",
    "LedgerReport",
    "LedgerRow",
    "Meter",
    "MeterAdapter",
    "PrometheusAdapter",
    "UsageRecord",
    "bind",
    "cost_usd",
    "current",
    "price_for",
    "read_records",
    "rebind",
    "render_summary",
    "summarize",
]
