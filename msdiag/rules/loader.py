"""Load rules/*.yaml with a strict schema.

A rule is pure data: an unknown key, a wrong type, an unknown metric id or an unknown parameter
is a load error that names the file and line. Conditions are declarative (``all`` / ``any`` /
``not`` over metric comparisons); nothing is evaluated as code.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from msdiag.errors import RuleError
from msdiag.model import ESTIMATE_MODELS, REQUEST_KINDS, STEP_KINDS
from msdiag.units import BYTES_PER_KIB

if TYPE_CHECKING:
    import yaml

CATEGORIES = ("compute", "communication", "data", "memory", "host", "bubble", "inference", "stability")
SEVERITIES = ("info", "warning", "critical")
BOTTLENECKS = ("compute", "communication", "data", "memory", "host", "bubble")
# a request log's bottlenecks: their cost is a share of TTFT (queueing, batching, prefill) or of TPOT (decode)
INFERENCE_BOTTLENECKS = ("batching", "queueing", "prefill", "decode")
OPS = (">", ">=", "<", "<=", "==", "!=")
FORMATS = ("pct", "ms", "us", "s", "mb", "gb", "x", "int", "f1", "f2", "f3", "raw")
_ID = re.compile(r"^[a-z][a-z0-9-]*$")
#: a rule is a few KiB (the largest shipped is under 10 KiB): a bigger file is not a rule
MAX_RULE_BYTES = int(256 * BYTES_PER_KIB)
#: nesting of mappings and lists in a rule (the shipped rules reach 6)
MAX_DEPTH = 32
_PLACEHOLDER = re.compile(r"\{([^{}|]+)(?:\|([a-z0-9]+))?\}")

RULE_KEYS = {
    "id", "name", "category", "severity", "summary", "params", "condition", "critical_when",
    "verdict", "message", "suggestions", "docs", "references", "cases", "projection",
}
REQUIRED = ("id", "name", "category", "severity", "summary", "condition", "message", "suggestions", "docs", "cases")
PARAM_KEYS = {"default", "unit", "bounds", "doc"}
SUGGESTION_KEYS = {"when", "framework", "action", "api", "snippet", "effect"}
#: what a suggestion applies to (``framework:``, default any): a capture gets its own framework's advice
FRAMEWORKS = ("mindspore", "torch_npu", "any")
DOCS_KEYS = {"why", "how", "false_positives"}
VERDICT_KEYS = {"bottleneck", "cost"}
CASE_KEYS = {"name", "metrics", "expect", "set"}
COMPARISON_KEYS = {"metric", "op", "value", "param", "other", "optional", "corroborating"}
PROJECTION_KEYS = {"removes", "estimate", "assumes"}


@dataclass
class Param:
    name: str
    default: float
    unit: str
    bounds: tuple[float, float]
    doc: str


@dataclass
class Rule:
    id: str
    name: str
    category: str
    severity: str
    summary: str
    params: dict[str, Param]
    condition: dict[str, Any]
    message: str
    suggestions: list[dict[str, Any]]
    docs: dict[str, str]
    cases: list[dict[str, Any]]
    path: str
    critical_when: dict[str, Any] | None = None
    verdict: dict[str, str] | None = None
    references: list[str] = field(default_factory=list)
    #: what the rule's fix removes (msdiag/plan.py): {removes: [kind], estimate: {model, ...}, assumes: text}
    projection: dict[str, Any] | None = None

    def metrics(self) -> set[str]:
        """Every metric id the rule's conditions and message read."""
        out: set[str] = set()
        for cond in [self.condition, self.critical_when] + [s.get("when") for s in self.suggestions]:
            if cond:
                out |= _condition_metrics(cond)
        out |= {name for name, _ in _PLACEHOLDER.findall(self.message) if not name.startswith("param.")}
        return out

    def condition_metrics(self) -> set[str]:
        """Metric ids the firing condition needs (optional and corroborating comparisons excluded)."""
        return _condition_metrics(self.condition, required_only=True)


