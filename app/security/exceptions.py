"""The refusals of app/security: a bad CSRF token (403), a rate limit (429). Their answer
(a localized page or JSON) is app.security.errors.security_error."""

import math
from typing import Literal

from fastapi import HTTPException

Kind = Literal["csrf", "rate_limited"]


class SecurityRejection(HTTPException):
    kind: Kind
    retry_after = 0


class CsrfFailed(SecurityRejection):
    kind = "csrf"

    def __init__(self) -> None:
        super().__init__(status_code=403, detail="missing or invalid CSRF token")


class RateLimited(SecurityRejection):
    kind = "rate_limited"

    def __init__(self, retry_after_s: float) -> None:
        self.retry_after = max(1, math.ceil(retry_after_s))
        super().__init__(
            status_code=429,
            detail=f"too many requests; try again in {self.retry_after} s",
            headers={"Retry-After": str(self.retry_after)},
        )
