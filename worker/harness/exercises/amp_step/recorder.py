"""In-sandbox setup for the mixed-precision exercise: the learner's names + a recorder.

The recorder only watches: it logs, per loader batch ("iteration"), the calls that make an AMP
step (scaler.scale / unscale_ / step / update, clip_grad_norm_, backward), whether each forward
ran under autocast, and at every real optimizer.step() the gradients and parameters it used.
Everything is an observation; the trusted grader decides what it means.

One exception to "only watches": torch raises a RuntimeError on the second iteration of a loop
that never calls scaler.update() ("unscale_() is being called after step()"), an AssertionError
on scaler.update() without any scaler.step()/unscale_() and on scaler.step() once the gradients
were cleared after backward ("No inf checks were recorded"), and "Attempting to unscale FP16
gradients" for a model cast to float16. Those messages name torch internals, not the learner's
mistake, so the wrappers detect these situations *before* torch does, stop the script with
`ScalerMisuse`, and report why (`failed` does the same for the ones that slip through); the
grader turns that into a diagnosis.

No side effects at import (the warm pool's zygote imports this module): CUDA is touched only in
`setup`, in the forked job process.
"""

import contextlib
import math
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from ...context import Context
from ...recorder import Recorder, flat, stacked
from .problem import AmpScenario, make_data, make_model, make_optimizer, poisoned

MAX_EVENTS = 2048
MAX_RECORDED_STEPS = 128
MAX_SNAPSHOTS = 128
MAX_DTYPES = 4
# (text in torch's message, the stop reason it means)
KNOWN_ERRORS = (
    ("No inf checks were recorded", "grads_cleared"),
    ("unscale_() has already been called", "unscaled_twice"),
    ("Attempting to unscale FP16 gradients", "fp16_weights"),
)


