"""The sizes a module holds that no rebuild changes: numbers in the formulas, listed in
``Cost.fixed`` so that a formula says at which values of them it holds.

A module rebuilt from its constructor (:mod:`.rebuild`) changes the int arguments and the
int fields of a config passed in; what else it was given passes through unchanged:

- a module passed in (``Head(Enc(8, 32), 5)``): the sizes it names (``d_model`` = 32, by
  :func:`~.module_sizes.module_names`), or ``enc.d_model`` where the rebuild changes a size
  of that name;
- a list or tuple of ints (``widths=[16, 32, 16]``): each element that sizes an axis of the
  module's weights, as ``widths[1]`` (``config.widths[1]`` inside a config);
- the ints of a config inside a config (``config.mlp.hidden``, as ``mlp.hidden``), whose
  fields the rebuild does not change (it changes the outer config's own int fields);
- an int given in two places (an argument and a config's field of one name), which the
  rebuild leaves alone rather than pick one.

Whatever way the module is built, an int global its classes' constructors read (``HIDDEN``
in ``nn.Linear(d, HIDDEN)``) is held too, where it sizes an axis; and an int attribute its
classes' methods count steps by (``for _ in range(self.depth):``, or through a config it
keeps, ``range(self.config.n_layers)``), whatever it sizes. A module that cannot be
rebuilt holds all of its sizes: its names and the ints that only divide a width
(``self.heads``), the sizes its methods pass to ops (through a local name or a slice's
bound too), its count of blocks (``self.n_blocks``), its lists' ints, those globals, and
the widths of its torch layers and the axes of its own tensors that no size listed has
(``fc1.out_features`` = 32, where ``hidden`` is kept nowhere; ``table.shape[0]`` = 1024,
a buffer's length given to the constructor and kept nowhere else).
"""

from __future__ import annotations

import ast
import dis
import inspect
import textwrap
import types
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, NamedTuple

import torch

from .module_sizes import _int_fields, config_fields, module_names, module_repeats
from .rebuild import Rebuild

__all__ = ["Held", "held_sizes", "own_held", "with_held"]


class Held(NamedTuple):
    """A size held at ``size``: listed as ``name``, or as ``qualified`` (``enc.d_model``,
    ``self.seq``) where another size has that name."""

    name: str
    qualified: str
    size: int
    #: listed only where no size listed has its value (a torch layer's width: ``fc1``'s
    #: ``out_features`` of a module that cannot be rebuilt, its one name for it)
    unnamed: bool = False


def held_sizes(module: Any, rebuild: Rebuild | None) -> tuple[Held, ...]:
    """The sizes ``module`` holds at their values that ``rebuild`` (None: no rebuild) never
    changes; each sizes an axis of the module's parameters or buffers."""
    if not isinstance(module, torch.nn.Module):
        names = module_names(module) if rebuild is None else {}
        return tuple(Held(name, name, size) for name, size in names.items())
    axes = {size for t in (*module.parameters(), *module.buffers()) for size in t.shape}
    found: list[Held] = []
    if rebuild is None:
        names = module_names(module)
        found += [Held(name, name, size) for name, size in names.items()]
        # (and those that only divide a width: ``self.heads = heads`` beside a
        # ``heads * dim_head`` projection, read by the constructor alone)
        found += [Held(name, name, size) for name, size in _own_ints(module) if name not in names]
        for sub in _own_classes(module):
            for name, value in vars(sub).items():
                if not name.startswith("_"):
                    found += [Held(f"{name}[{i}]", f"{name}[{i}]", n) for i, n in _ints_of(value)]
        found += _layer_widths(module)
        found += _tensor_axes(module)
    elif not rebuild.declared:
        if rebuild.passed is None:  # (typed submodules rebuilt in a copy: the rest held)
            rest = module_names(module).items()
            found += [Held(name, name, n) for name, n in rest if name not in rebuild.sizes]
        for argument, value in (rebuild.passed or {}).items():
            found += _passed_sizes(argument, value)
        found += [Held(name, name, size) for name, size in rebuild.doubled.items()]
        if rebuild.passed is not None:  # (set from ``**kwargs``, a default the call left)
            unchanged = _unchanged_names(module, rebuild).items()
            found += [Held(name, f"self.{name}", size) for name, size in unchanged]
    found += [Held(name, name, size) for name, size in _globals_read(module).items()]
    counts = {held.name for held in _counts_read(module)}
    found = [held for held in found if held.name in counts or _sizes(held, axes)]
    if rebuild is None:  # (its count of blocks, which sizes no axis: ``self.n_blocks``)
        repeats = module_repeats(module)
        found += [Held(name, name, count) for name, count in repeats.items()]
        found += _unnamed_repeats(module, set(repeats.values()))
        # (and a count its code reads, which sizes no axis either: ``self.depth`` steps,
        # and a size its code passes to an op: ``x.unfold(-1, self.k, 1)``'s window)
        found += _counts_read(module)
        found += _counts_read(module, passed=True)
    return tuple(dict.fromkeys(found))


