"""Account service: keyword-only functions over a database session."""

import time

from sqlalchemy import delete
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, select

from app.accounts import security
from app.accounts.schemas import UserPublic
from app.accounts.security import Problem
from gradlab.models import AuthToken, User

LAST_USED_GRANULARITY_S = 60.0  # write last_used_at at most this often per token


class AccountError(Exception):
    def __init__(self, problem: Problem) -> None:
        super().__init__(security.PROBLEM_TEXT[problem])
        self.problem = problem


def to_public(user: User) -> UserPublic:
    return UserPublic(id=user.id, email=user.email, created_at=user.created_at)


def register(*, session: Session, email: str, password: str) -> User:
    """A new account; AccountError names what is wrong with the input."""
    email = security.normalize_email(email)
    problem = security.email_problem(email) or security.password_problem(password, email=email)
    if problem is not None:
        raise AccountError(problem)
    if get_by_email(session=session, email=email) is not None:
        raise AccountError(Problem.email_taken)
    user = User(email=email, password_hash=security.hash_password(password))
    session.add(user)
    try:
        session.commit()
    except IntegrityError:  # registered concurrently
        session.rollback()
        raise AccountError(Problem.email_taken) from None
    session.refresh(user)
    return user


def get_by_email(*, session: Session, email: str) -> User | None:
    return session.exec(select(User).where(User.email == security.normalize_email(email))).first()


def authenticate(*, session: Session, email: str, password: str) -> User | None:
    user = get_by_email(session=session, email=email)
    ok, new_hash = security.verify_password(user.password_hash if user else None, password)
    if not ok or user is None:
        return None
    if new_hash is not None:
        user.password_hash = new_hash
        session.add(user)
        session.commit()
        session.refresh(user)
    return user


def create_token(*, session: Session, user_id: str, lifetime_s: float) -> str:
    """A new login for `user_id`; the token itself is returned once and stored hashed."""
    token = security.new_token()
    now = time.time()
    session.add(
        AuthToken(
            token_hash=security.token_hash(token),
            user_id=user_id,
            created_at=now,
            last_used_at=now,
            expires_at=now + lifetime_s,
        )
    )
    session.commit()
    return token


def user_for_token(*, session: Session, token: str) -> tuple[UserPublic, int] | None:
    """The account and token id of a live token, or None (unknown, revoked, expired)."""
    row = session.exec(
        select(AuthToken).where(AuthToken.token_hash == security.token_hash(token))
    ).first()
    now = time.time()
    if row is None or row.expires_at <= now:
        return None
    user = session.get(User, row.user_id)
    if user is None:
        return None
    public, token_id = to_public(user), row.id
    assert token_id is not None
    if now - row.last_used_at > LAST_USED_GRANULARITY_S:
        row.last_used_at = now
        session.add(row)
        session.commit()
    return public, token_id


def revoke(*, session: Session, token_id: int) -> None:
    session.execute(delete(AuthToken).where(AuthToken.id == token_id))  # type: ignore[arg-type]
    session.commit()


def purge_expired(*, session: Session) -> None:
    session.execute(delete(AuthToken).where(AuthToken.expires_at <= time.time()))  # type: ignore[arg-type]
    session.commit()
