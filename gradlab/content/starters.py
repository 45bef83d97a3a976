"""Translated starter code: `exercises/<locale>/<name>.py` beside the English `exercises/<name>.py`.

The starter is the first thing a learner reads in the editor, so its comments and docstrings are
translated like the prose. Its code never is: whatever the page's language, the learner who
submits the starter unchanged must send the grader the same program. `code_difference` compares
a translation with the English token by token, with comments and line breaks left out and every
docstring masked, and says where the two first differ.

A folder per locale rather than `<name>.<locale>.py`: whatever lists `exercises/*.py` as the
exercises (the corpus tests, the benches) keeps seeing one file per exercise.
"""

import ast
import functools
import io
import tokenize
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from gradlab.config import DEFAULT_LOCALE, LOCALES
from gradlab.content.yamlfile import Problem

_SKIPPED = {tokenize.COMMENT, tokenize.NL}
_DOCSTRING = "<docstring>"
_SPOKEN = {  # how a token without text of its own is named in a report
    tokenize.NEWLINE: "the end of a statement",
    tokenize.DEDENT: "the end of an indented block",
    tokenize.ENDMARKER: "the end of the file",
}


def translated_path(folder: Path, starter: str, locale: str) -> Path:
    """Where `locale`'s translation of the starter `starter` (relative to the lesson `folder`,
    as lesson.yaml names it) lives: the same file name in a folder named after the locale."""
    english = PurePosixPath(starter)
    return folder / english.parent / locale / english.name


@dataclass(frozen=True)
class _Token:
    kind: int
    text: str
    line: int

    @property
    def shown(self) -> str:
        if self.text == _DOCSTRING:
            return "a docstring"
        if self.kind == tokenize.INDENT:
            width = f"{len(self.text)} spaces" if self.text.strip(" ") == "" else repr(self.text)
            return f"a block indented by {width}"
        return _SPOKEN.get(self.kind) or f"`{self.text}`"


class NotPython(Exception):
    def __init__(self, line: int, reason: str) -> None:
        super().__init__(f"line {line}: {reason}")
        self.line, self.reason = line, reason


def _docstring_starts(tree: ast.Module) -> set[tuple[int, int]]:
    """Where each docstring (of the module, a class or a function) starts: (line, column)."""
    starts = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            first = node.body[0] if node.body else None
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                # The column is in UTF-8 bytes, but only indentation (ASCII) precedes it.
                starts.add((first.lineno, first.col_offset))
    return starts


@functools.lru_cache(maxsize=256)
def code_tokens(source: str) -> tuple[_Token, ...]:
    """The tokens of `source` that make its program: no comments, no blank or continued lines,
    each docstring as one placeholder token (its text may be anything). Raises NotPython.
    Cached: every (re)load compares each English starter with up to three translations."""
    try:
        tree = ast.parse(source)
        raw = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except SyntaxError as exc:
        raise NotPython(exc.lineno or 1, exc.msg) from None
    except (tokenize.TokenError, ValueError) as exc:  # ValueError: a NUL character
        raise NotPython(1, str(exc)) from None
    docstrings = _docstring_starts(tree)
    tokens: list[_Token] = []
    depth = None  # inside a docstring statement: its parenthesis depth
    for token in raw:
        if token.type in _SKIPPED:
            continue
        if depth is not None:  # a docstring is strings, maybe in parentheses, nothing else
            if token.type == tokenize.STRING:
                continue
            if token.string == "(":
                depth += 1
                continue
            if token.string == ")" and depth > 0:
                depth -= 1
                continue
            depth = None
        if token.start in docstrings:
            tokens.append(_Token(tokenize.STRING, _DOCSTRING, token.start[0]))
            depth = 1 if token.string == "(" else 0
            continue
        # NEWLINE's text is "\n", "\r\n" or "" at the end of the file: the same statement end
        text = "" if token.type in (tokenize.NEWLINE, tokenize.DEDENT) else token.string
        tokens.append(_Token(token.type, text, token.start[0]))
    return tuple(tokens)


@dataclass(frozen=True)
class Difference:
    line: int  # in the translation
    english_line: int
    found: str  # what the translation has there, in words
    expected: str  # what the English has


def code_difference(english: str, translated: str) -> Difference | None:
    """None when the two sources are the same program but for comments and docstrings; else
    where they first differ. Raises NotPython (for the English source too)."""
    theirs, ours = code_tokens(english), code_tokens(translated)
    for here, there in zip(ours, theirs, strict=False):
        if (here.kind, here.text) != (there.kind, there.text):
            return Difference(here.line, there.line, here.shown, there.shown)
    # Equal up to the end of the shorter one: both end with their only ENDMARKER, so they are
    # equal throughout.
    return None


def check_translated_starter(
    *, file: Path, code: str, english_name: str, english_code: str
) -> list[Problem]:
    """The problems of one translated starter (an empty list: its code is the English's);
    `english_name` is the English starter as lesson.yaml names it."""
    try:
        code_tokens(english_code)
    except NotPython as exc:
        return [
            Problem(
                file,
                1,
                f"cannot be compared with the English starter: {english_name} is not valid "
                f"Python (line {exc.line}: {exc.reason})",
            )
        ]
    try:
        found = code_difference(english_code, code)
    except NotPython as exc:
        return [Problem(file, exc.line, f"not valid Python: {exc.reason}")]
    if found is None:
        return []
    return [
        Problem(
            file,
            found.line,
            f"its code differs from the English starter's: {found.found} here, where "
            f"{english_name}:{found.english_line} has {found.expected} (translate only comments "
            "and docstrings; copy the code unchanged)",
        )
    ]


def stray_translations(folder: Path, starters: list[str]) -> list[Problem]:
    """Python files in a locale's starter folder that translate no exercise's starter (a
    renamed or misspelled file would otherwise be ignored without a word)."""
    expected = {
        translated_path(folder, starter, locale)
        for starter in starters
        for locale in LOCALES
        if locale != DEFAULT_LOCALE
    }
    problems = []
    for parent in sorted({(folder / starter).parent for starter in starters}):
        for locale in LOCALES:
            if locale == DEFAULT_LOCALE or not (parent / locale).is_dir():
                continue
            for path in sorted((parent / locale).glob("*.py")):
                if path not in expected:
                    problems.append(
                        Problem(
                            path,
                            1,
                            "translates no exercise's starter: name it like the English file "
                            "(lesson.yaml `starter:`), in the folder of its locale",
                        )
                    )
    return problems
