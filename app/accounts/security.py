"""Passwords (argon2id via argon2-cffi), login tokens (random, stored as SHA-256), emails."""

import contextlib
import hashlib
import re
import secrets
import unicodedata
from enum import StrEnum
from functools import cache
from pathlib import Path

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

MIN_PASSWORD = 8
MAX_PASSWORD = 1024  # argon2 takes any length; this only bounds the work one request can ask for
MAX_EMAIL = 320
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s.]+$")
_hasher = PasswordHasher()  # argon2id, the library's current recommended parameters
_DUMMY_HASH = _hasher.hash(secrets.token_urlsafe(16))
COMMON_PASSWORDS_FILE = Path(__file__).with_name("common_passwords.txt")


class Problem(StrEnum):
    """Why register refused an input (templates word them; the API says them in English)."""

    email_invalid = "email_invalid"
    password_short = "password_short"
    password_long = "password_long"
    password_is_email = "password_is_email"
    password_blank = "password_blank"
    password_common = "password_common"
    email_taken = "email_taken"


PROBLEM_TEXT = {
    Problem.email_invalid: "email: not a valid email address",
    Problem.password_short: f"password: must be at least {MIN_PASSWORD} characters long",
    Problem.password_long: f"password: must be at most {MAX_PASSWORD} characters long",
    Problem.password_is_email: ("password: must not be the email address or its part before the @"),
    Problem.password_blank: "password: must not be only spaces",
    Problem.password_common: (
        "password: too common, it is among the first any attacker tries; choose another"
    ),
    Problem.email_taken: "email: an account with this email address already exists",
}


def normalize_email(email: str) -> str:
    """One spelling per mailbox, in practice: NFKC, trimmed, lowercase."""
    return unicodedata.normalize("NFKC", email).strip().lower()


def email_problem(email: str) -> Problem | None:
    if len(email) > MAX_EMAIL or not _EMAIL.match(email):
        return Problem.email_invalid
    return None


@cache
def common_passwords() -> frozenset[str]:
    """The shipped list of common passwords, casefolded (`#` lines are comments)."""
    lines = COMMON_PASSWORDS_FILE.read_text(encoding="utf-8").splitlines()
    return frozenset(
        line.strip().casefold() for line in lines if line.strip() and not line.startswith("#")
    )


def password_problem(password: str, *, email: str) -> Problem | None:
    """What makes `password` unacceptable for the account `email` (normalized), or None."""
    if len(password) < MIN_PASSWORD:
        return Problem.password_short
    if len(password) > MAX_PASSWORD:
        return Problem.password_long
    if not password.strip():
        return Problem.password_blank
    spelled = normalize_email(password)  # NFKC, trimmed, lowercase: as emails are compared
    local_part = email.rpartition("@")[0]
    if spelled == email or (local_part and spelled == local_part):
        return Problem.password_is_email
    if password.strip().casefold() in common_passwords() or spelled in common_passwords():
        return Problem.password_common
    return None


def hash_password(password: str) -> str:
    return _hasher.hash(password)


def verify_password(password_hash: str | None, password: str) -> tuple[bool, str | None]:
    """(matches, new hash when the stored one uses outdated parameters). Without a stored hash
    (unknown email) it still spends the time of one verification."""
    if password_hash is None:
        with contextlib.suppress(VerificationError):
            _hasher.verify(_DUMMY_HASH, password)
        return False, None
    try:
        _hasher.verify(password_hash, password)
    except (VerificationError, InvalidHashError):
        return False, None
    return True, hash_password(password) if _hasher.check_needs_rehash(password_hash) else None


SESSION_TOKEN_PREFIX = "gls_"  # grader tokens start with "glg_" (gradlab/tokens.py)


def new_token() -> str:
    return SESSION_TOKEN_PREFIX + secrets.token_urlsafe(32)


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()
