"""The size check of scripts/lint: no module of the package over 450 lines, no function over 80 lines, except those
listed in scripts/size_exceptions.txt, each with its reason.

    python scripts/sizes.py [--exceptions FILE] [PATH ...]      (default: src, with scripts/size_exceptions.txt)

A module's size is its line count; a function's runs from its `def` line to its last line, docstring and nested
functions included (a nested function is measured on its own too). An exception names a module by its path from the
repository's root, or a function as `PATH::Class.method`; an exception that no longer names something over its limit
is reported too, so the list only ever holds what is still too big. Exit 0 when nothing is over, else 1 with one line
per problem. Standard library only: it runs before anything is installed.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

MODULE_LINES = 450  # a module a reader can hold whole; past it, it has more than one job
FUNCTION_LINES = 80  # a function read at once, on one screen and a half
EXCEPTIONS = Path(__file__).with_name("size_exceptions.txt")


@dataclass(frozen=True, kw_only=True)
class Oversize:
    target: str  # "src/meta_agent/engine.py", or "src/meta_agent/engine.py::Engine.run"
    lines: int
    limit: int


def functions(tree: ast.AST, prefix: str = "") -> Iterator[tuple[str, int]]:
    """Each function of `tree` (methods and nested ones too) as its dotted qualified name and its length in lines."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            assert node.end_lineno is not None
            yield f"{prefix}{node.name}", node.end_lineno - node.lineno + 1
            yield from functions(node, f"{prefix}{node.name}.")
        elif isinstance(node, ast.ClassDef):
            yield from functions(node, f"{prefix}{node.name}.")
        else:
            yield from functions(node, prefix)


def oversizes(path: Path, name: str) -> Iterator[Oversize]:
    """What in the module at `path`, named `name` in reports, is over its limit."""
    text = path.read_text(encoding="utf-8")
    lines = len(text.splitlines())
    if lines > MODULE_LINES:
        yield Oversize(target=name, lines=lines, limit=MODULE_LINES)
    for qualname, length in functions(ast.parse(text, filename=name)):
        if length > FUNCTION_LINES:
            yield Oversize(target=f"{name}::{qualname}", lines=length, limit=FUNCTION_LINES)


def read_exceptions(text: str, source: str) -> tuple[dict[str, str], list[str]]:
    """The exceptions (target -> reason) a file lists, one `TARGET  REASON` a line (`#` starts a comment), and the
    problems of its lines: one with no reason, a target listed twice."""
    listed: dict[str, str] = {}
    problems: list[str] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        target, _, reason = line.strip().partition(" ")
        where = f"{source}:{number}: {target}"
        if not reason.strip():
            problems.append(f"{where}: an exception needs its reason, after the path")
        elif target in listed:
            problems.append(f"{where}: listed twice")
        else:
            listed[target] = reason.strip()
    return listed, problems


def shown(path: Path, root: Path) -> str:
    """`path` as reports and exceptions name it: from the repository's root, with forward slashes."""
    path = path.resolve()
    return path.relative_to(root).as_posix() if path.is_relative_to(root) else path.as_posix()


def check(paths: list[Path], root: Path, exceptions: dict[str, str], source: str) -> list[str]:
    """One line for each thing over its limit and not excepted, and for each exception that excepts nothing."""
    modules = sorted({file for path in paths for file in ([path] if path.is_file() else path.rglob("*.py"))})
    found = [over for module in modules for over in oversizes(module, shown(module, root))]
    problems = [
        f"{over.target}: {over.lines} lines, over the limit of {over.limit} (split it, or list it with its reason "
        f"in {source})"
        for over in found
        if over.target not in exceptions
    ]
    over_now = {over.target for over in found}
    problems += [
        f"{source}: {target} is no longer over its limit (or is gone): remove its exception"
        for target in exceptions
        if target not in over_now
    ]
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("paths", nargs="*", type=Path, default=[Path("src")])
    parser.add_argument("--exceptions", type=Path, default=EXCEPTIONS)
    args = parser.parse_args(argv)
    root = Path.cwd().resolve()  # scripts/lint runs from the repository's root
    source = shown(args.exceptions, root)
    exceptions, problems = read_exceptions(args.exceptions.read_text(encoding="utf-8"), source)
    problems += check(args.paths, root, exceptions, source)
    for problem in problems:
        print(f"sizes: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
