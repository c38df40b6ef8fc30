"""Check ``terraform/`` against the provider schemas without provider binaries.

``terraform validate`` needs the provider plugins, which CI cannot download. The
schema of the Google provider ships, in a form we can read, inside the npm
package ``@cdktf/provider-google`` (16.12.1 is generated from google 6.50.0): its
``.jsii`` assembly describes every resource and data source as a ``…Config``
interface (arguments and nested blocks, optional or required) and a class whose
getters are the attributes you can read. The ``archive``, ``time`` and
``google-beta`` providers are not in that package; the one type used of each is
described here (``BUILTIN``), from the providers' documentation.

For every module directory under the given root it reports:
- resource and data source types the providers do not have;
- arguments and nested blocks a resource, data source or block does not take,
  and required ones that are missing (``dynamic`` blocks count as present);
- inputs a local module does not declare, and its required inputs left unset;
- references to undeclared ``var.``/``local.``/``module.`` names, to resources
  not declared in the module, and to attributes a resource type does not have.

Install the schema once (CI does this too)::

    npm install --prefix .cache/cdktf-provider-google --no-save --ignore-scripts \\
        --no-audit --no-fund @cdktf/provider-google@16.12.1

Usage: ``python scripts/check_terraform_schema.py [terraform/] [--jsii PATH]``.
Exit status 0 when clean, 1 with problems, 2 when the schema is missing.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from terraform_config import (  # noqa: E402
    Block, arguments, dynamic_blocks, load_module, local_module_source, module_dirs,
    nested_blocks, walk_strings,
)

REPO = Path(__file__).resolve().parent.parent
DEFAULT_JSII = REPO / ".cache/cdktf-provider-google/node_modules/@cdktf/provider-google/.jsii"
INSTALL_HINT = (
    "npm install --prefix .cache/cdktf-provider-google --no-save --ignore-scripts "
    "--no-audit --no-fund @cdktf/provider-google@16.12.1"
)

META_ARGUMENTS = {"count", "for_each", "depends_on", "provider"}
META_BLOCKS = {"lifecycle", "provisioner", "connection"}
MODULE_META = {"source", "version", "count", "for_each", "depends_on", "providers"}


@dataclass
class Schema:
    """What a resource, data source or nested block accepts."""

    arguments: set[str] = field(default_factory=set)
    blocks: dict[str, Schema] = field(default_factory=dict)
    required: set[str] = field(default_factory=set)
    # Attributes that can be read, for reference checks, keyed by _loose(name); a nested
    # block maps to its own readable schema.
    readable: dict[str, Schema | None] = field(default_factory=dict)


@dataclass(frozen=True)
class Problem:
    file: Path
    address: str
    message: str

    def __str__(self) -> str:
        try:
            where = self.file.relative_to(REPO)
        except ValueError:
            where = self.file
        return f"{where}: {self.address}: {self.message}"


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)([A-Z])", lambda m: "_" + m.group(1).lower(), name)


def _loose(name: str) -> str:
    """A name with case and underscores dropped: jsii getters (``md5Hash``) do not always
    convert back to the Terraform name (``md5hash``), so references compare loosely."""
    return name.replace("_", "").lower()


def _archive_file() -> Schema:
    source = Schema(arguments={"content", "filename"}, required={"content", "filename"})
    computed = ["id", "output_size", "output_md5", "output_sha", "output_sha256", "output_sha512",
                "output_base64sha256", "output_base64sha512"]
    arguments_ = {"type", "output_path", "output_file_mode", "source_content",
                  "source_content_filename", "source_file", "source_dir", "excludes",
                  "exclude_symlink_directories"}
    return Schema(
        arguments=arguments_,
        blocks={"source": source},
        required={"type", "output_path"},
        readable={_loose(name): None for name in [*arguments_, *computed]},
    )


def _time_sleep() -> Schema:
    arguments_ = {"create_duration", "destroy_duration", "triggers"}
    return Schema(arguments=arguments_, readable={_loose(name): None for name in [*arguments_, "id"]})


def _project_service_identity() -> Schema:
    return Schema(arguments={"project", "service"}, blocks={"timeouts": Schema(arguments={"create"})},
                  required={"service"},
                  readable={_loose(name): None for name in ["project", "service", "id", "email", "member"]})


# hashicorp/archive 2.x, hashicorp/time 0.x and the one google-beta 6.x type, from their
# documentation (the package above carries only google).
BUILTIN: dict[tuple[str, str], Schema] = {
    ("data", "archive_file"): _archive_file(),
    ("resource", "time_sleep"): _time_sleep(),
    ("resource", "google_project_service_identity"): _project_service_identity(),
}


# --- the Google provider schema, from the jsii assembly ---------------------------------------

_TYPE_LINK = re.compile(r"/docs/(resources|data-sources)/(\w+) (\w+)\}")
_ARGUMENT_LINK = re.compile(r"/docs/(?:resources|data-sources)/\w+#(\w+) ")
_PROVIDER_VERSION = re.compile(r"hashicorp/google/(\d+\.\d+\.\d+)/docs")


def _struct_of(type_ref: dict[str, Any]) -> str | None:
    """The fqn of the struct a property holds (one, or a list of them); ``None`` for plain values."""
    if "fqn" in type_ref:
        return type_ref["fqn"]
    for option in type_ref.get("union", {}).get("types", []):
        element = option.get("collection", {}).get("elementtype", {})
        if element.get("fqn", "").startswith("@cdktf/"):
            return element["fqn"]
    return None


class JsiiSchemas:
    """Resource and data source schemas read from ``@cdktf/provider-google``'s ``.jsii``."""

    def __init__(self, jsii_path: Path):
        assembly = json.loads(jsii_path.read_text(encoding="utf-8"))
        self.types: dict[str, dict[str, Any]] = assembly["types"]
        self.package_version: str = assembly["version"]
        self.provider_version = ""
        self.classes: dict[tuple[str, str], str] = {}
        for fqn, spec in self.types.items():
            summary = spec.get("docs", {}).get("summary", "")
            if spec.get("base") not in ("cdktf.TerraformResource", "cdktf.TerraformDataSource"):
                continue
            link = _TYPE_LINK.search(summary)
            if link:
                kind = "resource" if link.group(1) == "resources" else "data"
                self.classes[(kind, link.group(3))] = fqn
                version = _PROVIDER_VERSION.search(summary)
                self.provider_version = self.provider_version or (version.group(1) if version else "")
        self._cache: dict[str, Schema] = {}

    def get(self, kind: str, type_name: str) -> Schema | None:
        fqn = self.classes.get((kind, type_name))
        if fqn is None:
            return None
        if fqn not in self._cache:
            schema = self._struct(fqn + "Config")
            schema.readable = self._readable(fqn)
            self._cache[fqn] = schema
        return self._cache[fqn]

    def _struct(self, fqn: str) -> Schema:
        schema = Schema()
        for prop in self.types[fqn].get("properties", []):
            name = self._argument_name(prop)
            struct = _struct_of(prop["type"])
            if struct and self.types.get(struct, {}).get("datatype"):
                schema.blocks[name] = self._struct(struct)
            else:
                schema.arguments.add(name)
            if not prop.get("optional"):
                schema.required.add(name)
        return schema

    @staticmethod
    def _argument_name(prop: dict[str, Any]) -> str:
        # The registry link in the docs carries the Terraform name exactly (camelCase does
        # not round-trip for names such as ``source_md5hash``).
        link = _ARGUMENT_LINK.search(json.dumps(prop.get("docs", {})).replace("\\n", " "))
        return link.group(1) if link else _snake(prop["name"])

    def _readable(self, fqn: str) -> dict[str, Schema | None]:
        readable: dict[str, Schema | None] = {}
        props = [p for p in self.types[fqn].get("properties", []) if not p.get("static")]
        names = {p["name"] for p in props}
        for prop in props:
            name = prop["name"]
            if name == "internalValue" or (name.endswith("Input") and name[:-5] in names):
                continue
            target = prop["type"].get("fqn", "")
            readable[_loose(name)] = self._nested_readable(target)
        return readable

    def _nested_readable(self, fqn: str) -> Schema | None:
        if fqn.endswith("List") and fqn in self.types:
            getter = next((m for m in self.types[fqn].get("methods", []) if m["name"] == "get"), None)
            fqn = getter["returns"]["type"]["fqn"] if getter else ""
        if fqn.endswith("OutputReference") and fqn in self.types:
            return Schema(readable=self._readable(fqn))
        return None


