"""A small evaluator for GitHub Actions ``${{ }}`` expressions.

``ci.plan`` reads the workflow files themselves and needs to evaluate their ``if:``
conditions, ``runs-on``, ``env`` and ``with`` values for one tag. Only the part of the
expression language the workflows use is implemented: context paths, string / number /
boolean literals, ``== != && || !``, parentheses and a handful of functions. Anything else
raises ``ExpressionError`` so that a new construct in a workflow is noticed, not guessed.

Values only known while a workflow runs (``github.run_id``, ``steps.*``, ``runner.temp``)
are ``Unknown`` placeholders that render as ``<github.run_id>``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..core.errors import BuildError


class ExpressionError(BuildError):
    """An expression the plan cannot evaluate."""


@dataclass(frozen=True)
class Unknown:
    """A value that exists only at run time."""

    text: str

    def __str__(self) -> str:
        return f"<{self.text}>"


#: The context key under which a caller that knows the run's real state (ci/simulate.py)
#: passes the job-status functions' values; the plan assumes every earlier job succeeded.
STATUS_KEY = "__status__"
#: Job-status functions as the plan assumes them: every earlier job succeeded.
STATUS_FUNCTIONS: dict[str, bool] = {
    "success": True,
    "always": True,
    "cancelled": False,
    "failure": False,
}

_TOKEN = re.compile(
    r"\s*(?:(?P<string>'(?:[^']|'')*')|(?P<number>-?\d+(?:\.\d+)?)"
    r"|(?P<op>==|!=|&&|\|\||<=|>=|[!<>(),\[\]])"
    r"|(?P<name>[A-Za-z_][A-Za-z0-9_-]*(?:\.[A-Za-z_*][A-Za-z0-9_-]*)*))"
)
_INTERPOLATION = re.compile(r"\$\{\{(.*?)\}\}", re.DOTALL)
#: A string that is exactly one expression (not two side by side: "${{ a }}-${{ b }}").
_WHOLE = re.compile(r"\$\{\{((?:(?!\}\}).)*)\}\}", re.DOTALL)


def _tokens(text: str) -> list[tuple[str, str]]:
    tokens: list[tuple[str, str]] = []
    position = 0
    text = text.strip()
    while position < len(text):
        match = _TOKEN.match(text, position)
        if not match or match.end() == position:
            raise ExpressionError(f"cannot read expression '{text}' at '{text[position:]}'")
        kind = match.lastgroup
        assert kind is not None
        tokens.append((kind, match.group(kind)))
        position = match.end()
    return tokens


def truthy(value: Any) -> bool | Unknown:
    if isinstance(value, Unknown):
        return value
    if value is None:
        return False
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return value != 0
    if isinstance(value, str):
        return value != ""
    return True  # objects and arrays


def to_string(value: Any) -> str:
    """How GitHub renders a value inside a string."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True)
    return str(value)


def _equal(left: Any, right: Any) -> bool | Unknown:
    if isinstance(left, Unknown) or isinstance(right, Unknown):
        return Unknown(f"{left} == {right}")
    if isinstance(left, str) and isinstance(right, str):
        return left.casefold() == right.casefold()  # GitHub compares strings ignoring case
    if type(left) is not type(right) and None not in (left, right):
        return to_string(left).casefold() == to_string(right).casefold()
    return bool(left == right)


class _Parser:
    def __init__(self, text: str, lookup: Callable[[str], Any],
                 status: Mapping[str, bool] = STATUS_FUNCTIONS) -> None:
        self.text = text
        self.tokens = _tokens(text)
        self.position = 0
        self.lookup = lookup
        self.status = status

    def parse(self) -> Any:
        value = self._or()
        if self.position != len(self.tokens):
            raise ExpressionError(f"unexpected '{self.tokens[self.position][1]}' in '{self.text}'")
        return value

    def _peek(self) -> str | None:
        return self.tokens[self.position][1] if self.position < len(self.tokens) else None

    def _take(self, expected: str | None = None) -> tuple[str, str]:
        if self.position >= len(self.tokens):
            raise ExpressionError(f"expression '{self.text}' ends too early")
        token = self.tokens[self.position]
        if expected is not None and token[1] != expected:
            raise ExpressionError(f"expected '{expected}' in '{self.text}', found '{token[1]}'")
        self.position += 1
        return token

    def _or(self) -> Any:
        left = self._and()
        while self._peek() == "||":
            self._take()
            right = self._and()
            test = truthy(left)
            if isinstance(test, Unknown):
                # Either side's value: truthy whatever the left is, if the right is.
                left = right if truthy(right) is True else Unknown(f"{left} || {right}")
            else:
                left = left if test else right
        return left

    def _and(self) -> Any:
        left = self._compare()
        while self._peek() == "&&":
            self._take()
            right = self._compare()
            test = truthy(left)
            if isinstance(test, Unknown):
                # Either side's value: falsy whatever the left is, if the right is.
                left = right if truthy(right) is False else Unknown(f"{left} && {right}")
            else:
                left = right if test else left
        return left

    def _compare(self) -> Any:
        left = self._unary()
        while self._peek() in ("==", "!="):
            operator = self._take()[1]
            right = self._unary()
            result = _equal(left, right)
            if operator == "!=":
                result = result if isinstance(result, Unknown) else not result
            left = result
        return left

    def _unary(self) -> Any:
        if self._peek() == "!":
            self._take()
            value = truthy(self._unary())
            return value if isinstance(value, Unknown) else not value
        return self._primary()

    def _primary(self) -> Any:
        kind, text = self._take()
        if text == "(":
            value = self._or()
            self._take(")")
            return value
        if kind == "string":
            return text[1:-1].replace("''", "'")
        if kind == "number":
            return float(text) if "." in text else int(text)
        if kind != "name":
            raise ExpressionError(f"unexpected '{text}' in '{self.text}'")
        if text in ("true", "false"):
            return text == "true"
        if text == "null":
            return None
        if self._peek() == "(":
            return self._call(text)
        return self.lookup(text)

    def _call(self, name: str) -> Any:
        self._take("(")
        arguments: list[Any] = []
        while self._peek() != ")":
            arguments.append(self._or())
            if self._peek() == ",":
                self._take()
        self._take(")")
        return call(name, arguments, self.status)


