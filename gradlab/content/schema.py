"""Pydantic models of the content files. `extra="forbid"` turns a typo into an error."""

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

Slug = Annotated[str, StringConstraints(pattern=r"^[a-z0-9]+(-[a-z0-9]+)*$", max_length=64)]
Text = Annotated[str, StringConstraints(strip_whitespace=True)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# --- lessons/course.yaml --------------------------------------------------------------------


class CourseLesson(Strict):
    id: Slug
    title: dict[str, Text] = Field(description="lesson title per locale; `en` is required")

    @model_validator(mode="after")
    def _has_english(self) -> "CourseLesson":
        if not self.title.get("en"):
            raise ValueError("title needs an `en` entry")
        return self


class Course(Strict):
    id: Slug
    title: dict[str, Text]
    lessons: list[CourseLesson] = Field(min_length=1)
    faq: list[Slug] = Field(default_factory=list, description="FAQ keys answered per locale")


# --- lessons/<lesson>/lesson.yaml (language-neutral) -------------------------------------------


class Quiz(Strict):
    options: int = Field(ge=2, le=8, description="number of options every locale must list")
    answer: int = Field(ge=0, description="index of the correct option")

    @model_validator(mode="after")
    def _answer_in_range(self) -> "Quiz":
        if self.answer >= self.options:
            raise ValueError(f"answer {self.answer} is not one of {self.options} options")
        return self


class SectionSpec(Strict):
    id: Slug
    kind: Literal["prose", "quiz", "recap"] = "prose"
    code: str | None = Field(default=None, description="Python shown after the section's body")
    quiz: Quiz | None = None

    @model_validator(mode="after")
    def _quiz_iff_kind(self) -> "SectionSpec":
        if (self.kind == "quiz") != (self.quiz is not None):
            raise ValueError("a `quiz` block belongs to (and is required by) kind: quiz")
        return self


class Limits(Strict):
    wall_s: float = Field(default=30.0, gt=0, le=600)
    memory_mb: int = Field(default=4096, ge=256, le=65536)


MessageKey = Annotated[str, StringConstraints(pattern=r"^[a-z0-9_]+(\.[a-z0-9_]+)*$")]
Placeholder = Annotated[str, StringConstraints(pattern=r"^[a-z_][a-z0-9_]*$")]


class MessageContract(Strict):
    """The messages an exercise's grader takes from the locale files, each with exactly the
    `{placeholders}` it fills in (every locale is checked against this)."""

    checks: dict[MessageKey, list[Placeholder]] = Field(default_factory=dict)
    diagnoses: dict[MessageKey, list[Placeholder]] = Field(
        default_factory=dict, description="diagnosis code -> its placeholders"
    )


class ExerciseSpec(Strict):
    id: Slug
    starter: str = Field(description="starter code file, relative to the lesson folder")
    device: Literal["auto", "cpu", "cuda"] = "auto"
    limits: Limits = Field(default_factory=Limits)
    messages: MessageContract = Field(
        default_factory=MessageContract,
        description="the grader's messages (worker/graders/exercises/<harness>)",
    )


class LessonSpec(Strict):
    id: Slug
    sections: list[SectionSpec] = Field(min_length=1)
    exercises: list[ExerciseSpec] = Field(default_factory=list)


# --- lessons/<lesson>/<locale>.yaml (prose) ---------------------------------------------------


class SectionText(Strict):
    source: str | None = Field(
        default=None,
        pattern=r"^[0-9a-f]{12}$",
        description="hash of the English text this translation was made from "
        "(written by `gradlab lessons stamp`)",
    )
    title: Text | None = None
    body: Text | None = None
    question: Text | None = None
    options: list[Text] | None = None
    explanation: Text | None = None
    points: list[Text] | None = None


class FaqText(Strict):
    source: str | None = Field(
        default=None,
        pattern=r"^[0-9a-f]{12}$",
        description="hash of the English text this translation was made from "
        "(written by `gradlab lessons stamp`)",
    )
    question: Text
    answer: Text


class ExerciseText(Strict):
    source: str | None = Field(
        default=None,
        pattern=r"^[0-9a-f]{12}$",
        description="hash of the English text this translation was made from "
        "(written by `gradlab lessons stamp`)",
    )
    title: Text
    instructions: Text
    hints: list[Text] = Field(default_factory=list)
    diagnoses: dict[str, Text] = Field(
        default_factory=dict, description="diagnosis code -> message, with {placeholders}"
    )
    checks: dict[str, Text] = Field(
        default_factory=dict, description="check message key -> message, with {placeholders}"
    )


class LessonText(Strict):
    source: str | None = Field(
        default=None,
        pattern=r"^[0-9a-f]{12}$",
        description="hash of the English title and subtitle this translation was made from "
        "(written by `gradlab lessons stamp`)",
    )
    title: Text | None = None
    subtitle: Text | None = None
    sections: dict[str, SectionText] = Field(default_factory=dict)
    faq: dict[str, FaqText] = Field(default_factory=dict)
    exercises: dict[str, ExerciseText] = Field(default_factory=dict)