def _unnamed_repeats(module: torch.nn.Module, named: set[int]) -> list[Held]:
    """The counts of blocks no attribute names (``nn.ModuleList(Block() for _ in
    range(cfg.n_layers))`` where ``cfg`` is kept nowhere): ``len(blocks)``, for each
    ``ModuleList``, and each ``Sequential`` of one class of module repeated, of two or
    more blocks whose length no name listed has."""
    found: list[Held] = []
    for path, sub in module.named_modules():
        if not isinstance(sub, torch.nn.ModuleList | torch.nn.Sequential):
            continue
        kinds = {type(block) for block in sub.children()}
        repeated = isinstance(sub, torch.nn.ModuleList) or len(kinds) == 1
        if path and repeated and len(sub) >= 2 and len(sub) not in named:
            found.append(Held(f"len({path})", f"len({path})", len(sub)))
    return found


def _sizes(held: Held, axes: set[int]) -> bool:
    """Whether ``held`` sizes one of ``axes`` or splits one into parts (``n_heads`` of a
    width ``n_heads * head_dim``: a number in the formulas by itself, as the count of the
    heads' scores); an id (``pad_token_id``) is no size, whatever it divides."""
    if held.size in axes:
        return True
    if held.size < 2 or held.name.endswith("_id"):
        return False
    return any(axis % held.size == 0 for axis in axes)


def own_held(rebuild: Rebuild | None, moved: set[str]) -> tuple[Held, ...]:
    """The rebuild's own sizes that no dry run changed (``moved``: the keys of the sizes
    the runs changed): one named as a dim of the call where that dim changes alone (a
    table at its full ``seq`` beside an input's ``seq``), one no other value builds."""
    if rebuild is None or rebuild.declared:
        return ()
    return tuple(
        Held(name, rebuild.key(name), size)
        for name, size in rebuild.sizes.items()
        if rebuild.key(name) not in moved
    )


def with_held(
    fixed: Mapping[str, int],
    held: Iterable[Held],
    shown: Mapping[str, int],
    changed: set[str],
) -> dict[str, int]:
    """``fixed`` with each held size added by its name, or by its qualified name where a
    size of its formula (``shown``), one changed or one listed has the name at another
    value or was changed; one whose name and value a dim held at it has already is that dim."""
    result = dict(fixed)
    for name, qualified, size, unnamed in held:
        if unnamed and size in result.values():
            continue
        if result.get(name) == size or (name not in changed and shown.get(name) == size):
            continue
        key = name
        if name in result or name in shown or name in changed:
            if qualified == name:
                continue
            key = qualified
        result.setdefault(key, size)
    return result


