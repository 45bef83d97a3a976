"""Request and response bodies of the accounts API."""

from typing import Literal

from pydantic import BaseModel, Field

from app.accounts.security import MAX_EMAIL, MAX_PASSWORD


class Credentials(BaseModel):
    email: str = Field(max_length=MAX_EMAIL)
    password: str = Field(max_length=MAX_PASSWORD)


class Token(BaseModel):
    access_token: str
    token_type: Literal["bearer"] = "bearer"


class UserPublic(BaseModel):
    id: str
    email: str
    created_at: float
