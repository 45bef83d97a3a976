"""Passwords refused at register: too short, only spaces, the email or its local part, or on the
shipped list of common passwords (case-insensitively); in the API (422, English) and on the
form (422, the learner's language)."""

import pytest
from fastapi.testclient import TestClient

from app.accounts import security
from app.accounts.security import Problem
from app.i18n import gettext
from gradlab.config import LOCALES
from tests.conftest import csrf_token

COMMON_MESSAGE = (
    "This password is too common: it is among the first that attackers try. Choose another one."
)
BLANK_MESSAGE = "The password must not be only spaces."
IS_EMAIL_MESSAGE = "The password must not be your email address or the part before the @."


@pytest.mark.parametrize(
    ("email", "password", "words"),
    [
        ("ada@example.org", "password", "too common"),
        ("ada@example.org", "12345678", "too common"),
        ("ada@example.org", "PassWord", "too common"),
        ("ada@example.org", "QWERTY123", "too common"),
        ("ada@example.org", "iloveyou", "too common"),
        ("ada@example.org", "  password1  ", "too common"),
        ("ada@example.org", "qwertyuiop", "too common"),
        ("ada@example.org", "11111111", "too common"),
        ("ada@example.org", "michael1990", "too common"),
        ("ada@example.org", " " * 8, "only spaces"),
        ("ada@example.org", "\t \n \u00a0   ", "only spaces"),
        ("ada@example.org", "Ada@Example.org", "must not be the email"),
        ("adalovelace@example.org", "AdaLovelace", "its part before the @"),
        ("ada@example.org", "short", "at least 8 characters"),
    ],
)
def test_weak_passwords_are_refused_by_the_api(
    client: TestClient, email: str, password: str, words: str
) -> None:
    response = client.post("/api/v1/auth/register", json={"email": email, "password": password})
    assert response.status_code == 422, response.text
    assert words in response.json()["detail"]
    assert client.get("/api/v1/auth/me").status_code == 401  # not signed in


@pytest.mark.parametrize(
    "password", ["correct horse", "journey-password-1", "pw-123456", "password is long enough"]
)
def test_reasonable_passwords_are_accepted(client: TestClient, password: str) -> None:
    response = client.post(
        "/api/v1/auth/register", json={"email": "ada@example.org", "password": password}
    )
    assert response.status_code == 201, response.text


@pytest.mark.parametrize("locale", LOCALES)
@pytest.mark.parametrize(
    ("email", "password", "message"),
    [
        ("ada@example.org", "Password1", COMMON_MESSAGE),
        ("ada@example.org", " " * 8, BLANK_MESSAGE),
        ("adalovelace@example.org", "adalovelace", IS_EMAIL_MESSAGE),
    ],
)
def test_register_form_says_why_in_the_learners_language(
    client: TestClient, locale: str, email: str, password: str, message: str
) -> None:
    response = client.post(
        f"/{locale}/register",
        data={"email": email, "password": password, "csrf_token": csrf_token(client)},
    )
    assert response.status_code == 422
    translated = gettext(locale, message)
    assert locale == "en" or translated != message, "not translated"
    assert translated in response.text
    assert 'id="password"' in response.text
    field = response.text.split('id="password"', 1)[1].split(">", 1)[0]
    assert 'aria-invalid="true"' in field  # the password field is the one marked


def test_the_common_password_list_ships_with_the_package() -> None:
    words = security.common_passwords()
    assert len(words) >= 1000
    classics = {
        "123456",
        "password",
        "12345678",
        "qwerty",
        "iloveyou",
        "111111",
        "abc123",
        "letmein",
        "monkey",
        "dragon",
        "football",
        "sunshine",
        "princess",
        "admin",
        "welcome",
        "trustno1",
        "1q2w3e4r",
        "qwertyuiop",
        "passw0rd",
        "baseball",
    }
    assert classics <= words
    assert sum(len(word) >= security.MIN_PASSWORD for word in words) >= 1000
    assert all(word == word.strip().casefold() and not word.startswith("#") for word in words)


def test_password_problem_order_and_cases() -> None:
    email = "grace.hopper@example.org"
    assert security.password_problem("x" * 7, email=email) is Problem.password_short
    assert security.password_problem(" " * 9, email=email) is Problem.password_blank
    assert security.password_problem("GRACE.HOPPER", email=email) is Problem.password_is_email
    assert security.password_problem(email.upper(), email=email) is Problem.password_is_email
    assert security.password_problem("Sunshine1", email=email) is Problem.password_common
    assert security.password_problem("grace.hopper!", email=email) is None
    assert security.password_problem("a fine long phrase", email=email) is None
