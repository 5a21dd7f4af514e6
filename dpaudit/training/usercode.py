"""Code the user names: the only code dpaudit runs besides its own (see the security model in
:mod:`dpaudit.training.external`).

An import path is ``path/to/file.py:name`` or ``module:name``: one source file and one identifier after the colon
(no attribute chains such as ``file.py:torch.load``). A ``module`` is a top-level module resolved, from the current
folder and ``sys.path``, to exactly one ``.py`` source file; a module of a package (``pkg.module``) and a package
(``pkg/__init__.py``) are refused, because importing them runs files the digest does not cover. Files of the
standard library, of dpaudit, of installed (third-party) packages -- anything under ``site-packages`` /
``dist-packages``, a Python installation's ``lib/pythonX.Y``, ``sys.prefix`` or ``sys.base_prefix`` -- are
refused whether named by module or by file path.

The code that runs is the code that was hashed: the file is read once, its sha256 taken from those bytes, and
those bytes are compiled and executed into a fresh module (no ``__pycache__`` bytecode is read or written, the
file is not read a second time). Relative imports (``from . import x``) are refused before anything runs; the
named object must be a function or class defined in that file itself (not one it imported). What the file
imports with ``import x`` is an ordinary import of the user's environment: dpaudit adds no folder (never a
bundle's, nor the file's own) to ``sys.path``. So a module *beside* the file (``import mlp`` next to ``mlp.py``)
is not found unless it is on ``sys.path`` anyway: the rule is one pinned file per factory or training function;
helpers go into that file, or into an installed package. The error says so when the missing module lies beside
the file.

:class:`BundleCode` decides whether a bundle's recorded factory / training function may run: only when the user
names the same code (same function name, same sha256 as the bundle records) or opts in with ``trust_bundle``
(``--trust-bundle-code``), which first prints exactly what will run to stderr.
"""

from __future__ import annotations

import ast
import builtins
import hashlib
import importlib.machinery
import inspect
import json
import keyword
import os
import re
import site
import stat
import sys
import sysconfig
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from dpaudit._escape import console_text
from dpaudit.errors import DataError, ParameterError, format_value, worded

__all__ = ["ImportPath", "PinnedCode", "BundleCode", "parse_import_path", "pin_code", "run_pinned", "load_callable",
           "code_digest", "check_code_kwargs", "MAX_CODE_BYTES"]

#: The largest source file pinned and run (a factory or training function is a few kB).
MAX_CODE_BYTES = 16 << 20
_SHA = re.compile(r"[0-9a-f]{64}")
_MODULES: dict[str, types.ModuleType] = {}      # sha256 -> the module executed from exactly those bytes
_ANNOUNCED: set[str] = set()


@dataclass(frozen=True)
class ImportPath:
    """A parsed import path: ``target`` (a file path or a top-level module name) and ``name`` (one identifier)."""

    text: str
    target: str
    name: str
    is_file: bool


def _usage(what: str, path: Any, why: str) -> ParameterError:
    return ParameterError(f"The '{what}' parameter must be an import path 'module:function' (a top-level module) or "
                          f"'path/to/file.py:function', with one function name after the colon; {why}. Got "
                          f"{format_value(path)} instead.")


def parse_import_path(path: Any, what: str) -> ImportPath:
    """Check the form of an import path (see the module docstring); nothing is read or run."""
    if not isinstance(path, str) or "\x00" in path or path.count(":") != 1 or not all(path.split(":")):
        raise _usage(what, path, "it needs exactly one ':' between a module or file and a name")
    target, name = path.split(":")
    if not name.isidentifier() or keyword.iskeyword(name):
        raise _usage(what, path, f"{name!r} is not a single identifier (attribute chains such as 'x.y' are refused)")
    if name.startswith("__") and name.endswith("__"):
        raise _usage(what, path, f"{name!r} is a special (dunder) name")
    if target.endswith(".py"):
        return ImportPath(path, target, name, True)
    if not target.isidentifier() or keyword.iskeyword(target):
        why = ("a module of a package runs the package's __init__.py, which the digest does not cover; name its "
               "file instead (path/to/module.py:function)") if all(
            p.isidentifier() for p in target.split(".")) else f"{target!r} is neither a module name nor a .py file"
        raise _usage(what, path, why)
    return ImportPath(path, target, name, False)


