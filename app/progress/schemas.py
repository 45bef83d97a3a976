"""Progress bodies, exactly as docs/contracts.md fixes them."""

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

ExerciseState = Literal["not_started", "attempted", "passed"]


class LessonState(BaseModel):
    read: bool = False
    quiz_passed: bool = False
    last_section: str | None = None
    exercises: dict[str, ExerciseState] = Field(default_factory=dict)


class ProgressPublic(BaseModel):
    last_lesson: str | None
    lessons: dict[str, LessonState]


class ProgressUpdate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    read: bool | None = None
    last_section: str | None = Field(default=None, max_length=200)