def _condition_metrics(cond: dict[str, Any], required_only: bool = False) -> set[str]:
    out: set[str] = set()
    for key in ("all", "any"):
        for c in cond.get(key, []):
            out |= _condition_metrics(c, required_only)
    if "not" in cond:
        out |= _condition_metrics(cond["not"], required_only)
    if "metric" in cond and not (required_only and (cond.get("optional") or cond.get("corroborating"))):
        out.add(cond["metric"])
        if "other" in cond:
            out.add(cond["other"])
    return out


# ---- YAML with line numbers -----------------------------------------------------------------


class _Lines(dict):  # type: ignore[type-arg]
    """A dict that remembers the line of each key (1-based)."""

    lines: dict[str, int]


@lru_cache(maxsize=1)
def _yaml() -> Any:
    """PyYAML, imported when a rule file is parsed (a run whose rules are all kept parsed never does)."""
    import yaml

    return yaml


@lru_cache(maxsize=1)
def _loader() -> Any:
    """libyaml's parser where PyYAML was built with it (about ten times faster than the pure-Python one,
    the same events, nodes and marks); the pure-Python loader otherwise."""
    return getattr(_yaml(), "CSafeLoader", _yaml().SafeLoader)


@lru_cache(maxsize=1)
def _scalars() -> Any:
    """One constructor for every scalar (a scalar node holds no reference to others: nothing is shared)."""
    return _yaml().SafeLoader("")


def _scalar(node: yaml.Node) -> Any:
    scalars = _scalars()
    try:
        return scalars.construct_object(node, deep=True)
    finally:
        scalars.constructed_objects.clear()


def _line(d: Any, key: str | None = None) -> int | None:
    if isinstance(d, _Lines):
        return d.lines.get(key or "__self__", d.lines.get("__self__"))
    return None


def _read_text(path: Path) -> str:
    """The rule file's text: a regular file of at most MAX_RULE_BYTES, UTF-8 (else a RuleError).

    Opened non-blocking and checked with fstat before a byte is read, so a FIFO or a device named
    ``*.yaml`` is refused instead of blocking or streaming forever."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as e:
        raise RuleError(path, f"cannot be read ({e.strerror or e})") from None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise RuleError(path, "is not a regular file")
        data = f.read(MAX_RULE_BYTES + 1)
    if len(data) > MAX_RULE_BYTES:
        raise RuleError(path, f"is larger than {MAX_RULE_BYTES / BYTES_PER_KIB:.0f} KiB: not a rule file")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise RuleError(path, f"is not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start})", line) from None


_NOTHING = object()


def _lines() -> _Lines:
    out = _Lines()
    out.lines = {}
    return out


class _Builder:
    """The rule file's tree built from libyaml's event stream, in one pass (no node graph).

    Anchors / aliases and nesting deeper than MAX_DEPTH are refused as they come, so an alias bomb
    or a self-referencing alias is never expanded; what the composer and the constructor would have
    refused (a second document; a key that is not text or appears twice) is kept and raised at the
    end, so that a file's error is the one a check of its shape, then composing, then building gives.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.stack: list[list[Any]] = []  # per open collection: [container, pending key, key line, start line]
        self.root: Any = _NOTHING
        self.document: Any = None  # the first document's start mark
        self.composing: Exception | None = None
        self.building: RuleError | None = None

    def feed(self, ev: Any) -> None:
        yaml = _yaml()
        line = ev.start_mark.line + 1
        if isinstance(ev, yaml.AliasEvent) or getattr(ev, "anchor", None) is not None:
            raise RuleError(self.path, "YAML anchors and aliases (&name, *name) are not allowed in a rule file", line)
        if isinstance(ev, yaml.CollectionStartEvent):
            if len(self.stack) >= MAX_DEPTH:
                raise RuleError(self.path, f"nested more than {MAX_DEPTH} levels deep: not a rule", line)
            self.stack.append([_lines() if isinstance(ev, yaml.MappingStartEvent) else [], _NOTHING, 0, line])
        elif isinstance(ev, yaml.CollectionEndEvent):
            c, _, _, start = self.stack.pop()
            if isinstance(c, _Lines):
                c.lines["__self__"] = start
            self._place(c, start)
        elif isinstance(ev, yaml.ScalarEvent):
            self._place(_scalar_of(ev), line)
        elif isinstance(ev, yaml.DocumentStartEvent):
            if self.document is None:
                self.document = ev.start_mark
            elif self.composing is None:
                self.composing = yaml.composer.ComposerError(
                    "expected a single document in the stream", self.document, "but found another document", ev.start_mark
                )

    def _place(self, value: Any, line: int) -> None:
        if self.composing is not None or self.building is not None:
            return
        if not self.stack:
            self.root = value
            return
        top = self.stack[-1]
        c = top[0]
        if isinstance(c, list):
            c.append(value)
        elif top[1] is _NOTHING:  # a key
            if not isinstance(value, str):
                self.building = RuleError(self.path, f"keys must be text, found {value!r}", line)
            elif value in c:
                self.building = RuleError(self.path, f"key '{value}' appears twice", line)
            else:
                top[1], top[2] = value, line
        else:
            c[top[1]] = value
            c.lines[top[1]] = top[2]
            top[1] = _NOTHING

    def result(self) -> Any:
        """The tree (None for an empty document), or the first error composing or building found."""
        if self.composing is not None:
            raise self.composing
        if self.building is not None:
            raise self.building
        if self.root is _NOTHING:
            raise RuleError(self.path, "the file is empty")
        return self.root


