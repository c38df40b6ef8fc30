"""Keep the inputs and outputs tables of each Terraform module's README.md in step with its code.

Every README under ``terraform/`` that holds the markers below gets, between
them, a table of the module's variables (name, description, type, default,
required) and one of its outputs, generated from ``variables.tf`` and
``outputs.tf``::

    <!-- BEGIN TERRAFORM DOCS -->
    <!-- END TERRAFORM DOCS -->

Usage: ``python scripts/terraform_docs.py [terraform/]`` rewrites the tables;
``--check`` only reports the READMEs that are out of date (exit status 1).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from terraform_config import load_module, module_dirs, unquote  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
BEGIN, END = "<!-- BEGIN TERRAFORM DOCS -->", "<!-- END TERRAFORM DOCS -->"
LONG_DEFAULT = 60


def _expression(value: Any) -> str:
    text = str(value)
    return text[2:-1] if text.startswith("${") and text.endswith("}") else unquote(text)


def _default(value: Any) -> str:
    rendered = json.dumps(_plain(value), separators=(", ", ": "))
    return f"`{_cell(rendered)}`" if len(rendered) <= LONG_DEFAULT else "see variables.tf"


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {unquote(k): _plain(v) for k, v in value.items() if not k.startswith("__")}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return unquote(value) if isinstance(value, str) else value


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def tables(directory: Path) -> str:
    """The markdown tables of the module in ``directory``."""
    blocks = load_module(directory)
    lines = ["## Inputs", "", "| Name | Description | Type | Default | Required |", "|---|---|---|---|:---:|"]
    variables = sorted((b for b in blocks if b.kind == "variable"), key=lambda b: ("default" in b.body, b.labels[0]))
    for block in variables:
        body = block.body
        default = _default(body["default"]) if "default" in body else ""
        lines.append(f"| `{block.labels[0]}` | {_cell(unquote(body.get('description', '')))} "
                     f"| `{_cell(_expression(body.get('type', 'any')))}` | {default} "
                     f"| {'' if 'default' in body else 'yes'} |")
    lines += ["", "## Outputs", "", "| Name | Description |", "|---|---|"]
    for block in sorted((b for b in blocks if b.kind == "output"), key=lambda b: b.labels[0]):
        lines.append(f"| `{block.labels[0]}` | {_cell(unquote(block.body.get('description', '')))} |")
    return "\n".join(lines)


def render(readme: Path) -> str:
    text = readme.read_text(encoding="utf-8")
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    return f"{text[:start]}\n{tables(readme.parent)}\n{text[end:]}"


def readmes(root: Path) -> list[Path]:
    return [d / "README.md" for d in module_dirs(root)
            if (d / "README.md").is_file() and BEGIN in (d / "README.md").read_text(encoding="utf-8")]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("root", nargs="?", type=Path, default=REPO / "terraform")
    parser.add_argument("--check", action="store_true", help="report out-of-date READMEs, change nothing")
    args = parser.parse_args(argv)
    stale = []
    for readme in readmes(args.root):
        rendered = render(readme)
        if rendered != readme.read_text(encoding="utf-8"):
            stale.append(readme)
            if not args.check:
                readme.write_text(rendered, encoding="utf-8")
    for readme in stale:
        print(f"{'out of date' if args.check else 'updated'}: {readme}")
    return 1 if stale and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
