"""Import hygiene inside the package, checked on the source: no import circles (at any depth, function-local
imports included), no module importing another module's underscore names, ``__all__`` in every package."""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "dpaudit"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def _walk(tree: ast.AST):
    """Every node, skipping ``if TYPE_CHECKING:`` blocks (they never run)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node):
            stack.extend(node.orelse)
            continue
        yield node
        stack.extend(ast.iter_child_nodes(node))


def _resolve(module: str, node: ast.ImportFrom, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def scan(root: Path = PKG):
    """``(modules, edges, private)``: module names; ``edges[m]`` the dpaudit modules ``m`` imports (a
    ``from pkg import name`` counts as importing ``pkg.name`` when that is a module, else ``pkg``);
    ``private`` the ``(importer, module, name)`` triples importing an underscore name from another module."""
    files = {(_module_name(p) if root == PKG else ".".join(p.relative_to(root.parent).with_suffix("").parts)
              .removesuffix(".__init__")): p for p in sorted(root.rglob("*.py"))}
    modules = set(files)
    top = root.name
    edges: dict[str, set[str]] = {m: set() for m in modules}
    private: list[tuple[str, str, str]] = []
    for mod, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in _walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.split(".")[0] == top and a.name in modules:
                        edges[mod].add(a.name)
            elif isinstance(node, ast.ImportFrom):
                target = _resolve(mod, node, path.name == "__init__.py")
                if target.split(".")[0] != top:
                    continue
                for a in node.names:
                    sub = f"{target}.{a.name}"
                    if sub in modules:
                        edges[mod].add(sub)
                    else:
                        if target in modules:
                            edges[mod].add(target)
                        if a.name.startswith("_") and not a.name.startswith("__") and target != mod:
                            private.append((mod, target, a.name))
    for m in edges:
        edges[m].discard(m)
    return modules, edges, private


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    counter = 0
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in edges:
                    continue
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
    return out


def test_no_import_circles() -> None:
    _, edges, _ = scan()
    assert cycles(edges) == []


def test_no_underscore_names_across_modules() -> None:
    _, _, private = scan()
    assert [f"{a} imports {n} from {b}" for a, b, n in private] == []


def test_every_package_declares_all() -> None:
    missing = [str(p.relative_to(PKG.parent)) for p in sorted(PKG.rglob("__init__.py"))
               if "__all__" not in p.read_text(encoding="utf-8")]
    assert missing == []


def test_checker_finds_a_circle_and_a_private_import(tmp_path: Path) -> None:
    pkg = tmp_path / "dpaudit"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "a.py").write_text("from dpaudit.sub.b import thing\n")
    (pkg / "sub" / "b.py").write_text("def f():\n    from dpaudit.sub import a\n\nfrom .c import _hidden\n")
    (pkg / "sub" / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from dpaudit.sub import a\n")
    _, edges, private = scan(pkg)
    assert cycles(edges) == [["dpaudit.sub.a", "dpaudit.sub.b"]]
    assert private == [("dpaudit.sub.b", "dpaudit.sub.c", "_hidden")]


def test_cli_start_does_not_import_torch():
    """``dpaudit account`` / ``--help`` stay fast: the command modules import torch only when a command needs it."""
    import subprocess
    import sys

    code = "import sys, dpaudit.cli; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
