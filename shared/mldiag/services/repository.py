"""Typed access to stored resources: keys, etags, timestamps, transitions, pagination.

Every resource lives in the collection named after its type, keyed by its full
resource name (``/`` replaced, since document ids cannot contain it), with its
parent's name kept in ``_parent`` for listing children. Changes are made
within a transaction (:class:`InTransaction`, handed out by
:mod:`mldiag.services.unit_of_work`): reads first, then the writes, which check
the caller's etag and the resource's own transition rules before anything is
written.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, TypeVar

from pydantic_core import from_json, to_json

from mldiag.domain.errors import Aborted, AlreadyExists, InvalidArgument, NotFound
from mldiag.domain.names import parent_of
from mldiag.domain.resources import Resource
from mldiag.domain.clock import utcnow
from mldiag.ports import Document, DocumentStore, EncodedDocument, OrderBy, Transaction, Where

R = TypeVar("R", bound=Resource)
T = TypeVar("T")

PARENT_FIELD = "_parent"
MAX_PAGE_SIZE = 1000
DEFAULT_PAGE_SIZE = 100


def document_key(name: str) -> str:
    if not name:
        raise InvalidArgument("resource has no name", field="name")
    return name.replace("/", ":")


def encode(resource: Resource) -> EncodedDocument:
    """The resource's document, encoded once by its model: its etag the hash of that encoding without the etag (in
    the model's field order: the same content, the same etag), its parent's name in ``_parent``."""
    return _with_etag(resource.model_dump_json(by_alias=True, exclude_none=True, exclude={"etag"}), resource.name)


def encode_document(document: Document) -> EncodedDocument:
    """A resource's document changed as a document, its model not loaded, encoded as :func:`encode` encodes the
    resource: its fields in the model's order give the same text and etag."""
    fields = dict(document)
    fields.pop("etag", None)
    fields.pop(PARENT_FIELD, None)
    return _with_etag(to_json(fields).decode(), document["name"])


def _with_etag(body: str, name: str) -> EncodedDocument:
    etag = hashlib.sha256(body.encode()).hexdigest()[:20]
    fields = f'"etag":"{etag}","{PARENT_FIELD}":{to_json(parent_of(name)).decode()}'
    text = f"{body[:-1]},{fields}}}" if body != "{}" else f"{{{fields}}}"
    return EncodedDocument(text)


@dataclass(frozen=True)
class Page(Generic[R]):
    items: list[R]
    next_page_token: str = ""


def _encode_token(offset: int) -> str:
    return base64.urlsafe_b64encode(json.dumps({"offset": offset}).encode()).decode()


def _decode_token(token: str) -> int:
    if not token:
        return 0
    try:
        offset = json.loads(base64.urlsafe_b64decode(token.encode()))["offset"]
    except (ValueError, KeyError, TypeError):
        raise InvalidArgument("malformed page token", field="pageToken") from None
    if not isinstance(offset, int) or offset < 0:
        raise InvalidArgument("malformed page token", field="pageToken")
    return offset


