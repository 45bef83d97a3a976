"""The result contract (docs/contracts.md): one object per graded submission."""

from typing import Any, Literal

from pydantic import BaseModel, Field

ErrorKind = Literal[
    "syntax_error",
    "runtime_error",
    "timeout",
    "memory_limit",
    "output_limit",
    "sandbox_violation",
    "internal_error",
]


MessageGroup = Literal["checks", "diagnoses", "platform"]


class MessageSource(BaseModel):
    """What a message was written from, so that it can be written again in another locale: a
    key of the exercise's `checks` or `diagnoses` (its lesson files) or of the platform's
    messages (gradlab/messages.py), the values filled in (numbers as numbers; "∞" for one that
    is not finite), and `detail`, untranslated text that follows it (a traceback)."""

    group: MessageGroup
    key: str
    values: dict[str, Any] = Field(default_factory=dict)
    detail: str | None = None


class ResultError(BaseModel):
    kind: ErrorKind
    message: str
    line: int | None = None
    i18n: MessageSource | None = None


class Diagnosis(BaseModel):
    code: str
    message: str
    evidence: dict[str, Any] = Field(default_factory=dict)
    i18n: MessageSource | None = None


class Check(BaseModel):
    id: str
    passed: bool
    points: float
    max_points: float
    message: str
    i18n: MessageSource | None = None


class Note(BaseModel):
    """Information for the learner that is not graded (e.g. how far BatchNorm lands)."""

    id: str
    message: str
    i18n: MessageSource | None = None


class Output(BaseModel):
    stdout: str = ""
    stderr: str = ""
    truncated: bool = False


class Timings(BaseModel):
    queued_s: float = 0.0
    run_s: float = 0.0
    total_s: float = 0.0


class GradeResult(BaseModel):
    status: Literal["passed", "failed", "error"]
    score: float = Field(ge=0.0, le=1.0)
    error: ResultError | None = None
    diagnosis: Diagnosis | None = None
    checks: list[Check] = Field(default_factory=list)
    notes: list[Note] = Field(default_factory=list)
    output: Output = Field(default_factory=Output)
    device: Literal["cpu", "cuda"] = "cpu"
    timings: Timings = Field(default_factory=Timings)
    locale: str = "en"

    @classmethod
    def from_checks(cls, checks: list[Check], **fields: Any) -> "GradeResult":
        """`passed` only when every check passed; score is the share of points earned."""
        total = sum(c.max_points for c in checks)
        earned = sum(c.points for c in checks)
        status = "passed" if checks and all(c.passed for c in checks) else "failed"
        score = round(earned / total, 4) if total else 0.0
        return cls(status=status, score=score, checks=checks, **fields)

    @classmethod
    def failure(cls, error: ResultError, **fields: Any) -> "GradeResult":
        return cls(status="error", score=0.0, error=error, **fields)
