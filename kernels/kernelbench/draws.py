"""KernelBench's exact inputs drawn ahead: an evaluation at KernelBench's size draws them on the
CPU six times (five trials and the timed inputs), and a CPU draw is serial, about 6 s per 2^30
values, which made them most of chapter 9's time."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

from .problems import Problem


class ExactDraws:
    """KernelBench's exact inputs (``Problem.get_inputs`` on the CPU) for seeds asked for in a
    known order, drawn up to ``workers`` at a time in threads. Each seed has a generator of its
    own, so draws for different seeds can run side by side and give the same values. At most
    ``workers`` draws are held ahead; a seed asked for out of order is drawn then. ``close``
    cancels what was not needed (a failed trial ends the evaluation) and waits for what is
    running, so that no draw runs beside a timing."""

    def __init__(self, problem: Problem, seeds, workers: int | None = None):
        self.problem, self.order = problem, list(seeds)
        self.workers = draw_workers(problem, len(self.order)) if workers is None else workers
        self.pool = ThreadPoolExecutor(self.workers) if self.workers > 1 else None
        self.ahead: list = []  # (seed, future), in the order asked for

    def _top_up(self):
        while self.pool and self.order and len(self.ahead) < self.workers:
            seed = self.order.pop(0)
            self.ahead.append((seed, self.pool.submit(self.problem.get_inputs, seed)))

    def __call__(self, seed: int) -> list:
        self._top_up()
        for k, (ahead_seed, future) in enumerate(self.ahead):
            if ahead_seed == seed:
                del self.ahead[k]
                self._top_up()  # the next draw starts while this one's trial runs
                return future.result()
        if seed in self.order:
            self.order.remove(seed)
        return self.problem.get_inputs(seed)

    def close(self):
        if self.pool:
            self.pool.shutdown(wait=True, cancel_futures=True)
            self.pool, self.ahead, self.order = None, [], []


def draw_workers(problem: Problem, draws: int) -> int:
    """Threads for ``draws`` CPU draws of ``problem``'s inputs: one per draw, leaving a core free,
    as many as the host's available memory holds twice over (a draw's inputs, and the transients
    of the draw and of its copy to the GPU). 1, drawing one at a time, where it holds less: a
    Colab host has about 12 GB, and KernelBench's MSE inputs are 8 GiB."""
    cores = max(1, (os.cpu_count() or 1) - 1)
    fits = available_host_memory() // (2 * problem.min_bytes())
    return max(1, min(draws, cores, fits))


def available_host_memory() -> int:
    """Bytes the host can still give this process (``MemAvailable`` in /proc/meminfo), 0 where
    that cannot be read."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0