def _unchanged_names(module: torch.nn.Module, rebuild: Rebuild) -> dict[str, int]:
    """The sizes the module names (other than the rebuild's own) that keep their values,
    wherever they are held, when the module is built again with each of the rebuild's
    sizes changed alone (a ``self.hidden`` read from ``**kwargs``); none where a build
    fails (a size that derives from those changes cannot be told from one held)."""
    kept = {name: size for name, size in module_names(module).items() if name not in rebuild.sizes}
    for count in _counts_read(module):  # (a count from ``**kwargs``, or set in the body)
        if count.name not in rebuild.sizes:
            kept.setdefault(count.name, count.size)
    if not kept:
        return {}
    original = _fields_by_path(module)
    for name, size in rebuild.sizes.items():
        built = None
        for value in (2 * size + 2, size + 1):
            try:
                with torch.device("meta"):
                    built = rebuild.at({name: value}, None)
                break
            except Exception:  # (a value the constructor refuses: the next one)
                continue
        if built is None:
            return {}
        fields = _fields_by_path(built)
        for held in list(kept):
            places = [key for key, v in original.items() if key[1] == held and v == kept[held]]
            if any(fields.get(key) != original[key] for key in places):
                del kept[held]
    return kept


def _fields_by_path(module: torch.nn.Module) -> dict[tuple[str, str], int]:
    """The int fields of each of the module's (non-torch) submodules, by path and name."""
    return {
        (path, name): value
        for path, sub in module.named_modules(remove_duplicate=False)
        if not type(sub).__module__.startswith("torch.")
        for name, value in _int_fields(sub)
    }


def _passed_sizes(argument: str, value: Any) -> list[Held]:
    """The sizes a constructor argument that no rebuild changes holds: each module's in a
    module (or a list of them) passed in, the ints of a list, a config's lists of ints."""
    modules = [value] if isinstance(value, torch.nn.Module) else []
    if isinstance(value, list | tuple) and all(isinstance(v, torch.nn.Module) for v in value):
        modules = [torch.nn.ModuleList(value)] if value else []
    found: list[Held] = []
    for passed in modules:
        for path, sub in passed.named_modules(remove_duplicate=False):
            if not type(sub).__module__.startswith("torch."):
                where = f"{argument}.{path}" if path else argument
                found += [Held(name, f"{where}.{name}", n) for name, n in _int_fields(sub)]
    if modules:
        return found
    fields = config_fields(value, argument)
    if not hasattr(value, "_fields"):  # (a named tuple is a config)
        found += [Held(f"{argument}[{i}]", f"{argument}[{i}]", n) for i, n in _ints_of(value)]
    if fields is not None:
        for name, field in fields.items():  # a config's lists of ints, its sub-configs
            if not name.startswith("_"):
                held = [(f"{name}[{i}]", f"{argument}.{name}[{i}]", n) for i, n in _ints_of(field)]
                found += [Held(*entry) for entry in held]
                found += _nested_sizes(name, f"{argument}.{name}", field)
    return found


def _nested_sizes(name: str, qualified: str, value: Any, depth: int = 3) -> list[Held]:
    """The ints of a config inside a config (``config.mlp.hidden``), which a rebuild passes
    on unchanged (it changes the outer config's own int fields only), as ``mlp.hidden``."""
    fields = config_fields(value)
    if depth == 0 or fields is None:
        return []
    found: list[Held] = []
    for field, inner in fields.items():
        if field.startswith("_"):
            continue
        if type(inner) is int:
            found.append(Held(f"{name}.{field}", f"{qualified}.{field}", inner))
        else:
            where, path = f"{name}.{field}", f"{qualified}.{field}"
            found += [Held(f"{where}[{i}]", f"{path}[{i}]", n) for i, n in _ints_of(inner)]
            found += _nested_sizes(where, path, inner, depth - 1)
    return found


#: The int attributes of torch's layers that are no size: an axis's index (``Softmax(dim=2)``,
#: ``Flatten(start_dim)``), a parametrization's count of tensors (``weight_norm``'s 2), an
#: index the layer skips, a norm's order (``LPPool2d(2, ...)``'s ``norm_type``).
_NO_SIZES = frozenset(
    {"dim", "start_dim", "end_dim", "ntensors", "ignore_index", "padding_idx", "norm_type"}
)


