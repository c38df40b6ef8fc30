"""The fleet record: one row per finished analysis, the same in every store that holds it.

A :class:`FleetRecord` is what the fleet view queries: who (run, session, labels),
on what (hardware, hosts, devices, framework), how fast (the step time's
distribution, MFU where known), where the loop's time went (the attribution by
cause) and what the analysis said (P0/P1 findings with the time they cost).
It is published as a flat JSON object on ``analysis-events``, so a Pub/Sub
BigQuery subscription writes it as one table row with no code in between, and
``mldiag up`` keeps the same table in SQLite.

Field names are the column names. The table's schema is derived from this model
(:func:`bigquery_schema`), so the published message, the BigQuery table and the
local table cannot drift apart; a change to a field's meaning raises
:data:`SCHEMA_VERSION`.
"""

from __future__ import annotations

import types
import typing
from datetime import datetime
from typing import Any, Union

from pydantic import BaseModel, ConfigDict

from mldiag.domain.clock import format_timestamp

SCHEMA_VERSION = 1
# The CloudEvents type of the published record (binary mode: the record is the message data).
FLEET_RECORD_TYPE = "dev.mldiag.analysis.v1.record"
TABLE = "fleet_records"


class _Row(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CauseTime(_Row):
    """The loop time one cause took, summed over the session's hosts."""

    cause: str  # a TimeCause value: device_compute, collectives, transfers, compilation, dispatch, host_work, ...
    ms: float  # wall time over the captured loop, summed over hosts
    share: float  # of the hosts' loop time together
    device_ms: float  # ms times each host's accelerator count: accelerator time
    useful: bool  # the devices doing the model's work; every other cause is time lost


class FindingCost(_Row):
    """A P0 or P1 finding and the loop time of the causes its category names (None where it names none)."""

    priority: str
    category: str
    title: str
    cost_ms: float | None = None
    cost_share: float | None = None


class Label(_Row):
    key: str
    value: str


class FleetRecord(_Row):
    """One finished analysis of one session's files; ``record_id`` is the session and its generation set."""

    record_id: str
    schema_version: int = SCHEMA_VERSION
    analyzed_at: datetime
    run: str
    run_display_name: str = ""
    session: str
    generation_set: str
    session_created_at: datetime | None = None
    capture_kind: str  # programmatic, on_demand, snapshot, scanned, automatic (captured on an alert), unspecified
    status: str  # OPTIMAL or NEEDS_ATTENTION
    top_finding: str = ""
    host_count: int
    device_count: int
    device_kind: str = ""  # cpu, gpu, tpu
    hardware: str = ""  # the chip, as the device trace or the datasheet names it
    framework: str = ""
    steps: int = 0
    step_time_ms: float | None = None  # the report's step time
    step_time_mean_ms: float | None = None  # the distribution of the slowest host (the one the others wait for)
    step_time_median_ms: float | None = None
    step_time_p90_ms: float | None = None
    step_time_min_ms: float | None = None  # over every host
    step_time_max_ms: float | None = None
    mfu: float | None = None
    busy_fraction: float | None = None
    loop_ms: float = 0.0  # the attributed loop time, summed over hosts
    loop_device_ms: float = 0.0  # the same in accelerator time
    lost_ms: float = 0.0  # of loop_ms, everything but the devices doing the model's work
    lost_device_ms: float = 0.0
    lost_share: float | None = None  # lost_device_ms / loop_device_ms
    attribution: list[CauseTime] = []
    findings: list[FindingCost] = []
    labels: list[Label] = []

    def row(self) -> dict[str, Any]:
        """The record as the published message carries it and the tables store it (timestamps as RFC 3339)."""
        return self.model_dump(mode="json") | {
            "analyzed_at": format_timestamp(self.analyzed_at),
            "session_created_at": format_timestamp(self.session_created_at) if self.session_created_at else None,
        }


_SCALARS: dict[type, str] = {str: "STRING", int: "INT64", float: "FLOAT64", bool: "BOOL", datetime: "TIMESTAMP"}


def _field_schema(name: str, annotation: Any, required: bool) -> dict[str, Any]:
    # Only fields without a default are REQUIRED: BigQuery adds a column to a table only as NULLABLE.
    mode = "REQUIRED" if required else "NULLABLE"
    if typing.get_origin(annotation) in (Union, types.UnionType):
        (annotation,) = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
    if typing.get_origin(annotation) is list:
        (item,) = typing.get_args(annotation)
        return {"name": name, "type": "RECORD", "mode": "REPEATED", "fields": _model_schema(item)}
    return {"name": name, "type": _SCALARS[annotation], "mode": mode}


def _model_schema(model: type[BaseModel]) -> list[dict[str, Any]]:
    hints = typing.get_type_hints(model)
    return [_field_schema(name, hints[name], field.is_required()) for name, field in model.model_fields.items()]


def bigquery_schema() -> list[dict[str, Any]]:
    """The table's schema in BigQuery's JSON form (``bq mk --schema``, Terraform's ``schema``)."""
    return _model_schema(FleetRecord)
