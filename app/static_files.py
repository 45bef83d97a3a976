"""/static: Starlette's StaticFiles (ETag and Last-Modified, 304 on If-None-Match) plus an
explicit `Cache-Control: no-cache`: browsers keep the files and revalidate them (a 304 without
a body), so a deploy's new CSS or JS is seen at once. Without it, browsers guess a lifetime from
Last-Modified and may run old scripts against new pages. (Next step: versioned URLs, which
could be `immutable` for a year.)"""

import os

from starlette.responses import Response
from starlette.staticfiles import PathLike, StaticFiles
from starlette.types import Scope

STATIC_CACHE_CONTROL = "no-cache"


class RevalidatedStaticFiles(StaticFiles):
    def file_response(
        self,
        full_path: PathLike,
        stat_result: os.stat_result,
        scope: Scope,
        status_code: int = 200,
    ) -> Response:
        response = super().file_response(full_path, stat_result, scope, status_code)
        response.headers["Cache-Control"] = STATIC_CACHE_CONTROL
        return response
