"""``pytfcomm/_core.pyi`` against the built ``pytfcomm._core``: the stub may not drift.

Checked both ways: every public name of the module (functions, classes, their public
methods and properties, ``__init__`` where the bindings define one) is in the stub, and
every name in the stub exists in the module, as the same kind (class, function, method,
property). For functions and methods the parameter names are compared with the
signature pybind11 writes on the first line of ``__doc__`` (``__text_signature__``
where a callable has one): the same names in the same order, the same ones with a
default (equal defaults where the stub writes a literal). An argument the bindings
leave unnamed (pybind11 calls it ``arg0``, ``arg1``, ...; it cannot be passed by
keyword) must be positional-only in the stub, under any name. Return and argument
types are not compared: pybind11 spells them differently.

GPU parts. A build without CUDA keeps the name ``GpuCommunicator`` but as a function
that raises ConfigError (csrc/bindings/gpu_bindings.cc). The stub describes the CUDA
build, between the comment lines ``# cuda-only: begin`` and ``# cuda-only: end``. In a
CUDA build (``build_info()["cuda"]``) that section is checked like the rest; without
CUDA only its top-level names are required to exist. Nothing else is optional, and the
module not importing is a failure, never a skip.
"""

from __future__ import annotations

import ast
import inspect
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import pytfcomm._core as core

STUB = Path(core.__file__).with_name("_core.pyi")
BEGIN, END = "# cuda-only: begin", "# cuda-only: end"
UNNAMED = re.compile(r"arg\d+")


# --------------------------------------------------------------------------- the stub


@dataclass
class StubFunction:
    name: str
    args: ast.arguments
    lineno: int


@dataclass
class StubClass:
    name: str
    lineno: int
    methods: dict[str, StubFunction] = field(default_factory=dict)
    properties: dict[str, bool] = field(default_factory=dict)  # name -> has a setter


@dataclass
class Stub:
    functions: dict[str, StubFunction]
    classes: dict[str, StubClass]
    variables: dict[str, ast.expr]
    cuda_only: range  # line numbers of the cuda-only section


def _decorators(node: ast.FunctionDef) -> list[str]:
    return [ast.unparse(d) for d in node.decorator_list]


def _read_stub() -> Stub:
    text = STUB.read_text()
    lines = text.splitlines()
    begins = [i + 1 for i, line in enumerate(lines) if line.strip() == BEGIN]
    ends = [i + 1 for i, line in enumerate(lines) if line.strip() == END]
    assert len(begins) == 1 and len(ends) == 1 and begins[0] < ends[0], (
        f"{STUB} must have one '{BEGIN}' line and, after it, one '{END}' line"
    )
    stub = Stub({}, {}, {}, range(begins[0], ends[0]))
    helpers: dict[str, StubClass] = {}
    for node in ast.parse(text, filename=str(STUB)).body:
        if isinstance(node, ast.FunctionDef):
            assert not _decorators(node), f"stub line {node.lineno}: decorated function"
            stub.functions[node.name] = StubFunction(node.name, node.args, node.lineno)
        elif isinstance(node, ast.ClassDef):
            cls = StubClass(node.name, node.lineno)
            # A stub-only base for typing (the enums' _Enum) is not a name of the
            # module: its members count as members of the classes built on it.
            for base in node.bases:
                if isinstance(base, ast.Name) and base.id in helpers:
                    cls.methods.update(helpers[base.id].methods)
                    cls.properties.update(helpers[base.id].properties)
            for item in node.body:
                if not isinstance(item, ast.FunctionDef):
                    continue
                decorators = _decorators(item)
                if decorators == ["property"]:
                    cls.properties[item.name] = False
                elif decorators == [f"{item.name}.setter"]:
                    cls.properties[item.name] = True
                else:
                    assert not decorators, f"stub line {item.lineno}: {decorators}"
                    cls.methods[item.name] = StubFunction(item.name, item.args, item.lineno)
            (helpers if node.name.startswith("_") else stub.classes)[node.name] = cls
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            stub.variables[node.target.id] = node.annotation
    return stub


# --------------------------------------------------------------------------- the module


def _public(names: Any) -> list[str]:
    return sorted(n for n in names if not n.startswith("_"))


def _is_binding(obj: Any) -> bool:
    """A function pybind11 made (its docstring starts with its signature)."""
    return callable(obj) and not isinstance(obj, type) and _doc_signatures(obj) != []


def _doc_signatures(obj: Any) -> list[str]:
    """The signatures pybind11 put in ``__doc__`` (several for an overloaded function)."""
    name = getattr(obj, "__name__", "")
    doc = getattr(obj, "__doc__", None) or ""
    if not name or not doc.startswith(f"{name}("):
        return []
    if "\nOverloaded function.\n" in doc:
        pattern = re.compile(rf"^\d+\. ({re.escape(name)}\(.*)$", re.MULTILINE)
        return pattern.findall(doc)
    return [doc.splitlines()[0]]