def _scalar_of(ev: Any) -> Any:
    """A scalar event's value, as the composer and SafeLoader's constructor make it."""
    yaml = _yaml()
    scalars = _scalars()
    tag = ev.tag
    if tag is None or tag == "!":
        tag = scalars.resolve(yaml.ScalarNode, ev.value, ev.implicit)
    if tag == "tag:yaml.org,2002:str":
        return ev.value
    return _scalar(yaml.ScalarNode(tag, ev.value, ev.start_mark, ev.end_mark, style=ev.style))


def _read_yaml(path: Path) -> Any:
    """The rule file as dicts (with key lines), lists and scalars; any problem is a RuleError with its line."""
    return _yaml_of(_read_text(path), path)


def _yaml_of(text: str, path: Path) -> Any:
    """A rule file's text as dicts (with key lines), lists and scalars (RuleError naming ``path``)."""
    yaml = _yaml()
    build = _Builder(path)
    try:
        for ev in yaml.parse(text, Loader=_loader()):
            build.feed(ev)
        return build.result()
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        raise RuleError(path, f"not valid YAML: {getattr(e, 'problem', None) or e}", mark.line + 1 if mark else None) from None


# ---- validation -------------------------------------------------------------------------------


def _keys(d: Any, allowed: set[str], where: str, path: Path) -> None:
    if not isinstance(d, dict):
        raise RuleError(path, f"{where} must be a mapping", _line(d))
    for k in d:
        if k not in allowed:
            hint = ", ".join(sorted(allowed))
            raise RuleError(path, f"unknown key '{k}' in {where} (allowed: {hint})", _line(d, k))


def _text(d: dict[str, Any], key: str, path: Path, where: str = "the rule") -> str:
    v = d.get(key)
    if not isinstance(v, str) or not v.strip():
        raise RuleError(path, f"'{key}' in {where} must be non-empty text", _line(d, key))
    return v


