"""What the ``mldiag`` code does that Terraform must allow, read from the code itself.

- :func:`published_topics`: the topics each deployed function can publish to, found by
  walking its call graph from its entry point to every message it builds (a model of
  :mod:`mldiag.domain.messages`, whose class names its topic, or an ``Outgoing(TOPIC, ...)``)
  and every ``bus.publish(TOPIC, ...)`` it reaches (a sweep of stale outbox entries publishes
  whatever any code staged).
- :func:`firestore_queries`: every Firestore query shape the code builds, found at each
  call of the query builder (``store.query``, ``Repository.list`` / ``find_where``,
  ``list_page`` and the CLI's ``list_all``), with the conditions and order written at
  the call, held in a local variable it passes (assigned, appended or extended), or
  handed in by the callers of the function for a parameter it passes.

Calls are resolved through each module's imports and definitions; a method called on
an object resolves only when its name is defined once in the package, which is enough
for the paths that publish and query and keeps the graph from fanning out through
common names (``get``, ``list``, ``save``).
"""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
import re
import typing
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[3] / "shared" / "mldiag"
# The control plane's entry points are its routes: every function of these packages.
HTTP_PACKAGES = ("mldiag.entrypoints.http", "mldiag.entrypoints.console")
# Operator replay re-publishes an archived event to the topic it came from; a missing
# grant is reported per event, so it widens no function's publishes_to.
REPLAY = "mldiag.services.operator.replay.replay_one"
EQUALITIES = frozenset({"==", "in", "array_contains", "array_contains_any"})
_FILTER_TERM = re.compile(r"(?P<field>[A-Za-z_][\w.]*)\s*(?P<op><=|>=|!=|=|<|>)")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@dataclass
class CodeGraph:
    """Every function and method of the package, and how a name in a module resolves."""

    trees: dict[str, ast.Module] = field(default_factory=dict)
    definitions: dict[str, ast.FunctionDef] = field(default_factory=dict)
    owner: dict[str, str] = field(default_factory=dict)
    scopes: dict[str, dict[str, str]] = field(default_factory=dict)
    methods: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))

    @classmethod
    def load(cls, sources: typing.Mapping[str, str] = {}) -> CodeGraph:  # noqa: B006 (read only)
        """The package as it is, or with some modules' source text replaced (``sources``: module → text)."""
        graph = cls()
        for path in sorted(PACKAGE.rglob("*.py")):
            module = _module_name(path)
            graph.trees[module] = ast.parse(sources.get(module) or path.read_text(encoding="utf-8"), filename=str(path))
        for module, tree in graph.trees.items():
            graph.scopes[module] = graph._scope(module, tree)
        return graph

    def _scope(self, module: str, tree: ast.Module) -> dict[str, str]:
        scope: dict[str, str] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("mldiag"):
                scope.update({alias.asname or alias.name: f"{node.module}.{alias.name}" for alias in node.names})
            elif isinstance(node, ast.Import):
                scope.update({alias.asname or alias.name: alias.name for alias in node.names
                              if alias.name.startswith("mldiag")})
        for node in tree.body:
            if isinstance(node, ast.FunctionDef):
                self._define(f"{module}.{node.name}", node, module)
                scope[node.name] = f"{module}.{node.name}"
            elif isinstance(node, ast.ClassDef):
                scope[node.name] = f"{module}.{node.name}"
                for item in node.body:
                    if isinstance(item, ast.FunctionDef):
                        self._define(f"{module}.{node.name}.{item.name}", item, module)
                        self.methods[item.name].add(f"{module}.{node.name}.{item.name}")
        return scope

    def _define(self, qualified: str, node: ast.FunctionDef, module: str) -> None:
        self.definitions[qualified] = node
        self.owner[qualified] = module

    def resolve(self, module: str, node: ast.expr) -> set[str]:
        """The package functions a name or attribute in ``module`` may denote."""
        scope = self.scopes[module]
        if isinstance(node, ast.Name):
            target = scope.get(node.id, "")
            for candidate in (target, f"{target}.__init__"):
                if candidate in self.definitions:
                    return {candidate}
            return set()
        if isinstance(node, ast.Attribute):
            if isinstance(node.value, ast.Name) and node.value.id in scope:
                candidate = f"{scope[node.value.id]}.{node.attr}"
                if candidate in self.definitions:
                    return {candidate}
            found = self.methods.get(node.attr, set())
            return set(found) if len(found) == 1 else set()
        return set()

    def names(self, module: str, node: ast.expr) -> str:
        """What a bare name in ``module`` was imported as or defined as (``mldiag.ports.Where``)."""
        return self.scopes[module].get(node.id, "") if isinstance(node, ast.Name) else ""

    def callees(self, qualified: str) -> set[str]:
        module = self.owner[qualified]
        return {target for node in ast.walk(self.definitions[qualified])
                if isinstance(node, (ast.Name, ast.Attribute)) and isinstance(node.ctx, ast.Load)
                for target in self.resolve(module, node)}

    def reachable(self, starts: set[str]) -> set[str]:
        seen: set[str] = set()
        todo = list(starts)
        while todo:
            current = todo.pop()
            if current in seen or current not in self.definitions:
                continue
            seen.add(current)
            todo += self.callees(current)
        return seen

    def calls_in(self, qualified: str, target: str) -> list[ast.Call]:
        """Calls of ``target`` written in the body of ``qualified``."""
        module = self.owner[qualified]
        return [node for node in ast.walk(self.definitions[qualified])
                if isinstance(node, ast.Call) and target in self.resolve(module, node.func)]

    def callers(self, target: str) -> list[tuple[str, ast.Call]]:
        return [(qualified, call) for qualified in self.definitions for call in self.calls_in(qualified, target)]

    def evaluate(self, module: str, node: ast.expr) -> typing.Any:
        """A constant expression (``COLLECTION``, ``ProfilerSession.collection``) in ``module``'s namespace."""
        return eval(compile(ast.Expression(node), module, "eval"), vars(importlib.import_module(module)))  # noqa: S307


