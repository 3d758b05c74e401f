"""A small compiler for the JSONPath filters Dolma mixer configs use, compiled once per config.

Supported: ``$`` (also Dolma's ``$@``), ``.name``, ``['name']``, ``[index]`` (negative too),
``[*]``/``.*``, ``[start:end]``, and filters ``[?( ... )]`` with ``@``/``$`` paths, numbers,
strings, ``true``/``false``/``null``, ``== != < <= > >=``, ``&&``, ``||``, ``!`` and parentheses.
A bare path in a filter tests existence.

Semantics follow the jsonpath-rust library behind Dolma's mixer, with one fix on purpose:
numbers compare **by value** whatever their JSON type, so an integer ``1`` satisfies
``>= 1.0`` (Dolma's dedup exclude rule silently keeps duplicates without this). A filter on an
object tests the object itself (``$.attributes[?(@.key[0][2] < 50)]``); on an array it tests
each element. A comparison with a missing value is false. An expression *matches* a row when it
selects at least one value.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from feedline.curate.errors import CurateError

Nodes = list[Any]
Step = Callable[[Nodes, Any], Nodes]
Predicate = Callable[[Any, Any], bool]

_TOKEN = re.compile(
    r"""\s*(?:
        (?P<num>-?\d+(?:\.\d*)?(?:[eE][+-]?\d+)?)
      | (?P<str>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")
      | (?P<op>==|!=|<=|>=|&&|\|\||\.\.|\[\?\(|[<>!()\[\]$@.*:,?])
      | (?P<name>[A-Za-z_][A-Za-z0-9_\-]*)
    )""",
    re.VERBOSE,
)
_MISSING = object()


def _tokenize(text: str) -> list[tuple[str, str]]:
    tokens: list[tuple[str, str]] = []
    pos = 0
    text = text.strip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise CurateError(f"JSONPath {text!r}: cannot parse at position {pos}: {text[pos:pos + 20]!r}")
        kind = m.lastgroup or ""
        tokens.append((kind, m.group(kind)))
        pos = m.end()
        while pos < len(text) and text[pos].isspace():
            pos += 1
    return tokens


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _compare(op: str, left: Any, right: Any) -> bool:
    if _is_number(left) and _is_number(right):
        pass  # int and float compare by value in Python
    elif type(left) is not type(right):
        return op == "!="
    elif op not in ("==", "!=") and not isinstance(left, str):
        return False
    if op == "==":
        return bool(left == right)
    if op == "!=":
        return bool(left != right)
    if op == "<":
        return bool(left < right)
    if op == "<=":
        return bool(left <= right)
    if op == ">":
        return bool(left > right)
    return bool(left >= right)


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = _tokenize(text)
        self.pos = 0

    def error(self, what: str) -> CurateError:
        return CurateError(f"JSONPath {self.text!r}: {what}")

    def peek(self, offset: int = 0) -> tuple[str, str]:
        at = self.pos + offset
        return self.tokens[at] if at < len(self.tokens) else ("end", "")

    def take(self, value: str | None = None) -> tuple[str, str]:
        token = self.peek()
        if value is not None and token[1] != value:
            raise self.error(f"expected {value!r}, found {token[1] or 'the end'!r}")
        self.pos += 1
        return token

    # path := ('$' | '@') segment*
    def path(self) -> tuple[str, list[Step]]:
        root = self.take()[1]
        if root not in ("$", "@"):
            raise self.error(f"a path starts with $ or @, not {root!r}")
        if root == "$" and self.peek()[1] == "@":  # Dolma configs sometimes write "$@.attributes"
            self.take()
        steps: list[Step] = []
        while True:
            kind, value = self.peek()
            if value == ".":
                self.take()
                kind, value = self.take()
                if value == "*":
                    steps.append(_wildcard)
                elif kind in ("name", "num"):
                    steps.append(_member(value))
                else:
                    raise self.error(f"expected a name after '.', found {value!r}")
            elif value == "..":
                raise self.error("recursive descent '..' is not supported")
            elif value == "[?(":
                self.take()
                predicate = self.expression()
                self.take(")")
                self.take("]")
                steps.append(_filter(predicate))
            elif value == "[":
                self.take()
                steps.append(self.bracket())
                self.take("]")
            else:
                return root, steps

    def bracket(self) -> Step:
        kind, value = self.peek()
        if value == "*":
            self.take()
            return _wildcard
        if kind == "str":
            self.take()
            return _member(_unquote(value))
        if kind == "num" or value == ":":
            start = int(self.take()[1]) if kind == "num" else None
            if self.peek()[1] != ":":
                if start is None:
                    raise self.error("empty index")
                return _index(start)
            self.take()
            end = int(self.take()[1]) if self.peek()[0] == "num" else None
            return _slice(start, end)
        raise self.error(f"unsupported bracket selector {value!r}")

    # expression := and ('||' and)*
    def expression(self) -> Predicate:
        terms = [self.conjunction()]
        while self.peek()[1] == "||":
            self.take()
            terms.append(self.conjunction())
        if len(terms) == 1:
            return terms[0]
        return lambda node, root: any(t(node, root) for t in terms)

    def conjunction(self) -> Predicate:
        terms = [self.unary()]
        while self.peek()[1] == "&&":
            self.take()
            terms.append(self.unary())
        if len(terms) == 1:
            return terms[0]
        return lambda node, root: all(t(node, root) for t in terms)

    def unary(self) -> Predicate:
        kind, value = self.peek()
        if value == "!" :
            self.take()
            inner = self.unary()
            return lambda node, root: not inner(node, root)
        if value == "(":
            self.take()
            inner = self.expression()
            self.take(")")
            return inner
        left = self.operand()
        op = self.peek()[1]
        if op in ("==", "!=", "<", "<=", ">", ">="):
            self.take()
            right = self.operand()
            return _comparison(op, left, right)
        return lambda node, root: bool(left(node, root))

    def operand(self) -> Callable[[Any, Any], Nodes]:
        kind, value = self.peek()
        if value in ("@", "$"):
            root, steps = self.path()
            run = _run_steps(steps)
            if root == "@":
                return lambda node, doc: run([node], doc)
            return lambda node, doc: run([doc], doc)
        self.take()
        literal: Any
        if kind == "num":
            literal = float(value) if any(c in value for c in ".eE") else int(value)
        elif kind == "str":
            literal = _unquote(value)
        elif value in ("true", "false"):
            literal = value == "true"
        elif value == "null":
            literal = None
        else:
            raise self.error(f"expected a value, found {value!r}")
        constant = [literal]
        return lambda node, doc: constant


def _unquote(token: str) -> str:
    return re.sub(r"\\(.)", r"\1", token[1:-1])


def _member(name: str) -> Step:
    def step(nodes: Nodes, root: Any) -> Nodes:
        out = []
        for node in nodes:
            if isinstance(node, dict):
                value = node.get(name, _MISSING)
                if value is not _MISSING:
                    out.append(value)
        return out

    return step


def _index(i: int) -> Step:
    def step(nodes: Nodes, root: Any) -> Nodes:
        out = []
        for node in nodes:
            if isinstance(node, list) and -len(node) <= i < len(node):
                out.append(node[i])
        return out

    return step


def _slice(start: int | None, end: int | None) -> Step:
    def step(nodes: Nodes, root: Any) -> Nodes:
        out: Nodes = []
        for node in nodes:
            if isinstance(node, list):
                out.extend(node[start:end])
        return out

    return step


def _wildcard(nodes: Nodes, root: Any) -> Nodes:
    out: Nodes = []
    for node in nodes:
        if isinstance(node, dict):
            out.extend(node.values())
        elif isinstance(node, list):
            out.extend(node)
    return out


def _filter(predicate: Predicate) -> Step:
    def step(nodes: Nodes, root: Any) -> Nodes:
        out = []
        for node in nodes:
            if isinstance(node, list):
                out.extend(e for e in node if predicate(e, root))
            elif isinstance(node, dict) and predicate(node, root):
                out.append(node)
        return out

    return step


def _comparison(op: str, left: Callable[[Any, Any], Nodes], right: Callable[[Any, Any], Nodes]) -> Predicate:
    def test(node: Any, root: Any) -> bool:
        lefts = left(node, root)
        if not lefts:
            return False
        rights = right(node, root)
        return any(_compare(op, a, b) for a in lefts for b in rights)

    return test


def _run_steps(steps: list[Step]) -> Callable[[Nodes, Any], Nodes]:
    def run(nodes: Nodes, root: Any) -> Nodes:
        for step in steps:
            if not nodes:
                return nodes
            nodes = step(nodes, root)
        return nodes

    return run


class JsonPath:
    """A compiled expression: ``select(row)`` gives the values, ``matches(row)`` if any."""

    def __init__(self, text: str) -> None:
        self.text = text
        parser = _Parser(text)
        root, steps = parser.path()
        if root != "$":
            raise parser.error("an expression starts with $")
        if parser.peek()[0] != "end":
            raise parser.error(f"unexpected {parser.peek()[1]!r}")
        self._run = _run_steps(steps)

    def select(self, row: Any) -> Nodes:
        return self._run([row], row)

    def matches(self, row: Any) -> bool:
        return bool(self._run([row], row))

    def __repr__(self) -> str:
        return f"JsonPath({self.text!r})"

    def __reduce__(self) -> tuple[type[JsonPath], tuple[str]]:
        return JsonPath, (self.text,)  # closures do not pickle; recompile (once) in the worker
