"""The portal's watches page (D28): the list (status, last change, next scan, paged), a watch added,
a CSV file imported with a report per row, pause, resume and end (CSRF, the scans permission), and
on a watch scan's page what changed since the previous scan; tenant and mode isolation, escaping,
no target in an address."""
from __future__ import annotations

import copy
import io

import pytest
from freezegun import freeze_time

from app.accounts import admin
from app.activity.models import ActivityEntry
from app.billing import charges
from app.extensions import db
from app.scans import results
from app.scans.models import Scan
from app.scans.results import normalize_result
from app.tracking import states
from app.tracking.simulated.results import result_for
from app.watches.models import Watch
from tests import factories
from tests.portal.helpers import csrf, login

PAGE = "/app/watches"
START = "2026-11-21 12:00:00"
HOSTILE = "<script>alert(1)</script>@example.com"


def text(response) -> str:
    return response.get_data(as_text=True)


def api_watch(client, account, target="jane.doe@example.com", **body) -> dict:
    r = client.post("/api/v1/watches", headers=account.headers,
                    json={"target": target, "interval": "weekly", **body})
    assert r.status_code == 201, r.json
    return r.json


def entries(account, action) -> list[ActivityEntry]:
    with db.connection_context():
        return list(ActivityEntry.select().where((ActivityEntry.customer_id == account.id)
                                                 & (ActivityEntry.action == action)))


def balance(account) -> int:
    with db.connection_context():
        return charges.balance_of(account.id)


def csv_upload(client, account, content: bytes, key_id=None, **fields):
    data = {"csrf_token": csrf(client, PAGE), "key_id": key_id or account.key.id, "interval": "weekly",
            "purpose": "", "case_ref": "", **fields, "file": (io.BytesIO(content), "targets.csv")}
    return client.post(f"{PAGE}/import", data=data, content_type="multipart/form-data")


def report_rows(html: str) -> dict[int, str]:
    """The import report's rows by row number, each row's HTML."""
    table = html[html.index('id="import-report"'):]
    table = table[:table.index("</table>")]
    rows = {}
    for chunk in table.split('<tr data-row="')[1:]:
        number, rest = chunk.split('"', 1)
        rows[int(number)] = rest[:rest.index("</tr>")]
    return rows


def test_the_list_shows_status_last_change_and_next_scan_and_pages(client, portal_account, make_customer):
    with freeze_time(START):
        first = api_watch(client, portal_account)
        paused = api_watch(client, portal_account, target="+447700900123")
    client.patch(f"/api/v1/watches/{paused['watch_id']}", json={"status": "paused"}, headers=portal_account.headers)
    with db.connection_context():
        Watch.update(last_change_at="2026-11-22 08:00:00", last_error="the balance is below 1 credit").where(
            Watch.id == first["watch_id"]).execute()
    other = api_watch(client, make_customer(), target="someone.else@example.com")
    login(client)
    page = text(client.get(PAGE))
    assert 'aria-current="page">Watches' in page
    row = page[page.index(f'id="{first["watch_id"]}"'):].split("</tr>")[0]
    assert "jane.doe@example.com" in row and "badge ok" in row and ">active<" in row
    assert "2026-11-22 08:00:00 UTC" in row and "the balance is below 1 credit" in row
    assert first["next_scan_at"].replace("T", " ").replace("Z", " UTC") in row
    assert first["last_scan_id"] in row and "Pause" in row and "End" in row
    paused_row = page[page.index(f'id="{paused["watch_id"]}"'):].split("</tr>")[0]
    assert ">paused<" in paused_row and "Resume" in paused_row and "none yet" in paused_row
    assert other["watch_id"] not in page and "someone.else" not in page  # another customer's: never
    only_paused = text(client.get(f"{PAGE}?status=paused"))
    assert paused["watch_id"] in only_paused and first["watch_id"] not in only_paused
    with db.connection_context():  # 26 more, older: a second page of 25
        for n in range(26):
            Watch.insert(id=f"wch_page{n:02d}", customer=portal_account.id, api_key=portal_account.key.id,
                         livemode=True, kind="email", target=f"user{n}@example.com", optout_hash="x",
                         interval="daily", status="active", created_at=f"2026-11-{10 + n % 10} 00:00:{n:02d}").execute()
    second_page = text(client.get(f"{PAGE}?page=2"))
    assert "Page 2 of 2 · 28 in all" in second_page and "← Newer" in second_page


def test_a_watch_ended_by_an_opt_out_shows_no_target(client, portal_account):
    from app.privacy import suppressions
    ended = api_watch(client, portal_account)
    with db.connection_context():
        suppressions.add("email", "jane.doe@example.com")
    login(client)
    page = text(client.get(PAGE))
    row = page[page.index(f'id="{ended["watch_id"]}"'):].split("</tr>")[0]
    assert "removed: the person opted out" in row and "jane.doe" not in page


