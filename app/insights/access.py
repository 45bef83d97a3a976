"""Who may read class insight: grader tokens and instructor accounts (`gradlab user instructor`)."""

from typing import Literal

from sqlmodel import Session

from app.accounts.auth import Auth
from gradlab.models import User

Access = Literal["granted", "anonymous", "not_instructor"]


def access(*, session: Session, auth: Auth) -> Access:
    """`granted`, or why not: nobody signed in (401), an account without the role (403)."""
    if auth.grader_id is not None:
        return "granted"
    if auth.user is None:
        return "anonymous"
    user = session.get(User, auth.user.id)
    return "granted" if user is not None and user.instructor else "not_instructor"
