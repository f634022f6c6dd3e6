"""The analysis options, typed: what the CLI or a config file sets and what the metrics read.

One frozen object travels from the command line (``msdiag/cli.py``) or a project config
(``msdiag/config.py``) through ``analysis.analyze`` to every metric (``Context.options``), which
reads it by attribute. Values are checked when the object is made, so that a metric never meets a
malformed option. ``rule_params`` holds every rule parameter after ``--set`` overrides (filled by
the analysis once the rules are loaded): a metric whose cut is also a rule's threshold reads it
here (``param("rule.param")``), so the two can never disagree.

This module imports nothing from msdiag's packages (it sits under analysis, metrics and config).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

#: Transports communication.json reports (metrics/communication.py judges their bandwidth).
TRANSPORTS = ("HCCS", "RDMA", "SDMA", "PCIE", "SIO")


def parse_bandwidth_norms(raw: Any) -> dict[str, float]:
    """Bandwidth norms (GB/s by transport) from a mapping or 'HCCS=28,RDMA=25'; ValueError when malformed."""
    if raw is None:
        return {}
    if isinstance(raw, str):
        items: list[tuple[Any, Any]] = []
        for part in raw.split(","):
            if not part.strip():
                continue
            key, sep, val = part.partition("=")
            if not sep:
                raise ValueError(f"bandwidth_norms: '{part.strip()}' is not TRANSPORT=GBPS")
            items.append((key, val))
    elif isinstance(raw, Mapping):
        items = list(raw.items())
    else:
        raise ValueError(f"bandwidth_norms should be a mapping or 'HCCS=28,RDMA=25', found {type(raw).__name__}")
    out: dict[str, float] = {}
    for key, val in items:
        t = str(key).strip().upper()
        if t not in TRANSPORTS:
            raise ValueError(f"bandwidth_norms: unknown transport '{key}' (known: {', '.join(TRANSPORTS)})")
        if isinstance(val, bool):
            raise ValueError(f"bandwidth_norms: {t} = {val!r} is not a number of GB/s")
        try:
            v = float(val)
        except (TypeError, ValueError):
            raise ValueError(f"bandwidth_norms: {t} = {val!r} is not a number of GB/s") from None
        if not v > 0:
            raise ValueError(f"bandwidth_norms: {t} = {v:g} should be positive")
        out[t] = v
    return out


#: The goals ``--goal NAME=VALUE`` accepts (msdiag/plan.py reads each from its metric).
GOAL_NAMES = ("mfu", "step-ms", "tokens-per-s", "memory-share", "ttft-p99-ms", "tpot-p99-ms")
#: Goals that are ratios, given as fractions (0.45, not 45).
RATIO_GOALS = ("mfu", "memory-share")


def parse_goal(raw: Any) -> tuple[str, float]:
    """A goal ``NAME=VALUE`` (or a (name, value) pair) -> (name, value); ValueError naming what is wrong."""
    if isinstance(raw, (tuple, list)) and len(raw) == 2:
        name, val = str(raw[0]), raw[1]
    else:
        name, sep, val = str(raw).partition("=")
        if not sep:
            raise ValueError(f"goal '{raw}' is not NAME=VALUE (names: {', '.join(GOAL_NAMES)})")
    name = name.strip()
    if name not in GOAL_NAMES:
        raise ValueError(f"goal '{name}' is unknown (names: {', '.join(GOAL_NAMES)})")
    try:
        v = float(val)
    except (TypeError, ValueError):
        raise ValueError(f"goal {name}={val!r}: the value must be a number") from None
    if not v > 0 or v != v or v == float("inf"):
        raise ValueError(f"goal {name}={val!r}: the value must be a positive number")
    if name in RATIO_GOALS and v > 1:
        raise ValueError(f"goal {name}={val!r}: a share, between 0 and 1 (0.45 for 45%)")
    return name, v


def _positive(name: str, value: Any, integer: bool) -> Any:
    """``value`` as a positive int / float (None passes); ValueError naming the option otherwise."""
    if value is None:
        return None
    kind = "integer" if integer else "number"
    if isinstance(value, bool):
        raise ValueError(f"{name} should be a positive {kind}, found {value!r}")
    try:
        v = int(value) if integer else float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} should be a positive {kind}, found {value!r}") from None
    if integer and v != value and not (isinstance(value, str) and str(v) == value.strip()):
        raise ValueError(f"{name} should be a positive {kind}, found {value!r}")
    if not v > 0:
        raise ValueError(f"{name} should be a positive {kind}, found {value!r}")
    return v


@dataclass(frozen=True)
class Options:
    """Analysis options shared by analyze, report, diff and capture (checked when made: ValueError)."""

    jobs: int | None = None
    peak_tflops: float | None = None
    device: str | None = None
    model_config: str | None = None
    ranks_per_node: int | None = None
    device_memory_gb: float | None = None
    host_cores: int | None = None
    tokens_per_step: int | None = None  # tokens the whole job trains on per step (--tokens-per-step)
    rules_dirs: tuple[str, ...] = ()
    overrides: Mapping[str, str] = field(default_factory=dict)  # --set RULE.PARAM=VALUE
    disable: tuple[str, ...] = ()  # rule ids left out of the diagnosis (--disable, config disable)
    bandwidth_norms: Mapping[str, float] = field(default_factory=dict)  # GB/s by transport, over the defaults
    cache: str | None = None  # rank cache folder (ingest/cache.py); None: parse every rank
    scheduler: str | None = None  # Dask scheduler address: ranks are read on its workers
    requests: str | None = None  # a request timing log analyzed with the capture (--requests)
    train_log: str | None = None  # a training log (or msrun worker-log folder) analyzed with the capture (--train-log)
    slo_ttft_ms: float | None = None
    slo_tpot_ms: float | None = None
    goals: tuple[tuple[str, float], ...] = ()  # --goal NAME=VALUE / config goal (msdiag/plan.py)
    config: str | None = None  # the project config file the options came from (msdiag/config.py)
    whole_timeline: bool = False  # keep every rank's whole timeline, unreduced (msdiag report --trace, msdiag/export.py)
    #: every rule's parameters after overrides, by rule id (filled by the analysis from the loaded rules)
    rule_params: Mapping[str, Mapping[str, float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        """Check and normalise every value once, so that metrics read well-formed options."""
        fix = {
            "jobs": _positive("jobs", self.jobs, integer=True),
            "peak_tflops": _positive("peak_tflops", self.peak_tflops, integer=False),
            "ranks_per_node": _positive("ranks_per_node", self.ranks_per_node, integer=True),
            "device_memory_gb": _positive("device_memory_gb", self.device_memory_gb, integer=False),
            "host_cores": _positive("host_cores", self.host_cores, integer=True),
            "tokens_per_step": _positive("tokens_per_step", self.tokens_per_step, integer=True),
            "slo_ttft_ms": _positive("slo_ttft_ms", self.slo_ttft_ms, integer=False),
            "slo_tpot_ms": _positive("slo_tpot_ms", self.slo_tpot_ms, integer=False),
            "bandwidth_norms": parse_bandwidth_norms(self.bandwidth_norms),
            "rules_dirs": tuple(str(d) for d in self.rules_dirs),
            "disable": tuple(dict.fromkeys(str(r) for r in self.disable)),
            "overrides": {str(k): str(v) for k, v in self.overrides.items()},
            "goals": tuple(parse_goal(g) for g in self.goals),
        }
        for name, value in fix.items():
            object.__setattr__(self, name, value)

    def param(self, key: str) -> float:
        """A rule parameter ``"rule-id.param"`` after overrides; KeyError when the rules were not resolved."""
        rid, _, name = key.partition(".")
        try:
            return float(self.rule_params[rid][name])
        except KeyError:
            raise KeyError(f"rule parameter {key} is not resolved (is rule {rid} loaded?)") from None

    def as_dict(self) -> dict[str, Any]:
        """The JSON ``options`` of the report; ``disable``, ``bandwidth_norms``, ``goal`` and ``config`` only when set."""
        out: dict[str, Any] = {
            "jobs": self.jobs,
            "peak_tflops": self.peak_tflops,
            "device": self.device,
            "model_config": self.model_config,
            "ranks_per_node": self.ranks_per_node,
            "device_memory_gb": self.device_memory_gb,
            "host_cores": self.host_cores,
            "rules": list(self.rules_dirs),
            "set": dict(self.overrides),
            "scheduler": self.scheduler,
            "requests": self.requests,
            "slo_ttft_ms": self.slo_ttft_ms,
            "slo_tpot_ms": self.slo_tpot_ms,
        }
        if self.train_log:
            out["train_log"] = self.train_log
        if self.disable:
            out["disable"] = list(self.disable)
        if self.bandwidth_norms:
            out["bandwidth_norms"] = dict(self.bandwidth_norms)
        if self.goals:
            out["goal"] = [f"{n}={v:g}" for n, v in self.goals]
        if self.config:
            out["config"] = self.config
        if self.tokens_per_step:
            out["tokens_per_step"] = self.tokens_per_step
        return out