def _check_condition(c: Any, path: Path, metrics: set[str], params: dict[str, Param], where: str) -> None:
    if not isinstance(c, dict):
        raise RuleError(path, f"{where} must be a mapping (all / any / not, or a comparison)", _line(c))
    combinators = [k for k in ("all", "any", "not") if k in c]
    if combinators:
        if len(c) != 1:
            raise RuleError(path, f"{where}: '{combinators[0]}' must stand alone in its mapping", _line(c))
        k = combinators[0]
        if k == "not":
            _check_condition(c["not"], path, metrics, params, f"{where}.not")
            return
        items = c[k]
        if not isinstance(items, list) or not items:
            raise RuleError(path, f"{where}.{k} must be a non-empty list", _line(c, k))
        for i, sub in enumerate(items):
            _check_condition(sub, path, metrics, params, f"{where}.{k}[{i}]")
        return
    _keys(c, COMPARISON_KEYS, where, path)
    m = c.get("metric")
    if m not in metrics:
        raise RuleError(path, f"{where}: unknown metric id '{m}'", _line(c, "metric"))
    if c.get("op") not in OPS:
        raise RuleError(path, f"{where}: op must be one of {' '.join(OPS)}", _line(c, "op"))
    rhs = [k for k in ("value", "param", "other") if k in c]
    if len(rhs) != 1:
        raise RuleError(path, f"{where}: give exactly one of value, param, other", _line(c))
    if "param" in c and c["param"] not in params:
        raise RuleError(path, f"{where}: unknown param '{c['param']}'", _line(c, "param"))
    if "other" in c and c["other"] not in metrics:
        raise RuleError(path, f"{where}: unknown metric id '{c['other']}'", _line(c, "other"))
    if "value" in c and not isinstance(c["value"], (int, float, str)):
        raise RuleError(path, f"{where}: value must be a number or text", _line(c, "value"))
    if "optional" in c and not isinstance(c["optional"], bool):
        raise RuleError(path, f"{where}: optional must be true or false", _line(c, "optional"))
    _check_corroborating(c, path, where)


def _check_corroborating(c: dict[str, Any], path: Path, where: str) -> None:
    """``corroborating: true``: a comparison that, when its metric is null, holds at lower confidence instead of
    skipping the rule; only in the firing condition, outside ``not`` (where a missing value would turn it false)."""
    if "corroborating" not in c:
        return
    if not isinstance(c["corroborating"], bool):
        raise RuleError(path, f"{where}: corroborating must be true or false", _line(c, "corroborating"))
    if c.get("optional") and c["corroborating"]:
        raise RuleError(path, f"{where}: a comparison is optional or corroborating, not both", _line(c, "corroborating"))
    if c["corroborating"] and (not where.startswith("condition") or ".not" in where):
        raise RuleError(path, f"{where}: corroborating is allowed only in the firing condition, outside not", _line(c, "corroborating"))


def _check_template(text: str, path: Path, metrics: set[str], params: dict[str, Param], line: int | None) -> None:
    for name, fmt in _PLACEHOLDER.findall(text):
        if name.startswith("param."):
            if name[6:] not in params:
                raise RuleError(path, f"message names unknown param '{name[6:]}'", line)
        elif name not in metrics:
            raise RuleError(path, f"message names unknown metric id '{name}'", line)
        if fmt and fmt not in FORMATS:
            raise RuleError(path, f"unknown format '|{fmt}' (allowed: {', '.join(FORMATS)})", line)


def _check_projection(p: Any, path: Path, metrics: set[str]) -> dict[str, Any]:
    """``projection``: the kinds of time the fix removes (model.STEP_KINDS / REQUEST_KINDS), an optional
    estimate model with its inputs (model.ESTIMATE_MODELS) and an optional sentence of what it assumes."""
    _keys(p, PROJECTION_KEYS, "projection", path)
    kinds = p.get("removes")
    known = (*STEP_KINDS, *REQUEST_KINDS)
    if not isinstance(kinds, list) or not kinds or not all(k in known for k in kinds):
        raise RuleError(path, f"projection.removes must be a non-empty list of: {', '.join(known)}", _line(p, "removes"))
    if any(k in STEP_KINDS for k in kinds) and any(k in REQUEST_KINDS for k in kinds):
        raise RuleError(path, "projection.removes mixes step and request kinds", _line(p, "removes"))
    est = p.get("estimate")
    if est is not None:
        model = est.get("model") if isinstance(est, dict) else None
        if model not in ESTIMATE_MODELS:
            raise RuleError(path, f"projection.estimate.model must be one of {', '.join(ESTIMATE_MODELS)}", _line(p, "estimate"))
        _keys(est, {"model", *ESTIMATE_MODELS[model]}, "projection.estimate", path)
        if "metric" in ESTIMATE_MODELS[model] and est.get("metric") not in metrics:
            raise RuleError(path, f"projection.estimate: unknown metric id '{est.get('metric')}'", _line(est, "metric"))
    if "assumes" in p:
        _text(p, "assumes", path, "projection")
    return dict(p)