def test_a_watch_is_added_from_the_form_charged_with_the_chosen_key_and_logged(client, portal_account):
    login(client)
    before = balance(portal_account)
    response = client.post(PAGE, data={"csrf_token": csrf(client, PAGE), "key_id": portal_account.key.id,
                                       "target": "new.person@example.com", "kind": "", "interval": "daily",
                                       "purpose": "fraud_prevention", "case_ref": "CASE-9"})
    assert response.status_code == 302 and "new.person" not in response.headers["Location"]
    with db.connection_context():
        watch = Watch.get(Watch.target == "new.person@example.com")
        [scan] = Scan.select().where(Scan.watch_id == watch.id)
    assert (watch.kind, watch.interval, watch.purpose, watch.case_ref, watch.api_key_id) == (
        "email", "daily", "fraud_prevention", "CASE-9", portal_account.key.id)
    assert balance(portal_account) == before - 1
    [entry] = entries(portal_account, "watch.create")
    assert (entry.status, entry.credits, entry.user_email, entry.livemode) == (302, 1, "ops@acme.example", True)
    assert f"Watch {watch.id} added" in text(client.get(PAGE)) and scan.id in text(client.get(PAGE))


def test_a_refused_watch_says_why_and_changes_nothing(client, portal_account):
    with db.connection_context():
        narrow, _ = admin.issue_key(portal_account.id, "no watches", scopes=["scans:read"])
    login(client)
    page = text(client.get(PAGE))
    assert portal_account.key.id in page and narrow.id not in page  # a key that cannot watch is not offered
    refused = client.post(PAGE, data={"csrf_token": csrf(client, PAGE), "key_id": narrow.id, "target": "a@b.example",
                                      "interval": "daily"})
    assert refused.status_code == 400 and "lacks the scope watches" in text(refused)
    short = client.post(PAGE, data={"csrf_token": csrf(client, PAGE), "key_id": portal_account.key.id,
                                    "target": "ab", "interval": "daily"})
    assert short.status_code == 400 and "target must have at least 3 characters" in text(short)
    no_csrf = client.post(PAGE, data={"key_id": portal_account.key.id, "target": "a@b.example", "interval": "daily"})
    assert no_csrf.status_code == 400
    with db.connection_context():
        assert Watch.select().count() == 0
    assert balance(portal_account) == 100


def test_a_csv_import_reports_every_row_and_watches_the_valid_ones(client, portal_account):
    content = ("Name,target,kind\n"
               "Jane,jane.doe@example.com,\n"
               "Short,ab,\n"
               "\n"
               "Phone,+44 7700 900123,phone\n"
               "Fax,x@y.example,fax\n"
               f"Hostile,{HOSTILE},\n").encode()
    login(client)
    before = balance(portal_account)
    response = csv_upload(client, portal_account, content, case_ref="IMPORT-1")
    assert response.status_code == 200, text(response)[:3000]
    html = text(response)
    rows = report_rows(html)
    assert sorted(rows) == [2, 3, 5, 6, 7]  # the header is row 1; the blank row 4 is skipped, still counted
    assert "created" in rows[2] and "jane.doe@example.com" in rows[2]
    assert "rejected" in rows[3] and "target_too_short" in rows[3]
    assert "created" in rows[5] and "+447700900123" in rows[5]
    assert "rejected" in rows[6] and "invalid_kind" in rows[6]
    assert "rejected" in rows[7] and "invalid_target" in rows[7]
    assert HOSTILE not in html and "&lt;script&gt;alert(1)&lt;/script&gt;@example.com" in html
    assert "2 of 5 rows watched, 3 rejected" in html
    with db.connection_context():
        made = list(Watch.select().where(Watch.customer == portal_account.id))
    assert sorted(w.target for w in made) == ["+447700900123", "jane.doe@example.com"]
    assert {w.case_ref for w in made} == {"IMPORT-1"}
    assert balance(portal_account) == before - 2
    [entry] = entries(portal_account, "watches.create")
    assert (entry.status, entry.credits) == (200, 2)


@pytest.mark.parametrize(("content", "message"), [
    (b"email\njane@example.com\n", "its first row must name the columns"),
    ("target\njane@exämple.com\n".encode("latin-1"), "not UTF-8 text"),
    (b"", "the file is empty"),
    (("target\n" + "".join(f"user{n}@example.com\n" for n in range(101))).encode(), "at most 100 targets"),
])
def test_a_csv_file_that_cannot_be_imported_is_refused_whole(client, portal_account, content, message):
    login(client)
    response = csv_upload(client, portal_account, content)
    assert response.status_code == 400 and message in text(response)
    with db.connection_context():
        assert Watch.select().count() == 0
    assert balance(portal_account) == 100


def test_a_pro_account_cannot_import_as_it_cannot_bulk(client, make_customer):
    from tests.portal.helpers import PASSWORD
    account = make_customer(tier="pro")
    with db.connection_context():
        admin.create_user(account.id, "pro@acme.example", PASSWORD)
    login(client, email="pro@acme.example")
    response = csv_upload(client, account, b"target\njane@example.com\n")
    assert response.status_code == 400 and "Business and Enterprise" in text(response)