class ScalerMisuse(Exception):
    """Raised by a scaler wrapper just before torch would fail with an internal message."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _finite_float(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError, RuntimeError):
        return None
    return number if math.isfinite(number) else None


class RecordingLoader(DataLoader):
    """A real DataLoader that tells the recorder when it hands out a batch."""

    on_batch: Any = None

    def __iter__(self):  # type: ignore[override]
        for batch in super().__iter__():
            if self.on_batch is not None:
                self.on_batch()
            yield batch


class AmpRecorder(Recorder):
    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        loader: RecordingLoader,
        scaler: torch.amp.GradScaler,
        device_type: str,
    ) -> None:
        self.params = list(model.parameters())
        self.device_type = device_type
        self.yielded = 0
        self.events: list[dict[str, Any]] = []
        self.events_truncated = False
        self.snapshots: list[torch.Tensor] = []
        self.steps = 0
        self.step_grads: list[torch.Tensor] = []
        self.step_params: list[torch.Tensor] = []
        self.step_meta: list[dict[str, Any]] = []
        self.forwards = 0
        self.autocast_forwards = 0
        self.autocast_dtypes: list[str] = []
        self.stopped: str | None = None
        self.stopped_iteration = -1
        self.param_dtypes: set[str] = set()
        # the scaler's stage since the last update(), as torch tracks it
        self._unscaled = False
        self._stepped = False
        self._in_scaler_step = False
        self._pending_scaled = False
        loader.on_batch = self._on_batch
        model.register_forward_pre_hook(self._on_forward)
        model.register_forward_hook(self._after_forward)
        optimizer.register_step_pre_hook(self._on_step)
        self._wrap_scaler(scaler, optimizer)

    @property
    def iteration(self) -> int:
        """Index of the batch being trained on (-1 before the first)."""
        return self.yielded - 1

    def _event(self, kind: str, **info: Any) -> None:
        if len(self.events) >= MAX_EVENTS:
            self.events_truncated = True
            return
        self.events.append({"i": self.iteration, "k": kind, **info})

    def _on_batch(self) -> None:
        if len(self.snapshots) < MAX_SNAPSHOTS:
            self.snapshots.append(flat(self.params))
        self.yielded += 1

    # --- forward / backward -------------------------------------------------------------

    def _on_forward(self, _module: nn.Module, _args: tuple) -> None:
        self.forwards += 1
        if torch.is_autocast_enabled(self.device_type):
            self.autocast_forwards += 1
            dtype = str(torch.get_autocast_dtype(self.device_type))
            if dtype not in self.autocast_dtypes and len(self.autocast_dtypes) < MAX_DTYPES:
                self.autocast_dtypes.append(dtype)

    def _after_forward(self, _module: nn.Module, _args: tuple, output: Any) -> None:
        if isinstance(output, torch.Tensor) and output.requires_grad:
            output.register_hook(self._on_output_grad)

    def _on_output_grad(self, _grad: torch.Tensor) -> None:
        """A backward pass reached the model's output (however it was started). The model's
        parameters have not received this pass's gradients yet, so any gradient they hold is
        left over from before: `dirty`."""
        dirty = any(
            p.grad is not None and not bool((p.grad == 0).all()) for p in self.params
        )  # NaN == 0 is False: NaN leftovers count as dirty
        self._event("backward", scaled=self._pending_scaled, dirty=dirty)
        self._pending_scaled = False

    def _on_scaled_grad(self, _grad: torch.Tensor) -> None:
        # fires when a backward pass starts at (or goes through) a tensor scaler.scale returned
        self._pending_scaled = True

    # --- optimizer ----------------------------------------------------------------------

    def _on_step(self, _optimizer: torch.optim.Optimizer, _args: tuple, _kwargs: dict) -> None:
        self.steps += 1
        self.param_dtypes.update(str(p.dtype) for p in self.params)
        direct = not self._in_scaler_step
        self._event("optimizer_step", direct=direct)
        if len(self.step_grads) >= MAX_RECORDED_STEPS:
            return
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in self.params]
        self.step_grads.append(flat(grads))
        self.step_params.append(flat(self.params))
        self.step_meta.append({"iteration": self.iteration, "direct": direct})

    # --- scaler and clipping --------------------------------------------------------------

    def _wrap_scaler(self, scaler: torch.amp.GradScaler, optimizer: torch.optim.Optimizer) -> None:
        scale, unscale_, step, update = scaler.scale, scaler.unscale_, scaler.step, scaler.update

        def scale_(outputs: Any) -> Any:
            self._event("scale")
            result = scale(outputs)
            if isinstance(result, torch.Tensor) and result.requires_grad:
                result.register_hook(self._on_scaled_grad)
            return result

        def unscale(opt: torch.optim.Optimizer) -> None:
            if any(
                p.grad is not None and p.grad.dtype == torch.float16
                for group in opt.param_groups
                for p in group["params"]
            ):  # torch: "Attempting to unscale FP16 gradients" (fp16 weights, not fp32)
                raise ScalerMisuse("fp16_weights")
            if self._in_scaler_step:  # scaler.step's own implicit unscale_: not the learner's
                return unscale_(opt)
            if self._stepped:
                raise ScalerMisuse("missing_update")
            self._event("unscale")
            unscale_(opt)
            self._unscaled = True

        def step_(opt: torch.optim.Optimizer, *args: Any, **kwargs: Any) -> Any:
            if self._stepped:
                raise ScalerMisuse("missing_update")
            if all(p.grad is None for group in opt.param_groups for p in group["params"]):
                raise ScalerMisuse("grads_cleared")  # torch: "No inf checks were recorded"
            before = self.steps
            self._in_scaler_step = True
            try:
                result = step(opt, *args, **kwargs)
            finally:
                self._in_scaler_step = False
            self._stepped = True
            self._event("step", ran=self.steps > before)
            return result

        def update_(*args: Any, **kwargs: Any) -> None:
            if not (self._stepped or self._unscaled):
                raise ScalerMisuse("update_without_step")
            update(*args, **kwargs)
            self._stepped = self._unscaled = False
            self._event("update", scale=_finite_float(scaler.get_scale()))

        scaler.scale = scale_  # type: ignore[method-assign]
        scaler.unscale_ = unscale  # type: ignore[method-assign]
        scaler.step = step_  # type: ignore[method-assign]
        scaler.update = update_  # type: ignore[method-assign]

    def _clip_wrapper(self, original: Any) -> Any:
        def clip_grad_norm_(parameters: Any, max_norm: Any, *args: Any, **kwargs: Any) -> Any:
            total = original(parameters, max_norm, *args, **kwargs)
            self._event(
                "clip",
                unscaled=self._unscaled,
                max_norm=_finite_float(max_norm),
                norm=_finite_float(total),
            )
            return total

        return clip_grad_norm_

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        """Patch clip_grad_norm_ where a script can reach it; stop on ScalerMisuse."""
        import torch.nn.utils.clip_grad as clip_module

        owners = (torch.nn.utils, clip_module)
        originals = [owner.clip_grad_norm_ for owner in owners]
        wrapper = self._clip_wrapper(clip_module.clip_grad_norm_)
        for owner in owners:
            owner.clip_grad_norm_ = wrapper  # type: ignore[attr-defined]
        try:
            yield
        except ScalerMisuse as exc:
            self.stopped, self.stopped_iteration = exc.reason, self.iteration
        finally:
            for owner, original in zip(owners, originals, strict=True):
                owner.clip_grad_norm_ = original  # type: ignore[attr-defined]

    def failed(self, exc: BaseException) -> bool:
        """Torch's own errors whose cause is known: stop as ScalerMisuse would have."""
        text = str(exc)
        reason = next((r for marker, r in KNOWN_ERRORS if marker in text), None)
        if reason is None:
            return False
        self.stopped, self.stopped_iteration = reason, self.iteration
        return True

    def observations(self, prefix: str) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        width = sum(p.numel() for p in self.params)
        tensors = {
            f"{prefix}.grads": stacked(self.step_grads, width),
            f"{prefix}.params": stacked(self.step_params, width),
            f"{prefix}.snapshots": stacked(self.snapshots, width),
            f"{prefix}.final": flat(self.params),
        }
        meta = {
            "steps": self.steps,
            "step_meta": self.step_meta,
            "yielded": self.yielded,
            "events": self.events,
            "events_truncated": self.events_truncated,
            "forwards": self.forwards,
            "autocast_forwards": self.autocast_forwards,
            "autocast_dtypes": self.autocast_dtypes,
            "stopped": self.stopped,
            "stopped_iteration": self.stopped_iteration,
            # the weights' dtypes at every step and at the end (mixed precision keeps fp32)
            "param_dtypes": sorted(self.param_dtypes | {str(p.dtype) for p in self.params}),
        }
        return tensors, meta