def parse_rule(path: Path, metrics: set[str]) -> Rule:
    """Load and validate one rule file."""
    return _validate(_read_yaml(path), path, metrics)


def _validate(d: Any, path: Path, metrics: set[str]) -> Rule:
    """The Rule of a parsed rule file, every key and reference checked (RuleError naming file:line)."""
    _keys(d, RULE_KEYS, "the rule", path)
    for k in REQUIRED:
        if k not in d:
            raise RuleError(path, f"missing required key '{k}'", _line(d))
    rid = _text(d, "id", path)
    if not _ID.match(rid):
        raise RuleError(path, f"id '{rid}' must be lower-case words joined by '-'", _line(d, "id"))
    if d["category"] not in CATEGORIES:
        raise RuleError(path, f"category must be one of {', '.join(CATEGORIES)}", _line(d, "category"))
    if d["severity"] not in SEVERITIES:
        raise RuleError(path, f"severity must be one of {', '.join(SEVERITIES)}", _line(d, "severity"))
    params: dict[str, Param] = {}
    raw_params = d.get("params") or {}
    if not isinstance(raw_params, dict):
        raise RuleError(path, "params must be a mapping", _line(d, "params"))
    for pname, p in raw_params.items():
        _keys(p, PARAM_KEYS, f"params.{pname}", path)
        if not isinstance(p.get("default"), (int, float)) or isinstance(p.get("default"), bool):
            raise RuleError(path, f"params.{pname}.default must be a number", _line(p, "default"))
        b = p.get("bounds")
        if not (isinstance(b, list) and len(b) == 2 and all(isinstance(x, (int, float)) for x in b) and b[0] <= b[1]):
            raise RuleError(path, f"params.{pname}.bounds must be [low, high]", _line(p, "bounds"))
        if not b[0] <= p["default"] <= b[1]:
            raise RuleError(path, f"params.{pname}.default {p['default']} lies outside its bounds {b}", _line(p, "default"))
        params[pname] = Param(pname, float(p["default"]), _text(p, "unit", path, f"params.{pname}"), (float(b[0]), float(b[1])), _text(p, "doc", path, f"params.{pname}"))
    _check_condition(d["condition"], path, metrics, params, "condition")
    if "critical_when" in d:
        _check_condition(d["critical_when"], path, metrics, params, "critical_when")
    verdict = d.get("verdict")
    if verdict is not None:
        _keys(verdict, VERDICT_KEYS, "verdict", path)
        if verdict.get("bottleneck") not in BOTTLENECKS + INFERENCE_BOTTLENECKS:
            raise RuleError(path, f"verdict.bottleneck must be one of {', '.join(BOTTLENECKS + INFERENCE_BOTTLENECKS)}",
                            _line(verdict, "bottleneck"))
        if verdict.get("cost") not in metrics:
            raise RuleError(path, f"verdict.cost: unknown metric id '{verdict.get('cost')}'", _line(verdict, "cost"))
    message = _text(d, "message", path)
    _check_template(message, path, metrics, params, _line(d, "message"))
    sugg = d["suggestions"]
    if not isinstance(sugg, list) or not sugg:
        raise RuleError(path, "suggestions must be a non-empty list", _line(d, "suggestions"))
    for i, s in enumerate(sugg):
        _keys(s, SUGGESTION_KEYS, f"suggestions[{i}]", path)
        _text(s, "action", path, f"suggestions[{i}]")
        _text(s, "effect", path, f"suggestions[{i}]")
        if "when" in s:
            _check_condition(s["when"], path, metrics, params, f"suggestions[{i}].when")
        for k in ("api", "snippet"):
            if k in s and not isinstance(s[k], str):
                raise RuleError(path, f"suggestions[{i}].{k} must be text", _line(s, k))
        if s.setdefault("framework", "any") not in FRAMEWORKS:
            raise RuleError(path, f"suggestions[{i}].framework must be one of {', '.join(FRAMEWORKS)}", _line(s, "framework"))
    _keys(d["docs"], DOCS_KEYS, "docs", path)
    for k in DOCS_KEYS:
        _text(d["docs"], k, path, "docs")
    refs = d.get("references") or []
    if not isinstance(refs, list) or not all(isinstance(r, str) for r in refs):
        raise RuleError(path, "references must be a list of text", _line(d, "references"))
    cases = d["cases"]
    if not isinstance(cases, list) or not cases:
        raise RuleError(path, "cases must be a non-empty list", _line(d, "cases"))
    for i, c in enumerate(cases):
        _keys(c, CASE_KEYS, f"cases[{i}]", path)
        if c.get("expect") not in ("fire", "quiet", "critical", "skip"):
            raise RuleError(path, f"cases[{i}].expect must be fire, quiet, critical or skip", _line(c, "expect"))
        if not isinstance(c.get("metrics"), dict):
            raise RuleError(path, f"cases[{i}].metrics must be a mapping of metric id to value", _line(c, "metrics"))
        for m in c["metrics"]:
            if m not in metrics:
                raise RuleError(path, f"cases[{i}].metrics: unknown metric id '{m}'", _line(c["metrics"], m))
    return Rule(
        id=rid, name=_text(d, "name", path), category=d["category"], severity=d["severity"],
        summary=_text(d, "summary", path), params=params, condition=d["condition"], message=message,
        suggestions=list(sugg), docs=dict(d["docs"]), cases=list(cases), path=str(path),
        critical_when=d.get("critical_when"), verdict=dict(verdict) if verdict else None, references=list(refs),
        projection=_check_projection(d["projection"], path, metrics) if "projection" in d else None,
    )


