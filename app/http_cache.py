"""Conditional requests: the one `If-None-Match` check of pages (app/page_cache.py) and static
files (app/static_files.py)."""


def if_none_match(header: str | None, etag: str) -> bool:
    """`If-None-Match` names `etag` (weak comparison, RFC 9110 13.1.2) or is `*`."""
    if not header:
        return False
    if header.strip() == "*":
        return True
    opaque = etag.removeprefix("W/")
    return any(tag.strip().removeprefix("W/") == opaque for tag in header.split(","))