def _roots() -> list[tuple[str, Path]]:
    """(reason, folder) of everything a user's code may not come from, most specific first."""
    out: list[tuple[str, Path]] = [("dpaudit itself", Path(__file__).resolve().parents[1])]
    for key in ("stdlib", "platstdlib"):
        path = sysconfig.get_paths().get(key)
        if path:
            out.append(("the standard library", Path(path).resolve()))
    third = [sysconfig.get_paths().get(k) for k in ("purelib", "platlib")]
    try:
        third += list(site.getsitepackages())
    except AttributeError:  # pragma: no cover - old virtualenv's site module
        pass
    try:
        third.append(site.getusersitepackages())
    except AttributeError:  # pragma: no cover
        pass
    out += [("an installed (third-party) package", Path(p).resolve()) for p in third if p]
    for prefix in {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}:
        p = Path(prefix).resolve()
        if p != Path(p.anchor):
            out.append(("the Python installation", p))
    return sorted(out, key=lambda item: -len(item[1].parts))     # the deepest folder names the reason


def _foreign(file: Path) -> str | None:
    """Why ``file`` (resolved) is not the user's own code, or None."""
    for why, root in _roots():
        if file == root or root in file.parents:
            return f"{why} ({root})"
    parts = [p.lower() for p in file.parts]
    if "site-packages" in parts or "dist-packages" in parts:
        return "an installed (third-party) package (a site-packages / dist-packages folder)"
    for a, b in zip(parts, parts[1:]):
        if a in ("lib", "lib64") and re.fullmatch(r"python\d+(\.\d+)?t?", b):
            return "a Python installation's library"
    return None


class _Foreign(DataError):
    """An import path naming code that is never the user's own (standard library, dpaudit, an installed package, a
    package, compiled code)."""


def _resolve(ip: ImportPath, what: str, base: Path | None) -> Path:
    """The one source file ``ip`` names (checked: exists, regular file, not a package, not foreign code)."""
    if ip.is_file:
        raw = Path(ip.target).expanduser()
        if not raw.is_absolute() and base is not None:
            raw = Path(base) / raw
        try:
            file = raw.resolve(strict=True)
        except (OSError, RuntimeError):
            raise DataError(f"{what} {ip.text!r}: the file {str(raw)!r} does not exist.") from None
        if file.name == "__init__.py":
            raise _Foreign(f"{what} {ip.text!r}: {file} is a package's __init__.py; dpaudit runs one module file, "
                           "not a package.")
    else:
        top = ip.target
        if top in getattr(sys, "stdlib_module_names", ()) or top in sys.builtin_module_names:
            raise _Foreign(f"{what} {ip.text!r}: dpaudit runs factories and training functions from your own code "
                           "only, not from the standard library.")
        if top == "dpaudit":
            raise _Foreign(f"{what} {ip.text!r}: dpaudit runs factories and training functions from your own code "
                           "only, not from dpaudit.")
        try:
            spec = importlib.machinery.PathFinder.find_spec(top, [os.getcwd(), *sys.path])
        except (ImportError, ValueError, OSError) as exc:
            raise DataError(f"{what} {ip.text!r}: cannot locate module {top!r} ({exc}).") from None
        if spec is None or not spec.origin:
            raise DataError(f"{what} {ip.text!r}: no module named {top!r} (is it in the current directory or on "
                            "PYTHONPATH?).")
        origin = Path(spec.origin).resolve()
        why = _foreign(origin)
        if why is not None:
            raise _Foreign(f"{what} {ip.text!r}: module {top!r} is part of {why}; dpaudit runs factories and "
                           "training functions from your own code only.")
        if spec.submodule_search_locations is not None:
            raise _Foreign(f"{what} {ip.text!r}: {top!r} is a package ({origin}); importing it runs files the "
                           "digest does not cover. Name one module file instead (path/to/module.py:function).")
        file = origin
    why = _foreign(file)
    if why is not None:
        raise _Foreign(f"{what} {ip.text!r}: {file} is part of {why}; dpaudit runs factories and training "
                       "functions from your own code only.")
    if file.suffix != ".py":
        raise _Foreign(f"{what} {ip.text!r}: {file} is not a Python source file (.py); dpaudit runs source it can "
                       "hash, never compiled modules or bytecode.")
    return file


