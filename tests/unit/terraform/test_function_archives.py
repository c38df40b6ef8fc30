"""Each function's source archive holds what the functions import, and nothing that runs only on hosts.

The files are the ones Terraform selects: ``terraform console`` evaluates the function
module's ``sources.tf`` for each function. What they must be is read from the code: the
import closure of ``functions/<name>/main.py`` within ``shared/mldiag`` (imports at module
and function level, and modules named in strings, as the lazy package exports are), the
data files of the packages it reaches, and every file of ``functions/<name>/``. A library
module that no function imports (``mldiag/local``, ``mldiag/cli`` ...) must not ship.
"""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
from pathlib import Path

import pytest
from terraform_support import REPO, Planted, missing_tool

MODULE_FILES = ("variables.tf", "sources.tf")
HOST_PACKAGES = ("agent", "cli", "client", "local")
# The function module's required variables that the file selection does not read.
UNREAD = ("project_id=p", "region=r", "prefix=p", "description=d", "service_account_id=function", "requirements=[]",
          "build={sources_bucket=\"b\", service_account_id=\"s\", docker_repository=\"d\"}",
          "resources={memory=\"1Gi\", cpu=\"1\", timeout_seconds=60, concurrency=1, max_instances=1}")


class Library:
    """The modules of ``shared/mldiag`` under ``root`` and what each imports."""

    def __init__(self, root: Path):
        self.package = root / "shared" / "mldiag"
        self.files = {self._module(path): path for path in self.package.rglob("*.py")
                      if "__pycache__" not in path.parts}
        self._imports: dict[str, set[str]] = {}

    def _module(self, path: Path) -> str:
        parts = path.relative_to(self.package.parent).with_suffix("").parts
        return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)

    def imports(self, path: Path) -> set[str]:
        """The library modules ``path`` imports anywhere in it, with the packages that hold them."""
        named: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if isinstance(node, ast.Import):
                named |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                assert node.level == 0, f"{path}: relative import; the library imports by absolute name"
                named |= {node.module, *(f"{node.module}.{alias.name}" for alias in node.names)}
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in self.files:
                named.add(node.value)  # importlib.import_module("mldiag..."), lazy exports
        parts_of = (name.split(".") for name in named)
        return {module for parts in parts_of for module in (".".join(parts[:i]) for i in range(1, len(parts) + 1))
                if module in self.files}

    def closure(self, entry: Path) -> set[str]:
        seen: set[str] = set()
        todo = list(self.imports(entry))
        while todo:
            module = todo.pop()
            if module not in seen:
                seen.add(module)
                todo += self._imported_by(module)
        return seen

    def _imported_by(self, module: str) -> set[str]:
        if module not in self._imports:
            self._imports[module] = self.imports(self.files[module])
        return self._imports[module]

    def needed(self, modules: set[str]) -> set[str]:
        """Archive paths of ``modules`` and of the data files in the packages among them."""
        packages = {self.files[module].parent for module in modules if self.files[module].name == "__init__.py"}
        data = {path for path in self.package.rglob("*") if path.is_file() and path.suffix not in (".py", ".pyc")
                and next(p for p in path.parents if (p / "__init__.py").exists()) in packages}
        return {str(path.relative_to(self.package.parent))
                for path in {self.files[module] for module in modules} | data}


def archive_files(terraform: Path, root: Path, function: str, workdir: Path) -> set[str]:
    """The archive paths the function module selects for ``function``, as ``terraform`` evaluates them."""
    if shutil.which("terraform") is None:
        missing_tool("the terraform binary is not on PATH (https://developer.hashicorp.com/terraform/install)")
    workdir.mkdir(parents=True, exist_ok=True)
    for name in MODULE_FILES:
        shutil.copy(terraform / "modules/function" / name, workdir / name)
    variables = [argument for value in (f"name={function}", f"source_root={root}", *UNREAD)
                 for argument in ("-var", value)]
    result = subprocess.run(["terraform", "console", "-no-color", *variables], cwd=workdir, capture_output=True,
                            text=True, input="jsonencode(keys(merge(local.function_files, local.library_files)))",
                            check=False, timeout=120)
    assert result.returncode == 0 and "Error:" not in result.stderr, result.stderr
    return set(json.loads(json.loads(result.stdout)))


