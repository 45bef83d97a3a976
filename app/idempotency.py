"""`Idempotency-Key` for submission POSTs: a retry returns what the first request made.

Per owner, the key is stored with the SHA-256 of the parsed request (endpoint + canonical JSON
of the body) and the ids of the submissions it created, in the same transaction as those
submissions: either both exist or neither. A retry with the same key and the same request gets
the same submissions (nothing is enqueued again); the same key with a different request is 409.
Two concurrent first requests race on the unique (owner, key): the loser rolls back and answers
like a retry. Keys expire after `idempotency_ttl_s` (then the key may be used afresh); expired rows
are deleted when the key is seen again and periodically by the webhook dispatcher's housekeeping.
Only successful creations are remembered: a refused request (404, 413, 422...) can be retried
with the same key after fixing it.
"""

import hashlib
import json
import time

from fastapi import HTTPException
from pydantic import BaseModel
from sqlalchemy import delete
from sqlmodel import Session, select

from gradlab.models import IdempotencyKey

MAX_KEY = 255


def request_hash(endpoint: str, body: BaseModel) -> str:
    canonical = json.dumps(body.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(f"{endpoint}\n{canonical}".encode()).hexdigest()


def recall(*, session: Session, owner: str, key: str, digest: str) -> list[str] | None:
    """The submission ids remembered for this key, None when it is new (or expired); 409 when it
    was used for a different request."""
    now = time.time()
    session.execute(
        delete(IdempotencyKey).where(
            IdempotencyKey.owner == owner,  # type: ignore[arg-type]
            IdempotencyKey.key == key,  # type: ignore[arg-type]
            IdempotencyKey.expires_at <= now,  # type: ignore[arg-type]
        )
    )
    row = session.exec(
        select(IdempotencyKey).where(IdempotencyKey.owner == owner, IdempotencyKey.key == key)
    ).first()
    if row is None:
        return None
    if row.request_hash != digest:
        raise HTTPException(
            status_code=409,
            detail="this Idempotency-Key was already used with a different request",
        )
    return list(json.loads(row.submission_ids))


def remember(
    *, session: Session, owner: str, key: str, digest: str, ids: list[str], ttl_s: float
) -> None:
    """Add the key to the session's transaction (the caller commits it with the submissions)."""
    now = time.time()
    session.add(
        IdempotencyKey(
            owner=owner,
            key=key,
            request_hash=digest,
            submission_ids=json.dumps(ids),
            created_at=now,
            expires_at=now + ttl_s,
        )
    )