# --- topics ----------------------------------------------------------------------------------------

def entry_points(graph: CodeGraph, function: str) -> set[str]:
    if function == "control_plane":
        return {name for name in graph.definitions
                if any(graph.owner[name] == package or graph.owner[name].startswith(f"{package}.")
                       for package in HTTP_PACKAGES)}
    return {f"mldiag.entrypoints.handlers.{function}"}


MESSAGES = "mldiag.domain.messages"


def _message_model(graph: CodeGraph, module: str, call: ast.Call) -> type | None:
    """The message model ``call`` builds: ``Model(...)`` or ``Model.of(...)`` of a model with a topic."""
    func = call.func.value if isinstance(call.func, ast.Attribute) and call.func.attr == "of" else call.func
    named = graph.names(module, func) if isinstance(func, ast.Name) else ""
    if not named.startswith(f"{MESSAGES}."):
        return None
    model = getattr(importlib.import_module(MESSAGES), named.rsplit(".", 1)[1], None)
    return model if isinstance(model, type) and isinstance(getattr(model, "topic", None), str) else None


def _staged_topics(graph: CodeGraph, functions: set[str]) -> set[str]:
    """Topics of the messages the functions build, which the outbox publishes once staged."""
    topics = set()
    for qualified in functions:
        module = graph.owner[qualified]
        for call in (node for node in ast.walk(graph.definitions[qualified]) if isinstance(node, ast.Call)):
            if (model := _message_model(graph, module, call)) is not None:
                topics.add(model.topic)
            elif graph.names(module, call.func) == f"{MESSAGES}.Outgoing" and isinstance(next(iter(call.args), None),
                                                                                          ast.Name):
                topics.add(graph.evaluate(module, call.args[0]))
    return topics


def _published_topics(graph: CodeGraph, functions: set[str]) -> set[str]:
    """Topics passed to ``bus.publish`` directly (the outbox publishes what was staged; a unit of work's
    ``publish`` stages)."""
    return {graph.evaluate(graph.owner[qualified], node.args[0])
            for qualified in functions if qualified != REPLAY and graph.owner[qualified] != "mldiag.services.outbox"
            for node in ast.walk(graph.definitions[qualified])
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "publish"
            and _is_bus(node.func.value)}


def _is_bus(node: ast.expr) -> bool:
    return (isinstance(node, ast.Name) and node.id == "bus") or (isinstance(node, ast.Attribute) and node.attr == "bus")


def published_topics(graph: CodeGraph, function: str) -> set[str]:
    reached = graph.reachable(entry_points(graph, function))
    topics = _staged_topics(graph, reached) | _published_topics(graph, reached)
    if "mldiag.services.outbox.flush_stale" in reached:
        # What any service staged; the local hosts publish on their own bus, never through the outbox.
        topics |= _staged_topics(graph, {name for name in graph.definitions
                                         if not graph.owner[name].startswith("mldiag.local")})
    return topics


