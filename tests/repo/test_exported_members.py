"""The embedding API: `from meta_agent import ...` gives exactly the names of `__all__`, the one list of them, each from
its own module, loaded only when asked for; every member of an exported union is exported; and the embedding example of
the docs (docs/embedding.md) runs as written."""

from __future__ import annotations

import ast
import inspect
import json
import os
import re
import subprocess
import sys
import typing
from pathlib import Path

import pytest
from conftest import TESTS

import meta_agent
import meta_agent.errors

ROOT = TESTS.parent
EDGES = ("mcp", "openai", "anthropic")
# Type aliases (a Literal, a union, a Callable) carry no module of their own; every other name is a class or function.
ALIASES = {"Emit", "Event", "Message", "Mode", "Part", "StopReason", "TrustLevel"}


def _type_checking_imports() -> dict[str, str]:
    """Each name the `if TYPE_CHECKING:` block of meta_agent/__init__.py imports, with the module it names."""
    tree = ast.parse(Path(meta_agent.__file__).read_text())
    seen: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for statement in node.body:
                assert isinstance(statement, ast.ImportFrom) and statement.module is not None
                for alias in statement.names:
                    assert alias.name not in seen, f"{alias.name} imported twice"
                    seen[alias.name] = statement.module
    return seen


def test_all_is_exactly_what_the_package_imports_for_type_checkers() -> None:
    # As httpx's test holds its __all__ to what it imports: a name added to one and not the other fails here.
    assert len(set(meta_agent.__all__)) == len(meta_agent.__all__)
    assert set(meta_agent.__all__) == {*_type_checking_imports(), "__version__"}


def test_all_is_the_only_list_of_public_names() -> None:
    # The lazy loader reads the same imports type checkers read; the package holds no table of names of its own.
    assert meta_agent._read_homes() == _type_checking_imports()
    tree = ast.parse(Path(meta_agent.__file__).read_text())
    lists = [
        target.id
        for node in tree.body
        if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(target, ast.Name)
        and any(isinstance(item, ast.Constant) and isinstance(item.value, str) for item in ast.walk(node.value))
    ]
    assert lists == ["__all__"]


def test_every_member_of_an_exported_union_is_exported() -> None:
    # A sink matching on `Event` needs every member by name (ModelSwitched was once left out); so do Message and Part.
    for union in ("Event", "Message", "Part"):
        members = typing.get_args(getattr(meta_agent, union))
        assert len(members) >= 2, union
        missing = [member.__name__ for member in members if member.__name__ not in meta_agent.__all__]
        assert not missing, f"{union} members not exported: {missing}"
    assert "ModelSwitched" in {member.__name__ for member in typing.get_args(meta_agent.Event)}


def test_every_class_a_run_result_holds_is_exported() -> None:
    def classes(hint: object) -> set[type]:
        found = {hint} if inspect.isclass(hint) and hint.__module__.startswith("meta_agent.") else set()
        return found.union(*(classes(arg) for arg in typing.get_args(hint)))

    held = set().union(*(classes(hint) for hint in typing.get_type_hints(meta_agent.RunResult).values()))
    assert {"RunUsage", "StepRecord", "UnavailableServer", "ImagePart"} <= {held_class.__name__ for held_class in held}
    assert not [held_class.__name__ for held_class in held if held_class.__name__ not in meta_agent.__all__]


def test_every_public_name_resolves_and_is_listed_by_dir() -> None:
    for name in meta_agent.__all__:
        assert getattr(meta_agent, name) is not None, name
    assert set(meta_agent.__all__) <= set(dir(meta_agent))


def test_an_unknown_name_is_an_attribute_error() -> None:
    for name in ("Toolbox", "Enginee", "WebhookEntry"):  # internals (a class of a module public names come from too)
        with pytest.raises(AttributeError, match=f"no attribute '{name}'"):
            getattr(meta_agent, name)


def test_each_name_is_the_object_its_module_defines() -> None:
    # The real module is kept as __module__ (httpx rewrites it to "httpx"): our modules are not private, the docs'
    # architecture names them, and rewriting would mean importing them all up front, which the laziness exists to avoid.
    for name in meta_agent.__all__:
        value = getattr(meta_agent, name)
        if name == "__version__":
            assert isinstance(value, str)
        elif name in ALIASES:
            assert not inspect.isclass(value) and not inspect.isfunction(value), name
        else:
            assert value.__module__.startswith("meta_agent."), (name, value.__module__)
            assert value.__name__ == name


def test_every_error_of_the_tree_is_exported() -> None:
    errors = {
        name
        for name, value in vars(meta_agent.errors).items()
        if inspect.isclass(value) and issubclass(value, meta_agent.errors.MetaAgentError)
    }
    assert errors <= set(meta_agent.__all__)


def _fresh(code: str) -> list[str]:
    """The modules a fresh interpreter holds after running `code`."""
    probe = f"{code}\nimport sys, json; print(json.dumps(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    loaded: list[str] = json.loads(done.stdout.splitlines()[-1])
    return loaded


def test_importing_the_package_loads_nothing_of_ours_and_no_edge() -> None:
    loaded = _fresh("import meta_agent; assert meta_agent.__version__")
    assert [name for name in loaded if name.startswith("meta_agent")] == ["meta_agent", "meta_agent.version"]
    assert not [name for name in loaded if name.split(".")[0] in EDGES]


def test_the_neutral_types_import_without_mcp_or_a_vendor_sdk() -> None:
    loaded = _fresh("from meta_agent import ModelRequest, ModelResponse, RunResult, ScriptedProvider, Event")
    assert not [name for name in loaded if name.split(".")[0] in EDGES]


def test_the_engine_imports_from_the_package_root() -> None:
    loaded = _fresh("from meta_agent import Engine, build_server; assert Engine.__name__ == 'Engine'")
    assert "meta_agent.engine" in loaded and "meta_agent.front.server" in loaded


def test_the_documented_embedding_example_runs(tmp_path: Path) -> None:
    page = (ROOT / "docs" / "embedding.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", page, flags=re.DOTALL)
    assert len(blocks) == 1, "the embedding page has one python example"
    # Its traces and conversations go to a home of its own; no META_AGENT_* setting of ours leaks in.
    environ = {key: value for key, value in os.environ.items() if not key.startswith(("META_AGENT_", "XDG_"))}
    environ["HOME"] = str(tmp_path)
    done = subprocess.run(
        [sys.executable, "-c", blocks[0]], cwd=tmp_path, env=environ, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "final Hello from meta-agent.\n"
    assert list((tmp_path / ".local" / "state" / "meta-agent" / "traces").iterdir()), "the run left no trace"
