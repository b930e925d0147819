"""The normaliser's output, byte for byte, on the simulator's results for a few hundred targets of
every kind (issue 49: the normaliser was made cheaper without changing what it writes).

Each target's result goes through every path a stored result takes: normalised with its owner
(finding ids that follow their items, D26), normalised again as stored (with feedback on a
finding), without an owner (ids of scan and path), merged with a re-run of some of its sources,
and roughened (repeated, unknown and badly typed sources, timestamps with offsets, evidence on
dropped or unknown items). The digest of those outputs per target is kept in
``results_golden.json``; a rule of the result that changes on purpose writes it again:
``python -m tests.unit.test_results_golden``.
"""
from __future__ import annotations

import copy
import hashlib
import json
import logging
import random
from pathlib import Path

import pytest

from app.plumbing import runtime
from app.scans import results
from app.tracking.simulated.results import result_for

GOLDEN = Path(__file__).with_name("results_golden.json")
SECRET_KEY = "golden-secret-key"  # finding ids are keyed (D26): a fixed key, fixed ids
ARTIFACTS = "http://127.0.0.1:8700/_sim/artifacts/inv_golden"
CHECKED_AT = ("2026-11-22T12:05:00Z", "2026-11-22T13:05:00+01:00", "2026-11-22T12:05:00", None, "not a time")
PER_KIND = 120


def targets() -> list[tuple[str, str]]:
    """A few hundred targets of each kind, always the same; one in six asks the simulator for a
    partial result (some sources failed)."""
    out = []
    for i in range(PER_KIND):
        partial = "partial." if i % 6 == 3 else ""
        out.append(("email", f"{partial}person.{i}@example.com" if i % 7 else f"Person.{i}@Example.COM"))
        out.append(("phone", f"+1415{i:03d}7777" if partial else f"+1415555{1000 + i:04d}" if i % 2
                    else f"+44770090{i:04d}"))
        out.append(("username", f"{partial}user_{i}" if i % 5 else f"@User{i}"))
    return out


def roughened(raw: dict, rng: random.Random) -> dict:
    """``raw`` with the flaws an engine's explanation may have, drawn from ``rng``."""
    raw = copy.deepcopy(raw)
    sources = raw.get("sources") or []
    if sources:
        sources.append({**rng.choice(sources), "status": "found"})  # a repeated id: the first wins
        sources.append({"id": 42, "name": "", "status": "exploded", "checked_at": "2026-11-22T12:05:00.123456+05:30",
                        "latency_ms": 12.7})
        sources.append({"id": True, "name": "bool", "status": "found"})
        sources.append({"id": "  padded  ", "name": "  Padded  ", "status": "skipped", "reason": "quarantined",
                        "latency_ms": -1})
        sources.append({"id": "x" * 80, "name": "n" * 300, "status": "timeout", "latency_ms": float("inf")})
        sources.append("not a source")
        rng.shuffle(sources)
    contacts = raw.setdefault("contacts", {})
    contacts["emails"] = ["not an e-mail", *contacts.get("emails", []), 7]  # moves every e-mail's index
    contacts["phones"] = ["+44 (7700) 900-123", *contacts.get("phones", []), "12"]
    evidence = raw.get("evidence") or []
    evidence += [{"path": " contacts.emails[0] ", "source_ids": ["gravatar", 42, None, "unknown_source"]},
                 {"path": "contacts.emails[1]", "source_ids": ["mailbox_verifier"], "confidence": 2,
                  "matched_on": ["email", "email", "bogus", 3]},
                 {"path": "profiles.verified[99]", "source_ids": ["github"]},
                 {"path": "nowhere[0]", "source_ids": ["github"]},
                 {"path": "breaches[0]", "source_ids": "breach_index"},
                 "not evidence"]
    raw["evidence"] = evidence
    if rng.random() < 0.5:
        raw.setdefault("risk", {})["reasons"] = [
            {"code": " breaches ", "points": raw.get("risk", {}).get("score", 0), "description": " all ",
             "paths": ["contacts.emails[1]", "contacts.emails[1]"]}]
    return raw


