"""CEL parser: tokens to ``ast`` nodes, with macros expanded.

kpe parses CEL itself because cel-python's parser cannot read the optional
syntax Kubernetes uses (``a.?b``, ``a[?k]``, ``{?k: v}``, ``[?x]``) and mis-lexes
some escapes. The grammar is the CEL spec's; precedence climbs from ``?:``
down to member access.
"""

from __future__ import annotations

from collections.abc import Callable

from engine.cel.parser import ast
from engine.cel.errors import TOO_DEEP, CompileError
from engine.cel.parser.lexer import INT64_MIN_MAGNITUDE, Token, tokenize

RESERVED = frozenset(
    "as break const continue else for function if import let loop package namespace return var void while".split()
)
_RELATIONS = ("<", "<=", ">=", ">", "==", "!=")
MAX_DEPTH = 250  # nesting bound so hostile input fails cleanly, not with RecursionError


def parse(text: str) -> ast.Node:
    """Parse one CEL expression; raises ``CompileError`` with the position of the problem."""
    try:
        return _Parser(text).parse()
    except RecursionError:
        # Each nesting level costs the recursive descent several frames: deep input runs out
        # of Python's stack before MAX_DEPTH; a policy's error, not a crash of the loader.
        raise CompileError(TOO_DEEP, text=text) from None


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = tokenize(text)
        self.pos = 0
        self.depth = 0

    # -- token helpers ---------------------------------------------------
    @property
    def tok(self) -> Token:
        return self.tokens[self.pos]

    def next(self) -> Token:
        token = self.tokens[self.pos]
        self.pos += 1
        return token

    def accept(self, kind: str) -> Token | None:
        if self.tok.kind == kind:
            return self.next()
        return None

    def expect(self, kind: str, what: str | None = None) -> Token:
        if self.tok.kind != kind:
            raise self.error(f"expected {what or repr(kind)}, found {self.describe(self.tok)}")
        return self.next()

    def describe(self, token: Token) -> str:
        if token.kind == "eof":
            return "end of expression"
        return repr(self.text[token.offset : self.tokens[self.pos + 1].offset if self.pos + 1 < len(self.tokens) else None].strip() or token.kind)

    def error(self, message: str, offset: int | None = None) -> CompileError:
        return CompileError(message, text=self.text, offset=self.tok.offset if offset is None else offset)

    # -- grammar ---------------------------------------------------------
    def parse(self) -> ast.Node:
        node = self.expr()
        if self.tok.kind != "eof":
            raise self.error(f"unexpected {self.describe(self.tok)}")
        return node

    def expr(self) -> ast.Node:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise self.error("expression nested too deeply")
        try:
            start = self.tok.offset
            cond = self.logical("||")
            if self.accept("?"):
                then = self.logical("||")
                self.expect(":", "':'")
                otherwise = self.expr()
                return ast.Conditional(cond, then, otherwise, offset=start)
            return cond
        finally:
            self.depth -= 1

    def logical(self, op: str) -> ast.Node:
        start = self.tok.offset
        sub: Callable[[], ast.Node] = (lambda: self.logical("&&")) if op == "||" else self.relation
        operands = [sub()]
        while self.accept(op):
            operands.append(sub())
        if len(operands) == 1:
            return operands[0]
        return ast.Logical(op, tuple(operands), offset=start)

    def relation(self) -> ast.Node:
        left = self.addition()
        while True:
            token = self.tok
            if token.kind in _RELATIONS or (token.kind == "ident" and token.value == "in"):
                self.next()
                op = "in" if token.kind == "ident" else token.kind
                left = ast.Binary(op, left, self.addition(), offset=token.offset)
            else:
                return left

    def addition(self) -> ast.Node:
        left = self.multiplication()
        while self.tok.kind in ("+", "-"):
            token = self.next()
            left = ast.Binary(token.kind, left, self.multiplication(), offset=token.offset)
        return left

    def multiplication(self) -> ast.Node:
        left = self.unary()
        while self.tok.kind in ("*", "/", "%"):
            token = self.next()
            left = ast.Binary(token.kind, left, self.unary(), offset=token.offset)
        return left

    def unary(self) -> ast.Node:
        token = self.tok
        if token.kind == "!":
            ops = []
            while self.tok.kind == "!":
                ops.append(self.next())
            negated = self.member()
            for op in reversed(ops):
                negated = ast.Unary("!", negated, offset=op.offset)
            return negated
        if token.kind == "-":
            ops = []
            while self.tok.kind == "-":
                ops.append(self.next())
            # -9223372036854775808 is a literal, not the negation of an out-of-range one.
            if self.tok.kind == "int" and self.tokens[self.pos + 1].kind not in (".", "[", ".?", "[?"):
                lit = self.next()
                node: ast.Node = ast.Literal(-int(lit.value), offset=ops[-1].offset)  # type: ignore[call-overload]
                ops.pop()
            else:
                node = self.member()
            for op in reversed(ops):
                node = ast.Unary("-", node, offset=op.offset)
            return node
        node = self.member()
        return node

    def member(self) -> ast.Node:
        node = self.primary()
        while True:
            token = self.tok
            if token.kind in (".", ".?"):
                self.next()
                name_tok = self.tok
                if name_tok.kind not in ("ident", "quoted_ident"):
                    raise self.error(f"expected a field name after '.', found {self.describe(name_tok)}")
                self.next()
                name = str(name_tok.value)
                if token.kind == "." and name_tok.kind == "ident" and self.accept("("):
                    args = self.arguments(")")
                    node = self.call(name, args, node, token.offset)
                else:
                    node = ast.Select(node, name, token.kind == ".?", offset=token.offset)
            elif token.kind in ("[", "[?"):
                self.next()
                index = self.expr()
                self.expect("]", "']'")
                node = ast.Index(node, index, token.kind == "[?", offset=token.offset)
            else:
                return node

    def primary(self) -> ast.Node:
        token = self.tok
        kind = token.kind
        if kind in ("int", "uint", "double", "string", "bytes"):
            self.next()
            if kind == "int" and token.value == INT64_MIN_MAGNITUDE:
                raise self.error("int literal out of range", token.offset)
            return ast.Literal(token.value, offset=token.offset)
        if kind == "ident" or (kind == "." and self.tokens[self.pos + 1].kind == "ident"):
            leading_dot = kind == "."
            if leading_dot:
                self.next()
            name_tok = self.next()
            name = str(name_tok.value)
            if name in ("true", "false", "null") and not leading_dot:
                return ast.Literal({"true": True, "false": False, "null": None}[name], offset=token.offset)
            if name in RESERVED or name == "in":
                raise self.error(f"reserved identifier {name!r}", name_tok.offset)
            if self.accept("("):
                args = self.arguments(")")
                return self.call(name, args, None, token.offset)
            if self.tok.kind == "{" and self._looks_like_struct():
                return self.struct(("." if leading_dot else "") + name, token.offset)
            return ast.Ident(("." if leading_dot else "") + name, offset=token.offset)
        if kind == "(":
            self.next()
            node = self.expr()
            self.expect(")", "')'")
            return node
        if kind in ("[", "[?"):
            self.next()
            elements: list[ast.Node] = []
            optional: set[int] = set()
            # The lexer reads `[?` as one token; at the start of a list it opens an optional element.
            first_optional = kind == "[?"
            while self.tok.kind != "]" or first_optional:
                if first_optional or self.accept("?"):
                    first_optional = False
                    optional.add(len(elements))
                elements.append(self.expr())
                if not self.accept(","):
                    break
            self.expect("]", "']'")
            return ast.ListLit(tuple(elements), frozenset(optional), offset=token.offset)
        if kind == "{":
            self.next()
            entries: list[ast.MapEntry] = []
            while self.tok.kind != "}":
                opt = bool(self.accept("?"))
                key = self.expr()
                self.expect(":", "':'")
                entries.append(ast.MapEntry(key, self.expr(), opt))
                if not self.accept(","):
                    break
            self.expect("}", "'}'")
            return ast.MapLit(tuple(entries), offset=token.offset)
        if kind == "eof":
            raise self.error("unexpected end of expression")
        raise self.error(f"unexpected {self.describe(token)}")

    def _looks_like_struct(self) -> bool:
        # `Name{` opens a message literal only when followed by `}` or `field:`.
        after = self.tokens[self.pos + 1]
        return after.kind == "}" or (after.kind in ("ident", "?") and self.tokens[self.pos + 2].kind in (":", "ident"))

    def struct(self, name: str, offset: int) -> ast.Node:
        self.expect("{")
        fields: list[tuple[str, ast.Node]] = []
        while self.tok.kind != "}":
            self.accept("?")
            field = self.expect("ident", "a field name")
            self.expect(":", "':'")
            fields.append((str(field.value), self.expr()))
            if not self.accept(","):
                break
        self.expect("}", "'}'")
        return ast.StructLit(name, tuple(fields), offset=offset)

    def arguments(self, close: str) -> list[ast.Node]:
        args: list[ast.Node] = []
        while self.tok.kind != close:
            args.append(self.expr())
            if not self.accept(","):
                break
        self.expect(close, repr(close))
        return args

    # -- macros ----------------------------------------------------------
    def call(self, name: str, args: list[ast.Node], target: ast.Node | None, offset: int) -> ast.Node:
        if target is None and name == "has" and len(args) == 1:
            arg = args[0]
            if not isinstance(arg, ast.Select):
                raise self.error("invalid argument to has() macro", offset)
            return ast.Has(arg.operand, arg.field, offset=offset)
        if target is not None:
            expansion = _EXPANSIONS.get((name, len(args)))
            if expansion is not None:
                # A comprehension that collects what the library method then finishes:
                # l.sortBy(e, key) -> l.map(e, [e, key]).sortBy() (cel-go's lists extension);
                # r.transformMapEntry(k, v, [filter,] m) -> r.transformList(k, v, [filter,] m)
                # .transformMapEntry(), which merges the maps (cel-go's two-variable comprehensions).
                inner = self.comprehension(expansion, target, args, offset, macro=name)
                if name == "sortBy":
                    assert isinstance(inner, ast.Comprehension) and inner.transform is not None
                    pair = ast.ListLit((ast.Ident(inner.var, offset=offset), inner.transform), offset=offset)
                    inner = ast.Comprehension("map", target, inner.var, None, None, pair, offset=offset)
                return ast.Call(name, (), inner, offset=offset)
            macro = _MACROS.get((name, len(args)))
            if macro is not None:
                return self.comprehension(macro, target, args, offset)
        return ast.Call(name, tuple(args), target, offset=offset)

    def comprehension(self, spec: tuple[str, int], target: ast.Node, args: list[ast.Node], offset: int, macro: str = "") -> ast.Node:
        kind, nvars = spec
        names: list[str] = []
        for arg in args[:nvars]:
            if not isinstance(arg, ast.Ident) or arg.name.startswith("."):
                raise self.error(f"argument of {macro or kind}() must be a simple name", arg.offset)
            names.append(arg.name)
        rest = args[nvars:]
        var, var2 = names[0], (names[1] if nvars == 2 else None)
        if kind in ("map", "transformList", "transformMap") and len(rest) == 2:
            predicate, transform = rest
        elif kind in ("map", "transformList", "transformMap", "optMap", "optFlatMap"):
            predicate, transform = None, rest[0]
        else:
            predicate, transform = rest[0], None
        return ast.Comprehension(kind, target, var, var2, predicate, transform, offset=offset)


