"""The terminal view of a training log in a report object: what the log holds, its stability metrics, and
the stability finding beside the profiling verdict (issue 18)."""

from __future__ import annotations

from typing import Any

from msdiag import fmt


def _loss_line(m: dict[str, Any], t: dict[str, Any]) -> str:
    loss = t.get("loss") or {}
    spikes = m.get("loss_spike_count")
    where = f" (steps {m['loss_spike_steps']})" if m.get("loss_spike_steps") else ""
    return (
        f"  loss: first {fmt.value(loss.get('first'), '')}, last {fmt.value(loss.get('last'), '')}, "
        f"min {fmt.value(loss.get('min'), '')}; spikes {fmt.value(spikes, '')}{where}; "
        f"NaN / inf steps {fmt.value(m.get('loss_nonfinite_steps'), '')}"
    )


def _optim_line(m: dict[str, Any]) -> str | None:
    parts = []
    if m.get("lr_peak") is not None:
        w = m.get("lr_warmup_steps")
        parts.append(f"peak lr {m['lr_peak']:.3g}, warm-up " + (f"{w} steps" if w else "none"))
    if m.get("grad_norm_spike_count") is not None:
        parts.append(f"grad-norm spikes {m['grad_norm_spike_count']}")
    if m.get("overflow_share") is not None:
        parts.append(f"overflow {fmt.pct(m['overflow_share'])} of steps")
    if m.get("loss_scale_min") is not None:
        parts.append(f"loss scale min {m['loss_scale_min']:g} ({m.get('loss_scale_drops')} drops)")
    return "  " + "; ".join(parts) if parts else None


def _time_line(m: dict[str, Any], t: dict[str, Any]) -> str | None:
    if m.get("train_step_time_ms") is None:
        return None
    line = f"  step time ({t.get('step_time_from')}): median {fmt.value(m['train_step_time_ms'], 'ms')}"
    if m.get("slow_step_period") is not None:
        named = m.get("checkpoint_stall_named")
        why = f", {fmt.pct(named)} after a save / evaluation the log names" if named is not None else "; the log does not name what they do"
        line += (
            f"; every {m['slow_step_period']} steps a slow step ({m.get('checkpoint_stall_steps')} steps, "
            f"{fmt.value(m.get('checkpoint_stall_ms'), 'ms')} over the median: {fmt.pct(m.get('checkpoint_stall_share'))} of the logged time{why})"
        )
    if m.get("throughput_drift") is not None:
        line += f"; throughput drift {100 * m['throughput_drift']:+.1f}%"
    return line


def render_lines(report: dict[str, Any]) -> list[str]:
    """Lines for the text report; none without a training log."""
    t = report.get("training_log")
    if not t:
        return []
    m = report.get("metrics") or {}
    ranks = ", ".join(map(str, t.get("ranks") or []))
    out = [
        f"\nTraining log ({', '.join(t.get('format_labels') or [])}): {t['steps']} step(s) {t['first_step']}-{t['last_step']}, "
        f"rank(s) {ranks}",
        _loss_line(m, t),
    ]
    out.extend(x for x in (_optim_line(m), _time_line(m, t)) if x)
    if m.get("rank_loss_spread") is not None:
        out.append(f"  ranks' losses differ by {fmt.pct(m['rank_loss_spread'])} of their median (median step)")
    s = t.get("stability") or {}
    verdict = report.get("verdict") or {}
    if s and verdict.get("bottleneck") not in ("stability", "stable"):  # beside a profiling verdict
        out.append(f"  Stability: {s.get('sentence')}")
    return out
