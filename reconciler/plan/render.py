"""Plans for people and machines: text (like `terraform plan`), JSON (versioned), Markdown (PR)."""

from __future__ import annotations

import json

from reconciler.plan.model import Action, Plan

GITHUB_COMMENT_LIMIT = 65536
MARKDOWN_BUDGET = 60000  # leave room for a header/footer added by the workflow

SYMBOL = {
    "cordon": "~", "checkpoint": "!", "preempt": "-", "reclaim": "-", "move": ">",
    "mig-reconfigure": "~", "set-sharing": "~", "uncordon": "~", "scale": "~",
    "quota": "+", "priority-class": "+", "label-node": "+",
}


def to_json(plan: Plan) -> str:
    data = plan.model_dump(mode="json")
    data["summary"] = plan.summary()
    data["counts"] = dict(sorted(plan.counts().items()))
    for a, src in zip(data["actions"], plan.actions, strict=True):
        a["disruptive"] = src.disruptive
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


def _line(a: Action) -> str:
    deps = f"  (after {', '.join(a.depends_on)})" if a.depends_on else ""
    return f"  {SYMBOL[a.kind]} {a.kind:<16} {a.target}\n      {a.reason}{deps}"


def _capacity_lines(plan: Plan) -> list[str]:
    out = []
    for pool, c in sorted(plan.capacity.items()):
        now = f"{c['wholeNow']} whole / {c['migNow']} MIG / {c['sharedNow']} shared"
        after = f"{c['wholeAfter']} whole / {c['migAfter']} MIG / {c['sharedAfter']} shared"
        out.append(f"  {pool}: {now}" + (f"  ->  {after}" if now != after else "  (unchanged)"))
    return out


def to_text(plan: Plan) -> str:
    lines = [plan.summary()]
    if plan.revision:
        lines.append(f"Desired revision {plan.revision[:12]}, observed at {plan.observed_at}.")
    else:
        lines.append(f"Observed at {plan.observed_at}.")
    disruptive = [a for a in plan.actions if a.disruptive]
    rest = [a for a in plan.actions if not a.disruptive]
    if disruptive:
        lines += ["", f"Disruptive actions ({len(disruptive)}), in order:"]
        lines += [_line(a) for a in disruptive]
    if rest:
        lines += ["", f"Other actions ({len(rest)}):"]
        lines += [_line(a) for a in rest]
    if plan.capacity:
        lines += ["", "GPUs by partition:"] + _capacity_lines(plan)
    if plan.findings:
        lines += ["", "Findings (not changed by this plan):"]
        lines += [f"  [{f.severity}] {f.subject}: {f.message}" for f in plan.findings]
    return "\n".join(lines) + "\n"


def _md_escape(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


def _md_table(actions: list[Action]) -> list[str]:
    rows = ["| # | action | target | reason |", "|---|---|---|---|"]
    for i, a in enumerate(actions, 1):
        rows.append(f"| {i} | `{a.kind}` | `{_md_escape(a.target)}` | {_md_escape(a.reason)} |")
    return rows


def to_markdown(plan: Plan, title: str = "gpupool plan", budget: int = MARKDOWN_BUDGET) -> str:
    """Fits a GitHub comment: summary first, details collapsed, truncated with a note if huge."""
    head = [f"### {title}", "", f"**{plan.summary()}**", ""]
    if plan.revision:
        head.append(f"Desired revision `{plan.revision[:12]}`, observed state of {plan.observed_at}.")
        head.append("")
    if plan.capacity:
        head += ["| pool | now (whole / MIG / shared) | after |", "|---|---|---|"]
        for pool, c in sorted(plan.capacity.items()):
            head.append(
                f"| {pool} | {c['wholeNow']} / {c['migNow']} / {c['sharedNow']} | {c['wholeAfter']} / {c['migAfter']} / {c['sharedAfter']} |"
            )
        head.append("")
    disruptive = [a for a in plan.actions if a.disruptive]
    rest = [a for a in plan.actions if not a.disruptive]
    body: list[str] = []
    if disruptive:
        body += [f"<details open><summary>Disruptive actions ({len(disruptive)})</summary>", ""]
        body += _md_table(disruptive) + ["", "</details>", ""]
    if rest:
        body += [f"<details><summary>Other actions ({len(rest)})</summary>", ""]
        body += _md_table(rest) + ["", "</details>", ""]
    if plan.findings:
        body += [f"<details><summary>Findings ({len(plan.findings)})</summary>", ""]
        body += [f"- **{f.severity}** `{_md_escape(f.subject)}`: {_md_escape(f.message)}" for f in plan.findings]
        body += ["", "</details>", ""]
    return fit_markdown(head, body, budget)


def fit_markdown(head: list[str], body: list[str], budget: int) -> str:
    """Join; if over budget, keep whole lines up to it and say how much was left out."""
    text = "\n".join(head + body) + "\n"
    if len(text) <= budget:
        return text
    out, size, dropped = [], 0, 0
    for line in head + body:
        if size + len(line) + 1 > budget - 400:
            dropped += 1
            continue
        out.append(line)
        size += len(line) + 1
    if any(line.startswith("<details") for line in out) and out.count("</details>") < sum(1 for x in out if x.startswith("<details")):
        out += ["", "</details>"]
    out += ["", f"> Truncated: {dropped} more lines did not fit in one comment. Run `gpupool plan --format text` for the full plan."]
    return "\n".join(out) + "\n"


RENDERERS = {"text": to_text, "json": to_json, "markdown": to_markdown}