def default_rules_dir() -> Path:
    """The rules shipped with msdiag: rules/ of a checkout, or msdiag._rules of a wheel install."""
    from msdiag.resources import resource_dir

    return resource_dir("rules")


def load_rules(
    extra_dirs: Iterable[str | Path] = (), metrics: set[str] | None = None, cache: str | Path | None = None
) -> dict[str, Rule]:
    """The built-in rules, then each extra folder's (a rule with the same id overrides).

    With ``cache`` (a folder), a rule file whose text was validated before against the same metric ids
    is taken from there (:class:`_ParsedRules`) instead of being parsed again.
    """
    from msdiag.metrics.registry import all_metrics

    known = metrics if metrics is not None else set(all_metrics())
    kept = _ParsedRules(Path(cache), known) if cache is not None else None
    rules: dict[str, Rule] = {}
    for d in [default_rules_dir(), *map(Path, extra_dirs)]:
        files = sorted(Path(d).glob("*.yaml")) + sorted(Path(d).glob("*.yml"))
        seen: dict[str, str] = {}
        for f in files:
            r = kept.rule(f) if kept is not None else parse_rule(f, known)
            if r.id in seen:
                raise RuleError(f, f"rule id '{r.id}' is also defined in {seen[r.id]}")
            seen[r.id] = str(f)
            rules[r.id] = r
    if kept is not None:
        kept.save()
    return rules


def apply_overrides(rules: dict[str, Rule], overrides: Mapping[str, str], where: str = "--set") -> dict[str, dict[str, float]]:
    """Parameter values per rule: defaults, then ``--set RULE.PARAM=VALUE`` (validated; errors name ``where``)."""
    values = {rid: {p.name: p.default for p in r.params.values()} for rid, r in rules.items()}
    for key, raw in overrides.items():
        rid, _, pname = key.partition(".")
        if rid not in rules:
            raise RuleError(where, f"unknown rule '{rid}' in {key}={raw}")
        r = rules[rid]
        if pname not in r.params:
            known = ", ".join(sorted(r.params)) or "none"
            raise RuleError(where, f"rule '{rid}' has no parameter '{pname}' (it has: {known})")
        try:
            v = float(raw)
        except ValueError:
            raise RuleError(where, f"{key}={raw}: the value must be a number") from None
        lo, hi = r.params[pname].bounds
        if not lo <= v <= hi:
            raise RuleError(where, f"{key}={raw}: outside the parameter's bounds [{lo}, {hi}]")
        values[rid][pname] = v
    return values