# --- checks -------------------------------------------------------------------------------------

def _check_body(body: dict[str, Any], schema: Schema, meta_args: set[str], meta_blocks: set[str],
                path: str = "") -> Iterator[str]:
    """Problems of one block body against its schema; ``path`` names the nested block (``a.b``)."""
    where = f"{path}: " if path else ""
    present: set[str] = set()
    for name in arguments(body):
        present.add(name)
        if name in schema.blocks:
            yield f"{where}{name} is a block: write `{name} {{ ... }}`"
        elif name not in schema.arguments and name not in meta_args:
            yield f"{where}unknown argument {name!r}"
    nested = [(kind, item) for kind, item in nested_blocks(body) if kind != "dynamic" and kind not in meta_blocks]
    for kind, item in [*nested, *dynamic_blocks(body)]:
        present.add(kind)
        if kind in schema.blocks:
            yield from _check_body(item, schema.blocks[kind], set(), set(), f"{path}.{kind}" if path else kind)
        elif kind in schema.arguments:
            yield f"{where}{kind} is an argument: write `{kind} = ...`"
        else:
            yield f"{where}unknown block {kind!r}"
    for name in sorted(schema.required - present):
        yield f"{where}missing required {'block' if name in schema.blocks else 'argument'} {name!r}"


def _variables(directory: Path) -> tuple[set[str], set[str]]:
    """``(declared, required)`` input variables of the module in ``directory``."""
    declared, required = set(), set()
    for block in load_module(directory):
        if block.kind == "variable":
            declared.add(block.labels[0])
            if "default" not in block.body:
                required.add(block.labels[0])
    return declared, required