def outputs(kind: str, target: str, index: int) -> list:
    """What each path makes of the target's result (``"invalid: ..."`` where it refuses it)."""
    owner = results.Owner(f"cus_{index % 4}", kind, target)
    scan_id = f"scn_golden_{index}"
    raw = result_for(kind, target, ARTIFACTS, checked_at=CHECKED_AT[index % len(CHECKED_AT)])
    fresh = results.normalize_result(copy.deepcopy(raw), kind, scan_id=scan_id, owner=owner)
    stored = json.loads(json.dumps(fresh))
    if stored["findings"]:
        stored["findings"][index % len(stored["findings"])]["feedback"] = {
            "verdict": ("confirmed", "false_positive")[index % 2], "note": " seen ", "at": "2026-11-20T10:00:00+02:00",
            "scan_id": "scn_earlier"}
    again = results.normalize_result(stored, kind, scan_id=scan_id, owner=owner, stored=True)
    without_owner = results.normalize_result(copy.deepcopy(raw), kind, scan_id=scan_id)
    asked = [s["id"] for s in fresh["sources"][: 1 + index % 3]]
    rerun_raw = result_for(kind, target, ARTIFACTS, sources=asked, checked_at=CHECKED_AT[0], generation=1 + index % 2)
    rerun = results.normalize_result(rerun_raw, kind, scan_id=f"scn_rerun_{index}", owner=owner)
    merged = results.merge_rerun(json.loads(json.dumps(fresh)), rerun, scan_id)
    try:
        rough = results.normalize_result(roughened(raw, random.Random(index)), kind, scan_id=scan_id, owner=owner)
    except results.InvalidResult as exc:
        rough = f"invalid: {exc}"
    return [fresh, again, without_owner, rerun, merged, rough]


def digests() -> dict[str, str]:
    """Each target's outputs as the SHA-256 of their compact JSON (the stored form)."""
    logging.getLogger(results.__name__).disabled = True  # dropped reasons are logged, one line each
    try:
        return {f"{kind}:{target}": hashlib.sha256(json.dumps(outputs(kind, target, i), separators=(",", ":"))
                                                   .encode()).hexdigest()
                for i, (kind, target) in enumerate(targets())}
    finally:
        logging.getLogger(results.__name__).disabled = False


@pytest.fixture
def secret(monkeypatch):
    monkeypatch.setitem(runtime.config, "SECRET_KEY", SECRET_KEY)


def test_the_normaliser_writes_what_it_always_wrote(secret):
    expected = json.loads(GOLDEN.read_text())
    actual = digests()
    assert actual.keys() == expected.keys()
    changed = [name for name in expected if actual[name] != expected[name]]
    assert not changed, f"{len(changed)} of {len(expected)} targets normalise differently, e.g. {changed[:3]}"


def test_the_golden_outputs_cover_every_path(secret):
    """The cases exercise what they are meant to: finding ids, feedback kept, merges, roughened
    sources, and results whose reasons are dropped."""
    kinds, feedback, partial, dropped_reasons = set(), 0, 0, 0
    for i, (kind, target) in enumerate(targets()[:60]):
        fresh, again, _, _, merged, rough = outputs(kind, target, i)
        kinds.add(kind)
        assert fresh["findings"] and fresh["sources"] and isinstance(rough, dict)
        feedback += any(f["feedback"] for f in again["findings"])
        partial += fresh["partial"]
        dropped_reasons += not rough["risk"]["reasons"]
        assert {s["id"] for s in rough["sources"]} >= {"42", "padded"}
        assert len(merged["findings"]) >= len(fresh["findings"])
    assert kinds == {"email", "phone", "username"}
    assert feedback == 60 and partial and dropped_reasons


if __name__ == "__main__":
    runtime.config["SECRET_KEY"] = SECRET_KEY
    GOLDEN.write_text(json.dumps(digests(), indent=0, sort_keys=True) + "\n")
    print(f"wrote {GOLDEN}")
