"""Measurement decides: which measured plan to recommend, and whether its margin over the
default a user would write is more than the run's own noise.

A plan the simulator prefers can measure slower than the default on a real, loaded
machine (a placement predicted 1.18x faster than one device measured 0.56x). So where
plans were run for real, the recommendation is the fastest *measured* plan, and only
when it beats the default by more than the noise of the run: the spread of one plan's
steps against its own median, the median over the plans. Otherwise the default is
recommended, and the report says so.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass

__all__ = ["Recommendation", "recommend"]


@dataclass(frozen=True)
class Recommendation:
    """What a measured run recommends.

    Attributes
    ----------
    method : str
        The plan to use.
    default : str
        What a user writes first (one device; the even split).
    fastest : str
        The plan with the least median measured step.
    margin : float
        The default's median step over the recommended plan's (1.0 when it is the default).
    fastest_margin : float
        The default's median step over the fastest plan's.
    noise : float
        The run's noise: the median over plans of ``(max - min) / median`` of its steps.
    beyond_noise : bool
        Whether the fastest plan's margin exceeds the noise (else the default is kept).
    """

    method: str
    default: str
    fastest: str
    margin: float
    fastest_margin: float
    noise: float
    beyond_noise: bool

    def to_dict(self) -> dict:
        return asdict(self)

    def sentence(self, unit: str = "the default") -> str:
        """One line for the user."""
        if self.fastest == self.default:
            return (f"recommended: {self.default} ({unit}): no plan measured faster "
                    f"(noise {self.noise:.1%})")
        if not self.beyond_noise:
            return (f"recommended: {self.default} ({unit}): the fastest, {self.fastest}, "
                    f"measured {self.fastest_margin:.3f}x it, within the run's noise of "
                    f"{self.noise:.1%}")
        return (f"recommended: {self.method}, measured {self.margin:.3f}x {self.default} "
                f"({unit}), beyond the run's noise of {self.noise:.1%}")


def recommend(times: dict[str, list[float]], default: str) -> Recommendation:
    """The recommendation of a run whose plans ``times`` (method -> measured step times,
    taken in turns) include ``default``.

    Examples
    --------
    >>> r = recommend({"single": [10, 11, 10.5], "sa": [7, 7.2, 7.1]}, "single")
    >>> r.method, round(r.margin, 2), r.beyond_noise
    ('sa', 1.48, True)
    >>> recommend({"single": [10, 12, 11], "sa": [10.5, 10.4, 10.6]}, "single").method
    'single'
    """
    if default not in times:
        raise ValueError(f"the default {default!r} was not measured")
    med = {m: statistics.median(ts) for m, ts in times.items()}
    noise = statistics.median((max(ts) - min(ts)) / med[m] for m, ts in times.items())
    fastest = min(med, key=lambda m: (med[m], m != default))
    lead = med[default] / med[fastest]
    beyond = fastest != default and lead - 1 > noise
    chosen = fastest if beyond else default
    return Recommendation(chosen, default, fastest, med[default] / med[chosen], lead, noise,
                          beyond)
