"""The smaller references: every reason code with what to do (``REASON_DOCS`` and
``reasons.yaml`` beside this file) and every alert of ``alerts.yaml``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from docs.hooks.tables import cell, code, table

__all__ = ["GUIDANCE", "alerts_reference", "reason_rows", "reasons_reference"]

GUIDANCE = Path(__file__).with_name("reasons.yaml")


class MissingGuidance(ValueError):
    """A reason code without its "what to do", or guidance for a code that does not exist."""


def reason_rows() -> list[tuple[str, str, str]]:
    """``(reason, meaning, what to do)`` for every reason code, in the code's order."""
    from envcheck.core.results import REASON_DOCS, Reason

    guidance: dict[str, str] = yaml.safe_load(GUIDANCE.read_text(encoding="utf-8"))
    codes = [str(r) for r in Reason]
    missing = [c for c in codes if c not in guidance]
    unknown = [c for c in guidance if c not in codes]
    if missing or unknown:
        raise MissingGuidance(f"{GUIDANCE}: no guidance for {missing or 'none'}; "
                              f"guidance for unknown codes {unknown or 'none'}")
    return [(str(r), REASON_DOCS[r], guidance[str(r)]) for r in Reason]


def reasons_reference() -> str:
    # The meaning as REASON_DOCS says it, word for word; the guidance is Markdown as written.
    rows = [[f"`{reason}`", meaning.replace("|", r"\|"), todo.replace("|", r"\|")]
            for reason, meaning, todo in reason_rows()]
    return table(["reason", "meaning", "what to do"], rows)


def _alerts(root: Path) -> list[tuple[str, dict[str, Any]]]:
    doc = yaml.safe_load((root / "alerts.yaml").read_text(encoding="utf-8"))
    return [(group["name"], rule) for group in doc["groups"] for rule in group["rules"]
            if "alert" in rule]


def alerts_reference(root: Path) -> str:
    out = []
    group_seen = None
    for group, rule in _alerts(root):
        if group != group_seen:
            out.append(f"## {group}\n")
            group_seen = group
        notes = rule.get("annotations", {})
        out.append(f"### {rule['alert']}\n")
        facts = [["severity", cell(rule.get("labels", {}).get("severity", ""))],
                 ["for", code(rule.get("for", "0s"))]]
        if "keep_firing_for" in rule:
            facts.append(["keep firing for", code(rule["keep_firing_for"])])
        facts.append(["summary", cell(notes.get("summary", ""))])
        out.append(table(["", ""], facts))
        out.append("```promql\n" + str(rule["expr"]).rstrip() + "\n```\n")
        if notes.get("description"):
            out.append(" ".join(str(notes["description"]).split()) + "\n")
    return "\n".join(out)