def call(name: str, arguments: list[Any],
         status: Mapping[str, bool] = STATUS_FUNCTIONS) -> Any:
    lowered = name.lower()
    if lowered in status and not arguments:
        return status[lowered]
    if any(isinstance(argument, Unknown) for argument in arguments):
        return Unknown(f"{name}({', '.join(map(str, arguments))})")
    if lowered == "fromjson":
        return json.loads(arguments[0])
    if lowered == "tojson":
        return json.dumps(arguments[0], indent=2)
    if lowered == "startswith":
        return to_string(arguments[0]).casefold().startswith(to_string(arguments[1]).casefold())
    if lowered == "endswith":
        return to_string(arguments[0]).casefold().endswith(to_string(arguments[1]).casefold())
    if lowered == "contains":
        haystack, needle = arguments
        if isinstance(haystack, list):
            return any(_equal(item, needle) is True for item in haystack)
        return to_string(needle).casefold() in to_string(haystack).casefold()
    if lowered == "format":
        return re.sub(r"\{(\d+)\}", lambda m: to_string(arguments[1 + int(m.group(1))]),
                      to_string(arguments[0]))
    if lowered == "join":
        items, separator = arguments[0], arguments[1] if len(arguments) > 1 else ","
        return to_string(separator).join(map(to_string, items if isinstance(items, list) else [items]))
    raise ExpressionError(f"function {name}() is not supported by the plan evaluator")


def resolve(contexts: Mapping[str, Any], path: str) -> Any:
    """A dotted context path; a missing property is null, as on GitHub."""
    value: Any = contexts
    for part in path.split("."):
        if isinstance(value, Unknown):
            return Unknown(path)
        if not isinstance(value, Mapping):
            return None
        if part not in value:
            if value is contexts:
                raise ExpressionError(f"unknown context '{part}' in '{path}'")
            return None
        value = value[part]
    return value


def evaluate(expression: str, contexts: Mapping[str, Any]) -> Any:
    """The value of one expression (without the ``${{ }}``)."""
    status = contexts.get(STATUS_KEY, STATUS_FUNCTIONS)
    return _Parser(expression, lambda path: resolve(contexts, path), status).parse()


def interpolate(value: Any, contexts: Mapping[str, Any]) -> Any:
    """Expand every ``${{ }}`` in a string, or in the strings of a list / mapping.

    A string that is exactly one expression keeps the expression's type (a matrix object,
    a boolean); otherwise the results are rendered into the string.
    """
    if isinstance(value, Mapping):
        return {key: interpolate(item, contexts) for key, item in value.items()}
    if isinstance(value, list):
        return [interpolate(item, contexts) for item in value]
    if not isinstance(value, str):
        return value
    whole = _WHOLE.fullmatch(value.strip())
    if whole:
        return evaluate(whole.group(1), contexts)
    return _INTERPOLATION.sub(lambda m: to_string(evaluate(m.group(1), contexts)), value)


def condition(text: Any, contexts: Mapping[str, Any]) -> bool | Unknown:
    """An ``if:`` value (with or without ``${{ }}``) as GitHub would decide it."""
    if isinstance(text, bool):
        return text
    source = str(text).strip()
    whole = _WHOLE.fullmatch(source)
    return truthy(evaluate(whole.group(1) if whole else source, contexts))


def uses_status_function(text: Any) -> bool:
    """Whether an ``if:`` overrides the implicit success() (always(), cancelled() ...)."""
    return bool(re.search(r"\b(always|success|failure|cancelled)\s*\(", str(text)))
