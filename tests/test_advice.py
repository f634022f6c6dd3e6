"""Issue 14, advice follows the cause: comm-exposed suggests bucket fusion or compression only when
moving data is a real part of the collective time, and points to the late or uncaptured rank instead
when the wait is for one."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from msdiag.analysis import Analysis
from msdiag.contract import build
from msdiag.rules.engine import evaluate_rule
from msdiag.rules.loader import apply_overrides, load_rules

RULES = load_rules()
RULE = RULES["comm-exposed"]
PARAMS = apply_overrides({RULE.id: RULE}, {})[RULE.id]


def _apis(metrics: dict[str, Any]) -> list[str]:
    """The api lines of comm-exposed's suggestions on these metrics (the rule must fire)."""
    o = evaluate_rule(RULE, metrics, PARAMS)
    assert o.status == "fired"
    return [str(s.get("api", "")) for s in o.suggestions or []]


def _fusion(apis: list[str]) -> bool:
    return any("comm_fusion" in a for a in apis)


def _compression(apis: list[str]) -> bool:
    return any("gradient_fp32_sync" in a for a in apis)


def test_fusion_when_transfer_is_a_real_cost() -> None:
    # 60% of collective time moves data, nothing idle or late: fusion and FP16 reduction both apply
    apis = _apis({"communication_exposed_share": 0.2, "step_time_us": 1e5, "comm_transit_share": 0.6,
                  "comm_idle_share": 0.1, "sync_wait_share": 0.05})
    assert _fusion(apis) and _compression(apis)


def test_no_fusion_when_transfer_is_a_few_percent() -> None:
    # 4% transit (level1's order), not idle-dominated: below min_transit 10%, so neither suggestion
    apis = _apis({"communication_exposed_share": 0.4, "step_time_us": 1e5, "comm_transit_share": 0.04,
                  "comm_idle_share": 0.1, "sync_wait_share": 0.05})
    assert not _fusion(apis) and not _compression(apis)


def test_fusion_kept_when_transit_not_recorded() -> None:
    # Level0 captures have no communication.json: without a transit figure the advice is not withdrawn
    assert _fusion(_apis({"communication_exposed_share": 0.4, "step_time_us": 1e5}))


def test_uncaptured_wait_points_to_comm_wait_uncaptured() -> None:
    # 12 ms per step waiting for ranks outside the capture (> 5 ms): that cause replaces fusion/compression
    apis = _apis({"communication_exposed_share": 0.2, "step_time_us": 1e5, "comm_transit_share": 0.6,
                  "uncaptured_wait_ms_per_step": 12.0})
    assert "msdiag rules explain comm-wait-uncaptured" in apis
    assert not _fusion(apis) and not _compression(apis)


def test_late_rank_points_to_comm_slow_rank() -> None:
    # rank 1 voted late arriver: the finding names it and drops the network advice
    o = evaluate_rule(RULE, {"communication_exposed_share": 0.2, "step_time_us": 1e5,
                             "comm_transit_share": 0.6, "slow_rank": 1}, PARAMS)
    apis = [str(s.get("api", "")) for s in o.suggestions or []]
    assert "msdiag rules explain comm-slow-rank" in apis
    assert any("rank 1 arrives late" in str(s["action"]) for s in o.suggestions or [])
    assert not _fusion(apis) and not _compression(apis)


def test_level1_no_fusion_or_compression_advice(corpus: Path, analysed: Callable[[str], Analysis]) -> None:
    # level1 (ascend/torchnpu-2rank-level1): communication.json gives transit ~3.7% of collective time
    # (rank 0 3.5%, rank 1 3.8%); comm-exposed fires (74% exposed) but suggests neither bucket fusion
    # (comm_fusion) nor FP16 gradient reduction (gradient_fp32_sync)
    r = build(analysed("ascend/torchnpu-2rank-level1"))
    assert 0.03 < r["metrics"]["comm_transit_share"] < 0.05
    exposed = [f for f in r["findings"] if f["rule_id"] == "comm-exposed"]
    assert exposed
    apis = [str(s.get("api", "")) for s in exposed[0]["suggestions"]]
    assert not _fusion(apis) and not _compression(apis)
    # the captured ranks 0-1 wait ~96 ms per step for ranks 2-7 (not captured): the finding points there
    assert r["metrics"]["ranks_not_captured"] == "2-7"
    assert "msdiag rules explain comm-wait-uncaptured" in apis
