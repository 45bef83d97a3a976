"""Class insight bodies: counts per exercise and per lesson, never a learner's identity."""

from datetime import date, datetime

from pydantic import BaseModel, Field


class Spread(BaseModel):
    """Nearest-rank percentiles over the learners who passed (the value at rank ceil(p * n))."""

    median: float | None = None
    p90: float | None = None


class ExerciseInsight(BaseModel):
    exercise: str
    lesson: str
    submissions: int
    graded: int = Field(description="submissions with a result: passed, failed or error")
    passed: int
    pass_rate: float | None = Field(description="passed / graded; null when nothing is graded")
    learners: int = Field(description="distinct learners (accounts and anonymous) who submitted")
    learners_passed: int
    diagnoses: dict[str, int] = Field(
        description="diagnosis code -> submissions given it (every declared code, then others)"
    )
    error_kinds: dict[str, int] = Field(description="error kind -> submissions")
    attempts_to_pass: Spread = Field(
        description="submissions a learner made up to and including their first pass"
    )
    hints_before_pass: Spread = Field(description="hints a learner opened before their first pass")
    seconds_to_pass: Spread = Field(
        description="from a learner's first submission to their first pass"
    )
    learners_with_hints: int = Field(description="learners who opened at least one hint")


class LessonInsight(BaseModel):
    lesson: str
    learners: int = Field(description="learners with reading progress in the lesson")
    read: int
    quiz_passed: int
    last_section: dict[str, int] = Field(
        description="section id -> learners whose last reported section it is, in page order"
    )


class InsightsPublic(BaseModel):
    exercise: str | None
    locale: str | None
    since: date | None
    until: date | None = Field(description="inclusive: the whole day counts")
    generated_at: datetime
    exercises: list[ExerciseInsight]
    lessons: list[LessonInsight]
