"""Every declared op has each layer's part, or that layer says why not (nothing half-registered).

The parts, keyed by op name (see ARCHITECTURE.md, "One declaration per op"):

- kernel          runtime: `impl(xp)`, its numpy specialisation `cpu`        (always)
- derivative      frontend: `grads` (defgrad)      -- or the trait differentiable=False
- decomposition   frontend: `decomposition` (defdecomp), needed by composites
- lowering        compiler: `lowering` (kernels/lower.py: a rule, or DECOMPOSED)
- onnx            onnx/_convert.py: a converter in CONVERTERS
- test entry      tests/op_cases: checked by tests/test_ops.py::test_every_op_has_a_case

A layer without its part records the reason in `OpDef.why_not[part]`; a reason next to a
part it explains away is stale and fails too.
"""
import numpy as np
import pytest

import eagerc
from eagerc.compiler.kernels import lower  # noqa: F401  (the compiler attaches the lowerings)
from eagerc.onnx._convert import CONVERTERS
from eagerc.runtime.ops import KINDS, OPS, declare
from eagerc.runtime.ops.meta import Spec

eagerc.nn.functional  # the frontend, which attaches its parts, loads on first use

# part -> (the op has it, the op needs it)
PARTS = {
    "derivative": (lambda op: op.grads is not None, lambda op: op.differentiable),
    "decomposition": (lambda op: op.decomposition is not None, lambda op: op.kind == "composite"),
    "lowering": (lambda op: op.lowering is not None, lambda op: True),
    "onnx": (lambda op: op.name in CONVERTERS, lambda op: True),
}


def missing_parts(ops):
    """[(op, part, what is wrong)] for every part an op needs and lacks without a reason, or has
    while also saying why not."""
    bad = []
    for op in ops:
        if not callable(op.cpu):
            bad.append((op.name, "kernel", "no numpy kernel"))
        for part, (has, needs) in PARTS.items():
            why = op.why_not.get(part)
            if has(op) and why:
                bad.append((op.name, part, f"has its {part} but also says why not: {why!r}"))
            elif needs(op) and not has(op) and not (isinstance(why, str) and why):
                bad.append((op.name, part, f"no {part} and no reason in why_not[{part!r}]"))
    return bad


def test_every_op_has_every_part_or_says_why_not():
    bad = missing_parts(OPS.values())
    assert not bad, "half-registered ops:\n" + "\n".join(f"  {n}: {why}" for n, _, why in bad)


def test_a_half_registered_op_is_caught():
    """A declaration with a kernel and a shape rule but nothing else is reported, part by part."""
    try:
        declare("test_half_op", ("x",), lambda xp: xp.negative, lambda x: Spec(x.shape, x.dtype),
                kind="composite")
        bad = missing_parts([OPS["test_half_op"]])
    finally:
        del OPS["test_half_op"]
    assert sorted(part for _, part, _ in bad) == ["decomposition", "derivative", "lowering", "onnx"]
    OPS["softmax"].why_not["lowering"] = "stale"
    try:
        assert missing_parts([OPS["softmax"]]) == [("softmax", "lowering", "has its lowering but also says why "
                                                    "not: 'stale'")]
    finally:
        del OPS["softmax"].why_not["lowering"]


def test_parts_and_traits_agree():
    for name, op in OPS.items():
        assert op.kind in KINDS
        if op.ufunc is not None:   # the ufunc a trait names exists, and is a ufunc
            assert isinstance(getattr(np, op.ufunc), np.ufunc), name
        assert op.grads is None or op.differentiable, name
        if op.decomposition is not None:   # only composites are decomposed
            assert op.kind == "composite", name
        assert op.view == (op.aliases == "view"), name
        assert ("random" in op.effects) == ("seed" in op.attrs), name
        if op.kind == "elementwise" and len(op.inputs) > 1:
            assert op.broadcasts, name


def test_declaration_errors_name_the_op():
    rule = lambda x: Spec(x.shape, x.dtype)  # noqa: E731
    with pytest.raises(ValueError, match="op 'bad': kind 'pointy' is not one of"):
        declare("bad", ("x",), None, rule, kind="pointy", ufunc="negative")
    with pytest.raises(ValueError, match="op 'bad': give a kernel or the numpy ufunc"):
        declare("bad", ("x",), None, rule, kind="elementwise")
    with pytest.raises(ValueError, match="op 'bad': an op draws random numbers exactly when"):
        declare("bad", (), lambda xp: None, rule, kind="creation", effects=("random",))
    with pytest.raises(ValueError, match="op 'add' is declared twice"):
        declare("add", ("a", "b"), None, rule, kind="elementwise", ufunc="add")
    assert "bad" not in OPS


def test_a_decomposition_must_take_the_ops_inputs_and_attributes():
    from eagerc.autograd.formulas import defdecomp
    with pytest.raises(TypeError, match="decomposition of softmax: it must take the inputs"):
        defdecomp("softmax", lambda x: x)    # softmax has attribute `dim`


def test_every_autocast_list_entry_is_a_declared_op_or_a_marked_function():
    """The autocast policy lives in one table (eagerc/amp/lists.py): a declared op on it carries the
    trait OpDef.autocast = {device: category} (apply casts its inputs); any other name is a frontend
    function marked @autocast_op(name). A stale or misspelt entry would silently do nothing."""
    from eagerc.amp import lists
    from eagerc.amp.autocast_mode import FUNCTIONS
    bad = [n for n in sorted(lists.names()) if n not in OPS and n not in FUNCTIONS]
    assert not bad, f"autocast list entries that are neither a declared op nor @autocast_op: {bad}"
    assert set(FUNCTIONS) <= lists.names(), "an @autocast_op function is on no list"
    for op in OPS.values():
        want = {d: lists.category(d, op.name) for d in lists.DEVICES if lists.category(d, op.name)} or None
        assert op.autocast == want, f"{op.name}: trait autocast {op.autocast} but the lists say {want}"
        assert want is None or set(want.values()) <= set(lists.CATEGORIES)