def test_a_test_key_imports_test_watches_shown_as_such_and_free(client, portal_account):
    with db.connection_context():
        test = factories.sandbox_key(portal_account, name="sandbox")
    login(client)
    response = csv_upload(client, portal_account, b"target\njane@example.com\n", key_id=test.key.id)
    assert response.status_code == 200 and "test mode" in report_rows(text(response))[2]
    assert balance(portal_account) == 100
    listed = text(client.get(f"{PAGE}?mode=test"))
    assert "jane@example.com" in listed and "badge test-mode" in listed
    assert "jane@example.com" not in text(client.get(f"{PAGE}?mode=live"))


def test_pause_resume_and_end_need_csrf_and_the_customers_own_watch(client, portal_account, make_customer):
    with freeze_time(START):
        watch_id = api_watch(client, portal_account)["watch_id"]
    others = api_watch(client, make_customer())["watch_id"]
    login(client)

    def post(action, target=watch_id, token=True):
        return client.post(f"{PAGE}/{target}/{action}", data={"csrf_token": csrf(client, PAGE)} if token else {})

    def status():
        with db.connection_context():
            return Watch.get_by_id(watch_id).status

    assert post("pause", token=False).status_code == 400 and status() == "active"
    assert post("pause").status_code == 302 and status() == "paused"
    assert post("resume").status_code == 302 and status() == "active"
    assert post("end", target=others).status_code == 404
    with db.connection_context():
        assert Watch.get_by_id(others).status == "active"
    assert post("end").status_code == 302 and status() == "ended"
    again = client.post(f"{PAGE}/{watch_id}/resume", data={"csrf_token": csrf(client, PAGE)}, follow_redirects=True)
    assert "this watch has ended" in text(again) and status() == "ended"  # an ended watch stays ended
    actions = {e.action for e in entries(portal_account, "watch.pause") + entries(portal_account, "watch.resume")
               + entries(portal_account, "watch.end")}
    assert actions == {"watch.pause", "watch.resume", "watch.end"}


def test_a_viewer_sees_the_list_but_no_form(client, portal_account, role_clients):
    api_watch(client, portal_account)
    clients = role_clients(portal_account)
    viewer = text(clients["viewer"].get(PAGE))
    developer = text(clients["developer"].get(PAGE))
    assert "jane.doe@example.com" in viewer and "Add watch" not in viewer and ">Pause<" not in viewer
    assert "Add watch" in developer and "Import and watch" in developer and ">Pause<" in developer


def _complete(scan_id: str, raw: dict) -> dict:
    with db.connection_context():
        scan = Scan.get_by_id(scan_id)
        result = normalize_result(raw, scan.kind, scan_id=scan.id,
                                  owner=results.Owner(scan.customer_id, scan.kind, scan.target))
        assert states.complete(scan_id, result)
    return result


def test_a_watch_scans_page_shows_what_changed_since_the_previous_scan(client, portal_account):
    target = "jane.watch@example.com"
    watch = api_watch(client, portal_account, target=target)
    first = result_for("email", target, "https://artifacts.example/inv_1", messy=False)
    before = _complete(watch["last_scan_id"], first)
    second = copy.deepcopy(first)
    second["breaches"] = [first["breaches"][1], {"name": "FreshLeak", "date": "2026-09", "accounts": 1000,
                                                 "classes": ["email_addresses"]}]
    second["risk"].update(score=80, band="critical")
    second["risk"]["reasons"][-1]["points"] += 80 - first["risk"]["score"]  # the reasons still add up to the score
    rerun = client.post(f"/api/v1/watches/{watch['watch_id']}/run", headers=portal_account.headers).json
    after = _complete(rerun["scan_id"], second)
    login(client)
    page = text(client.get(f"/app/scans/{rerun['scan_id']}"))
    section = page[page.index('id="watch-changes"'):]
    section = section[:section.index("</section>")]
    assert watch["watch_id"] in section and watch["last_scan_id"] in section
    assert f"{before['risk']['score']}" in section and "critical" in section
    added = {f["id"] for f in after["findings"]} - {f["id"] for f in before["findings"]}
    removed = {f["id"] for f in before["findings"]} - {f["id"] for f in after["findings"]}
    assert added and removed
    added_list = section[section.index('class="watch-added"'):]
    assert "Breach: FreshLeak (2026-09)" in added_list and all(f'href="#{fid}"' in added_list for fid in added)
    assert "Breach: TravelNest (2018-05)" in section[section.index('class="watch-removed"'):]
    baseline = text(client.get(f"/app/scans/{watch['last_scan_id']}"))
    assert "first completed scan" in baseline
    unrelated = client.post("/api/v1/scan", json={"target": "x@example.com"}, headers=portal_account.headers).json
    assert 'id="watch-changes"' not in text(client.get(f"/app/scans/{unrelated['scan_id']}"))
