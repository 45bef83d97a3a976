"""The submissions service's refusal (app/submissions/service.py, app/submissions/capacity.py)."""


class SubmissionRefused(Exception):
    """A submission (or draft) the service will not store: its HTTP status, a `reason` that a
    page words in the learner's language (templates/_submission_messages.html) with `values`,
    the API's English `detail`, and `retry_after` (seconds) when trying later may succeed."""

    def __init__(
        self,
        status: int,
        reason: str,
        detail: str,
        retry_after: int | None = None,
        **values: object,
    ) -> None:
        super().__init__(detail)
        self.status, self.reason, self.detail, self.values = status, reason, detail, values
        self.retry_after = retry_after