def _class_members(cls: type) -> tuple[set[str], set[str], dict[str, bool]]:
    """(methods, properties, property -> has a setter) the bindings define on ``cls``."""
    methods, properties, setters = set(), set(), {}
    for name, value in vars(cls).items():
        if isinstance(value, property):
            if not name.startswith("_"):
                properties.add(name)
                setters[name] = value.fset is not None
        elif isinstance(value, cls):
            continue  # an enum member (pybind11 enums): skipped
        elif name == "__init__" and _is_binding(value):
            methods.add(name)  # pybind11's default __init__ only says "No constructor"
        elif not name.startswith("_") and callable(value):
            methods.add(name)
    return methods, properties, setters


# --------------------------------------------------------------------------- signatures


@dataclass
class Param:
    name: str
    positional_only: bool
    default: str | None  # source text of the default, None when there is none


def _params_from_ast(args: ast.arguments) -> list[Param]:
    positional = [*args.posonlyargs, *args.args]
    defaults: list[ast.expr | None] = [None] * (len(positional) - len(args.defaults))
    defaults += args.defaults
    params = [
        Param(a.arg, i < len(args.posonlyargs), None if d is None else ast.unparse(d))
        for i, (a, d) in enumerate(zip(positional, defaults, strict=True))
    ]
    if args.vararg:
        params.append(Param("*" + args.vararg.arg, False, None))
    for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True):
        params.append(Param(a.arg, False, None if d is None else ast.unparse(d)))
    if args.kwarg:
        params.append(Param("**" + args.kwarg.arg, False, None))
    return params


def _params_from_signature(line: str) -> list[Param]:
    """Parameters of a pybind11 signature line, ``name(a: T, b: U = 1) -> R``."""
    inside = line[line.index("(") + 1 : line.rindex(")")]
    inside = re.sub(r"<[^<>]*>", "...", inside)  # reprs such as <Foo object at 0x...>
    tree = ast.parse(f"def f({inside}): pass")
    fn = tree.body[0]
    assert isinstance(fn, ast.FunctionDef)
    return _params_from_ast(fn.args)


def _real_params(obj: Any) -> list[list[Param]]:
    """Each signature of ``obj`` (one, or one per overload) as a parameter list."""
    if getattr(obj, "__text_signature__", None):
        sig = inspect.signature(obj)
        return [
            [
                Param(
                    ("*" if p.kind is p.VAR_POSITIONAL else "**" if p.kind is p.VAR_KEYWORD else "")
                    + p.name,
                    p.kind is p.POSITIONAL_ONLY,
                    None if p.default is p.empty else repr(p.default),
                )
                for p in sig.parameters.values()
            ]
        ]
    signatures = _doc_signatures(obj)
    assert signatures, f"{obj!r} has no signature in __doc__ or __text_signature__"
    return [_params_from_signature(s) for s in signatures]


def _literal(text: str) -> Any:
    try:
        return ast.literal_eval(text)
    except ValueError:
        return ...


def _compare(where: str, stub: list[Param], real: list[Param]) -> list[str]:
    """What differs between the stub's parameters and the module's; [] when they agree."""
    problems = []
    if [p.name.startswith("*") for p in stub] != [p.name.startswith("*") for p in real] or len(
        stub
    ) != len(real):
        return [
            f"{where}: stub ({', '.join(p.name for p in stub)}) vs module "
            f"({', '.join(p.name for p in real)})"
        ]
    for s, r in zip(stub, real, strict=True):
        if UNNAMED.fullmatch(r.name):
            if not s.positional_only:
                problems.append(
                    f"{where}: {s.name!r} is unnamed in the bindings ({r.name}, positional "
                    "only): put it before '/' in the stub"
                )
        elif s.name != r.name:
            problems.append(f"{where}: stub names {s.name!r} where the module has {r.name!r}")
        if (s.default is None) != (r.default is None):
            has = "has" if s.default is not None else "lacks"
            problems.append(f"{where}: {s.name!r} {has} a default in the stub only")
        elif s.default not in (None, "...") and _literal(s.default) is not ...:
            if _literal(s.default) != _literal(r.default or ""):
                problems.append(
                    f"{where}: {s.name!r} defaults to {s.default} in the stub but to "
                    f"{r.default} in the module"
                )
    return problems


def _check_callable(where: str, stub_fn: StubFunction, obj: Any) -> list[str]:
    stub = _params_from_ast(stub_fn.args)
    attempts = [_compare(where, stub, real) for real in _real_params(obj)]
    return [] if any(not a for a in attempts) else attempts[0]


# --------------------------------------------------------------------------- tests


@pytest.fixture(scope="module")
def stub() -> Stub:
    assert STUB.is_file(), f"no stub beside the module: {STUB}"
    return _read_stub()


def _cuda_build() -> bool:
    return bool(core.build_info()["cuda"])


