"""Long-running operations (``projects/P/locations/L/operations/O``).

Create, update and delete answer with an operation, as Google's API does. Work
that finishes within the request is recorded as an operation that is already
done and carries its result, so a client that polls ``operations/O`` (the
official SDK does) reads the same answer later.
"""

from __future__ import annotations

import uuid
from typing import Any

from mldiag.domain.names import parse_location
from mldiag.domain.resources import Operation, OperationMetadata
from mldiag.services.dependencies import Stored


def completed(services: Stored, target: str, verb: str, response: dict[str, Any] | None) -> Operation:
    """Record an operation on ``target`` (a resource name) that is already done, with ``response``."""
    location = parse_location("/".join(target.split("/")[:4]))
    now = services.now()
    operation = Operation(
        name=location.operation(f"operation-{uuid.uuid4().hex}"),
        metadata=OperationMetadata(create_time=now, end_time=now, target=target, verb=verb),
        done=True,
        response=response or {},
    )
    return services.operations.create(operation)


def get(services: Stored, name: str) -> Operation:
    return services.operations.get(name)
