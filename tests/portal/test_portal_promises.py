"""What the portal promises a person (issue 38): each role sees only the forms it may send, a
partial scan is re-run from its page and linked to its re-runs, the scans list shows risk, the
score's reasons name their findings, counts are told apart, a phone profile agrees with its
carrier source, key names in the activity log, one time format, an invitation a newcomer reads."""
from __future__ import annotations

import re

import pytest

from app.accounts import portal_roles as roles
from app.accounts.models import ApiKey, Customer, PortalUser
from app.activity.models import DEFAULT_PARTITION, ActivityEntry
from app.activity.statements import entries as activity_store
from app.extensions import db
from app.plumbing.models import utcnow
from app.scans.models import Scan
from app.scans.results import normalize_result
from app.tracking import states
from app.tracking.simulated.results import result_for
from tests.api.helpers import engine_mode
from tests.portal.helpers import csrf, login

FORM_RE = re.compile(r'<form[^>]*method="post"[^>]*action="([^"]+)"')


def create(client, account, target):
    response = client.post("/api/v1/scan", json={"target": target}, headers=account.headers)
    assert response.status_code == 202, response.get_json()
    return response.get_json()["scan_id"]


def complete(scan_id) -> dict:
    with db.connection_context():
        scan = Scan.get_by_id(scan_id)
        raw = result_for(scan.kind, scan.target, "https://artifacts.example/inv_1", messy=False,
                         checked_at="2026-11-21T12:01:00Z")
        result = normalize_result(raw, scan.kind, scan_id=scan_id)
        assert states.complete(scan_id, result)
    return result


def text(response) -> str:
    return response.get_data(as_text=True)


def test_each_role_sees_only_the_forms_its_role_may_send(app, client, portal_account, role_clients):
    scan_id = create(client, portal_account, "partial.jane@example.com")
    complete(scan_id)
    clients = role_clients(portal_account)
    pages = (f"/app/scans/{scan_id}", f"/app/api-keys/{portal_account.key.id}", "/app/scans", "/app/activity",
             "/app/usage", "/app/api-keys")
    adapter = app.url_map.bind("localhost")
    shown: dict[str, set[str]] = {}
    for role, role_client in clients.items():
        shown[role] = set()
        for path in pages:
            page = role_client.get(path)
            assert page.status_code == 200, (role, path)
            for action in FORM_RE.findall(text(page)):
                endpoint, _ = adapter.match(action.split("#")[0], method="POST")  # a fragment stays in the browser
                permission = app.view_functions[endpoint].portal_permission
                assert permission == "public" or roles.allows(role, permission), \
                    f"{role} is shown a form of {endpoint} ({permission}) on {path}"
                shown[role].add(endpoint)
    # Not vacuous: the forms are there for the roles that may send them.
    assert {"portal.finding_feedback", "portal.erase_scan", "portal.rerun_scan"} <= shown[roles.DEVELOPER]
    assert "portal.save_access" in shown[roles.ADMIN] and "portal.save_access" not in shown[roles.DEVELOPER]
    # A viewer's only forms: logging out and the searches (posted so that a target is never in an address).
    assert shown[roles.VIEWER] - {"portal.logout"} <= {"portal.scans", "portal.activity_log", "portal.activity_csv"}
    assert "portal.logout" in shown[roles.VIEWER]
    viewer_scan = text(clients[roles.VIEWER].get(f"/app/scans/{scan_id}"))
    assert "Not this person</button>" not in viewer_scan and "Erase this scan" not in viewer_scan
    assert "A developer, admin or owner can re-run it here" in viewer_scan


def test_a_partial_scan_is_rerun_from_its_page_and_each_links_the_other(client, portal_account):
    original = create(client, portal_account, "partial.jane@example.com")
    complete(original)
    with db.connection_context():
        before = Customer.get_by_id(portal_account.id).balance
    login(client)
    page = text(client.get(f"/app/scans/{original}"))
    assert "Re-run the sources that did not answer" in page and "Re-runs" not in page
    response = client.post(f"/app/scans/{original}/rerun", data={"csrf_token": csrf(client, f"/app/scans/{original}")},
                           headers={"X-Request-Id": "req_portal_rerun"})
    assert response.status_code == 302
    rerun = response.headers["Location"].rsplit("/", 1)[-1]
    assert rerun.startswith("scn_") and rerun != original
    with db.connection_context():
        made = Scan.get_by_id(rerun)
        assert (made.rerun_of, made.api_key_id, made.target) == (original, portal_account.key.id,
                                                                 "partial.jane@example.com")
        assert Customer.get_by_id(portal_account.id).balance == before - 1  # charged as a creation
        # One entry, written with the charge, naming the person who asked (not a key).
        (entry,) = ActivityEntry.select().where(ActivityEntry.action == "scan.rerun")
        user = PortalUser.get(PortalUser.email == "ops@acme.example")
        assert (entry.resource_id, entry.credits, entry.user_id, entry.user_email, entry.key_id, entry.status,
                entry.livemode, entry.client_address) == (rerun, 1, user.id, "ops@acme.example", None, 302,
                                                          True, "127.0.0.1")
        assert entry.request_id == "req_portal_rerun"
    new_page = text(client.get(f"/app/scans/{rerun}"))
    assert "Re-run queued" in new_page
    assert re.search(rf'Re-run of</dt><dd><a class="rerun-of" href="/app/scans/{original}"', new_page)
    assert f'href="/app/scans/{rerun}"' in text(client.get(f"/app/scans/{original}"))
    # Who looked this target up: the re-run asked in the portal is found by the target.
    assert rerun in text(client.post("/app/activity", data={"csrf_token": csrf(client, "/app/activity"),
                                                            "target": "partial.jane@example.com",
                                                            "action": "scan.rerun"}))


