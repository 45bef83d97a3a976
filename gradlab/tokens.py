"""Grader API tokens: created, listed and revoked with `gradlab token ...`, checked by the web app.

A grader token is `glg_` + 32 random bytes (base64url); account login tokens start with `gls_`
(app/accounts), so a token says which kind it is and each kind is looked up only in its own
table: a grader token never authenticates as an account, nor the reverse.

Only the token's SHA-256 is stored. A slow password hash (argon2) protects low-entropy secrets
that people choose; a 256-bit random token cannot be guessed or brute-forced from its hash, so a
fast hash loses nothing and keeps each API request's lookup one indexed equality query.

Each token has its own webhook signing secret (`whsec_` + 32 random bytes), printed once with the
token. It is stored as is, because the dispatcher needs it to sign (HMAC) every delivery.
"""

import hashlib
import secrets
import time
from dataclasses import dataclass

from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, select

from gradlab.models import GraderToken

PREFIX = "glg_"
SECRET_PREFIX = "whsec_"
MAX_NAME = 100
LAST_USED_GRANULARITY_S = 60.0  # write last_used_at at most this often per token


class TokenError(Exception):
    """A refused `create` or `revoke` (the message says why)."""


@dataclass(frozen=True)
class NewToken:
    id: int
    name: str
    token: str
    webhook_secret: str


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def owner_of(token_id: int) -> str:
    return f"grader:{token_id}"


def token_id_of(owner: str) -> int | None:
    """The grader token id of an owner string, or None when the owner is not a grader."""
    kind, _, ident = owner.partition(":")
    return int(ident) if kind == "grader" and ident.isdigit() else None


def create(*, session: Session, name: str) -> NewToken:
    name = name.strip()
    if not name or len(name) > MAX_NAME or not name.isprintable():
        raise TokenError(f"a token name is 1-{MAX_NAME} printable characters")
    token = PREFIX + secrets.token_urlsafe(32)
    secret = SECRET_PREFIX + secrets.token_urlsafe(32)
    row = GraderToken(
        name=name, token_hash=token_hash(token), prefix=token[:10], webhook_secret=secret
    )
    session.add(row)
    try:
        session.commit()
    except IntegrityError:
        session.rollback()
        raise TokenError(f"an active token is already named {name!r}") from None
    session.refresh(row)
    assert row.id is not None
    return NewToken(id=row.id, name=name, token=token, webhook_secret=secret)


def list_tokens(*, session: Session, include_revoked: bool = True) -> list[GraderToken]:
    query = select(GraderToken).order_by(col(GraderToken.id))
    if not include_revoked:
        query = query.where(col(GraderToken.revoked_at).is_(None))
    return list(session.exec(query).all())


def revoke(*, session: Session, name_or_id: str) -> GraderToken:
    """Revoke the active token of that name, else the token of that id."""
    row = session.exec(
        select(GraderToken).where(
            GraderToken.name == name_or_id, col(GraderToken.revoked_at).is_(None)
        )
    ).first()
    if row is None and name_or_id.isdigit():
        row = session.get(GraderToken, int(name_or_id))
    if row is None:
        raise TokenError(f"no active token named {name_or_id!r} and no token with that id")
    if row.revoked_at is not None:
        raise TokenError(f"token {row.id} ({row.name!r}) is already revoked")
    row.revoked_at = time.time()
    session.add(row)
    session.commit()
    session.refresh(row)
    return row


def lookup(*, session: Session, token: str) -> GraderToken | None:
    """The live token row for a presented grader token, or None (unknown, revoked)."""
    if not token.startswith(PREFIX):
        return None
    row = session.exec(
        select(GraderToken).where(GraderToken.token_hash == token_hash(token))
    ).first()
    if row is None or row.revoked_at is not None:
        return None
    now = time.time()
    if row.last_used_at is None or now - row.last_used_at > LAST_USED_GRANULARITY_S:
        row.last_used_at = now
        session.add(row)
        session.commit()
        session.refresh(row)
    return row
