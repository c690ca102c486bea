"""Anti-cheat, the static half: read a candidate's source (never run it) and name the tricks it uses.

``static_findings(source, problem)`` walks the candidate's AST with every import alias resolved
(``import torch.nn.functional as F`` makes ``F.softmax`` read ``torch.nn.functional.softmax``) and
returns one ``Finding`` per trick and line. The tricks are those of issue 6 that show in source:
side streams, threads and processes, lazy tensor subclasses, patched timers (or other torch/time
globals), results cached across calls, the reference's own heavy op or model, reading the harness's
frames, forged verdicts and precision below the problem's dtype. String constants are read too, for
the few tricks that live in C/CUDA source (a created CUDA stream, a detached thread, half precision);
OpenMP and the ``ctypes`` calls that pass tensor pointers to C are legitimate and not reported.

A precision finding is ``policy_dependent``: the ``relaxed`` policy allows TF32/bf16/fp16 as long as
the answer is within its tolerance, ``strict`` does not. ``blocking(findings, policy)`` applies that.
The dynamic half (ops actually executed, streams of the launches, thread counts, ...) runs in the worker.
"""

from __future__ import annotations

import ast
import re
from typing import TYPE_CHECKING

from tools.cheat_tricks import (
    C_FAST_MATH,
    C_L2_PERSIST,
    C_LOW_PRECISION,
    C_SOURCE,
    C_STREAM,
    C_THREAD,
    CACHE_DECORATORS,
    CONTAINERS,
    DYNAMIC_BUILTINS,
    DYNAMIC_CODE,
    FORGERY_STRINGS,
    FRAME_ATTRS,
    FRAME_BUILTINS,
    FRAME_INSPECTION,
    FRAME_MODULES,
    FRAME_NAMES,
    GLOBAL_CALLS,
    GLOBAL_STATE,
    HEAVY_OPS,
    KEY_CALLS,
    L2_CALL_NAMES,
    L2_PERSISTENCE,
    LAZY_TENSOR,
    LOW_DTYPES,
    PATCHED_ROOTS,
    PRECISION_ATTRS,
    PRECISION_CALLS,
    PRECISION_DOWNGRADE,
    PRECISION_METHODS,
    REFERENCE_INHERITANCE,
    REFERENCE_OP,
    REFLECTIVE_CALLABLES,
    RESULT_CACHE,
    SIDE_STREAM,
    STATUS_KEY,
    STREAM_CALLS,
    THREAD,
    THREAD_CALLS,
    THREAD_MODULES,
    THREAD_SAFE_NAMES,
    TIMER_PATCH,
    TIMER_WORDS,
    TORCH_OP_NAMESPACES,
    TRICKS,
    VERDICT_FORGERY,
    Finding,
    blocking,
    heavy_names,
    library_family,
)
from tools.module_routes import (
    GATEWAY_MODULES,
    NAMESPACE_LINKS,
    canonical,
    gateway_route,
    import_call,
    namespace_read,
)

if TYPE_CHECKING:
    from tools.problem import ProblemInfo

__all__ = ["TRICKS", "Finding", "blocking", "static_findings"]


def thread_route(name: str) -> bool:
    """Whether the dotted ``name`` starts work on another thread or process (or may: a module of them)."""
    # The module itself is followed name by name, and its locks start nothing. Only the exact names: a link past
    # one (threading.Lock.__self__ is the _thread module) is flagged with the rest.
    if name == "threading" or name in THREAD_SAFE_NAMES:
        return False
    return (
        name in THREAD_CALLS
        or name.split(".")[0] in THREAD_MODULES
        or name == "torch.multiprocessing"
        or name.startswith("torch.multiprocessing.")
    )


# ----------------------------------------------------------------------------------------- analysis


