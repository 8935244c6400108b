"""scripts/sizes.py, the size check of scripts/lint: a module over 450 lines or a function over 80 is reported unless
an exception lists it with its reason, and an exception that no longer excepts anything is reported too."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

from conftest import TESTS

SCRIPT = TESTS.parent / "scripts" / "sizes.py"


def _sizes() -> ModuleType:
    spec = importlib.util.spec_from_file_location("sizes", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["sizes"] = module  # its dataclass looks its module up while the class is made
    spec.loader.exec_module(module)
    return module


sizes = _sizes()


def _function(name: str, lines: int, indent: str = "") -> str:
    """A function of exactly `lines` lines, from its `def` to its last line."""
    body = "".join(f"{indent}    x{index} = {index}\n" for index in range(lines - 2))
    return f"{indent}def {name}() -> int:\n{body}{indent}    return 0\n"


def _package(root: Path, module_lines: int, function_lines: int) -> Path:
    """src/pkg/ with one module of `module_lines` lines holding a method of `function_lines` lines."""
    package = root / "src" / "pkg"
    package.mkdir(parents=True)
    text = "class Big:\n" + _function("work", function_lines, indent="    ")
    text += "".join(f"# filler {index}\n" for index in range(module_lines - len(text.splitlines())))
    (package / "big.py").write_text(text)
    (package / "small.py").write_text(_function("fine", 10))
    return package


def _check(root: Path, exceptions: dict[str, str]) -> list[str]:
    problems: list[str] = sizes.check([root / "src"], root, exceptions, "exceptions.txt")
    return problems


def test_the_limits_are_the_house_rules() -> None:
    assert (sizes.MODULE_LINES, sizes.FUNCTION_LINES) == (450, 80)


def test_a_module_and_a_function_at_their_limits_pass(tmp_path: Path) -> None:
    _package(tmp_path, module_lines=450, function_lines=80)
    assert _check(tmp_path, {}) == []


def test_a_long_module_and_a_long_method_are_reported_by_name(tmp_path: Path) -> None:
    _package(tmp_path, module_lines=451, function_lines=81)
    assert _check(tmp_path, {}) == [
        "src/pkg/big.py: 451 lines, over the limit of 450 (split it, or list it with its reason in exceptions.txt)",
        "src/pkg/big.py::Big.work: 81 lines, over the limit of 80 (split it, or list it with its reason in "
        "exceptions.txt)",
    ]


def test_a_nested_function_is_measured_on_its_own_and_named_inside_its_parent(tmp_path: Path) -> None:
    package = tmp_path / "src" / "pkg"
    package.mkdir(parents=True)
    outer = "def outer() -> None:\n" + _function("inner", 90, indent="    ")
    (package / "nested.py").write_text(outer)
    assert [line.split(": ")[0] for line in _check(tmp_path, {})] == [
        "src/pkg/nested.py::outer",
        "src/pkg/nested.py::outer.inner",
    ]


def test_listed_exceptions_pass(tmp_path: Path) -> None:
    _package(tmp_path, module_lines=500, function_lines=100)
    listed = {"src/pkg/big.py": "two jobs, split later", "src/pkg/big.py::Big.work": "one long table"}
    assert _check(tmp_path, listed) == []


def test_an_exception_that_excepts_nothing_is_reported(tmp_path: Path) -> None:
    _package(tmp_path, module_lines=100, function_lines=20)
    listed = {"src/pkg/big.py": "was long once", "src/pkg/gone.py::f": "moved away"}
    assert _check(tmp_path, listed) == [
        "exceptions.txt: src/pkg/big.py is no longer over its limit (or is gone): remove its exception",
        "exceptions.txt: src/pkg/gone.py::f is no longer over its limit (or is gone): remove its exception",
    ]


def test_the_exceptions_file_needs_a_reason_on_each_line_and_each_target_once() -> None:
    text = "# a comment\n\nsrc/a.py  why a\nsrc/b.py\nsrc/a.py  again\n"
    listed, problems = sizes.read_exceptions(text, "x.txt")
    assert listed == {"src/a.py": "why a"}
    assert problems == [
        "x.txt:4: src/b.py: an exception needs its reason, after the path",
        "x.txt:5: src/a.py: listed twice",
    ]


def test_the_command_exits_1_naming_each_problem_and_0_once_excepted(tmp_path: Path) -> None:
    _package(tmp_path, module_lines=460, function_lines=10)
    exceptions = tmp_path / "exceptions.txt"
    exceptions.write_text("")
    command = [sys.executable, str(SCRIPT), "--exceptions", "exceptions.txt", "src"]
    failed = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert failed.returncode == 1
    assert failed.stderr.startswith("sizes: src/pkg/big.py: 460 lines, over the limit of 450")
    exceptions.write_text("src/pkg/big.py  a reason\n")
    passed = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert (passed.returncode, passed.stderr) == (0, "")


def test_the_repositorys_exceptions_file_reads_cleanly() -> None:
    listed, problems = sizes.read_exceptions(sizes.EXCEPTIONS.read_text(), "size_exceptions.txt")
    assert problems == []
    assert all(target.startswith("src/meta_agent/") for target in listed)
