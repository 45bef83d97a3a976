"""The JSON Schemas of the content files, generated from the Pydantic models and committed
under `lessons/schema/`, so that editors (via the `yaml-language-server` header of every
lesson file) autocomplete keys and flag typos while an author types."""

import json
from pathlib import Path

from pydantic import BaseModel

from gradlab.content.schema import Course, LessonSpec, LessonText

SCHEMA_DIR = "schema"
SCHEMAS: dict[str, tuple[type[BaseModel], str]] = {
    "course.schema.json": (Course, "lessons/course.yaml: course id, lesson order and titles"),
    "lesson.schema.json": (LessonSpec, "lessons/<lesson>/lesson.yaml: the language-neutral part"),
    "locale.schema.json": (LessonText, "lessons/<lesson>/<locale>.yaml: a lesson's prose"),
}


def schema_text(model: type[BaseModel], title: str) -> str:
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": title,
        **model.model_json_schema(),
    }
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"


def write_schema_files(content_dir: Path) -> list[Path]:
    folder = content_dir / SCHEMA_DIR
    folder.mkdir(exist_ok=True)
    written = []
    for name, (model, title) in SCHEMAS.items():
        path = folder / name
        path.write_text(schema_text(model, title), encoding="utf-8")
        written.append(path)
    return written


def stale_schema_files(content_dir: Path) -> list[Path]:
    """Schema files that are missing or differ from what the models generate today."""
    stale = []
    for name, (model, title) in SCHEMAS.items():
        path = content_dir / SCHEMA_DIR / name
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current != schema_text(model, title):
            stale.append(path)
    return stale