def _layer_widths(module: torch.nn.Module) -> list[Held]:
    """The int attributes of the module's torch layers (``in_features``, ``out_channels``),
    and the ints of their tuples (a convolution's ``kernel_size``, ``stride``), by path
    (``fc1.out_features``, ``conv.kernel_size[0]``): the only names a size has that the
    module keeps nowhere else (``nn.Linear(d, hidden)`` with ``hidden`` not kept)."""
    found: list[Held] = []
    for path, sub in module.named_modules():
        if type(sub).__module__.startswith("torch."):
            for name, value in vars(sub).items():
                if name.startswith("_") or name in _NO_SIZES:
                    continue
                where = f"{path}.{name}" if path else name
                if type(value) is int:
                    ints = [(where, value)]
                elif type(value) is tuple:
                    ints = [(f"{where}[{i}]", n) for i, n in _ints_of(value)]
                else:
                    ints = []
                found += [Held(key, key, n, unnamed=True) for key, n in ints if n > 1]
    return found


def _tensor_axes(module: torch.nn.Module) -> list[Held]:
    """The axes of the parameters and buffers the module's own classes hold, by path
    (``table.shape[0]``): the only names a size has that was given to a constructor and
    kept only as a tensor's shape (``register_buffer("table", torch.zeros(max_seq, d))``
    with ``max_seq`` kept nowhere)."""
    found: list[Held] = []
    for path, sub in module.named_modules():
        if type(sub).__module__.startswith("torch."):
            continue
        for store in (sub._parameters, sub._buffers):
            for name, tensor in store.items():
                if tensor is None:
                    continue
                where = f"{path}.{name}" if path else name
                for axis, size in enumerate(tensor.shape):
                    if size > 1:
                        held = f"{where}.shape[{axis}]"
                        found.append(Held(held, held, size, unnamed=True))
    return found


def _counts_read(module: torch.nn.Module, *, passed: bool = False) -> list[Held]:
    """The int attributes of the module's own classes that their methods count steps by
    (``for _ in range(self.depth):``, or through a config it keeps,
    ``range(self.config.n_layers)``, ``cfg = self.config; range(cfg.n_layers)``), whatever
    axes they size: numbers in the formulas of a module that cannot be rebuilt; with
    ``passed``, those they pass to a call instead (``x.unfold(-1, self.k, 1)``,
    ``F.avg_pool1d(x, self.window)``), but as an axis (``dim=self.axis``). Other
    attributes code reads (an index, a limit an ``assert`` checks) are left out; so is
    everything where the source cannot be read. Each is named after its last attribute
    (``n_layers``), qualified by its path (``self.config.n_layers``)."""
    found: list[Held] = []
    table = _PASSED if passed else _RANGED
    for path, sub in module.named_modules():
        if type(sub).__module__.startswith("torch."):
            continue
        counts = table.get(type(sub))
        if counts is None:  # (read once per class: 10,000 blocks of one class, once)
            counts = table[type(sub)] = _ranged_attributes(type(sub), passed)
        for chain in sorted(counts):
            value = _value_at(sub, chain)
            name = chain[-1]
            if type(value) is int and value > 1 and not name.endswith("_id"):
                dotted = ".".join(chain)
                found.append(Held(name, f"{path}.{dotted}" if path else f"self.{dotted}", value))
    return found


def _value_at(owner: object, chain: tuple[str, ...]) -> object:
    """The value at ``owner.a.b`` for ``chain`` ``("a", "b")``; None where it cannot be read
    (a property that raises, an attribute set only in some calls)."""
    value = owner
    for name in chain:
        try:
            value = getattr(value, name)
        except Exception:  # (any error a property raises: nothing to hold)
            return None
    return value


_RANGED: dict[type, frozenset[tuple[str, ...]]] = {}
_PASSED: dict[type, frozenset[tuple[str, ...]]] = {}