def rerun_entries(account) -> list[ActivityEntry]:
    return list(ActivityEntry.select().where(ActivityEntry.customer_id == account.id,
                                             ActivityEntry.action == "scan.rerun"))


@pytest.mark.config(PROPAGATE_EXCEPTIONS=False)  # the answer a person gets, not the test's exception
def test_a_rerun_whose_entry_cannot_be_written_is_neither_charged_nor_made(client, portal_account):
    """The entry is written in the admission's transaction: when no partition can take it, the
    re-run fails whole (no scan, no charge), not a charge whose entry is lost."""
    original = create(client, portal_account, "partial.jane@example.com")
    complete(original)
    login(client)
    token = csrf(client, f"/app/scans/{original}")
    with db.connection_context():
        before = (Customer.get_by_id(portal_account.id).balance, Scan.select().count())
        for day in activity_store.day_partitions():
            activity_store.drop_day_partition(day)
        db.execute_sql(f'ALTER TABLE "activity_entry" DETACH PARTITION "{DEFAULT_PARTITION}"')
    try:
        response = client.post(f"/app/scans/{original}/rerun", data={"csrf_token": token})
    finally:
        with db.connection_context():
            db.execute_sql(f'ALTER TABLE "activity_entry" ATTACH PARTITION "{DEFAULT_PARTITION}" DEFAULT')
    assert response.status_code == 500
    with db.connection_context():
        assert (Customer.get_by_id(portal_account.id).balance, Scan.select().count()) == before
        assert not Scan.select().where(Scan.rerun_of == original).exists()
        assert rerun_entries(portal_account) == []


def test_a_rerun_the_engine_refuses_has_one_entry_that_cost_nothing(client, portal_account, simulator):
    """The entry written with the charge is refunded with it; the audit writes no second one."""
    original = create(client, portal_account, "partial.jane@example.com")
    complete(original)
    login(client)
    token = csrf(client, f"/app/scans/{original}")
    with db.connection_context():
        before = Customer.get_by_id(portal_account.id).balance
    engine_mode(simulator, "down")
    try:
        response = client.post(f"/app/scans/{original}/rerun", data={"csrf_token": token}, follow_redirects=True)
    finally:
        engine_mode(simulator, "up")
    assert "Re-run refused" in text(response)
    with db.connection_context():
        assert Customer.get_by_id(portal_account.id).balance == before
        assert not Scan.select().where(Scan.rerun_of == original).exists()
        assert [(e.credits, e.status, e.user_email) for e in rerun_entries(portal_account)] == [
            (0, 302, "ops@acme.example")]


@pytest.mark.parametrize("change", [{"revoked_at": "now"}, {"scopes": ["scans:read"]}], ids=["revoked", "narrowed"])
def test_a_rerun_with_a_key_that_may_no_longer_create_is_refused(client, portal_account, change):
    original = create(client, portal_account, "partial.jane@example.com")
    complete(original)
    login(client)
    token = csrf(client, f"/app/scans/{original}")
    with db.connection_context():
        values = {name: utcnow() if value == "now" else value for name, value in change.items()}
        ApiKey.update(**values).where(ApiKey.id == portal_account.key.id).execute()
        scans = Scan.select().count()
    response = client.post(f"/app/scans/{original}/rerun", data={"csrf_token": token}, follow_redirects=True)
    assert "Re-run refused: the API key that created this scan can no longer create scans" in text(response)
    with db.connection_context():
        assert Scan.select().count() == scans


