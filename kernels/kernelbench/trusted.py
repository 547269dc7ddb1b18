"""The program under test in a process of its own, which holds nothing the verdict depends on.

:class:`Program` starts the child (``spawn``: a fresh interpreter that never saw the validator's
state) and speaks to it over a pipe. The child (:func:`serve`) loads the program, builds
``ModelNew`` and then only answers requests: call the model on these inputs; time one call on
these inputs; time its GPU-only rate; say which functions of PyTorch changed in its process.
Inputs go to the child through ``torch.multiprocessing`` (CPU tensors in shared memory, CUDA
tensors by CUDA IPC handles: the same memory, no copy); what comes back is JSON (an output's
dtype, shape, device and values, and times), never a pickle, so that nothing the program sends
can run code in the parent.

:class:`RemoteModel` is that child seen as a ``torch.nn.Module``: :func:`~.evaluate.evaluate`
runs it like any ``ModelNew``, and so every reference (the ``Model``, ``reference64``, the
coverage and offset expectations, the eager and ``torch.compile`` timings) is computed in the
parent, which never imports the program.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
import time

import torch
import torch.multiprocessing as mp

from .report import crash_reason

PRECISIONS = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
SENT_VALUES = 1 << 20  # the most output values sent back; a larger output fails on its shape


class ProgramGone(RuntimeError):
    """The program's process ended, or gave no answer in time: ``check`` and ``why``."""

    def __init__(self, check: str, why: str):
        super().__init__(why)
        self.check, self.why = check, why


def _raised(kind: str, message: str) -> Exception:
    """An exception of the program's type name (RuntimeError, ...), rebuilt from its words only."""
    return type(kind if kind.isidentifier() else "ProgramError", (RuntimeError,), {})(message)


# --- the child: the program's process -----------------------------------------------------------

def _torch_functions() -> dict:
    """The public callables of torch, torch.nn.functional and torch.Tensor, by qualified name."""
    import torch.nn.functional as F

    found = {}
    for prefix, space in (("torch", torch), ("torch.nn.functional", F), ("torch.Tensor", torch.Tensor)):
        for name, value in list(vars(space).items()):
            if not name.startswith("_") and callable(value) and not isinstance(value, type):
                found[f"{prefix}.{name}"] = value
    return found


def _changed(before: dict) -> list[str]:
    now = _torch_functions()
    return sorted(name for name, value in before.items() if now.get(name) is not value)


def _encode(out) -> dict:
    if not isinstance(out, torch.Tensor):
        return {"type": type(out).__name__, "value": out if isinstance(out, (int, float)) else None}
    out = out.detach()
    values = None
    if out.numel() <= SENT_VALUES:
        flat = out.cpu().reshape(-1)
        values = (flat.float() if flat.dtype in (torch.float16, torch.bfloat16) else flat).tolist()
    return {"type": "Tensor", "dtype": str(out.dtype).removeprefix("torch."),
            "shape": list(out.shape), "device": str(out.device), "values": values}


def _decode(sent: dict):
    if sent["type"] != "Tensor":
        return sent["value"] if sent["value"] is not None else type(sent["type"], (), {})()
    dtype = getattr(torch, sent["dtype"])
    if sent["values"] is None:  # too large to send: a shape no loss has, so the check fails on it
        return torch.full((), float("nan")).to(dtype).expand(sent["shape"])
    values = torch.tensor(sent["values"], dtype=torch.float32 if dtype in (torch.float16, torch.bfloat16) else None)
    return values.to(dtype).reshape(sent["shape"]).to(sent["device"])


def _build(spec: str, problem_id: int):
    from .evaluate import _instantiate
    from .problems import PROBLEMS

    if spec.startswith("cheat:"):
        from .cheats import trusted_cheats

        _, pid, name = spec.split(":", 2)
        program = trusted_cheats(int(pid))[name].model
    elif spec.endswith(".py"):
        with open(spec) as file:
            program = file.read()
    else:
        module, _, name = spec.partition(":")
        program = __import__(module, fromlist=[name])
        for part in name.split("."):
            program = getattr(program, part)
    return _instantiate(program, PROBLEMS[problem_id])


def _switch_to_this_context(flush) -> None:
    """Run a tiny kernel and wait for it, so that the GPU's switch from the parent's context
    (which has just written the inputs) to this one happens before a timed call's wall clock
    starts, not inside it, where it looked like work hidden from the events (0.16 ms per call
    on an H200, which failed every honest program's timed-stream check). With it, the honest
    programs' hidden time is the parent's eager one within 0.03 ms (bench/PERFLOG.md, session
    36), so the check compares with the eager timing, as in one process."""
    if flush is not None:
        flush[:1].zero_()
        torch.cuda.synchronize()


