"""Long work says where it is: a line per case with the time elapsed and an estimate of the time left.

Used by `make bench`, `make train` and `make verify-peers`, whose cases run for minutes each; the estimate assumes
the cases left cost what the finished ones did on average (said as "about").
"""

from __future__ import annotations

import time
from collections.abc import Callable


def duration(seconds: float) -> str:
    """'42 s', '3 min 05 s', '1 h 02 min'."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {seconds:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def time_left(done: float, total: float, elapsed: float) -> str:
    """'elapsed 3 min 05 s, about 40 s left' for `done` of `total` units after `elapsed` seconds (the units left
    costing what the done ones did on average); 'elapsed ...' alone before any is done."""
    said = f"elapsed {duration(elapsed)}"
    if 0 < done < total:
        said += f", about {duration(elapsed / done * (total - done))} left"
    return said


class Progress:
    """`total` cases of `what`: `start(label)` before each says which one runs, `done(label)` after it says how far
    the work is (through `say`, flushed at once by default)."""

    def __init__(
        self,
        what: str,
        total: int,
        clock: Callable[[], float] = time.monotonic,
        say: Callable[[str], object] | None = None,
    ) -> None:
        if total < 0:
            raise ValueError(f"total: expected a non-negative number of cases, got {total}")
        self.what, self.total, self.finished, self.clock = what, total, 0, clock
        self.say = say or (lambda line: print(line, flush=True))
        self.began = clock()

    def start(self, label: str) -> str:
        line = (
            f"{self.what}: {self.finished + 1} of {self.total}, {label} (elapsed {duration(self.clock() - self.began)})"
        )
        self.say(line)
        return line

    def done(self, label: str) -> str:
        self.finished += 1
        elapsed = time_left(self.finished, self.total, self.clock() - self.began)
        line = f"{self.what}: {self.finished} of {self.total} done, {label}: {elapsed}"
        self.say(line)
        return line
