"""What the API takes and answers for submissions (the result contract: docs/contracts.md)."""

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Locale = Literal["en", "es", "de", "tr"]  # gradlab.config.LOCALES (tests/test_result_locale.py)

EXAMPLE_CODE = (
    "for step, (x, y) in enumerate(loader):\n"
    "    loss = loss_fn(model(x), y) / accum_steps\n"
    "    loss.backward()\n"
    "    if (step + 1) % accum_steps == 0:\n"
    "        optimizer.step()\n"
    "        optimizer.zero_grad()\n"
)
EXAMPLE_RESULT: dict[str, Any] = {
    "status": "failed",
    "score": 0.6,
    "error": None,
    "diagnosis": {
        "code": "loss_not_scaled",
        "message": "Each update's gradient is 4.0x the reference: divide each micro-batch "
        "loss by accum_steps.",
        "evidence": {"ratio": 4.0},
        "i18n": {
            "group": "diagnoses",
            "key": "loss_not_scaled",
            "values": {"ratio": 4.0, "accum_steps": 4},
            "detail": None,
        },
    },
    "checks": [
        {"id": "runs", "passed": True, "points": 1, "max_points": 1, "message": "ran"},
        {"id": "gradients", "passed": False, "points": 0, "max_points": 2, "message": "4.0x"},
    ],
    "notes": [],
    "output": {"stdout": "", "stderr": "", "truncated": False},
    "device": "cpu",
    "timings": {"queued_s": 0.02, "run_s": 0.41, "total_s": 0.45},
    "locale": "en",
}


class SubmissionCreate(BaseModel):
    """Code to grade. `code` over the size limit (64 KiB of UTF-8 by default) is refused with
    413, an unknown `exercise` with 404."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "exercise": "gradient-accumulation/accumulate",
                    "code": EXAMPLE_CODE,
                    "locale": "en",
                    "callback_url": "https://lms.example.edu/hooks/gradlab",
                }
            ]
        }
    )

    exercise: str = Field(description="`<lesson>/<exercise>`, see GET /api/v1/exercises")
    code: str = Field(description="the learner's Python script")
    locale: Locale = Field(default="en", description="language of the result's messages")
    callback_url: str | None = Field(
        default=None,
        description="grader tokens only: the result is POSTed here, signed (docs/api.md); "
        "http(s) to a public address",
    )


class SubmissionPublic(BaseModel):
    """A submission and, once graded, its result (the result contract of docs/contracts.md)."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "id": "3f2a9c1e5b7d4e0f8a6b2c4d1e3f5a7b",
                    "exercise": "gradient-accumulation/accumulate",
                    "locale": "en",
                    "status": "failed",
                    "url": "/api/v1/submissions/3f2a9c1e5b7d4e0f8a6b2c4d1e3f5a7b",
                    "created_at": 1767225600.0,
                    "finished_at": 1767225600.45,
                    "result": EXAMPLE_RESULT,
                }
            ]
        }
    )

    id: str
    exercise: str
    locale: str
    status: Literal["queued", "running", "passed", "failed", "error"]
    url: str = Field(description="where to read it: GET this URL")
    created_at: float = Field(description="unix time")
    finished_at: float | None
    result: dict[str, Any] | None = Field(
        description="null until graded; then {status, score, error, diagnosis, checks, notes, "
        "output, device, timings, locale}; each message with `i18n`, its source "
        "(docs/contracts.md)"
    )
