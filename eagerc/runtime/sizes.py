"""Symbolic sizes: the one representation of a size that depends on dynamic dimensions.

Every layer that meets such a size uses a `SizeExpr`: a sum of terms, each an integer
times a product of named sizes (`s0`, `16*s0`, `s0*s1`, `batch-1`, `2*n+3`), kept in one
canonical order (higher degree first, names sorted, the constant last), written one way
(`str`) and evaluated one way (`expr(binding)`, never `eval`):

- @compile's dynamic graphs (compiler/dynamic.py) hold sizes as that text in value shapes
  and attributes, and its SymInts do arithmetic on them while a trace runs;
- a program file's size table (compiler/export.py writes it, runtime/program.py checks
  and evaluates it) stores each size-dependent integer as [path, c0, k, dims], meaning
  c0 + k * product(dims): `from_table` reads one entry;
- ONNX export names dynamic output sizes by the text and computes them from the inputs'
  shapes term by term.

Grammar of the text: term (('+' | '-') term)*, term = factor ('*' factor)*, factor = an
integer or a name (a letter or '_', then letters, digits, '_').
"""

__all__ = ["SizeExpr", "evaluate", "from_table"]

MAX_TEXT = 200   # characters of a size expression's text
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
            e = _PARSED[text] = cls(_parse(text))
        return e

    @classmethod
    def affine(cls, c0, k, names):
        """c0 + k * product(names): a size table's entry (built directly: a loaded file may hold
        many)."""
        if not k or not names:
            return cls([(k, tuple(names)), (c0, ())])
        e = object.__new__(cls)
        e.terms = ((k, tuple(sorted(names))), (c0, ())) if c0 else ((k, tuple(sorted(names))),)
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

    # arithmetic with integers and other expressions (SymInts during a dynamic trace)
    def __add__(self, other):
        return SizeExpr(self.terms + _terms(other))

    __radd__ = __add__

    def __neg__(self):
        return SizeExpr([(-c, names) for c, names in self.terms])

    def __sub__(self, other):
        return self + -_expr(other)

    def __rsub__(self, other):
        return _expr(other) + -self

    def __mul__(self, other):
        return SizeExpr([(ca * cb, na + nb) for ca, na in self.terms for cb, nb in _terms(other)])

    __rmul__ = __mul__


def _expr(x):
    return x if isinstance(x, SizeExpr) else SizeExpr([(x, ())])


def _terms(x):
    return x.terms if isinstance(x, SizeExpr) else ((x, ()),)


def _parse(text):
    if not isinstance(text, str) or not text or len(text) > MAX_TEXT:
        raise ValueError(f"bad size expression {text!r}")
    terms = []
    i, n = 0, len(text)
    sign = 1
    if text[0] in "+-":
        sign = -1 if text[0] == "-" else 1
        i = 1
    while True:
        coef, names = sign, []
        while True:
            j = i
            if j < n and text[j].isdigit():
                while j < n and text[j].isdigit():
                    j += 1
                coef *= int(text[i:j])
            elif j < n and (text[j].isalpha() or text[j] == "_"):
                while j < n and (text[j].isalnum() or text[j] == "_"):
                    j += 1
                names.append(text[i:j])
            else:
                raise ValueError(f"bad size expression {text!r} at position {i}")
            i = j
            if i < n and text[i] == "*":
                i += 1
                continue
            break
        terms.append((coef, tuple(names)))
        if i == n:
            return terms
        if text[i] not in "+-":
            raise ValueError(f"bad size expression {text!r} at position {i}")
        sign = -1 if text[i] == "-" else 1
        i += 1


def evaluate(size, binding):
    """The value of a size: an int is itself, a text is an expression over `binding`."""
    return size if isinstance(size, int) else SizeExpr.parse(size)(binding)


def from_table(entry):
    """(path, SizeExpr) of a size-table entry [path, c0, k, dims] (checked by the loader)."""
    path, c0, k, names = entry
    return tuple(path), SizeExpr.affine(c0, k, names)