def _outputs(directory: Path) -> set[str]:
    return {b.labels[0] for b in load_module(directory) if b.kind == "output"}


_VAR_REF = re.compile(r"(?<![\w.])var\.(\w+)")
_LOCAL_REF = re.compile(r"(?<![\w.])local\.(\w+)")
_MODULE_REF = re.compile(r"(?<![\w.])module\.(\w+)(?:\[[^\]]*\])?\.(\w+)")
_RESOURCE_REF = re.compile(
    r"(?<![\w.])(data\.)?((?:google|archive|time)_\w+)\.(\w+)((?:\[[^\]]*\]|\.\w+|\.\*)*)"
)
_PATH_STEP = re.compile(r"\.(\w+)")


def _check_references(blocks: list[Block], schemas: Schemas) -> Iterator[Problem]:
    variables = {b.labels[0] for b in blocks if b.kind == "variable"}
    locals_ = {name for b in blocks if b.kind == "locals" for name in arguments(b.body)}
    modules = {b.labels[0]: b for b in blocks if b.kind == "module"}
    declared = {(b.kind, b.labels[0], b.labels[1]) for b in blocks if b.kind in ("resource", "data")}
    outputs_of: dict[str, set[str] | None] = {}
    for block in blocks:
        expressions = [s for s in walk_strings(block.body) if "${" in s]
        for text in expressions:
            for name in _VAR_REF.findall(text):
                if name not in variables:
                    yield Problem(block.file, block.address, f"reference to undeclared var.{name}")
            for name in _LOCAL_REF.findall(text):
                if name not in locals_:
                    yield Problem(block.file, block.address, f"reference to undeclared local.{name}")
            for module, output in _MODULE_REF.findall(text):
                if module not in modules:
                    yield Problem(block.file, block.address, f"reference to undeclared module.{module}")
                    continue
                if module not in outputs_of:
                    source = local_module_source(modules[module])
                    outputs_of[module] = _outputs(source) if source else None
                known = outputs_of[module]
                if known is not None and output not in known:
                    yield Problem(block.file, block.address,
                                  f"module.{module} has no output {output!r}")
            for match in _RESOURCE_REF.finditer(text):
                kind = "data" if match.group(1) else "resource"
                type_name, name, path = match.group(2), match.group(3), match.group(4)
                if (kind, type_name, name) not in declared:
                    yield Problem(block.file, block.address,
                                  f"reference to undeclared {match.group(1) or ''}{type_name}.{name}")
                    continue
                schema = schemas.get(kind, type_name)
                if schema is not None:
                    yield from (Problem(block.file, block.address, message)
                                for message in _check_path(type_name, schema, path))