# --- Firestore queries -----------------------------------------------------------------------------

@dataclass(frozen=True)
class Query:
    """One query shape: equality fields, and the order Firestore needs an index for."""

    collection: str
    equalities: frozenset[str]
    order: tuple[tuple[str, bool], ...]  # (field, descending), explicit then implicit (inequalities)
    where: str  # the call site, for messages

    def describe(self) -> str:
        order = ", ".join(f"{f} {'desc' if d else 'asc'}" for f, d in self.order) or "none"
        return f"{self.collection}: {' and '.join(sorted(self.equalities)) or 'no equality'}, order {order}"


def _bindings(function: ast.FunctionDef, names: set[str]) -> list[ast.AST]:
    """What the function puts in the local ``names``: assignments, and ``append``/``extend`` calls."""
    found: list[ast.AST] = []
    for node in ast.walk(function):
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(target, ast.Name) and target.id in names for target in targets) and node.value:
                found.append(node.value)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr in ("append", "extend")
              and isinstance(node.func.value, ast.Name) and node.func.value.id in names):
            found += node.args
    return found


def _parameters(function: ast.FunctionDef) -> set[str]:
    arguments = function.args
    return {a.arg for a in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs,
                            *filter(None, (arguments.vararg, arguments.kwarg))]}


def _conditions(graph: CodeGraph, qualified: str, argument: ast.expr | None,
                callers: bool = True) -> list[tuple[str, str]]:
    """The ``Where`` terms an argument carries: written in it, put in a local variable it names,
    or (with ``callers``) handed in by the callers for a parameter it names."""
    if argument is None:
        return []
    function = graph.definitions[qualified]
    names = {node.id for node in ast.walk(argument) if isinstance(node, ast.Name)}
    terms = _where_terms(graph, qualified, [argument, *_bindings(function, names)])
    if callers and names & _parameters(function):
        terms += _passed_through(graph, qualified)
    return terms


def _where_terms(graph: CodeGraph, qualified: str, nodes: list[ast.AST]) -> list[tuple[str, str]]:
    module = graph.owner[qualified]
    terms = []
    for root in nodes:
        for node in ast.walk(root):
            if isinstance(node, ast.Call) and graph.names(module, node.func) == "mldiag.ports.Where":
                terms.append((graph.evaluate(module, node.args[0]), graph.evaluate(module, node.args[1])))
    return terms


def _order_terms(graph: CodeGraph, qualified: str, node: ast.expr | None) -> list[tuple[str, bool]] | None:
    """The order an ``order_by`` argument gives: a constant expression, or a local variable assigned one."""
    if node is None:
        return None
    if isinstance(node, ast.Name) and (assigned := _bindings(graph.definitions[qualified], {node.id})):
        node = assigned[-1]
    module = graph.owner[qualified]
    return [(order.field, order.descending) for order in graph.evaluate(module, node)]


def _filter_terms(node: ast.expr | None) -> list[tuple[str, str]]:
    """``field OP`` terms written in a literal (or f-string) AIP-160 filter, on either side of an ``if``."""
    if isinstance(node, ast.IfExp):
        return _filter_terms(node.body) + _filter_terms(node.orelse)
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        text = node.value
    elif isinstance(node, ast.JoinedStr):
        text = "".join(part.value if isinstance(part, ast.Constant) else "VALUE " for part in node.values)
    else:
        return []  # the user's own filter: an index of its own, as README says
    return [(match["field"], "==" if match["op"] == "=" else match["op"]) for match in _FILTER_TERM.finditer(text)]


def _keyword(call: ast.Call, name: str, position: int | None = None) -> ast.expr | None:
    for keyword in call.keywords:
        if keyword.arg == name:
            return keyword.value
    return call.args[position] if position is not None and len(call.args) > position else None


def _repository_collection(graph: CodeGraph, qualified: str, receiver: ast.expr) -> str | None:
    """``services().runs`` / ``self.services.sessions`` → the collection of that repository."""
    from mldiag.domain import resources
    from mldiag.services import dependencies
    from mldiag.services.event_archive import EventArchive
    from mldiag.services.repository import Repository

    if not isinstance(receiver, ast.Attribute):
        return None
    prop = dependencies.Services.__dict__.get(receiver.attr)
    if not isinstance(prop, functools.cached_property):
        return None
    # The module names its repositories' types for type checkers only (they load on first use).
    names = {**vars(resources), "Repository": Repository, "EventArchive": EventArchive}
    returned = typing.get_type_hints(prop.func, globalns={**vars(dependencies), **names})["return"]
    if typing.get_origin(returned) is not Repository:
        return None  # the event archive and the like build their own queries
    return typing.get_args(returned)[0].collection