class Repository(Generic[R]):
    """CRUD for one resource type over any :class:`mldiag.ports.DocumentStore`."""

    def __init__(self, store: DocumentStore, model: type[R], now: Callable[[], datetime] = utcnow):
        self.store = store
        self.model = model
        self.collection = model.collection
        self._now = now

    def load(self, document: Mapping[str, Any]) -> R:
        """The resource a stored document holds."""
        return self.model.model_validate({k: v for k, v in document.items() if not k.startswith("_")})

    def find(self, name: str) -> R | None:
        document = self.store.get(self.collection, document_key(name))
        return None if document is None else self.load(document)

    def get(self, name: str) -> R:
        resource = self.find(name)
        if resource is None:
            raise NotFound(f"{name} not found")
        return resource

    def _stamp_new(self, resource: R) -> R:
        now = self._now()
        return resource.model_copy(update={"create_time": now, "update_time": now})  # only dumped, never changed

    def create(self, resource: R) -> R:
        """Store a new resource; :class:`AlreadyExists` if the name is taken."""
        stamped = self._stamp_new(resource)
        document = encode(stamped)
        try:
            self.store.create(self.collection, document_key(stamped.name), document)
        except AlreadyExists:
            raise AlreadyExists(f"{resource.name} already exists") from None
        return self.load(from_json(document.text))

    def create_in(self, transaction: Transaction, resource: R) -> R:
        """Stage a create inside a caller's transaction (after its reads)."""
        document = encode(self._stamp_new(resource))
        transaction.create(self.collection, document_key(resource.name), document)
        return self.load(from_json(document.text))

    def find_in(self, transaction: Transaction, name: str) -> R | None:
        document = transaction.get(self.collection, document_key(name))
        return None if document is None else self.load(document)

    def stage_document_in(self, transaction: Transaction, document: Document, *, new: bool = False) -> None:
        """Stage the write of a resource's document that a caller made or changed as a document (its fields kept in
        the model's order), with its etag for its content; a ``new`` one is created (:class:`AlreadyExists` at the
        commit if the name is taken). No transition is checked: the caller's change is one its resource allows."""
        encoded = encode_document(document)
        if new:
            transaction.create(self.collection, document_key(document["name"]), encoded)
        else:
            transaction.set(self.collection, document_key(document["name"]), encoded)

    def save_in(self, transaction: Transaction, previous: R | None, resource: R) -> R:
        """Stage an update of ``previous`` to ``resource`` (transition-checked) in a caller's transaction;
        returns the resource as it will be stored."""
        return self.load(from_json(self.stage_save_in(transaction, previous, resource).text))

    def stage_save_in(self, transaction: Transaction, previous: R | None, resource: R) -> EncodedDocument:
        """:meth:`save_in` for a caller that needs no resource back: returns the document staged."""
        if previous is None:
            document = encode(self._stamp_new(resource))
            transaction.create(self.collection, document_key(resource.name), document)
            return document
        resource.check_transition(previous)
        resource.create_time = previous.create_time
        resource.update_time = self._now()
        document = encode(resource)
        transaction.set(self.collection, document_key(resource.name), document)
        return document

    def mutate_in(self, transaction: Transaction, name: str, change: Callable[[R], T], *,
                  new: Callable[[], R] | None = None) -> tuple[R, T]:
        """Read ``name`` in a caller's transaction, apply ``change`` to a copy and stage its save.

        Without a stored resource, ``new()`` makes one to change (:class:`NotFound` without ``new``).
        ``change`` may read more in the transaction (reads come before the save) and raise to abort;
        it may run more than once. Returns the saved resource and what ``change`` returned.
        """
        previous = self.find_in(transaction, name)
        if previous is not None:
            resource = previous.model_copy(deep=True)
        elif new is not None:
            resource = new()
        else:
            raise NotFound(f"{name} not found")
        said = change(resource)
        resource.name = name
        return self.save_in(transaction, previous, resource), said

    def within(self, transaction: Transaction) -> InTransaction[R]:
        """This repository read and written in ``transaction``."""
        return InTransaction(self, transaction)

    def find_where(self, where: Sequence[Where], limit: int = 100) -> list[R]:
        """Resources of this type under any parent that match ``where``."""
        return [self.load(d) for d in self.store.query(self.collection, where=where, limit=limit)]

    def list(
        self,
        parent: str,
        where: Sequence[Where] = (),
        order_by: Sequence[OrderBy] = (OrderBy("createTime"),),
        page_size: int = 0,
        page_token: str = "",
    ) -> Page[R]:
        if page_size < 0:
            raise InvalidArgument("must not be negative", field="pageSize")
        size = min(page_size or DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)
        offset = _decode_token(page_token)
        documents = self.store.query(
            self.collection,
            where=[Where(PARENT_FIELD, "==", parent), *where],
            order_by=order_by,
            limit=size + 1,
            offset=offset,
        )
        items = [self.load(d) for d in documents[:size]]
        token = _encode_token(offset + size) if len(documents) > size else ""
        return Page(items, token)


class InTransaction(Generic[R]):
    """A :class:`Repository` within one transaction (a unit of work's): its reads, then its writes."""

    def __init__(self, repository: Repository[R], transaction: Transaction):
        self.repository, self.transaction = repository, transaction

    def find(self, name: str) -> R | None:
        return self.repository.find_in(self.transaction, name)

    def find_document(self, name: str) -> Document | None:
        """The stored document of ``name``, not loaded into its model (:meth:`Repository.load` loads it)."""
        return self.transaction.get(self.repository.collection, document_key(name))

    def load(self, document: Mapping[str, Any]) -> R:
        """:meth:`Repository.load`."""
        return self.repository.load(document)

    def stage_document(self, document: Document, *, new: bool = False) -> None:
        """:meth:`Repository.stage_document_in`."""
        self.repository.stage_document_in(self.transaction, document, new=new)

    def create(self, resource: R) -> R:
        return self.repository.create_in(self.transaction, resource)

    def save(self, previous: R | None, resource: R) -> R:
        """:meth:`Repository.save_in`."""
        return self.repository.save_in(self.transaction, previous, resource)

    def stage_save(self, previous: R | None, resource: R) -> EncodedDocument:
        return self.repository.stage_save_in(self.transaction, previous, resource)

    def mutate(self, name: str, change: Callable[[R], T], *, new: Callable[[], R] | None = None) -> tuple[R, T]:
        """:meth:`Repository.mutate_in`."""
        return self.repository.mutate_in(self.transaction, name, change, new=new)

    def update(self, name: str, mutate: Callable[[R], object], *, etag: str = "") -> R:
        """Apply ``mutate`` to the stored resource; returns it as it will be stored.

        ``etag``, when given, must match the stored one (:class:`Aborted` otherwise).
        ``mutate`` may raise to abort without writing; it may run more than once.
        """

        def change(resource: R) -> None:
            _check_etag(name, etag, resource)
            mutate(resource)

        return self.mutate(name, change)[0]

    def delete(self, name: str, *, etag: str = "") -> None:
        """Delete the stored resource (:class:`NotFound` if there is none); ``etag``, when given, must match."""
        previous = self.find(name)
        if previous is None:
            raise NotFound(f"{name} not found")
        _check_etag(name, etag, previous)
        self.transaction.delete(self.repository.collection, document_key(name))


def _check_etag(name: str, etag: str, stored: Resource) -> None:
    if etag and etag != stored.etag:
        raise Aborted(f"etag mismatch for {name}: the resource changed since it was read")