def _optional(stub: Stub, lineno: int) -> bool:
    """Whether a stub entry at ``lineno`` may differ in this build (cuda-only, no CUDA)."""
    return lineno in stub.cuda_only and not _cuda_build()


def test_every_module_name_is_in_the_stub(stub: Stub) -> None:
    documented = {*stub.functions, *stub.classes, *stub.variables}
    missing = [n for n in _public(dir(core)) if n not in documented]
    assert not missing, f"in pytfcomm._core but not in {STUB.name}: {missing}"


def test_every_stub_name_is_in_the_module(stub: Stub) -> None:
    absent = [n for n in [*stub.functions, *stub.classes, *stub.variables] if not hasattr(core, n)]
    assert not absent, f"in {STUB.name} but not in pytfcomm._core: {absent}"


def test_module_variables(stub: Stub) -> None:
    for name, annotation in stub.variables.items():
        kind = ast.unparse(annotation)
        value = getattr(core, name)
        if kind in ("str", "int", "float", "bool"):
            assert type(value).__name__ == kind, f"{name} is {type(value).__name__}, stub {kind}"


def test_functions(stub: Stub) -> None:
    problems = []
    for name, fn in stub.functions.items():
        obj = getattr(core, name)
        if isinstance(obj, type):
            problems.append(f"{name}: a class in the module, a function in the stub")
        else:
            problems += _check_callable(name, fn, obj)
    assert not problems, "\n".join(problems)


def test_classes_and_their_members(stub: Stub) -> None:
    problems = []
    for name, cls in stub.classes.items():
        obj = getattr(core, name)
        if not isinstance(obj, type):
            if not _optional(stub, cls.lineno):
                kind = type(obj).__name__
                problems.append(f"{name}: a class in the stub, a {kind} in the module")
            continue
        methods, properties, setters = _class_members(obj)
        # As on the module's side: public methods and __init__ (dunders such as the
        # enums' __int__ come from pybind11's bases, not from the bindings).
        stub_methods = {m for m in cls.methods if not m.startswith("_") or m == "__init__"}
        if stub_methods != methods:
            problems.append(
                f"{name} methods: only in the module {sorted(methods - stub_methods)}, "
                f"only in the stub {sorted(stub_methods - methods)}"
            )
        if set(cls.properties) != properties:
            problems.append(
                f"{name} properties: only in the module {sorted(properties - set(cls.properties))}"
                f", only in the stub {sorted(set(cls.properties) - properties)}"
            )
        for prop, has_setter in cls.properties.items():
            if prop in setters and setters[prop] != has_setter:
                problems.append(f"{name}.{prop}: settable in one of stub and module only")
        for meth in sorted(stub_methods & methods):
            problems += _check_callable(f"{name}.{meth}", cls.methods[meth], vars(obj)[meth])
    assert not problems, "\n".join(problems)


def test_the_cuda_only_section_is_what_a_build_without_cuda_lacks(stub: Stub) -> None:
    """The section holds GpuCommunicator, the one name whose form depends on CUDA; outside
    it nothing is optional, so the section cannot quietly grow to hide drift."""
    inside = sorted(
        n
        for n, entry in [*stub.functions.items(), *stub.classes.items()]
        if entry.lineno in stub.cuda_only
    )
    assert inside == ["GpuCommunicator"], inside
    if not _cuda_build():
        assert not isinstance(core.GpuCommunicator, type)
        assert callable(core.GpuCommunicator)  # it raises ConfigError, saying why


def _stub_params(source: str) -> list[Param]:
    fn = ast.parse(source).body[0]
    assert isinstance(fn, ast.FunctionDef)
    return _params_from_ast(fn.args)


def test_the_checker_catches_drift() -> None:
    """The comparison itself: renamed, missing, defaulted and unnamed parameters."""
    stub = _stub_params("def f(self, a, b=1, /, c=2): ...")
    same = _params_from_signature("f(self: X, arg0: int, arg1: int = 1, c: int = 2) -> None")
    assert _compare("f", stub, same) == []
    renamed = _params_from_signature("f(self: X, arg0: int, arg1: int = 1, d: int = 2) -> None")
    assert any("'c' where the module has 'd'" in p for p in _compare("f", stub, renamed))
    named = _params_from_signature("f(self: X, a: int, b: int = 1, c: int = 2) -> None")
    assert _compare("f", stub, named) == []  # positional-only in the stub is fine
    loose = _stub_params("def f(self, a, b=1, c=2): ...")
    assert any("before '/'" in p for p in _compare("f", loose, same))
    other_default = _params_from_signature("f(self: X, arg0: int, arg1: int = 1, c: int = 3)")
    assert any("defaults to 2" in p for p in _compare("f", stub, other_default))
    no_default = _params_from_signature("f(self: X, arg0: int, arg1: int, c: int = 2)")
    assert any("'b' has a default in the stub only" in p for p in _compare("f", stub, no_default))
    shorter = _params_from_signature("f(self: X, arg0: int, arg1: int = 1) -> None")
    assert _compare("f", stub, shorter)