def _shape(collection: str, terms: list[tuple[str, str]], order: list[tuple[str, bool]], where: str) -> Query:
    from mldiag.adapters.store.queries import KEY, result_order
    from mldiag.ports import OrderBy, Where

    full = result_order([Where(f, op, None) for f, op in terms], [OrderBy(f, d) for f, d in order])
    return Query(collection, frozenset(f for f, op in terms if op in EQUALITIES),
                 tuple((o.field, o.descending) for o in full if o.field != KEY), where)


def firestore_queries(graph: CodeGraph) -> list[Query]:
    from mldiag.services.repository import PARENT_FIELD, Repository
    from mldiag.services.resources.listing import NEWEST_FIRST

    newest_first = [(o.field, o.descending) for o in NEWEST_FIRST]
    repository_default = [(o.field, o.descending)
                          for o in inspect.signature(Repository.list).parameters["order_by"].default]
    queries = []
    for qualified, node in graph.definitions.items():
        module = graph.owner[qualified]
        if qualified.startswith("mldiag.services.repository.") or module.startswith("mldiag.adapters."):
            continue  # the builders themselves
        site = f"{module}:{node.lineno} {qualified.rsplit('.', 1)[-1]}"
        for call in (c for c in ast.walk(node) if isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute)):
            method, receiver = call.func.attr, call.func.value
            if method == "query" and _receiver_name(receiver) == "store":
                if _keyword(call, "where") is None and _keyword(call, "order_by") is None:
                    continue  # a whole collection, unordered: no index involved
                collection = graph.evaluate(module, call.args[0])
                terms = _conditions(graph, qualified, _keyword(call, "where"))
                order = _order_terms(graph, qualified, _keyword(call, "order_by")) or []
                queries.append(_shape(collection, terms, order, site))
            elif method in ("list", "find_where") and (collection := _repository_collection(graph, qualified, receiver)):
                terms = _conditions(graph, qualified, _keyword(call, "where", 0 if method == "find_where" else 1))
                if method == "list":
                    terms = [(PARENT_FIELD, "=="), *terms]
                    order = _order_terms(graph, qualified, _keyword(call, "order_by")) or repository_default
                else:
                    order = []
                queries.append(_shape(collection, terms, order, site))
        for call in graph.calls_in(qualified, "mldiag.services.resources.listing.list_page"):
            collection = _repository_collection(graph, qualified, call.args[0])
            if collection is None:
                continue  # the API's generic route: the user's filter and order, or newest first
            request = call.args[2]
            terms = _filter_terms(_keyword(request, "filter")) if isinstance(request, ast.Call) else []
            order = _order_terms(graph, qualified, _keyword(call, "default_order", 3)) or newest_first
            queries.append(_shape(collection, [(PARENT_FIELD, "=="), *terms], order, site))
        for call in (c for c in ast.walk(node) if isinstance(c, ast.Call)
                     and isinstance(c.func, ast.Attribute) and c.func.attr == "list_all"):
            collection = _keyword(call, "collection", 1)
            if isinstance(collection, ast.Constant) and (terms := _filter_terms(_keyword(call, "filter"))):
                queries.append(_shape(collection.value, [(PARENT_FIELD, "=="), *terms], newest_first, site))
    # Every resource list the API serves by default: a parent's children, newest first.
    from mldiag.domain.resources import RESOURCE_TYPES

    queries += [_shape(model.collection, [(PARENT_FIELD, "==")], order, "mldiag.entrypoints.http.v1alpha list")
                for model in RESOURCE_TYPES for order in (newest_first, repository_default)]
    return queries


def _passed_through(graph: CodeGraph, qualified: str) -> list[tuple[str, str]]:
    """Conditions the callers of a function hand it (``open_tasks(services, Where(...))``)."""
    return [term for caller, call in graph.callers(qualified)
            for term in _conditions(graph, caller, call, callers=False)]


def _receiver_name(receiver: ast.expr) -> str:
    """``store`` for ``store``, ``self.store`` and ``services.store``."""
    return receiver.id if isinstance(receiver, ast.Name) else receiver.attr if isinstance(receiver, ast.Attribute) else ""
