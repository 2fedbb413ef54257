"""Plans for people and machines: text (like `terraform plan`), JSON (versioned), Markdown (PR).

Every renderer's output encodes as UTF-8, whatever a name in the snapshot holds: JSON escapes
what it cannot carry (`\\ud800`), and text and Markdown write it the same way (`printable`)."""

from __future__ import annotations

import json

from reconciler.plan.actions import Action
from reconciler.plan.model import Plan

GITHUB_COMMENT_LIMIT = 65536
MARKDOWN_BUDGET = 60000  # leave room for a header/footer added by the workflow

SYMBOL = {
    "cordon": "~",
    "checkpoint": "!",
    "preempt": "-",
    "reclaim": "-",
    "move": ">",
    "mig-reconfigure": "~",
    "set-sharing": "~",
    "partition-change": "~",
    "uncordon": "~",
    "scale": "~",
    "scale-envelope": "~",
    "admit": "+",
    "resume": "+",
    "hold": "=",
    "quota": "+",
    "priority-class": "+",
    "prune-quota": "-",
    "prune-priority-class": "-",
    "label-node": "+",
    "kueue-object": "+",
    "prune-kueue-object": "-",
    "dra-object": "+",
    "prune-dra-object": "-",
    "taint-device": "~",
}


def printable(text: str) -> str:
    """`text` as UTF-8 can carry it: a character it cannot encode (a lone surrogate, which a
    JSON snapshot can spell `"\\ud800"` in a name) is written as its escape (`\\ud800`), so
    printing or posting a plan never fails on a name. `text` itself when it encodes."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def to_json(plan: Plan) -> str:
    """Versioned JSON (`format_version`) that `Plan.model_validate_json` reads back unchanged."""
    return json.dumps(plan.model_dump(mode="json"), indent=2, sort_keys=True) + "\n"


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
    lines = [plan.summary]
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
    return printable("\n".join(lines) + "\n")


def _md_escape(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


def _md_table(actions: list[Action]) -> list[str]:
    rows = ["| # | action | target | reason |", "|---|---|---|---|"]
    for i, a in enumerate(actions, 1):
        rows.append(f"| {i} | `{a.kind}` | `{_md_escape(a.target)}` | {_md_escape(a.reason)} |")
    return rows


def to_markdown(plan: Plan, title: str = "gpupool plan", budget: int = MARKDOWN_BUDGET) -> str:
    """Fits a GitHub comment: summary first, details collapsed, truncated with a note if huge."""
    head = [f"### {title}", "", f"**{plan.summary}**", ""]
    if plan.revision:
        head.append(
            f"Desired revision `{plan.revision[:12]}`, observed state of {plan.observed_at}."
        )
        head.append("")
    if plan.capacity:
        head += ["| pool | now (whole / MIG / shared) | after |", "|---|---|---|"]
        for pool, c in sorted(plan.capacity.items()):
            head.append(
                f"| {pool} | {c['wholeNow']} / {c['migNow']} / {c['sharedNow']} "
                f"| {c['wholeAfter']} / {c['migAfter']} / {c['sharedAfter']} |"
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
        body += [
            f"- **{f.severity}** `{_md_escape(f.subject)}`: {_md_escape(f.message)}"
            for f in plan.findings
        ]
        body += ["", "</details>", ""]
    return fit_markdown(head, body, budget)


def fit_markdown(head: list[str], body: list[str], budget: int) -> str:
    """Join; if over budget, keep whole lines up to it and say how much was left out. What
    UTF-8 cannot carry is escaped first (`printable`), so the budget counts what is posted."""
    head, body = [printable(x) for x in head], [printable(x) for x in body]
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
    if any(line.startswith("<details") for line in out) and out.count("</details>") < sum(
        1 for x in out if x.startswith("<details")
    ):
        out += ["", "</details>"]
    out += [
        "",
        (
            f"> Truncated: {dropped} more lines did not fit in one comment. "
            "Run `gpupool plan --format text` for the full plan."
        ),
    ]
    return "\n".join(out) + "\n"


RENDERERS = {"text": to_text, "json": to_json, "markdown": to_markdown}


# --------------------------------------------------------------------------- change reports


def change_to_json(report) -> str:
    data = report.model_dump(mode="json")
    data["summary"] = report.summary()
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


def _rev(r: str | None) -> str:
    return r[:12] if r else "working tree"


def change_to_text(report) -> str:
    lines = [
        report.summary(),
        f"Base {_rev(report.base_revision)} -> head {_rev(report.head_revision)}; head is valid.",
        "",
    ]
    if report.replay is not None:
        lines += [report.replay.line(), ""]
    if report.gates:
        lines.append("Safety gates tripped:")
        lines += [f"  ! {g}" for g in report.gates]
        lines.append("")
    lines.append("GPUs by partition after planning (whole / MIG / shared):")
    for pool, c in sorted(report.capacity.items()):
        b, h, d = c["base"], c["head"], c["delta"]
        lines.append(
            f"  {pool}: {b['whole']}/{b['mig']}/{b['shared']} "
            f"-> {h['whole']}/{h['mig']}/{h['shared']}"
            f"  (whole {d['whole']:+d}, MIG {d['mig']:+d}, shared {d['shared']:+d})"
        )
    if report.policy_changes:
        lines += ["", "Policy changes:"] + [f"  {c}" for c in report.policy_changes]
    if report.quota_changes or report.quota_notes:
        lines += ["", "Quota objects:"]
        for key, diff in sorted(report.quota_changes.items()):
            lines.append(
                f"  {key}: "
                + (
                    ", ".join(f"{r} {a or '-'} -> {b or '-'}" for r, (a, b) in diff.items())
                    or "created/deleted"
                )
            )
            why = report.quota_reasons.get(key, {})
            if len(set(why.values())) == 1:  # one cause for the object (pruned, kept empty)
                lines.append(f"      {next(iter(why.values()))}")
            else:
                lines += [f"      {r + ': ' if r else ''}{w}" for r, w in why.items() if w]
            if key in report.quota_notes:
                lines.append(f"      {report.quota_notes[key]}")
        lines += [
            f"  {key}: {note}"
            for key, note in sorted(report.quota_notes.items())
            if key not in report.quota_changes
        ]
    if report.repartitions:
        lines += ["", f"Repartitioned GPUs ({len(report.repartitions)}):"]
        lines += [
            f"  {r.node}/gpu{r.gpu} ({r.pool}): {r.base} -> {r.head}" for r in report.repartitions
        ]
    if report.disruptions:
        lines += ["", f"Workloads disrupted ({len(report.disruptions)}):"]
        lines += [f"  {d.kind:<8} {d.workload}: {d.reason}" for d in report.disruptions]
    if report.drained_nodes:
        lines += ["", "Nodes drained: " + ", ".join(report.drained_nodes)]
    lines += ["", f"Base plan: {report.base_summary}", f"Head plan: {report.head_summary}"]
    return printable("\n".join(lines) + "\n")


def change_to_markdown(
    report, title: str = "gpupool plan for this change", budget: int = MARKDOWN_BUDGET
) -> str:
    icon = ":no_entry:" if report.gates else ":white_check_mark:"
    head = [
        f"### {title}",
        "",
        f"{icon} **{report.summary()}**",
        "",
        (
            f"Base `{_rev(report.base_revision)}` → head `{_rev(report.head_revision)}`. "
            "The head revision is valid."
        ),
        "",
    ]
    if report.replay is not None:
        head += [_md_escape(report.replay.line("→", markdown=True)), ""]
    if report.gates:
        head += (
            ["**Safety gates tripped** (the change is refused):", ""]
            + [f"- {_md_escape(g)}" for g in report.gates]
            + [""]
        )
    head += [
        "| pool | base (whole / MIG / shared) | head | Δ whole | Δ MIG | Δ shared |",
        "|---|---|---|---|---|---|",
    ]
    for pool, c in sorted(report.capacity.items()):
        b, h, d = c["base"], c["head"], c["delta"]
        head.append(
            f"| {pool} | {b['whole']} / {b['mig']} / {b['shared']} "
            f"| {h['whole']} / {h['mig']} / {h['shared']} "
            f"| {d['whole']:+d} | {d['mig']:+d} | {d['shared']:+d} |"
        )
    head.append("")
    body = _change_details(report)
    body += [f"Base plan: {report.base_summary}  ", f"Head plan: {report.head_summary}", ""]
    return fit_markdown(head, body, budget)


def _change_details(report) -> list[str]:
    """The change report's collapsible sections: disruptions, repartitions, quota objects,
    policy fields."""
    body: list[str] = []
    if report.disruptions:
        body += [
            f"<details open><summary>Workloads disrupted ({len(report.disruptions)})</summary>",
            "",
            "| workload | action | reason |",
            "|---|---|---|",
        ]
        body += [
            f"| `{d.workload}` | `{d.kind}` | {_md_escape(d.reason)} |" for d in report.disruptions
        ]
        body += ["", "</details>", ""]
    if report.repartitions:
        body += [
            f"<details open><summary>GPUs repartitioned ({len(report.repartitions)})</summary>",
            "",
            "| node | GPU | before | after |",
            "|---|---|---|---|",
        ]
        body += [f"| `{r.node}` | {r.gpu} | {r.base} | {r.head} |" for r in report.repartitions]
        body += ["", "</details>", ""]
    if report.quota_changes or report.quota_notes:
        n = len(report.quota_changes)
        body += [f"<details><summary>Quota objects ({n} changed)</summary>", ""]
        if report.quota_changes:
            body += [
                "| object | resource | base | head | from |",
                "|---|---|---|---|---|",
            ]
        for key, diff in sorted(report.quota_changes.items()):
            why = report.quota_reasons.get(key, {})
            for r, (a, b) in diff.items():
                body.append(
                    f"| `{key}` | `{r}` | {a or '—'} | {b or '—'} | {_md_escape(why.get(r, ''))} |"
                )
        if report.quota_notes:
            body += [""] if report.quota_changes else []
            body += [
                f"- `{key}`: {_md_escape(note)}" for key, note in sorted(report.quota_notes.items())
            ]
        body += ["", "</details>", ""]
    if report.policy_changes:
        body += [
            f"<details><summary>Policy fields changed ({len(report.policy_changes)})</summary>",
            "",
        ]
        body += [f"- `{_md_escape(c)}`" for c in report.policy_changes] + ["", "</details>", ""]
    return body


CHANGE_RENDERERS = {"text": change_to_text, "json": change_to_json, "markdown": change_to_markdown}