# ---- parsed rules kept between runs -------------------------------------------------------------

#: Bumped whenever Rule or what _validate builds changes: part of the key of every kept rule.
RULES_CACHE_VERSION = 1
#: Rules kept in one cache file (the built-in ones and a few extra folders' worth).
MAX_KEPT_RULES = 256


def _rule_doc(r: Rule) -> dict[str, Any]:
    """A Rule as JSON (Param as a list of its fields)."""
    doc = dict(r.__dict__)
    doc["params"] = {k: [p.name, p.default, p.unit, list(p.bounds), p.doc] for k, p in r.params.items()}
    return doc


def _rule_of(doc: dict[str, Any], path: Path) -> Rule:
    """The Rule of a kept JSON doc, at ``path`` (where the file is read from in this run)."""
    d = dict(doc)
    d["params"] = {k: Param(n, float(v), u, (float(b[0]), float(b[1])), t) for k, (n, v, u, b, t) in d["params"].items()}
    d["path"] = str(path)
    return Rule(**d)


class _ParsedRules:
    """Rule files already validated, kept as JSON in ``<cache>/msdiag-rules-v<N>.json`` (data, never code).

    Parsing the YAML with line marks is most of what loading the rules costs; a rule file is the same
    rule as long as its text, msdiag's version and the metric ids it is checked against are the same,
    so that is the key (the text is still read, with every check of :func:`_read_text`, each run).
    A rule is kept only when it comes back from JSON equal to the parsed one; a cache that cannot be
    read, parsed or written is silently not used: the files are parsed as without it. A file that
    fails to load is never kept, so its RuleError is raised every run.
    """

    def __init__(self, folder: Path, metrics: set[str]) -> None:
        from msdiag import __version__

        self.file = folder / f"msdiag-rules-v{RULES_CACHE_VERSION}.json"
        self.metrics = metrics
        self.salt = json.dumps([__version__, RULES_CACHE_VERSION, sorted(metrics)]).encode()
        self.used: dict[str, Any] = {}
        self.changed = False
        try:
            kept = json.loads(self.file.read_bytes())
            self.kept: dict[str, Any] = kept if isinstance(kept, dict) else {}
        except (OSError, ValueError):
            self.kept = {}

    def rule(self, path: Path) -> Rule:
        """The rule of ``path``: the kept one for this text, else parsed and validated (then kept)."""
        text = _read_text(path)
        key = hashlib.sha256(self.salt + b"\0" + text.encode()).hexdigest()
        doc = self.kept.get(key)
        if isinstance(doc, dict):
            try:
                r = _rule_of(doc, path)
                self.used[key] = doc
                return r
            except (TypeError, ValueError, KeyError):
                pass  # not what this version writes: parsed again below
        r = _validate(_yaml_of(text, path), path, self.metrics)
        doc = _rule_doc(r)
        try:
            same = _rule_of(json.loads(json.dumps(doc)), path) == r
        except (TypeError, ValueError):
            same = False
        if same:
            self.used[key] = doc
            self.changed = True
        return r

    def save(self) -> None:
        """Write the kept rules when one was added (atomically; any failure leaves the cache as it was)."""
        if not self.changed:
            return
        keep = {**{k: v for k, v in self.kept.items() if k not in self.used}, **self.used}
        if len(keep) > MAX_KEPT_RULES:
            keep = dict(self.used)
        try:
            self.file.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            tmp = self.file.with_name(f".{self.file.name}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps(keep), encoding="utf-8")
            os.replace(tmp, self.file)
        except OSError:
            pass
