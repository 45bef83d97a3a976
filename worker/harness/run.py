"""Run one job inside the sandbox: the learner's script once per scenario, observations out.

`run_job` is called by the warm pool's zygote (`harness.zygote`) in a freshly forked child, or,
on the cold path, by `python -m harness.run OBS_FD`, which reads /gradlab/job/spec.json and
/gradlab/job/submission.py (read-only binds). Either way it writes one safetensors blob of
observations to the observation channel. Errors are reported as observations too; the trusted
side decides what they mean.
"""

import contextlib
import importlib
import json
import os
import sys
import traceback
from typing import Any, BinaryIO

JOB_DIR = "/gradlab/job"
SUBMISSION_NAME = "submission.py"
# Exercise harnesses: modules of this package with `setup(scenario, device, dtype)`.
HARNESSES = ("accumulation", "mixed_precision", "profiling", "gpu_memory")


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
    }


def main() -> None:
    """Cold path: one fresh interpreter per job."""
    obs_fd = int(sys.argv[1])
    with open(os.path.join(JOB_DIR, "spec.json"), encoding="utf-8") as f:
        spec = json.load(f)
    with open(os.path.join(JOB_DIR, SUBMISSION_NAME), encoding="utf-8") as f:
        source = f.read()
    run_job(spec, source, os.fdopen(obs_fd, "wb", closefd=True))


def run_job(spec: dict[str, Any], source: str, out: BinaryIO) -> None:
    import torch

    from . import protocol

    if spec["harness"] not in HARNESSES:
        raise ValueError(f"unknown harness {spec['harness']!r}")
    harness = importlib.import_module(f".{spec['harness']}", __package__)
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

    meta: dict[str, Any] = {"device": device.type, "dtype": str(dtype), "scenarios": []}
    tensors: dict[str, Any] = {}
    try:
        code = compile(source, SUBMISSION_NAME, "exec", dont_inherit=True)
    except SyntaxError as exc:
        meta["error"] = {
            "kind": "syntax_error",
            "message": f"{type(exc).__name__}: {exc.msg}",
            "line": exc.lineno,
        }
        code = None

    out.write(protocol.READY_MARKER)
    out.flush()
    original_backward = torch.Tensor.backward
    for index, scenario in enumerate(spec["scenarios"] if code is not None else []):
        names, recorder = harness.setup(scenario, device, dtype)

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
            meta["error"] = _learner_error(exc, source.splitlines())
        finally:
            torch.Tensor.backward = original_backward
        if device.type == "cuda":
            torch.cuda.synchronize()
        scenario_tensors, scenario_meta = recorder.observations(f"s{index}")
        tensors.update(scenario_tensors)
        meta["scenarios"].append(scenario_meta)
        if "error" in meta:
            break

    sys.stdout.flush()
    sys.stderr.flush()
    out.write(protocol.encode(tensors, meta))
    out.close()


if __name__ == "__main__":
    main()
