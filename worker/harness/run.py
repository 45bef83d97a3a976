"""Run one phase of a job inside the sandbox, observations out.

Called by the zygote (`harness.zygote`) in a freshly forked child, after the worker has moved
that child into the phase's own cgroup. A phase is either the learner's script, run once per
scenario with the exercise's names and recorder, or one of the exercise's trusted routines
(`TRUSTED_PHASES`), which never sees learner code. Either way it writes one safetensors blob of
observations to the observation channel. Errors are reported as observations too; the trusted
side decides what they mean.

Exercises are the packages in `harness/exercises/`: each has `setup(scenario, ctx) -> (names,
recorder)` for the learner's phase and may have `TRUSTED_PHASES = {name: routine(scenario, ctx)
-> (tensors, meta)}`.
"""

import contextlib
import importlib
import os
import sys
import traceback
from pathlib import Path
from types import ModuleType
from typing import Any, BinaryIO

from .context import Clock, Context

SUBMISSION_NAME = "submission.py"
EXERCISES_DIR = Path(__file__).resolve().parent / "exercises"


def exercise_names() -> list[str]:
    """The exercise packages that exist (found on disk, not kept in a table)."""
    return sorted(
        entry.name
        for entry in os.scandir(EXERCISES_DIR)
        if entry.is_dir() and (Path(entry.path) / "__init__.py").exists()
    )


def exercise_module(name: str) -> ModuleType:
    if name not in exercise_names():
        raise ValueError(f"unknown exercise harness {name!r}")
    return importlib.import_module(f"{__package__}.exercises.{name}")


def _learner_error(exc: BaseException, source_lines: list[str]) -> dict[str, Any]:
    """Runtime error with the learner's frames only (harness frames are not theirs to read)."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == SUBMISSION_NAME]
    lines = ["Traceback (most recent call last):"]
    for frame in frames:
        lines.append(f'  File "{SUBMISSION_NAME}", line {frame.lineno}, in {frame.name}')
        if frame.lineno and 0 < frame.lineno <= len(source_lines):
            lines.append("    " + source_lines[frame.lineno - 1].strip())
    lines.extend(traceback.format_exception_only(type(exc), exc))
    kind = "memory_limit" if isinstance(exc, MemoryError) else "runtime_error"
    return {
        "kind": kind,
        "message": "\n".join(line.rstrip("\n") for line in lines),
        "line": frames[-1].lineno if frames else None,
        "exception": type(exc).__name__,
    }


def run_phase(request: dict[str, Any], out: BinaryIO, clock: Clock) -> None:
    """Run the phase `request` describes ({"spec": ..., "phase": ..., "indices": [...],
    "code": ...}) and write its observations to `out`. With `code` (the learner's, or a trusted
    script) the phase runs it per scenario; without, the harness routine named `phase`."""
    import torch

    from . import protocol

    spec = request["spec"]
    exercise = exercise_module(spec["harness"])
    torch.set_num_threads(1)
    device = torch.device(spec["device"])
    if device.type == "cuda":
        # Numerics policy: float32 without TF32, deterministic kernels.
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.use_deterministic_algorithms(True)
        dtype = torch.float32
    else:
        dtype = torch.float64  # exact enough that any mistake stands out by orders of magnitude

    phase, indices = request["phase"], [int(i) for i in request["indices"]]
    meta: dict[str, Any] = {
        "device": device.type,
        "dtype": str(dtype),
        "phase": phase,
        "indices": indices,
        "scenarios": [],
    }
    tensors: dict[str, Any] = {}
    contexts = [Context(device, dtype, clock, index) for index in indices]
    if request.get("code") is not None:
        _run_script(request["code"], spec, exercise, contexts, meta, tensors, out)
    else:
        out.write(protocol.READY_MARKER)
        routine = exercise.TRUSTED_PHASES[phase]
        for ctx in contexts:
            scenario_tensors, scenario_meta = routine(spec["scenarios"][ctx.index], ctx)
            tensors.update(scenario_tensors)
            meta["scenarios"].append(scenario_meta)
    sys.stdout.flush()
    sys.stderr.flush()
    out.write(protocol.encode(tensors, meta))
    out.close()


def _run_script(
    source: str,
    spec: dict[str, Any],
    exercise: ModuleType,
    contexts: list[Context],
    meta: dict[str, Any],
    tensors: dict[str, Any],
    out: BinaryIO,
) -> None:
    import torch

    from . import protocol

    try:
        code = compile(source, SUBMISSION_NAME, "exec", dont_inherit=True)
    except SyntaxError as exc:
        meta["error"] = {
            "kind": "syntax_error",
            "message": f"{type(exc).__name__}: {exc.msg}",
            "line": exc.lineno,
        }
        code = None
    except ValueError:  # a NUL character: Python < 3.12 says so with ValueError, not SyntaxError
        meta["error"] = {
            "kind": "syntax_error",
            "message": "SyntaxError: source code cannot contain null bytes",
            "line": source.count("\n", 0, source.find("\0")) + 1,
        }
        code = None

    out.write(protocol.READY_MARKER)
    out.flush()
    original_backward = torch.Tensor.backward
    for ctx in contexts if code is not None else []:
        names, recorder = exercise.setup(spec["scenarios"][ctx.index], ctx)

        def backward(self, *args, _recorder=recorder, **kwargs):  # type: ignore[no-untyped-def]
            _recorder.count_backward()
            return original_backward(self, *args, **kwargs)

        torch.Tensor.backward = backward
        names["__name__"] = "__main__"
        try:
            with recorder.running(), contextlib.suppress(SystemExit):
                exec(code, names)
            recorder.after_script(names)
        except SystemExit:
            pass
        except BaseException as exc:  # the learner's code failed: report where, stop here
            if not recorder.failed(exc):
                meta["error"] = _learner_error(exc, source.splitlines())
        finally:
            torch.Tensor.backward = original_backward
        if ctx.device.type == "cuda":
            torch.cuda.synchronize()
        scenario_tensors, scenario_meta = recorder.observations(f"s{ctx.index}")
        tensors.update(scenario_tensors)
        meta["scenarios"].append(scenario_meta)
        if "error" in meta:
            break
