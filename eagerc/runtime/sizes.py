"""Symbolic sizes: the one representation of a size that depends on dynamic dimensions.

A `SizeExpr` is a sum of terms, each an integer times a product of named sizes (`s0`,
`16*s0`, `s0*s1`, `batch-1`, `2*n+3`), in one canonical order (higher degree first, names
sorted, the constant last), written one way (`str`) and evaluated one way
(`expr(binding)`, never `eval`). @compile's dynamic graphs hold sizes as that text and its
SymInts compute with it (compiler/dynamic.py); a program file's size table stores each
size-dependent integer as [path, c0, k, dims], c0 + k * product(dims) (written by
compiler/export.py, checked and evaluated by runtime/program.py: `from_table`); ONNX export
writes the text as dim_param names and computes the terms from the inputs' shapes.

Text grammar: term (('+' | '-') term)*, term = factor ('*' factor)*, factor = an integer
or a name (a letter or '_', then letters, digits or '_').
"""
import re

__all__ = ["SizeExpr", "evaluate", "from_table"]

MAX_TEXT = 200   # characters of a size expression's text
_FACTOR = r"(?:\d+|[^\W\d]\w*)"
_TERM = rf"[+-]?{_FACTOR}(?:\*{_FACTOR})*"
_TEXT = re.compile(rf"{_TERM}(?:[+-]{_FACTOR}(?:\*{_FACTOR})*)*")
_PARSED = {}     # text -> SizeExpr


class SizeExpr:
    """A size expression: `terms` is a tuple of (coefficient, (name, ...)), canonical."""
    __slots__ = ("terms",)

    def __init__(self, terms):
        merged = {}
        for coef, names in terms:
            key = tuple(sorted(names))
            merged[key] = merged.get(key, 0) + coef
        self.terms = tuple((c, names) for names, c in sorted(merged.items(), key=lambda kv: (-len(kv[0]), kv[0]))
                           if c)

    @classmethod
    def parse(cls, text):
        """The expression written as `text` (parsed once per text); ValueError if it is not one."""
        e = _PARSED.get(text) if isinstance(text, str) else None
        if e is None:
            if not isinstance(text, str) or len(text) > MAX_TEXT or not _TEXT.fullmatch(text):
                raise ValueError(f"bad size expression {text!r}")
            terms = []
            for term in re.findall(_TERM, text):
                coef, names = -1 if term[0] == "-" else 1, []
                for f in term.lstrip("+-").split("*"):
                    if f[0].isdigit():
                        coef *= int(f)
                    else:
                        names.append(f)
                terms.append((coef, names))
            e = _PARSED[text] = cls(terms)
        return e

    @classmethod
    def affine(cls, c0, k, names):
        """c0 + k * product(names), built directly (a loaded file's table may hold many)."""
        if not k or not names:
            return cls([(k, tuple(names)), (c0, ())])
        e = object.__new__(cls)
        names = tuple(names) if len(names) == 1 else tuple(sorted(names))
        e.terms = ((k, names), (c0, ())) if c0 else ((k, names),)
        return e

    def __call__(self, binding):
        """The value with each name bound by `binding` (name -> int)."""
        total = 0
        for coef, names in self.terms:
            for s in names:
                coef *= binding[s]
            total += coef
        return total

    def symbols(self):
        return {s for _, names in self.terms for s in names}

    def __str__(self):
        out = []
        for coef, names in self.terms:
            piece = "*".join(([str(abs(coef))] if abs(coef) != 1 or not names else []) + list(names))
            out.append(("-" if coef < 0 else "+" if out else "") + piece)
        return "".join(out) or "0"

    def __repr__(self):
        return f"SizeExpr({str(self)!r})"

    def __eq__(self, other):
        return isinstance(other, SizeExpr) and self.terms == other.terms

    def __hash__(self):
        return hash(self.terms)

    # arithmetic (SymInts during a dynamic trace): SizeExpr operands; SizeExpr([(n, ())]) is n
    def __add__(self, other):
        return SizeExpr(self.terms + other.terms)

    def __neg__(self):
        return SizeExpr([(-c, names) for c, names in self.terms])

    def __sub__(self, other):
        return self + -other

    def __mul__(self, other):
        return SizeExpr([(ca * cb, na + nb) for ca, na in self.terms for cb, nb in other.terms])


def evaluate(size, binding):
    """The value of a size: an int is itself, a text is an expression over `binding`."""
    return size if isinstance(size, int) else SizeExpr.parse(size)(binding)


def from_table(entry):
    """(path, SizeExpr) of a size-table entry [path, c0, k, dims] (checked by the loader)."""
    path, c0, k, names = entry
    return tuple(path), SizeExpr.affine(c0, k, names)