def _check_path(type_name: str, schema: Schema, path: str) -> Iterator[str]:
    current: Schema | None = schema
    for step in _PATH_STEP.findall(path):
        if current is None:
            return
        if _loose(step) not in current.readable:
            yield f"{type_name} has no attribute {step!r}"
            return
        current = current.readable[_loose(step)]


class Schemas:
    """The schemas the checks know: the built-in ones, then the Google provider's."""

    def __init__(self, jsii: JsiiSchemas):
        self.jsii = jsii

    def get(self, kind: str, type_name: str) -> Schema | None:
        return BUILTIN.get((kind, type_name)) or self.jsii.get(kind, type_name)


def check_module(directory: Path, schemas: Schemas) -> list[Problem]:
    blocks = load_module(directory)
    problems: list[Problem] = []
    for block in blocks:
        if block.kind in ("resource", "data"):
            schema = schemas.get(block.kind, block.labels[0])
            if schema is None:
                kind = "resource" if block.kind == "resource" else "data source"
                problems.append(Problem(block.file, block.address, f"unknown {kind} type {block.labels[0]!r}"))
                continue
            meta_blocks = META_BLOCKS if block.kind == "resource" else {"lifecycle"}
            problems.extend(
                Problem(block.file, block.address, message)
                for message in _check_body(block.body, schema, META_ARGUMENTS, meta_blocks)
            )
        elif block.kind == "module":
            source = local_module_source(block)
            if source is None:
                continue
            if not source.is_dir():
                problems.append(Problem(block.file, block.address, f"module source {source} does not exist"))
                continue
            declared, required = _variables(source)
            given = set(arguments(block.body)) - MODULE_META
            problems.extend(Problem(block.file, block.address, f"module has no input {name!r}")
                            for name in sorted(given - declared))
            problems.extend(Problem(block.file, block.address, f"missing required input {name!r}")
                            for name in sorted(required - given))
    problems.extend(_check_references(blocks, schemas))
    return problems


def check_tree(root: Path, schemas: Schemas) -> list[Problem]:
    problems: list[Problem] = []
    for directory in module_dirs(root):
        problems.extend(check_module(directory, schemas))
    return problems


def load_schemas(jsii_path: Path = DEFAULT_JSII) -> Schemas:
    return Schemas(JsiiSchemas(jsii_path))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("root", nargs="?", type=Path, default=REPO / "terraform")
    parser.add_argument("--jsii", type=Path, default=DEFAULT_JSII)
    args = parser.parse_args(argv)
    if not args.jsii.is_file():
        print(f"provider schema not found at {args.jsii}; install it with:\n  {INSTALL_HINT}",
              file=sys.stderr)
        return 2
    schemas = load_schemas(args.jsii)
    problems = check_tree(args.root, schemas)
    for problem in problems:
        print(problem)
    modules = len(module_dirs(args.root))
    print(f"{len(problems)} problem(s) in {modules} module(s) checked against google provider "
          f"{schemas.jsii.provider_version} (@cdktf/provider-google {schemas.jsii.package_version})",
          file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
