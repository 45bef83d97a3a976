"""The house rules: `app` never imports torch, `worker` never imports FastAPI."""

import subprocess
import sys

from gradlab.config import PROJECT_ROOT


def _modules_after_import(statement: str) -> set[str]:
    code = f"import sys\n{statement}\nprint('\\n'.join(sys.modules))"
    output = subprocess.run(
        [sys.executable, "-c", code], cwd=PROJECT_ROOT, check=True, capture_output=True, text=True
    ).stdout
    return {name.split(".")[0] for name in output.split()}


def test_web_app_does_not_import_torch() -> None:
    modules = _modules_after_import("import app.main, app.routes.api, app.routes.pages")
    assert "fastapi" in modules and "torch" not in modules


def test_worker_does_not_import_fastapi() -> None:
    modules = _modules_after_import("import worker.main, worker.grading, worker.harness.run")
    assert "torch" in modules and "fastapi" not in modules and "starlette" not in modules


def test_shared_core_imports_neither() -> None:
    modules = _modules_after_import("import gradlab.cli, gradlab.queue, gradlab.content.loader")
    assert "torch" not in modules and "fastapi" not in modules
