from pydantic import BaseModel


class DraftPublic(BaseModel):
    code: str | None
    updated_at: float | None


class DraftUpdate(BaseModel):
    code: str