class _Checker(ast.NodeVisitor):
    def __init__(self, source: str, heavy: set[str], low_dtypes: set[str]) -> None:
        self.source = source
        self.heavy = heavy
        self.low = low_dtypes  # dtypes below the problem's: float16, bfloat16, tf32
        self.aliases: dict[str, str] = {}  # local name -> dotted module path
        self.findings: list[Finding] = []
        self.defined_classes: set[str] = set()
        self.cached_functions: set[str] = set()
        self.module_containers: set[str] = set()  # module-level names bound to dicts/lists/None
        self.function_stack: list[ast.FunctionDef | ast.AsyncFunctionDef] = []
        self.module_names: set[str] = set()  # names bound at module level (C libraries, kernels, constants)
        self.alias_values: set[int] = set()  # ids of values assigned to a plain name and followed as its alias

    # ---- helpers

    def add(self, trick: str, node: ast.AST | None, detail: str, policy_dependent: bool = False) -> None:
        line = getattr(node, "lineno", None)
        self.findings.append(Finding(trick, line, detail, policy_dependent))

    def dotted(self, node: ast.AST) -> str | None:
        """The fully qualified dotted name of a Name/Attribute chain, import aliases resolved."""
        parts: list[str] = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if isinstance(node, ast.Call):  # __import__("os").sys, importlib.import_module("os").sys ...
            returned = import_call(node, self.callee(node.func))[2]
            return ".".join([returned, *reversed(parts)]) if returned else None
        if not isinstance(node, ast.Name):
            return None
        root = self.aliases.get(node.id)
        if root is None:
            return None
        parts.append(root)
        return ".".join(reversed(parts))

    def callee(self, func: ast.AST) -> str | None:
        """The called function's dotted name, module links followed; a bare builtin as ``builtins.NAME``."""
        if isinstance(func, ast.Name) and func.id not in self.aliases:
            return f"builtins.{func.id}"
        name = self.dotted(func)
        return canonical(name) if name else None

    def check_name_getter(self, node: ast.Call, callee: str) -> None:
        """``operator.attrgetter("sys.modules")`` follows a dotted name held in a string: each link is read as a
        ``getattr`` would be; ``methodcaller``'s method name likewise."""
        names = node.args if callee.endswith("attrgetter") else node.args[:1]
        for arg in names:
            if not (isinstance(arg, ast.Constant) and isinstance(arg.value, str)):
                self.add(DYNAMIC_CODE, node, f"{callee} with a computed name")
                continue
            links = [
                p for p in arg.value.split(".") if p in GATEWAY_MODULES or p in NAMESPACE_LINKS or p in FRAME_ATTRS
            ]
            if links:
                self.add(FRAME_INSPECTION, node, f"{callee}({arg.value!r}) reads .{links[0]}: other modules or frames")

    def in_forward(self) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        for f in reversed(self.function_stack):
            if f.name in ("forward", "__call__"):
                return f
        return None

    def check_module_name(self, name: str, node: ast.AST) -> None:
        if thread_route(name):
            self.add(THREAD, node, f"imports {name}: work on another thread or process escapes the timer")
        for m in FRAME_MODULES:
            if name == m or name.startswith(m + "."):
                self.add(FRAME_INSPECTION, node, f"imports {name}, which can read the harness's frames or objects")
        if name.startswith("tools.") and name.split(".")[1] not in ("compile", "errors"):
            self.add(FRAME_INSPECTION, node, f"imports the harness module {name}")

    def check_name(self, name: str, node: ast.AST) -> None:
        """Rules on a resolved dotted name, wherever it appears (called, passed, assigned), as written and with
        its module links followed (``os.sys.modules`` is ``sys.modules``: tools.module_routes)."""
        real = canonical(name)
        via = gateway_route(name)
        if via is not None:
            self.add(FRAME_INSPECTION, node, f"reaches the {via} module through {name}: the checks follow modules by "
                     "their own import only")  # fmt: skip
        if (module := namespace_read(name)) is not None:
            self.add(FRAME_INSPECTION, node, f"reads the namespace of module {module} ({name}) by computed keys")
        for link in name.split(".")[1:-1]:  # the last link is the node's own attribute: visit_Attribute reads it
            if link in FRAME_ATTRS:
                self.add(FRAME_INSPECTION, node, f"reads .{link} in {name}, which reaches other frames or objects")
        for spelling in dict.fromkeys((name, real)):
            self.check_spelling(spelling, node)

    def check_spelling(self, name: str, node: ast.AST) -> None:
        if name.split(".")[-1] in L2_CALL_NAMES:
            self.add(L2_PERSISTENCE, node, f"uses {name}: data kept hot in L2 survives the cache flush")
        if name in STREAM_CALLS:
            self.add(SIDE_STREAM, node, f"uses {name}: work on a stream other than the current one escapes the timer")
        if thread_route(name):
            self.add(THREAD, node, f"uses {name}: work on another thread or process escapes the timer")
        if name in FRAME_NAMES or name.startswith(("inspect.", "gc.", *(n + "." for n in FRAME_NAMES))):
            self.add(FRAME_INSPECTION, node, f"uses {name}, which can read the harness's frames or objects")
        if name in GLOBAL_CALLS:
            self.add(GLOBAL_STATE, node, f"calls {name}, which changes how the reference runs too")
        if name in PRECISION_CALLS:
            self.add(PRECISION_DOWNGRADE, node, f"uses {name}: lower precision than fp32", True)
        for dtype, spellings in LOW_DTYPES.items():
            if name in spellings and dtype in self.low:
                self.add(PRECISION_DOWNGRADE, node, f"uses {name}, below the problem's precision", True)
        if name in ("torch.Tensor._make_subclass", "torch.Tensor._make_wrapper_subclass") or name.startswith(
            ("torch.overrides", "torch.utils._python_dispatch", "torch._subclasses")
        ):
            self.add(LAZY_TENSOR, node, f"uses {name}: a tensor subclass or dispatch mode can compute lazily")
        if name.startswith("os.write") or name in ("os.fdopen", "os.dup2", "os.dup", "os.pwrite", "os.writev"):
            self.add(VERDICT_FORGERY, node, f"uses {name}: writing to raw file descriptors can forge the verdict")
        self.check_heavy(name, node)

    def check_heavy(self, name: str, node: ast.AST) -> None:
        if not self.heavy:
            return
        head, _, last = name.rpartition(".")
        if last in self.heavy and (head in TORCH_OP_NAMESPACES or head.startswith("torch.ops.aten")):
            self.add(REFERENCE_OP, node, f"uses {name}, the reference's own op")
        elif head.startswith("torch.ops.aten") and head.split(".")[-1] in self.heavy:
            self.add(REFERENCE_OP, node, f"uses {head}, the reference's own op")

    # ---- imports

    def visit_Import(self, node: ast.Import) -> None:
        for a in node.names:
            if a.asname:
                self.aliases[a.asname] = a.name
            else:
                self.aliases[a.name.split(".")[0]] = a.name.split(".")[0]
            self.check_module_name(a.name, node)
        self.generic_visit(node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        mod = "." * node.level + (node.module or "")
        self.check_module_name(mod, node)
        for a in node.names:
            full = f"{mod}.{a.name}"
            self.aliases[a.asname or a.name] = full
            if a.name == "Model":
                self.add(REFERENCE_INHERITANCE, node, f"imports the problem's Model from {mod}")
            elif a.name != "*":
                self.check_module_name(full, node)
                self.check_name(full, node)
            elif mod == "threading":  # binds Thread and Timer under names no alias records
                self.add(THREAD, node, "imports every name of threading, Thread among them")
            elif mod.split(".")[0] in GATEWAY_MODULES:  # from sys import *: a bare `modules`
                self.add(FRAME_INSPECTION, node, f"imports every name of {mod}")
        self.generic_visit(node)

    # ---- names and attributes

    def visit_Attribute(self, node: ast.Attribute) -> None:
        name = self.dotted(node)
        if name is not None:
            self.check_name(name, node)
        if node.attr in FRAME_ATTRS:
            self.add(FRAME_INSPECTION, node, f"reads .{node.attr}, which reaches other frames or objects")
        if node.attr in PRECISION_ATTRS and isinstance(node.ctx, ast.Store) and "tf32" in self.low:
            self.add(PRECISION_DOWNGRADE, node, f"sets {node.attr}: TF32 or reduced-precision reductions", True)
        if node.attr in ("as_subclass", "_make_subclass", "_make_wrapper_subclass"):
            self.add(LAZY_TENSOR, node, f"uses .{node.attr}(): a tensor subclass can compute lazily")
        if name is None:
            if node.attr in GATEWAY_MODULES:  # m.sys where m is a module the checks lost track of ([os][0], f())
                self.add(FRAME_INSPECTION, node, f"reads an attribute named {node.attr}, the module's name")
            self.generic_visit(node)
        else:  # a resolved chain: its inner links (cupy.cuda.Stream of ...Stream.from_external) are not uses
            base = node.value
            while isinstance(base, ast.Attribute):
                base = base.value
            if isinstance(base, ast.Call):
                self.visit(base)

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, ast.Load):
            if node.id in self.aliases and self.aliases[node.id] != node.id:
                name = self.aliases[node.id]
                # `from torch.nn.functional import softmax` then `softmax(x)`
                self.check_heavy(name, node)
            if node.id == "Model" and "Model" not in self.defined_classes:
                self.add(REFERENCE_INHERITANCE, node, "uses the problem's Model")
            if node.id in ("__builtins__", "__loader__", "__spec__"):
                self.add(FRAME_INSPECTION, node, f"reads {node.id}")
            self.check_bare_module(node)
        self.generic_visit(node)

    def check_bare_module(self, node: ast.Name) -> None:
        """A gateway module, or threading, used as a value (passed, stored, returned): the checks read their
        attributes by name only, and a module handed on is used under names they cannot follow."""
        if self.tracked(node):
            return
        module = canonical(self.aliases[node.id]) if node.id in self.aliases else None
        if module in GATEWAY_MODULES:
            self.add(FRAME_INSPECTION, node, f"passes the {module} module around as a value")
        elif module == "threading":
            self.add(THREAD, node, "passes the threading module around as a value: its Thread escapes the checks")

    def tracked(self, node: ast.AST) -> bool:
        """Whether ``node`` is the value of a plain ``name = value``, which visit_Assign follows as an alias."""
        return id(node) in self.alias_values

    def visit_BinOp(self, node: ast.BinOp) -> None:
        if isinstance(node.op, ast.MatMult) and "matmul" in self.heavy:
            self.add(REFERENCE_OP, node, "uses the @ operator: the reference's own matmul")
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        if isinstance(node.op, ast.MatMult) and "matmul" in self.heavy:
            self.add(REFERENCE_OP, node, "uses the @= operator: the reference's own matmul")
        self.check_targets([node.target], node)
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str):
            self.check_string(node.value, node)
        elif isinstance(node.value, bytes):
            self.check_string(node.value.decode("latin-1"), node)
        self.generic_visit(node)

    def check_string(self, text: str, node: ast.Constant) -> None:
        m = FORGERY_STRINGS.search(text)
        if m:
            self.add(VERDICT_FORGERY, node, f"mentions {m.group(0)!r}, the worker's result channel")
        if not C_SOURCE.search(text):  # prose (docstrings) is not read for C patterns
            return
        first = node.lineno
        for pattern, trick, what, dependent in self.c_rules():
            m = pattern.search(text)
            if m:
                line = first + text.count("\n", 0, m.start())
                self.findings.append(Finding(trick, line, f"C/CUDA source {what} ({m.group(0).strip()!r})", dependent))

    def c_rules(self) -> list[tuple[re.Pattern[str], str, str, bool]]:
        rules = [
            (C_STREAM, SIDE_STREAM, "creates or uses its own CUDA stream", False),
            (C_THREAD, THREAD, "detaches a thread or forks", False),
            (C_L2_PERSIST, L2_PERSISTENCE, "keeps data persistent in L2 across the cache flush", False),
        ]
        for dtype, pattern in C_LOW_PRECISION.items():
            if dtype in self.low:
                rules.append((pattern, PRECISION_DOWNGRADE, f"computes in {dtype}", True))
        return rules

    # ---- calls

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        name = self.dotted(func)
        callee = self.callee(func)
        # A builtin however it is spelled: print, builtins.print, `from builtins import print as p`.
        builtin = callee is not None and callee.startswith("builtins.") and callee.count(".") == 1
        fname = callee.removeprefix("builtins.") if builtin else None  # type: ignore[union-attr]
        is_import, imported, _ = import_call(node, callee)
        if is_import:
            self.check_import_call(imported, callee, node)
        elif fname in DYNAMIC_BUILTINS:
            self.add(DYNAMIC_CODE, node, f"calls {fname}(): code the checks cannot read")
        if fname in FRAME_BUILTINS and node.args:
            self.add(FRAME_INSPECTION, node, f"calls {fname}() on another object")
        if fname in ("getattr", "setattr", "delattr", "hasattr") and node.args:
            target = self.dotted(node.args[0])
            attr = node.args[1] if len(node.args) > 1 else None
            literal = isinstance(attr, ast.Constant) and isinstance(attr.value, str)
            if target is not None:
                if literal:
                    self.check_name(f"{target}.{attr.value}", node)  # type: ignore[union-attr]
                    if attr.value in FRAME_ATTRS:  # type: ignore[union-attr]
                        self.add(FRAME_INSPECTION, node, f"reads .{attr.value}")  # type: ignore[union-attr]
                elif fname == "getattr":
                    self.add(DYNAMIC_CODE, node, f"getattr on {target} with a computed name")
                if fname in ("setattr", "delattr") and target.split(".")[0] in PATCHED_ROOTS:
                    self.patched(target + (f".{attr.value}" if literal else ""), node)  # type: ignore[union-attr]
            elif literal and attr.value in GATEWAY_MODULES:  # type: ignore[union-attr]
                # getattr(m, "sys") where m is a module the checks lost track of
                self.add(FRAME_INSPECTION, node, f"reads an attribute named {attr.value}, the module's name")  # type: ignore[union-attr]
        if callee in ("operator.attrgetter", "operator.methodcaller"):
            self.check_name_getter(node, callee)
        for arg in [*node.args, *(k.value for k in node.keywords)]:
            if isinstance(arg, ast.Name | ast.Attribute) and self.callee(arg) in REFLECTIVE_CALLABLES:
                # functools.reduce(getattr, ["sys", "modules"], os): called where its arguments cannot be read
                self.add(DYNAMIC_CODE, node, f"passes {self.callee(arg)} as a value, called with arguments unseen")
        if (
            isinstance(func, ast.Attribute)
            and func.attr in self.heavy
            and self.dotted(func) is None
            and not (isinstance(func.value, ast.Name) and func.value.id in ("self", *self.module_names))
        ):  # x.softmax(...); not _lib.matmul(...), a C function bound at module level
            self.add(REFERENCE_OP, node, f"calls .{func.attr}(), the reference's own op")
        raw_memory = (name or "").startswith("ctypes.") or (
            isinstance(func, ast.Attribute) and func.attr in ("from_address", "string_at", "memmove", "cast")
        )
        if raw_memory and any(
            isinstance(s, ast.Call) and isinstance(s.func, ast.Name) and s.func.id == "id"
            for a in node.args
            for s in ast.walk(a)
        ):
            self.add(FRAME_INSPECTION, node, "reads a Python object's memory through ctypes and id()")
        if fname == "open" and node.args:
            arg = node.args[0]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, int):
                self.add(VERDICT_FORGERY, node, f"opens file descriptor {arg.value}: can forge the verdict")
        if isinstance(func, ast.Attribute) and func.attr in ("write", "writelines"):
            base = self.dotted(func.value)
            streams = ("sys.stdout", "sys.stderr", "sys.__stdout__", "sys.__stderr__")
            if base and canonical(base).startswith(streams) and self.verdict_record(node):
                self.add(VERDICT_FORGERY, node, f"writes a verdict-like record to {base}")
        if fname == "print" and self.verdict_record(node):
            self.add(VERDICT_FORGERY, node, "prints a verdict-like record")
        if isinstance(func, ast.Attribute) and func.attr in PRECISION_METHODS:
            dtype = PRECISION_METHODS[func.attr]
            if dtype in self.low and self.dotted(func) is None:
                self.add(PRECISION_DOWNGRADE, node, f"converts to {dtype} with .{func.attr}()", True)
        for kw in node.keywords:
            if kw.arg == "non_blocking" and not (isinstance(kw.value, ast.Constant) and kw.value.value is False):
                self.add(SIDE_STREAM, node, "non_blocking transfer: its work can finish after the timer stops")
            if kw.arg == "options" or kw.arg == "extra_cuda_cflags":
                for sub in ast.walk(kw.value):
                    text = sub.value if isinstance(sub, ast.Constant) and isinstance(sub.value, str) else ""
                    if self.low and C_FAST_MATH.search(text):
                        self.add(PRECISION_DOWNGRADE, node, "compiles with --use_fast_math", True)
        self.check_cache_call(node)
        self.generic_visit(node)

    def check_import_call(self, imported: str | None, callee: str | None, node: ast.Call) -> None:
        """An import by a call: its module is checked as an import statement's would be; a gateway module so
        imported is a route (its value goes where alias tracking may not follow); a computed name is unreadable."""
        if imported is None:
            self.add(DYNAMIC_CODE, node, f"calls {callee}() with a module name the checks cannot read")
            return
        self.check_module_name(imported, node)
        self.check_name(imported, node)
        if imported.split(".")[0] in GATEWAY_MODULES:
            self.add(FRAME_INSPECTION, node, f"imports {imported} through {callee}() instead of an import statement")
        elif imported == "threading":  # threading is allowed for its locks only where its names can be read
            self.add(THREAD, node, f"imports threading through {callee}() instead of an import statement")

    def verdict_record(self, node: ast.Call) -> bool:
        """Whether a printed or written value is a verdict-like record: a dict with a "status" key (a display,
        ``dict(status=...)``), or text holding a JSON "status" key. Words alone are a message, not a record."""
        for sub in ast.walk(node):
            if isinstance(sub, ast.Dict) and any(isinstance(k, ast.Constant) and k.value == "status" for k in sub.keys):
                return True
            if isinstance(sub, ast.Call) and any(k.arg == "status" for k in sub.keywords):
                return True
            if isinstance(sub, ast.Constant) and isinstance(sub.value, str) and STATUS_KEY.search(sub.value):
                return True
        return False

    # ---- assignments: patching

    def patched(self, target: str, node: ast.AST) -> None:
        last = target.rsplit(".", 1)[-1]
        if last in PRECISION_ATTRS:
            return  # a precision setting, reported as such
        if target.startswith("torch.backends."):
            self.add(GLOBAL_STATE, node, f"sets {target}, which changes how the reference runs too")
            return
        if target.split(".")[0] in ("time", "timeit") or any(w in target for w in TIMER_WORDS):
            self.add(TIMER_PATCH, node, f"replaces {target}: the harness's clock must not be touched")
        else:
            self.add(TIMER_PATCH, node, f"patches {target}, a module the harness relies on")

    def check_targets(self, targets: list[ast.expr], node: ast.AST) -> None:
        for t in targets:
            for sub in ast.walk(t):
                if isinstance(sub, ast.Attribute) and isinstance(sub.ctx, ast.Store | ast.Del):
                    full = self.dotted(sub)
                    if full is not None and full.split(".")[0] in PATCHED_ROOTS:
                        self.patched(full, sub)
                if isinstance(sub, ast.Subscript) and isinstance(sub.ctx, ast.Store | ast.Del):
                    base = self.dotted(sub.value)
                    if base is not None and base.split(".")[0] in PATCHED_ROOTS:
                        if base == "sys.modules":
                            continue  # frame_inspection already
                        if base == "os.environ":
                            self.add(GLOBAL_STATE, sub, "sets an environment variable the reference also sees")
                        else:
                            self.patched(base + "[...]", sub)
                    self.check_cache_subscript(sub)

    def follow_alias(self, target: ast.AST, value: ast.AST | None) -> None:
        """``name = <dotted or imported>`` binds ``name`` as an import would (``s = __import__("os")``, ``m = os``):
        later ``s.sys.modules`` reads as ``os.sys.modules``. Aliases are never dropped: a later rebinding could
        sit in code that never runs."""
        if isinstance(target, ast.Name) and value is not None:
            resolved = self.dotted(value)
            if resolved is not None:
                self.aliases[target.id] = resolved
                self.alias_values.add(id(value))

    def visit_NamedExpr(self, node: ast.NamedExpr) -> None:
        self.follow_alias(node.target, node.value)
        self.generic_visit(node)

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            self.follow_alias(target, node.value)
        self.check_targets(node.targets, node)
        if not self.function_stack:
            v = node.value
            container = isinstance(v, ast.Dict | ast.List | ast.Set) or self.is_container_call(v)
            if container or (isinstance(v, ast.Constant) and v.value is None):
                self.module_containers.update(t.id for t in node.targets if isinstance(t, ast.Name))
        self.generic_visit(node)

    def is_container_call(self, value: ast.expr) -> bool:
        if isinstance(value, ast.Call):
            n = self.dotted(value.func) or (value.func.id if isinstance(value.func, ast.Name) else "")
            return n in CONTAINERS
        return False

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self.follow_alias(node.target, node.value)
        self.check_targets([node.target], node)
        self.generic_visit(node)

    def visit_Delete(self, node: ast.Delete) -> None:
        self.check_targets(node.targets, node)
        self.generic_visit(node)

    def visit_Global(self, node: ast.Global) -> None:
        if self.in_forward():
            for n in node.names:
                self.module_containers.add(n)
        self.generic_visit(node)

    # ---- caching

    def is_key(self, expr: ast.AST) -> ast.AST | None:
        """A sub-expression naming a tensor by address, identity or content (data_ptr(), id(x), hash(x), ...)."""
        for sub in ast.walk(expr):
            if isinstance(sub, ast.Call):
                f = sub.func
                if isinstance(f, ast.Name) and f.id in ("id", "hash") and f.id not in self.aliases:
                    return sub
                if isinstance(f, ast.Attribute) and f.attr in KEY_CALLS and self.dotted(f) is None:
                    return sub
            if isinstance(sub, ast.Attribute) and sub.attr == "_cdata":
                return sub
        return None

    def check_cache_subscript(self, sub: ast.Subscript) -> None:
        key = self.is_key(sub.slice)
        if key is not None:
            self.add(RESULT_CACHE, sub, "a container keyed by a tensor's address, identity or content")

    def visit_Subscript(self, node: ast.Subscript) -> None:
        key = node.slice
        if isinstance(key, ast.Constant) and key.value in GATEWAY_MODULES:  # globals()["sys"], ns["builtins"]
            self.add(FRAME_INSPECTION, node, f"looks up {key.value!r}, a module's name, in a namespace")
        if isinstance(node.ctx, ast.Load):
            self.check_cache_subscript(node)
        self.generic_visit(node)

    def check_cache_call(self, node: ast.Call) -> None:
        f = node.func
        lookup = isinstance(f, ast.Attribute) and f.attr in ("get", "setdefault", "pop", "__getitem__", "__contains__")
        if lookup and node.args and self.is_key(node.args[0]) is not None and self.dotted(f) is None:
            what = f"looks a result up by a tensor's address, identity or content (.{f.attr})"  # type: ignore[union-attr]
            self.add(RESULT_CACHE, node, what)
        fwd = self.in_forward()
        if fwd is not None and isinstance(f, ast.Name) and f.id in self.cached_functions:
            params = {a.arg for a in fwd.args.args[1:]}
            if any(isinstance(a, ast.Name) and a.id in params for a in node.args):
                self.add(RESULT_CACHE, node, f"passes forward's inputs to the memoised {f.id}()")
        name = self.dotted(f)
        if name == "torch.equal" and fwd is not None and any(self.stored(a) for a in node.args):
            self.add(RESULT_CACHE, node, "compares an input with a stored tensor: a result replayed across calls")

    def stored(self, expr: ast.AST) -> bool:
        """An expression reading state kept across calls: self.<attr> or a module-level container."""
        for sub in ast.walk(expr):
            if isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name) and sub.value.id == "self":
                return True
            if isinstance(sub, ast.Name) and sub.id in self.module_containers:
                return True
        return False

    def visit_Compare(self, node: ast.Compare) -> None:
        sides = [node.left, *node.comparators]
        if self.in_forward() is not None:
            keyed = any(self.is_key(s) is not None for s in sides)
            if keyed and any(self.stored(s) for s in sides):
                self.add(RESULT_CACHE, node, "compares an input's address, identity or content with a stored one")
            elif any(isinstance(op, ast.In | ast.NotIn) for op in node.ops) and self.is_key(node.left) is not None:
                self.add(RESULT_CACHE, node, "looks a tensor's address, identity or content up in a container")
            elif any(isinstance(op, ast.Is | ast.IsNot) for op in node.ops):
                fwd = self.in_forward()
                params = {a.arg for a in fwd.args.args[1:]} if fwd else set()
                names = {s.id for s in sides if isinstance(s, ast.Name)}
                if names & params and any(self.stored(s) for s in sides):
                    self.add(RESULT_CACHE, node, "tests whether an input is the same object as a stored one")
        self.generic_visit(node)

    def visit_Return(self, node: ast.Return) -> None:
        fwd = self.in_forward()
        if fwd is not None and node.value is not None and self.function_stack[-1] is fwd:
            value = node.value
            while isinstance(value, ast.Subscript | ast.Call) and not self.returns_computed(value):
                value = value.value if isinstance(value, ast.Subscript) else value.func.value  # type: ignore[attr-defined]
            if self.plain_stored(value):
                self.add(RESULT_CACHE, node, "forward returns a value kept from an earlier call")
        self.generic_visit(node)

    def returns_computed(self, value: ast.AST) -> bool:
        # container[key] and container.get(key) read stored state; any other call computes something.
        if isinstance(value, ast.Call):
            f = value.func
            return not (isinstance(f, ast.Attribute) and f.attr in ("get", "__getitem__", "pop", "setdefault"))
        return False

    def plain_stored(self, value: ast.AST) -> bool:
        if isinstance(value, ast.Attribute) and isinstance(value.value, ast.Name) and value.value.id == "self":
            return True
        if isinstance(value, ast.Attribute):
            return self.plain_stored(value.value)
        return isinstance(value, ast.Name) and value.id in self.module_containers

    # ---- definitions

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for base in node.bases:
            b = self.dotted(base)
            if b in ("torch.Tensor", "torch._C.TensorBase", "torch._C._TensorBase", "torch.nn.Parameter"):
                self.add(LAZY_TENSOR, node, f"class {node.name} derives from {b}: a tensor subclass can compute lazily")
            if b and b.startswith(("torch.utils._python_dispatch", "torch.overrides")):
                self.add(LAZY_TENSOR, node, f"class {node.name} derives from {b}: it intercepts torch's ops")
            if isinstance(base, ast.Name) and base.id == "Model" and "Model" not in self.defined_classes:
                self.add(REFERENCE_INHERITANCE, node, f"class {node.name} derives from the problem's Model")
            if b and b.rsplit(".", 1)[-1] in self.heavy and b.startswith("torch.nn"):
                self.add(REFERENCE_INHERITANCE, node, f"class {node.name} derives from {b}, the reference's module")
        self.generic_visit(node)

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        if node.name in ("__torch_function__", "__torch_dispatch__"):
            self.add(LAZY_TENSOR, node, f"defines {node.name}: it intercepts torch's ops")
        for dec in node.decorator_list:
            target = dec.func if isinstance(dec, ast.Call) else dec
            d = self.dotted(target)
            if d in CACHE_DECORATORS:
                self.cached_functions.add(node.name)
                tensor_args = any(
                    a.annotation is not None and "Tensor" in ast.unparse(a.annotation) for a in node.args.args
                )
                if node.name in ("forward", "__call__") or tensor_args:
                    self.add(RESULT_CACHE, dec, f"memoises {node.name}() with {d}: results replayed across calls")
        if isinstance(node, ast.AsyncFunctionDef):
            self.add(THREAD, node, f"async def {node.name}: work that can finish after the timer stops")
        self.function_stack.append(node)
        self.generic_visit(node)
        self.function_stack.pop()

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]