# (name, argument count) -> (kind, number of leading variable arguments)
_MACROS: dict[tuple[str, int], tuple[str, int]] = {
    ("all", 2): ("all", 1),
    ("exists", 2): ("exists", 1),
    ("exists_one", 2): ("exists_one", 1),
    ("existsOne", 2): ("exists_one", 1),
    ("map", 2): ("map", 1),
    ("map", 3): ("map", 1),
    ("filter", 2): ("filter", 1),
    ("all", 3): ("all", 2),
    ("exists", 3): ("exists", 2),
    ("exists_one", 3): ("exists_one", 2),
    ("existsOne", 3): ("exists_one", 2),
    ("transformList", 3): ("transformList", 2),
    ("transformList", 4): ("transformList", 2),
    ("transformMap", 3): ("transformMap", 2),
    ("transformMap", 4): ("transformMap", 2),
    ("optMap", 2): ("optMap", 1),
    ("optFlatMap", 2): ("optFlatMap", 1),
}

# Macros that expand to a comprehension and a call of the library method of the same
# name on its result (see ``_Parser.call``): (name, argument count) -> the comprehension.
_EXPANSIONS: dict[tuple[str, int], tuple[str, int]] = {
    ("sortBy", 2): ("map", 1),
    ("transformMapEntry", 3): ("transformList", 2),
    ("transformMapEntry", 4): ("transformList", 2),
}