#: Keywords whose value is an axis, an index or a number that sizes nothing.
_NO_SIZE = frozenset(("dim", "dims", "axis", "index", "dtype", "p", "eps", "value", "alpha"))


def _ranged_attributes(cls: type, passed: bool = False) -> frozenset[tuple[str, ...]]:
    """The attributes of ``self``, as chains of names (``("depth",)``, ``("config",
    "n_layers")``), that the methods of ``cls`` and of its bases that are not torch's
    (``__init__`` left out) pass to ``range`` (``range(self.depth)``,
    ``range(0, n, self.chunk)``, ``range(self.config.n_layers)``, or through a local name
    given such a chain, ``cfg = self.config``), or with ``passed`` to any other call (not
    as a keyword of :data:`_NO_SIZE`)."""
    names: set[tuple[str, ...]] = set()
    for klass in cls.__mro__:
        if klass is object or klass.__module__.startswith("torch."):
            continue
        for key, value in vars(klass).items():
            if key == "__init__" or not callable(value):
                continue
            try:
                tree = ast.parse(textwrap.dedent(inspect.getsource(inspect.unwrap(value))))
            except (OSError, TypeError, SyntaxError, ValueError):
                continue
            for node in ast.walk(tree):
                if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    continue
                if not node.args.args:
                    continue
                owner = node.args.args[0].arg  # (``self``)
                aliases, bound = _aliases(owner, node), _bindings(node)
                for call in ast.walk(node):
                    read: list[ast.expr] = []
                    if isinstance(call, ast.Call):
                        ranged = isinstance(call.func, ast.Name) and call.func.id == "range"
                        if ranged and not passed:
                            read = list(call.args)
                        elif passed and not ranged:
                            given = [k.value for k in call.keywords if k.arg not in _NO_SIZE]
                            read = [*call.args, *given]
                    elif passed and isinstance(call, ast.Slice):  # (``x[..., : self.k]``)
                        read = [part for part in (call.lower, call.upper, call.step) if part]
                    names.update(_attributes_of(owner, _through(read, bound), aliases))
    return frozenset(names)


def _bindings(function: ast.FunctionDef | ast.AsyncFunctionDef) -> dict[str, list[ast.expr]]:
    """The values ``function`` gives each local name it sets by a plain assignment
    (``shape = (*lead, -1, 3 * self.head_dim)``, ``h, d = self.heads, self.dim``), so
    that a size passed on through the name (``x.view(shape)``) is read where the name is."""
    values: dict[str, list[ast.expr]] = {}
    for node in ast.walk(function):
        if not isinstance(node, ast.Assign):
            continue
        for target in node.targets:
            if isinstance(target, ast.Name):
                values.setdefault(target.id, []).append(node.value)
            elif (  # (``h, kv_h = self.heads, self.kv_heads``: each its own)
                isinstance(target, ast.Tuple)
                and isinstance(node.value, ast.Tuple)
                and len(target.elts) == len(node.value.elts)
            ):
                for name, value in zip(target.elts, node.value.elts, strict=True):
                    if isinstance(name, ast.Name):
                        values.setdefault(name.id, []).append(value)
    return values


def _through(nodes: list[ast.expr], bound: Mapping[str, list[ast.expr]]) -> list[ast.expr]:
    """``nodes`` and the values given to each local name they read, and to the names those
    read, each once."""
    found, seen, pending = list(nodes), set[str](), list(nodes)
    while pending:
        for node in ast.walk(pending.pop()):
            if isinstance(node, ast.Name) and node.id in bound and node.id not in seen:
                seen.add(node.id)
                found += bound[node.id]
                pending += bound[node.id]
    return found