def serve(conn, spec: str, problem_id: int, device: str, precision: str, stderr: str) -> None:
    """The child's loop: build ModelNew on request, then answer calls until told to stop."""
    from ..correctness import poison_allocator
    from .checks import synchronize
    from .timing import bump_versions, flush_buffer, timed_call

    os.dup2(os.open(stderr, os.O_WRONLY), 2)  # the parent reads the last line after a crash
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.set_device(device)
        torch.empty(0, device=device)  # the context now, so the parent's sizing counts it
    before, model, flush, last = _torch_functions(), None, None, None
    conn.send_bytes(b'{"ready": true}')
    while True:
        try:
            request = conn.recv()
        except EOFError:
            return
        last = None  # the previous request's inputs: kept until now (see the end of the loop)
        op, inputs = request[0], list(request[1]) if len(request) > 1 else []
        try:
            if op == "stop":
                return
            if op == "build":
                model = _build(spec, problem_id).to(device=device, dtype=PRECISIONS[precision])
                reply = {}
            elif op == "call":
                poison_allocator(device)
                with torch.no_grad():
                    out = model(*inputs)
                synchronize(inputs)
                reply = {"out": _encode(out)}
            elif op == "warm":
                with torch.no_grad():
                    for _ in range(request[2]):
                        model(*inputs)
                        synchronize(inputs)
                reply = {}
            elif op == "time":  # one timed call, as timing.time_trials makes it
                flush = flush_buffer(inputs) if flush is None else flush
                bump_versions(inputs)
                _switch_to_this_context(flush)
                with torch.no_grad():
                    out, event, wall = timed_call(model, inputs, flush)
                reply = {"out": _encode(out), "event_ms": event, "wall_ms": wall}
            elif op == "gpu_only":
                from .timing import gpu_only_ms

                reply = {"ms": gpu_only_ms(model, inputs)}
            elif op == "changed":
                reply = {"changed": _changed(before)}
            else:
                reply = {"error": ["ValueError", f"unknown request {op!r}"]}
        except Exception as error:  # the program's error, by its type's name and first line
            first = (str(error).strip().splitlines() or [""])[0]
            reply = {"error": [type(error).__name__, first[:300]]}
        # Kept until the next request is received: a tensor the parent sends again then maps
        # to the same address here, as it would in one process (dropped, its next mapping may
        # land elsewhere, and a result cached by address would escape the recompute check).
        last, inputs = inputs, None
        conn.send_bytes(json.dumps(reply).encode())


# --- the parent: the trusted side ---------------------------------------------------------------

class Program:
    """The child process that holds the program; :meth:`ask` sends a request and waits for the
    answer until ``deadline`` (time.monotonic()). A crash or a missed deadline ends the child and
    raises :class:`ProgramGone` for this request and every later one."""

    def __init__(self, spec: str, problem_id: int, device, precision: str, time_limit: float):
        context = mp.get_context("spawn")
        self.conn, child_end = context.Pipe()
        handle, self.stderr = tempfile.mkstemp(prefix="modelnew-", suffix=".err")
        os.close(handle)
        self.deadline, self.limit, self.gone = time.monotonic() + time_limit, time_limit, None
        self.process = context.Process(target=serve, daemon=True, args=(
            child_end, spec, problem_id, str(device), precision, self.stderr))
        with _main_left_behind():
            self.process.start()
        child_end.close()
        self._answer()  # ready: the child imported torch and made its CUDA context

    def ask(self, op: str, *args) -> dict:
        if self.gone:
            raise self.gone
        # The inputs are this process's memory, shared with the child by CUDA IPC, and nothing
        # orders this process's writes (a refill, a fresh draw) before the child's reads but
        # finishing them first. Left in flight, a refill ran inside the child's wall-clock window.
        if torch.cuda.is_initialized():
            torch.cuda.synchronize()
        try:
            self.conn.send((op, *args))
        except (BrokenPipeError, ConnectionResetError, OSError):
            self._end()
        return self._answer()

    def _answer(self) -> dict:
        if self.gone:
            raise self.gone
        ready = False
        try:
            ready = self.conn.poll(max(0.0, self.deadline - time.monotonic()))
            data = self.conn.recv_bytes() if ready else None
        except (EOFError, ConnectionResetError, OSError):  # the child is gone, or going
            data = None
            self.process.join(timeout=30)
        if data is None:
            self._end(timed_out=not ready)
        answer = json.loads(data)
        if "error" in answer:
            raise _raised(*answer["error"])
        return answer

    def _end(self, timed_out: bool = False):
        if timed_out:
            self.gone = ProgramGone("time limit", f"no verdict within {self.limit:g} s: a hang, or "
                                                  f"far slower than the reference")
        self.close()  # the child's stderr file stays until read
        if not self.gone:
            with open(self.stderr, errors="replace") as file:
                err = file.read()
            self.gone = ProgramGone("crashed", crash_reason(self.process.exitcode or 0, err))
        os.unlink(self.stderr)
        raise self.gone

    def close(self) -> None:
        if self.process.is_alive():
            try:
                self.conn.send(("stop",))
            except OSError:
                pass
            self.process.join(timeout=5 if not self.gone else 0)
            if self.process.is_alive():
                self.process.kill()
        self.process.join()
        if self.gone is not None and os.path.exists(self.stderr):
            os.unlink(self.stderr)