def test_a_complete_scan_has_no_rerun_button_and_a_post_says_why(client, portal_account):
    scan_id = create(client, portal_account, "jane@example.com")
    complete(scan_id)
    login(client)
    page = text(client.get(f"/app/scans/{scan_id}"))
    assert "Re-run the sources" not in page
    answer = client.post(f"/app/scans/{scan_id}/rerun", data={"csrf_token": csrf(client, "/app/scans")},
                         follow_redirects=True)
    assert "Re-run refused: this scan has no source to re-run" in text(answer)


def test_the_scans_list_shows_risk_and_a_partial_marker(client, portal_account):
    partial = create(client, portal_account, "partial.jane@example.com")
    whole = create(client, portal_account, "jane@example.com")
    queued = create(client, portal_account, "joe@example.com")
    risks = {partial: complete(partial)["risk"], whole: complete(whole)["risk"]}
    login(client)
    page = text(client.get("/app/scans"))
    rows = {scan_id: re.search(rf'<tr>(?:(?!</tr>).)*{scan_id}(?:(?!</tr>).)*</tr>', page, re.DOTALL).group(0)
            for scan_id in (partial, whole, queued)}
    for scan_id, risk in risks.items():
        assert re.search(rf'<span class="score">{risk["score"]}</span> <span class="band band-{risk["band"]}">',
                         rows[scan_id])
    assert ">partial</span>" in rows[partial] and ">partial</span>" not in rows[whole]
    assert 'class="score"' not in rows[queued]


def test_why_this_score_names_its_findings_and_counts_are_told_apart(client, portal_account):
    scan_id = create(client, portal_account, "partial.jane@example.com")
    result = complete(scan_id)
    login(client)
    page = text(client.get(f"/app/scans/{scan_id}"))
    reasons = page.split('<ul class="reasons">')[1].split("</ul>\n")[0]
    assert not re.search(r"(profiles|contacts|breaches)[.\[]", reasons)  # no JSON paths for a person to decode
    breach = result["breaches"][0]
    assert f"Breach: {breach['name']}" in reasons
    engine, listed = result["counts"]["findings"], len(result["findings"])
    assert engine != listed  # the case the labels exist for
    assert f'Items found by the engine</dt><dd id="engine-items">{engine}</dd>' in page
    assert f'Findings listed below</dt><dd id="findings-listed">{listed}</dd>' in page
    assert f"{engine} items found by the engine, {listed} findings listed" in page


def test_times_are_formatted_alike(client, portal_account):
    scan_id = create(client, portal_account, "partial.jane@example.com")
    complete(scan_id)
    login(client)
    page = text(client.get(f"/app/scans/{scan_id}"))
    assert "2026-11-21 12:01:00 UTC" in page and "2026-11-21T12:01:00Z" not in page  # the sources' times
    assert not re.search(r"\d{4}-\d\d-\d\dT\d\d:\d\d", page.split("<main>")[1].replace('type="datetime-local"', ""))


@pytest.mark.parametrize("number, carrier", [("+442071838750", None), ("+33612345678", "SFR")])
def test_a_phone_profile_agrees_with_its_carrier_source(client, portal_account, number, carrier):
    scan_id = create(client, portal_account, number)
    result = complete(scan_id)
    login(client)
    page = text(client.get(f"/app/scans/{scan_id}"))
    shown = re.search(r"<dt>Carrier</dt><dd>([^<]*)</dd>", page).group(1)
    lookup = [s["status"] for s in result["sources"] if s["name"] == "Carrier Lookup"]
    if carrier:
        assert shown == carrier and lookup == ["found"]
    else:
        assert shown == "not known" and "found" not in lookup


def test_the_activity_page_names_keys(client, portal_account):
    with db.connection_context():
        name = ApiKey.get_by_id(portal_account.key.id).name
    client.get("/api/v1/scans", headers=portal_account.headers)
    login(client)
    page = text(client.get("/app/activity"))
    row = re.search(r"<tr>(?:(?!</tr>).)*scans\.list(?:(?!</tr>).)*</tr>", page, re.DOTALL).group(0)
    assert f"key {name}<br>" in row and portal_account.key.id in row


def test_the_invitation_says_who_invites_whom_to_what(client, portal_account):
    login(client)
    page = text(client.get("/app/users"))
    with db.connection_context():
        customer = Customer.get_by_id(portal_account.id).name
    assert "Invite a colleague to this portal" in page
    assert f"You invite a colleague to use this portal for {customer}" in page and "No e-mail is sent" in page
    invited = client.post("/app/users", data={"csrf_token": csrf(client, "/app/users"), "email": "new@acme.example",
                                              "role": "viewer"})
    body = text(invited)
    assert "new@acme.example is invited. Send them the link below" in body
    assert f"with it they set their password and\n    log in to {customer}'s portal" in body