def _chain(owner: str, node: ast.expr, aliases: Mapping[str, tuple[str, ...]]) -> tuple[str, ...]:
    """The names ``node`` reads from ``owner`` (``self.config.depth``: ``("config",
    "depth")``; ``cfg.depth`` with ``cfg = self.config``: the same), or () where it reads
    something else."""
    names: list[str] = []
    while isinstance(node, ast.Attribute):
        names.append(node.attr)
        node = node.value
    if not names or not isinstance(node, ast.Name):
        return ()
    if node.id == owner:
        return tuple(reversed(names))
    if node.id in aliases:
        return aliases[node.id] + tuple(reversed(names))
    return ()


def _aliases(
    owner: str, function: ast.FunctionDef | ast.AsyncFunctionDef
) -> dict[str, tuple[str, ...]]:
    """The local names ``function`` sets once to an attribute of ``owner`` (``cfg =
    self.config``), each with the chain it stands for; a name set otherwise too is left out."""
    chains: dict[str, tuple[str, ...]] = {}
    others: set[str] = set()
    for node in ast.walk(function):
        targets = node.targets if isinstance(node, ast.Assign) else []
        bound: list[ast.AST] = []
        if isinstance(node, ast.AnnAssign | ast.AugAssign | ast.For | ast.NamedExpr):
            bound = [node.target]
        elif isinstance(node, ast.With):
            bound = [item.optional_vars for item in node.items if item.optional_vars]
        for target in bound:
            others.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
        for target in targets:
            if not isinstance(target, ast.Name):
                others.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
                continue
            chain = _chain(owner, node.value, {}) if isinstance(node, ast.Assign) else ()
            if chain and target.id not in chains:
                chains[target.id] = chain
            else:
                others.add(target.id)
    return {name: chain for name, chain in chains.items() if name not in others}


def _attributes_of(
    owner: str, nodes: list[ast.expr], aliases: Mapping[str, tuple[str, ...]]
) -> Iterator[tuple[str, ...]]:
    """The attributes of ``owner`` (``self.depth``, ``self.config.depth``, or through a
    name of ``aliases``) read in ``nodes``, each as its chain of names."""
    for expression in nodes:
        for node in ast.walk(expression):
            if isinstance(node, ast.Attribute):
                chain = _chain(owner, node, aliases)
                if chain:
                    yield chain


def _ints_of(value: Any) -> list[tuple[int, int]]:
    """The (index, int) elements of a list or tuple of ints, or none."""
    if isinstance(value, list | tuple) and value and all(type(v) is int for v in value):
        return list(enumerate(value))
    return []


def _own_ints(module: torch.nn.Module) -> list[tuple[str, int]]:
    """The int attributes (and their configs' int fields) of the module's own classes,
    the first of each name."""
    found: dict[str, int] = {}
    for sub in _own_classes(module):
        for name, value in _int_fields(sub):
            found.setdefault(name, value)
    return list(found.items())


def _own_classes(module: torch.nn.Module) -> list[torch.nn.Module]:
    """The module and its submodules whose classes are not torch's own."""
    return [sub for sub in module.modules() if not type(sub).__module__.startswith("torch.")]


def _globals_read(module: torch.nn.Module) -> dict[str, int]:
    """Module-level ints that the constructors of the module's (non-torch) classes read."""
    found: dict[str, int] = {}
    for cls in dict.fromkeys(type(sub) for sub in _own_classes(module)):
        init = vars(cls).get("__init__")
        code = getattr(init, "__code__", None)
        if not isinstance(code, types.CodeType):
            continue
        scope: Mapping[str, Any] = getattr(init, "__globals__", {})
        for name in _names_in(code):
            value = scope.get(name)
            if type(value) is int and value > 1 and not name.startswith("_"):
                found.setdefault(name, value)
    return found


def _names_in(code: types.CodeType) -> Iterator[str]:
    """The global names a code object and those nested in it (comprehensions) read (not
    the attributes it sets: ``self.hidden`` is no global ``hidden``)."""
    for instruction in dis.get_instructions(code):
        if instruction.opname in ("LOAD_GLOBAL", "LOAD_NAME") and type(instruction.argval) is str:
            yield instruction.argval
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            yield from _names_in(constant)