@dataclass(frozen=True)
class PinnedCode:
    """One source file read once: where it is, its sha256, and the very bytes that were hashed."""

    path: ImportPath
    file: Path
    sha256: str
    source: bytes


def pin_code(path: Any, what: str, *, base: str | Path | None = None) -> PinnedCode:
    """Parse ``path``, resolve its source file (relative file paths from ``base``, default the current folder)
    and read it once; nothing runs."""
    ip = parse_import_path(path, what)
    file = _resolve(ip, what, None if base is None else Path(base))
    try:
        fd = os.open(file, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise DataError(f"{what} {ip.text!r}: cannot read {file}: {exc.strerror or exc}.") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise DataError(f"{what} {ip.text!r}: {file} is not a regular file.")
        if st.st_size > MAX_CODE_BYTES:
            raise DataError(f"{what} {ip.text!r}: {file} is {st.st_size} bytes; dpaudit runs source files of at most "
                            f"{MAX_CODE_BYTES} bytes.")
        chunks, left = [], MAX_CODE_BYTES + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    finally:
        os.close(fd)
    source = b"".join(chunks)
    if len(source) > MAX_CODE_BYTES:
        raise DataError(f"{what} {ip.text!r}: {file} is larger than {MAX_CODE_BYTES} bytes.")
    return PinnedCode(ip, file, hashlib.sha256(source).hexdigest(), source)


def code_digest(path: Any, what: str) -> str:
    """sha256 of the source file an import path names (the digest a release records)."""
    return pin_code(path, what).sha256


def _missing_module(file: Path, exc: ModuleNotFoundError) -> str:
    """The reason a pinned file's import failed, with the rule when the module lies beside the file: a pinned file
    runs alone; dpaudit never adds its folder to ``sys.path`` (the module beside it would run unpinned)."""
    top = (exc.name or "").split(".")[0]
    beside = [p for p in (file.parent / f"{top}.py", file.parent / top) if top and (p.is_file() or p.is_dir())]
    if not beside:
        return (f"ModuleNotFoundError: {exc} (a pinned file's imports resolve from your environment -- the current "
                "folder's installed packages and PYTHONPATH -- never from the file's own folder).")
    return (f"it imports {top!r}, the module {str(beside[0])!r} beside it, but a factory or training function is pinned "
            "as one file (the sha256 the release records covers that file only), so dpaudit never adds its folder to "
            f"sys.path and code beside it does not run. Put what it needs from {top!r} into the file itself, or "
            "install that code as a package (an installed package is imported as any dependency, unpinned).")


def run_pinned(pinned: PinnedCode, what: str) -> Callable:
    """Execute the pinned bytes into a fresh module (once per digest) and return the function or class named."""
    label = f"{what} {pinned.path.text!r}"
    module = _MODULES.get(pinned.sha256)
    if module is None:
        try:
            tree = ast.parse(pinned.source, filename=str(pinned.file))
        except (SyntaxError, ValueError) as exc:
            raise DataError(f"{label}: {pinned.file} is not valid Python ({str(exc)[:200]}).") from None
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level:
                raise DataError(f"{label}: {pinned.file} line {node.lineno} has a relative import (from "
                                f"{'.' * node.level}{node.module or ''} import ...); a pinned file runs on its own, "
                                "outside any package, so code beside it would run unpinned. Import absolutely.")
        code = compile(tree, str(pinned.file), "exec", dont_inherit=True)
        name = f"_dpaudit_code_{pinned.sha256[:20]}"
        module = types.ModuleType(name)
        module.__file__ = str(pinned.file)
        module.__dict__["__builtins__"] = builtins
        sys.modules[name] = module        # while it runs, as an import would (dataclasses look their module up)
        try:
            exec(code, module.__dict__)   # noqa: S102 - the user's own code, pinned by its digest
        except ModuleNotFoundError as exc:
            raise DataError(f"{label}: running {str(pinned.file)!r} failed: {_missing_module(pinned.file, exc)}") from None
        except Exception as exc:  # noqa: BLE001 - the user's file failed while running: one line
            raise DataError(f"{label}: running {str(pinned.file)!r} failed: {type(exc).__name__}: {exc}") from None
        finally:
            # not importable by name afterwards: a remote executor gets its functions by value, never re-reads a file
            sys.modules.pop(name, None)
        _MODULES[pinned.sha256] = module
    target = pinned.path.target if not pinned.path.is_file else str(pinned.file)
    if pinned.path.name not in module.__dict__:
        raise DataError(f"{label}: module {target!r} has no attribute {pinned.path.name!r}.")
    obj = module.__dict__[pinned.path.name]
    if not (inspect.isfunction(obj) or inspect.isclass(obj)):
        raise DataError(f"{label}: {pinned.path.name!r} is a {type(obj).__name__}, not a function defined in "
                        f"{pinned.file}.")
    if getattr(obj, "__module__", None) != module.__name__:
        raise DataError(f"{label}: {pinned.path.name!r} is not defined in {pinned.file} (it comes from "
                        f"{getattr(obj, '__module__', '?')!r}); dpaudit calls only functions and classes defined in "
                        "the pinned file itself.")
    return obj


def load_callable(path: Any, what: str, *, sha256: str | None = None, base: str | Path | None = None) -> Callable:
    """Pin ``path``, check its digest against ``sha256`` when given, and return the callable (its file runs)."""
    pinned = pin_code(path, what, base=base)
    if sha256 is not None and pinned.sha256 != sha256:
        raise DataError(f"{what} {pinned.path.text!r}: the code changed since the release was made (sha256 "
                        f"{pinned.sha256[:12]}... is not the recorded {str(sha256)[:12]}...); dpaudit runs only the "
                        "code a release was made with. Re-make the release if the change is yours.")
    return run_pinned(pinned, what)


def _kwarg_value_ok(v: Any, depth: int = 0) -> bool:
    if v is None or isinstance(v, (bool, int, str)):
        return True
    if isinstance(v, float):
        return v == v and v not in (float("inf"), float("-inf"))
    if isinstance(v, (list, tuple)) and depth < 8:
        return all(_kwarg_value_ok(x, depth + 1) for x in v)
    return False


def check_code_kwargs(kwargs: Any, where: str, *, error: type = DataError) -> dict[str, Any]:
    """Keyword arguments for a factory: an object of identifier keys and JSON scalars or lists of them (no
    objects), returned as a plain dict."""
    if kwargs is None:
        return {}
    if not isinstance(kwargs, Mapping):
        raise error(f"{where} must be an object of keyword arguments. Got {format_value(kwargs)} instead.")
    out: dict[str, Any] = {}
    for k, v in kwargs.items():
        if not isinstance(k, str) or not k.isidentifier() or keyword.iskeyword(k) or k.startswith("__"):
            raise error(f"{where}: the keyword {format_value(k)} is not a plain argument name.")
        if not _kwarg_value_ok(v):
            raise error(f"{where}: the value of {k!r} must be a JSON number, string, boolean, null or a list of "
                        f"them. Got {format_value(v)} instead.")
        out[k] = json.loads(json.dumps(v))
    return out


_ROLES = {"factory": ("--factory", "model factory", "model.spec.kwargs.factory"),
          "train_fn": ("--train-fn", "training function", "model.recipe.train_fn")}


def _flag(role: str) -> str:
    """The name of the user's code for ``role`` as the caller spells it: ``--factory`` on the command line,
    ``BundleCode(factory=...)`` from Python."""
    return worded(_ROLES[role][0], f"BundleCode({role}=...)")


def _how_to_run(role: str, name: str) -> str:
    """How to let a bundle's code run, as the caller spells it."""
    flag = _ROLES[role][0]
    return worded(f"Pass {flag} FILE.py:{name} (your copy of that code, checked against the digest) or "
                  "--trust-bundle-code (runs the file the bundle names, after printing it).",
                  f"Pass code=BundleCode({role}='FILE.py:{name}') (your copy of that code, checked against the "
                  "digest) or code=BundleCode(trust_bundle=True) (runs the file the bundle names, after printing it); "
                  f"dpaudit.attack takes the same code= keyword.")


@dataclass(frozen=True)
class BundleCode:
    """The user's decision about the code a bundle names (a torch model's factory, a recipe's training function).

    ``factory`` / ``train_fn``: the user's own import paths (``--factory FILE:NAME``, ``--train-fn FILE:NAME``,
    relative to the current folder); a bundle's recorded code runs only through them, when they name the same
    function and their file has the sha256 the bundle records. ``trust_bundle`` (``--trust-bundle-code``): run
    the code the bundle names as recorded (relative file paths from the bundle folder; still one source file,
    never the standard library, dpaudit or an installed package, and still only with the recorded digest), after
    printing exactly what will run to stderr. With neither, a bundle's code never runs.
    """

    factory: str | None = None
    train_fn: str | None = None
    trust_bundle: bool = False

    def __post_init__(self) -> None:
        for role in _ROLES:
            v = getattr(self, role)
            if v is not None:
                parse_import_path(v, _flag(role))
        if not isinstance(self.trust_bundle, bool):
            raise ParameterError(f"The 'trust_bundle' parameter of BundleCode must be a bool. Got "
                                 f"{format_value(self.trust_bundle)} instead.")

    @classmethod
    def of(cls, code: "BundleCode | None") -> "BundleCode":
        if code is None:
            return cls()
        if not isinstance(code, BundleCode):
            raise ParameterError(f"The 'code' parameter must be a BundleCode or None. Got {type(code).__name__} instead.")
        return code

    def callable_for(self, role: str, recorded: Any, recorded_sha: Any, *, bundle: str | Path,
                     kwargs: Mapping[str, Any] | None = None) -> tuple[Callable, str]:
        """The callable to run for the bundle's ``role`` (``"factory"`` or ``"train_fn"``) and a label naming it;
        a :class:`DataError` saying how to proceed when the user has not named that code."""
        _, what, field = _ROLES[role]
        flag = _flag(role)
        where = f"{bundle}/release.json: {field}"
        rec = parse_import_path(recorded, where)
        if not isinstance(recorded_sha, str) or not _SHA.fullmatch(recorded_sha):
            raise DataError(f"{bundle}/release.json: the {what} {rec.text!r} has no valid recorded code digest "
                            f"({field}_sha256); dpaudit runs only code pinned by the release. Re-make it with "
                            "dpaudit release make.")
        try:        # what the bundle names is never run if it is not someone's own code (nothing is read or run here)
            _resolve(rec, where, Path(bundle))
        except _Foreign:
            raise
        except DataError:
            pass    # not on this machine: the user's own copy decides
        mine = getattr(self, role)
        if mine is not None:
            pinned = pin_code(mine, flag)
            if pinned.path.name != rec.name:
                raise DataError(f"{flag} {mine!r} names the function {pinned.path.name!r}, but the {what} of "
                                f"{bundle} is {rec.name!r} ({rec.text}); name the same code.")
            if pinned.sha256 != recorded_sha:
                raise DataError(f"{flag} {mine!r}: {pinned.file} has sha256 {pinned.sha256[:16]}..., but {bundle} was "
                                f"made with code of sha256 {recorded_sha[:16]}... ({rec.text}); dpaudit runs a bundle's "
                                f"{what} only from the very code it was made with.")
            return run_pinned(pinned, flag), f"{flag} {mine}"
        if self.trust_bundle:
            pinned = pin_code(recorded, where, base=bundle)
            if pinned.sha256 != recorded_sha:
                raise DataError(f"{where} {rec.text!r}: the code changed since the release was made (sha256 "
                                f"{pinned.sha256[:12]}... is not the recorded {recorded_sha[:12]}...); dpaudit runs "
                                "only the code a release was made with.")
            how = (f"called with keyword arguments {json.dumps(dict(kwargs or {}), sort_keys=True)}"
                   if role == "factory" else "called as train(X, y, seed)")
            # the bundle chose the file and function names: shown literally (a name holding ESC[2K ESC[1A CR would
            # otherwise erase this very line, the one that says which code is about to run)
            notice = console_text(f"dpaudit: {worded('--trust-bundle-code', 'BundleCode(trust_bundle=True)')}: running the "
                                  f"{what} that {bundle} names: file {pinned.file} (sha256 {pinned.sha256}), function "
                                  f"{pinned.path.name}, {how}") + "\n"
            if notice not in _ANNOUNCED:        # once per process and bundle (an audit loads a bundle several times)
                _ANNOUNCED.add(notice)
                sys.stderr.write(notice)
                sys.stderr.flush()
            return run_pinned(pinned, where), f"{rec.text} (trusted bundle code)"
        raise DataError(f"{bundle}: its {what} is code the bundle names ({rec.text}, sha256 {recorded_sha[:16]}...), "
                        f"and dpaudit runs no code a bundle names. {_how_to_run(role, rec.name)}")