@contextlib.contextmanager
def _main_left_behind():
    """``spawn`` imports the parent's main script in the child, which runs a script without an
    ``if __name__ == "__main__":`` guard again; the child needs nothing from it (its target is
    :func:`serve`), so the script's name is hidden while the child starts."""
    main = sys.modules["__main__"]
    kept = {name: vars(main)[name] for name in ("__file__", "__spec__") if name in vars(main)}
    for name in kept:
        setattr(main, name, None)
    try:
        yield
    finally:
        for name, value in kept.items():
            setattr(main, name, value)


class RemoteModel(torch.nn.Module):
    """The program in its process, as a ModelNew: ``forward`` sends the inputs and returns the
    output it got back. Subclassed per evaluation with ``program`` (a :class:`Program`) and
    ``source`` (the program's text, read for the static checks, never run here)."""

    program: Program
    source = ""
    remote = True  # evaluate() may time it on the CPU: the child's clock is the host's

    def __init__(self):
        super().__init__()
        self.program.ask("build")

    def to(self, *args, **kwargs):  # the child moved its model already
        return self

    def forward(self, *inputs):
        return _decode(self.program.ask("call", inputs)["out"])

    def time_trials(self, inputs, trials=None, warmup=3, discard_first=1, refill=None, verify=None):
        """timing.time_trials with the calls in the child: each timed call's inputs written by
        ``refill`` here, the call and its events there, the output checked here."""
        from .timing import PERF_TRIALS, Timing

        self.program.ask("warm", inputs, warmup)
        events, walls, failure = [], [], None
        for trial in range((trials or PERF_TRIALS) + discard_first):
            expected = refill() if refill is not None else None
            answer = self.program.ask("time", inputs)
            if verify is not None and failure is None:
                why = verify(_decode(answer["out"]), expected)
                failure = None if why is None else f"timed call {trial + 1}: {why}"
            if trial >= discard_first:
                events.append(answer["event_ms"])
                walls.append(answer["wall_ms"])
        return Timing(events, walls, failure)

    def gpu_only_ms(self, inputs) -> float:
        return self.program.ask("gpu_only", inputs)["ms"]

    def changed_torch(self) -> list[str]:
        return self.program.ask("changed")["changed"]


def remote_class(program: Program, source: str) -> type:
    return type("ModelNew", (RemoteModel,), {"program": program, "source": source})


def source_of(spec: str) -> str | None:
    """The program's text for the static checks, read without running it: the file; a class's
    source where its module is the validator's own (imported already); else the module's file,
    found on sys.path without importing it or its packages."""
    import inspect

    if spec.endswith(".py"):
        with open(spec) as file:
            return file.read()
    if spec.startswith("cheat:"):
        from .cheats import trusted_cheats

        _, pid, name = spec.split(":", 2)
        return inspect.getsource(trusted_cheats(int(pid))[name].model)
    module, _, name = spec.partition(":")
    if module in sys.modules:
        found = sys.modules[module]
        for part in name.split("."):
            found = getattr(found, part, None)
        try:
            return inspect.getsource(found)
        except (OSError, TypeError):
            return None
    parts = module.split(".")
    for root in sys.path:
        for path in (os.path.join(root or ".", *parts) + ".py", os.path.join(root or ".", *parts, "__init__.py")):
            if os.path.isfile(path):
                with open(path) as file:
                    return file.read()
    return None