def setup(scenario_data: dict, ctx: Context) -> tuple[dict[str, Any], AmpRecorder]:
    """The learner's globals for one scenario, and the recorder watching them. The model is
    float32 whatever `ctx.dtype` the harness uses elsewhere: mixed precision starts from fp32."""
    device = ctx.device
    scenario = AmpScenario.from_dict(scenario_data)
    x, y = make_data(scenario)
    x = poisoned(scenario, x)
    dataset = TensorDataset(x.to(device, torch.float32), y.to(device, torch.float32))
    loader = RecordingLoader(dataset, batch_size=scenario.batch_size, shuffle=False)
    model = make_model(scenario).to(device, torch.float32)
    optimizer = make_optimizer(scenario, model)
    scaler = torch.amp.GradScaler(device.type, init_scale=scenario.init_scale)
    recorder = AmpRecorder(model, optimizer, loader, scaler, device.type)
    names = {
        "model": model,
        "loss_fn": nn.MSELoss(reduction="mean"),
        "optimizer": optimizer,
        "loader": loader,
        "scaler": scaler,
        "device_type": device.type,
        "amp_dtype": torch.float16 if device.type == "cuda" else torch.bfloat16,
        "max_norm": scenario.max_norm,
        "torch": torch,
        "nn": nn,
    }
    return names, recorder
