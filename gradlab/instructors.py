"""The instructor role of accounts (class insight, app/insights): `gradlab user instructor`."""

import unicodedata

from sqlmodel import Session, select

from gradlab.models import User


def set_instructor(*, session: Session, email: str, instructor: bool = True) -> User | None:
    """Give (or take back) the role; None when no account has that email. The email is matched
    as accounts store it (NFKC, trimmed, lowercase: app/accounts/security.normalize_email)."""
    normalized = unicodedata.normalize("NFKC", email).strip().lower()
    user = session.exec(select(User).where(User.email == normalized)).first()
    if user is None:
        return None
    user.instructor = instructor
    session.add(user)
    session.commit()
    session.refresh(user)
    return user


def instructors(*, session: Session) -> list[str]:
    """The emails of every instructor account, sorted."""
    rows = session.exec(select(User.email).where(User.instructor == True)).all()  # noqa: E712
    return sorted(rows)
