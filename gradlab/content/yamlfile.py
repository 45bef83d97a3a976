"""Read a YAML file into a Pydantic model, naming file:line for every error."""

from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import yaml
from pydantic import BaseModel, ValidationError

Model = TypeVar("Model", bound=BaseModel)
# Pydantic's wording, said the way an author editing YAML thinks of it.
FRIENDLY_ERRORS = {
    "extra_forbidden": "unknown key (a typo? see the schema in lessons/schema/)",
    "missing": "required key is missing",
}
Path_ = tuple[str | int, ...]
# libyaml's parser when PyYAML was built with it (the wheels are): the pure-Python one took
# three quarters of every app start and content reload
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass(frozen=True)
class Problem:
    file: Path
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.message}"


class ContentError(Exception):
    """One or more problems in the content files."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


def _node_lines(node: yaml.Node, path: Path_, lines: dict[Path_, int]) -> None:
    lines[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            lines[(*path, key.value)] = key.start_mark.line + 1
            _node_lines(value, (*path, key.value), lines)
            lines[(*path, key.value)] = key.start_mark.line + 1
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _node_lines(item, (*path, index), lines)


def line_of(lines: dict[Path_, int], loc: Path_) -> int:
    """The line of the deepest known prefix of `loc` (a missing key points at its parent)."""
    for end in range(len(loc), -1, -1):
        if loc[:end] in lines:
            return lines[loc[:end]]
    return 1


def _parse(text: str, loader_class: type) -> tuple[yaml.Node | None, object]:
    """The document's node tree and its data, parsed once (the nodes give the lines)."""
    loader = loader_class(text)
    try:
        node = loader.get_single_node()
        return node, loader.construct_document(node) if node is not None else None
    finally:
        loader.dispose()


def load_yaml(file: Path, model: type[Model]) -> tuple[Model, dict[Path_, int]]:
    """Parse and validate `file`; raise ContentError with file:line problems."""
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ContentError([Problem(file, 1, f"cannot read: {exc}")]) from exc
    try:
        node, data = _parse(text, _LOADER)
    except yaml.YAMLError:
        try:  # the same error from the pure-Python parser, worded as docs/authoring.md shows
            node, data = _parse(text, yaml.SafeLoader)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            line = mark.line + 1 if mark is not None else 1
            reason = getattr(exc, "problem", None) or str(exc)
            raise ContentError([Problem(file, line, f"invalid YAML: {reason}")]) from exc
    lines: dict[Path_, int] = {}
    if node is not None:
        _node_lines(node, (), lines)
    try:
        return model.model_validate(data if data is not None else {}), lines
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            loc = tuple(part for part in error["loc"] if not str(part).startswith("function-"))
            field = ".".join(str(part) for part in loc) or "(top level)"
            reason = FRIENDLY_ERRORS.get(error["type"], error["msg"])
            problems.append(Problem(file, line_of(lines, loc), f"{field}: {reason}"))
        raise ContentError(problems) from exc