def _low_dtypes(problem: ProblemInfo | None) -> set[str]:
    """The reduced precisions that would be a downgrade for this problem (those its tensors do not use)."""
    if problem is None:
        return {"float16", "bfloat16", "tf32"}
    used = {spec.dtype for spec in [*problem.inputs, *problem.outputs] if hasattr(spec, "dtype")}
    low = set()
    if used & {"float32", "float64"} or not used:
        low = {"float16", "bfloat16", "tf32"}
    if "float16" in used:
        low.discard("float16")
    if "bfloat16" in used:
        low.discard("bfloat16")
    return low


def static_findings(candidate_source: str, problem: ProblemInfo | None) -> list[Finding]:
    """Every trick visible in the candidate's source, in line order; [] for a clean (or unparsable) source."""
    try:
        tree = ast.parse(candidate_source)
    except SyntaxError:
        return []  # the compile step reports it
    heavy = heavy_names(problem.aten_ops if problem is not None else {})
    # A heavy op + pointwise tail problem may leave its heavy op to the library (cheat_tricks.library_family):
    # that op's spellings are not flagged here; the worker checks that the candidate then runs the tail itself.
    library = library_family(problem.aten_ops) if problem is not None else None
    if library is not None:
        heavy -= HEAVY_OPS[library]
    checker = _Checker(candidate_source, heavy, _low_dtypes(problem))
    # The classes the candidate defines first: a `Model` of its own is not the problem's.
    checker.defined_classes = {n.name for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}
    checker.module_names = {
        t.id
        for stmt in tree.body
        if isinstance(stmt, ast.Assign | ast.AnnAssign)
        for target in (stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target])
        for t in ast.walk(target)
        if isinstance(t, ast.Name)
    }
    checker.visit(tree)
    seen: set[tuple[str, int | None]] = set()
    out = []
    for f in sorted(checker.findings, key=lambda f: (f.line or 0, f.trick)):
        if (f.trick, f.line) not in seen:
            seen.add((f.trick, f.line))
            out.append(f)
    return out