def archive_problems(terraform: Path, root: Path, workdir: Path, only: str = "") -> list[str]:
    """What is wrong with each function's archive (``only`` that function's, if given)."""
    library = Library(root)
    entries = {path.parent.name: path for path in sorted((root / "functions").glob("*/main.py"))}
    imported = {name: library.closure(entry) for name, entry in entries.items()}
    anyone_imports = library.needed(set().union(*imported.values()))
    problems = []
    for name, entry in entries.items():
        if only and name != only:
            continue
        shipped = archive_files(terraform, root, name, workdir / name)
        own = {str(path.relative_to(entry.parent)) for path in entry.parent.rglob("*")
               if path.is_file() and "__pycache__" not in path.parts}
        problems += [f"{name}: {path} is needed but not in the archive"
                     for path in sorted((own | library.needed(imported[name])) - shipped)]
        problems += [f"{name}: {path} is in the archive but no function imports it"
                     for path in sorted(shipped - own - anyone_imports)]
    return problems


@pytest.fixture
def planted_library(planted: Planted) -> Planted:
    """``planted`` with a copy of the library too, to write a defect into."""
    shutil.copytree(REPO / "shared" / "mldiag", planted.root / "shared" / "mldiag",
                    ignore=shutil.ignore_patterns("__pycache__"))
    return planted


@pytest.mark.slow
def test_each_archive_holds_what_its_function_imports_and_nothing_else(tmp_path: Path):
    assert archive_problems(REPO / "terraform", REPO, tmp_path) == []


@pytest.mark.slow
def test_no_function_imports_a_host_package():
    library = Library(REPO)
    for entry in (REPO / "functions").glob("*/main.py"):
        reached = {module.split(".")[1] for module in library.closure(entry) if "." in module}
        assert reached.isdisjoint(HOST_PACKAGES), entry
        assert "bootstrap" in reached and "entrypoints" in reached  # the walk follows main.py's imports


@pytest.mark.slow
def test_planted_host_package_in_the_archive_is_reported(planted_library: Planted, tmp_path: Path):
    planted_library.replace("modules/function/variables.tf", '["agent", "cli", "client", "local"]',
                            '["agent", "cli", "client"]')
    problems = archive_problems(planted_library.terraform, planted_library.root, tmp_path, only="maintenance")
    assert "maintenance: mldiag/local/server.py is in the archive but no function imports it" in problems
    assert all("mldiag/local/" in problem for problem in problems)


@pytest.mark.slow
def test_planted_function_level_import_of_a_host_module_is_reported(planted_library: Planted, tmp_path: Path):
    handlers = planted_library.root / "shared/mldiag/entrypoints/handlers.py"
    handlers.write_text(handlers.read_text(encoding="utf-8") + "\n\ndef _describe(run):\n"
                        "    from mldiag.client.api import ApiClient\n\n    return ApiClient\n", encoding="utf-8")
    problems = archive_problems(planted_library.terraform, planted_library.root, tmp_path, only="on_alert")
    assert "on_alert: mldiag/client/api.py is needed but not in the archive" in problems
    assert "on_alert: mldiag/client/__init__.py is needed but not in the archive" in problems


@pytest.mark.slow
def test_planted_unpackaged_file_type_is_reported(planted_library: Planted, tmp_path: Path):
    planted_library.write("functions/on_alert/icon.png", "not really a png")
    assert archive_problems(planted_library.terraform, planted_library.root, tmp_path, only="on_alert") == [
        "on_alert: icon.png is needed but not in the archive"]
