"""Request dependencies: settings, database session, content, the current learner."""

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, HTTPException, Request
from sqlmodel import Session

from gradlab.config import LOCALES, Settings
from gradlab.content.loader import Content


def get_settings(request: Request) -> Settings:
    return request.app.state.settings


def get_session(request: Request) -> Iterator[Session]:
    with Session(request.app.state.engine) as session:
        yield session


def get_content(request: Request) -> Content:
    return request.app.state.content


def get_owner(request: Request) -> str:
    """Who owns what this request creates: the learner behind the signed cookie."""
    return f"learner:{request.state.learner_id}"


def valid_locale(locale: str) -> str:
    if locale not in LOCALES:
        raise HTTPException(status_code=404, detail=f"unknown locale {locale!r}")
    return locale


SettingsDep = Annotated[Settings, Depends(get_settings)]
SessionDep = Annotated[Session, Depends(get_session)]
ContentDep = Annotated[Content, Depends(get_content)]
OwnerDep = Annotated[str, Depends(get_owner)]
LocaleDep = Annotated[str, Depends(valid_locale)]
