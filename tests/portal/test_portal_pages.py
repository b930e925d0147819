"""The portal's scans, scan, batch and usage pages and the delivery console (issue 19):
what a person sees in every state, filters, charts and the ledger CSV, escaping and
tenant isolation (another customer's ids answer 404)."""
from __future__ import annotations

import csv
import io
import re
from datetime import timedelta

import pytest
from freezegun import freeze_time

from app.accounts.models import CreditLedger
from app.billing import charges, customers, usage
from app.extensions import db
from app.plumbing.models import utcnow
from app.scans.models import Scan
from app.scans.results import normalize_result
from app.tracking import states
from app.tracking.simulated.results import result_for
from app.webhooks import key_settings
from app.webhooks.models import WebhookDelivery
from tests.portal.helpers import csrf, login

HOSTILE = "<script>alert(1)</script>"


def create(client, account, target, kind=None):
    body = {"target": target} | ({"kind": kind} if kind else {})
    response = client.post("/api/v1/scan", json=body, headers=account.headers)
    assert response.status_code == 202, response.get_json()
    return response.get_json()["scan_id"]


def complete(scan_id, result=None):
    with db.connection_context():
        scan = Scan.get_by_id(scan_id)
        raw = result or result_for(scan.kind, scan.target, "https://artifacts.example/inv_1")
        assert states.complete(scan_id, normalize_result(raw, scan.kind))


def text(response):
    return response.get_data(as_text=True)


def search(client, **filters):
    """The scans page's filter form, posted as a browser does."""
    return client.post("/app/scans", data={"csrf_token": csrf(client, "/app/scans"), **filters})


def test_new_pages_need_a_login(client, portal_account):
    for path in ("/app/scans", "/app/scans/scn_x", "/app/batches/blk_x", "/app/usage/ledger.csv?start=2026-01-01"):
        response = client.get(path)
        assert response.status_code == 302 and "/app/login" in response.headers["Location"], path


def test_scans_list_newest_first_filters_and_search(client, portal_account):
    first = create(client, portal_account, "alice@example.com")
    second = create(client, portal_account, "+442071838750")
    third = create(client, portal_account, "bob_the_builder", "username")
    complete(first)
    login(client)
    page = text(client.get("/app/scans"))
    assert page.index(third) < page.index(second) < page.index(first)
    only_completed = text(client.get("/app/scans?status=completed"))
    assert first in only_completed and second not in only_completed and third not in only_completed
    phones = text(client.get("/app/scans?kind=phone"))
    assert second in phones and first not in phones
    found = text(search(client, q="ALICE"))  # case-insensitive substring of the target
    assert first in found and second not in found
    assert third not in text(search(client, q="%"))  # a LIKE wildcard is literal
    both = text(search(client, q="example", status="completed"))
    assert first in both and second not in both
    by_key = text(client.get(f"/app/scans?key={portal_account.key.id}"))
    assert first in by_key and third in by_key
    ignored = client.get("/app/scans?status=bogus&kind=<x>&page=-3")  # unknown filters are ignored, not a 500
    assert ignored.status_code == 200 and third in text(ignored)


def test_scans_list_pages(client, portal_account):
    ids = [create(client, portal_account, f"user{i:02d}", "username") for i in range(27)]
    login(client)
    first_page, second_page = text(client.get("/app/scans")), text(client.get("/app/scans?page=2"))
    assert ids[-1] in first_page and ids[0] not in first_page
    assert ids[0] in second_page and ids[-1] not in second_page
    assert "Page 2 of 2" in second_page and "27 in all" in second_page


def test_the_target_search_is_posted_and_never_put_in_an_address(client, portal_account):
    """A target in an address ends up in server logs, browser history and Referer headers: the form
    posts it, the pager keeps posting it, and a target in the query string is refused."""
    ids = [create(client, portal_account, f"jane{i:02d}@example.com") for i in range(27)]
    other = create(client, portal_account, "bob_the_builder", "username")
    login(client)
    form = text(client.get("/app/scans")).split('aria-label="Filter scans"')[0].rsplit("<form", 1)[1]
    assert 'method="post"' in form
    first = search(client, q="jane", kind="email")
    body = text(first)
    assert first.status_code == 200 and ids[-1] in body and ids[2] in body and ids[1] not in body
    assert other not in body and "Page 1 of 2 · 27 in all" in body
    assert "q=" not in body and "jane%" not in body  # no link or address carries it
    older = body.split('aria-label="Scan pages"')[1]
    assert 'name="q" value="jane"' in older and 'name="kind" value="email"' in older  # posted by the pager
    assert 'name="page" value="2"' in older and "href=" not in older
    second = text(search(client, q="jane", kind="email", page="2"))
    assert ids[0] in second and ids[1] in second and ids[2] not in second and "← Newer" in second
    refused = client.get("/app/scans?q=jane&kind=email")
    assert refused.status_code == 400 and "search with the form" in text(refused)
    assert ids[0] not in text(refused) and "No scans match these filters." in text(refused)
    plain = text(client.get("/app/scans?kind=username"))  # filters without a target stay links
    assert other in plain and ids[0] not in plain


def test_completed_scan_is_laid_out_and_links_are_safe(client, portal_account):
    scan_id = create(client, portal_account, "carol@example.com")
    raw = result_for("email", "carol@example.com", "https://artifacts.example/inv_2")
    raw["profiles"]["verified"].append({"platform": "evil", "url": "javascript:alert(1)", "handle": HOSTILE,
                                        "display_name": "x", "confidence": 0.9})
    raw["ai_summary"] = f"Summary {HOSTILE}"
    complete(scan_id, raw)
    login(client)
    response = client.get(f"/app/scans/{scan_id}")
    page = text(response)
    assert response.status_code == 200
    result = normalize_result(raw, "email")
    assert f'{result["risk"]["score"]} <small>/ 100</small>' in page and result["risk"]["band"] in page
    assert result["breaches"][0]["name"] in page if result["breaches"] else "No breach found." in page
    assert 'href="https://artifacts.example/inv_2.pdf" rel="noopener noreferrer"' in page
    assert HOSTILE not in page and "&lt;script&gt;" in page
    assert 'href="javascript:' not in page and "<code>javascript:alert(1)</code>" in page
    for href, rel in re.findall(r'<a href="([^"]+)" rel="([^"]+)"', page):
        assert href.startswith(("http://", "https://")) and rel == "noopener noreferrer"


def test_phone_scan_shows_its_phone_profile(client, portal_account):
    scan_id = create(client, portal_account, "+442071838750")
    complete(scan_id)
    login(client)
    page = text(client.get(f"/app/scans/{scan_id}"))
    assert "Phone profile" in page and "+44" in page and "Europe/London" in page


def test_failed_queued_and_hostile_targets(client, portal_account):
    failed = create(client, portal_account, "dave@example.com")
    with db.connection_context():
        states.fail(failed, "engine_failed", "the engine gave up <b>badly</b>")
    queued = create(client, portal_account, "erin@example.com")
    login(client)
    page = text(client.get(f"/app/scans/{failed}"))
    assert "The scan failed" in page and "engine_failed" in page and "&lt;b&gt;badly&lt;/b&gt;" in page
    page = text(client.get(f"/app/scans/{queued}"))
    assert "Waiting for the engine" in page and "<progress" in page
    assert "The webhook is sent when the scan finishes." in page


def test_a_hostile_target_is_escaped_everywhere(client, portal_account):
    scan_id = create(client, portal_account, "frank@example.com")
    with db.connection_context():  # a target the API would refuse, written as a row: the pages must still escape it
        Scan.update(target=f"{HOSTILE}@example.com").where(Scan.id == scan_id).execute()
    login(client)
    for page in (text(client.get("/app/scans")), text(client.get(f"/app/scans/{scan_id}")),
                 text(search(client, q="<script>"))):
        assert HOSTILE not in page and "&lt;script&gt;" in page


def test_batch_page_counts_and_lists_in_request_order(client, portal_account):
    response = client.post("/api/v1/scan/bulk", headers=portal_account.headers, json={"targets": [
        {"target": "gina@example.com"}, {"target": "x"}, {"target": "harry@example.com"}]})
    assert response.status_code == 202
    body = response.get_json()
    complete(body["scans"][0]["scan_id"])
    login(client)
    page = text(client.get(f"/app/batches/{body['bulk_id']}"))
    counters = dict(re.findall(r"<dt>(\w+)</dt><dd>(\d+)</dd>", page))
    assert counters == {"Submitted": "3", "Queued": "1", "Running": "0", "Completed": "1", "Failed": "0",
                        "Rejected": "1"}
    assert page.index("gina@example.com") < page.index("harry@example.com")
    listing = text(client.get(f"/app/scans?bulk={body['bulk_id']}"))
    assert body["scans"][1]["scan_id"] in listing


def test_another_customers_scan_and_batch_are_404(client, portal_account, make_customer):
    other = make_customer(name="Someone else")
    scan_id = create(client, other, "ivan@example.com")
    bulk = client.post("/api/v1/scan/bulk", headers=other.headers, json={"targets": [{"target": "jane@example.com"}]})
    bulk_id = bulk.get_json()["bulk_id"]
    login(client)
    for path in (f"/app/scans/{scan_id}", f"/app/batches/{bulk_id}", "/app/scans/scn_unknown",
                 "/app/batches/blk_unknown"):
        assert client.get(path).status_code == 404, path
    for page in (text(client.get(f"/app/scans?bulk={bulk_id}")), text(client.get(f"/app/scans?key={other.key.id}")),
                 text(search(client, q="ivan"))):
        assert scan_id not in page and "ivan@example.com" not in page


def test_delivery_console_rows_attempts_and_masked_request(client, portal_account, simulator, jobs):
    import requests
    requests.post(f"{simulator.url}/_sim/receivers/console", timeout=5,
                  json={"secret": "whsec_console_0123456789", "responses": [500, 200]}).raise_for_status()
    secret = "whsec_Y29uc29sZSBzZWNyZXQgMDEyMzQ1Njc4OQ=="
    with db.connection_context():
        key_settings.set_webhook(portal_account.key.id, portal_account.id, f"{simulator.url}/_sim/hooks/console", secret)
    scan_id = create(client, portal_account, "kate@example.com")
    complete(scan_id)
    with freeze_time(utcnow() + timedelta(seconds=1)) as frozen:
        jobs.run(frozen, until=lambda: WebhookDelivery.get().status != "pending")
    with db.connection_context():
        delivery = WebhookDelivery.get()
    assert delivery.status == "succeeded" and delivery.attempts == 2
    login(client)
    page = text(client.get(f"/app/api-keys/{portal_account.key.id}"))
    block = page[page.index(f'<tbody id="{delivery.id}"'):]
    block = block[:block.index("</details>")]
    assert f'href="/app/scans/{scan_id}"' in block and '<td class="num">2</td>' in block
    assert "HTTP 200" in block and "HTTP 500" in block and "<details>" in block
    assert f"X-Service-Delivery: {delivery.id}" in block and "X-Service-Signature: sha256=••••••••" in block
    assert f"webhook-id: {delivery.id}" in block and "webhook-signature: v1,••••••••" in block
    assert secret not in page and re.search(r"sha256=[0-9a-f]{64}", page) is None
    assert re.search(r"v1,[A-Za-z0-9+/]{43}=", page) is None
    assert "&#34;event&#34;:&#34;scan.completed&#34;" in block or '"event":"scan.completed"' in block
    scan_page = text(client.get(f"/app/scans/{scan_id}"))
    assert delivery.id in scan_page and "succeeded" in scan_page


def test_usage_charts_are_svg_with_titles_and_count_in_sql(client, portal_account):
    create(client, portal_account, "liam@example.com")
    create(client, portal_account, "mia@example.com")
    login(client)
    client.get("/app/usage")
    with db.connection_context():
        days = usage.activity(portal_account.id, "day")
        hours = usage.activity(portal_account.id, "hour")
    assert len(days) == 30 and len(hours) == 48
    assert days[-1].scans == 2 and days[-1].credits == 2 and sum(b.scans for b in days) == 2
    assert hours[-1].scans == 2
    page = text(client.get("/app/usage"))
    assert page.count('<svg class="chart"') == 2 and 'role="img"' in page
    assert "<title id=\"per-day-t\">Scans created and credits spent: last 30 days, per day</title>" in page
    assert "2 scans created and 2 credits spent" in page


def test_ledger_says_what_each_movement_was(client, portal_account):
    with db.connection_context():
        customers.add_credits(portal_account.id, 5, "goodwill after the <b>outage</b>")
    scan_id = create(client, portal_account, "noah@example.com")
    with freeze_time(utcnow()):  # one minute: its reads of one endpoint are one row (D24)
        for _ in range(3):
            client.get(f"/api/v1/scan/{scan_id}", headers=portal_account.headers)
        client.get("/api/v1/scan/scn_nope", headers=portal_account.headers)
        client.get("/api/v1/account", headers=portal_account.headers)
    login(client)
    page = text(client.get("/app/usage"))
    assert "Credits added by your account manager" in page and "goodwill after the &lt;b&gt;outage&lt;/b&gt;" in page
    assert "<code>POST /api/v1/scan</code>" in page and f'href="/app/scans/{scan_id}"' in page
    # Reads are summed per endpoint and minute (a 404 is a read of the same endpoint), ids left out.
    rows = re.findall(r'<td class="num minus">(-\d+)</td>\s*<td class="num">\d+</td>\s*<td>(\d+ reads?)</td>\s*'
                      r"<td><code>([^<]+)</code>", page)
    assert sorted(rows) == [("-1", "1 read", "GET /api/v1/account"), ("-4", "4 reads", "GET /api/v1/scan/{scan_id}")]
    assert "scn_nope" not in page
    assert "the reads of one endpoint in one minute are one movement" in page


def test_ledger_csv_for_a_period(client, portal_account):
    with db.connection_context():
        customers.add_credits(portal_account.id, 3, "=HYPERLINK(\"http://evil\")")
    with freeze_time(utcnow()):  # one minute: its reads are one row (D24)
        scan_id = create(client, portal_account, "olivia@example.com")
        for _ in range(3):
            client.get(f"/api/v1/scan/{scan_id}", headers=portal_account.headers)
        login(client)
        today = utcnow().date().isoformat()
        response = client.get(f"/app/usage/ledger.csv?start={today}&end={today}")
    assert response.status_code == 200 and response.mimetype == "text/csv"
    assert "attachment" in response.headers["Content-Disposition"]
    rows = list(csv.DictReader(io.StringIO(text(response))))
    # oldest first: initial credits, the grant, the scan, the minute's reads
    assert [r["kind"] for r in rows] == ["grant", "grant", "scan", "reads"]
    assert rows[1]["reason"].startswith("'=")  # a formula is neutralised
    assert rows[2]["scan_id"] == scan_id and rows[2]["change"] == "-1" and rows[2]["endpoint"] == "POST /api/v1/scan"
    assert (rows[3]["what"], rows[3]["change"], rows[3]["endpoint"], rows[3]["request_id"], rows[3]["reads"]) == (
        "3 reads", "-3", "GET /api/v1/scan/{scan_id}", "", "3")
    assert rows[2]["reads"] == ""  # a movement of its own
    assert int(rows[3]["balance_after"]) == balance_of(portal_account)
    assert sum(int(r["change"]) for r in rows) == balance_of(portal_account)  # the export adds up to the balance
    yesterday = (utcnow().date() - timedelta(days=1)).isoformat()
    empty = list(csv.DictReader(io.StringIO(text(client.get(f"/app/usage/ledger.csv?start={yesterday}&end={yesterday}")))))
    assert empty == []


@pytest.mark.parametrize("query, message", [
    ("start=2026-13-01&end=2026-01-01", "Not a valid date value"),
    ("start=&end=", "a date is needed"),
    ("end=2026-01-01", "a date is needed"),
    ("start=2026-02-01&end=2026-01-01", "must not be after"),
    ("start=2020-01-01&end=2026-01-01", "at most 366 days"),
    ("start=2999-01-01&end=2999-01-02", "starts in the future"),
    ("start=%00&end=%FF", "Not a valid date value"),
])
def test_ledger_csv_refuses_bad_periods_as_form_errors(client, portal_account, query, message):
    login(client)
    with db.connection_context():
        before = CreditLedger.select().count()
    response = client.get(f"/app/usage/ledger.csv?{query}")
    assert response.status_code == 400 and response.mimetype == "text/html"
    assert message in text(response) and "Download CSV" in text(response)
    with db.connection_context():
        assert CreditLedger.select().count() == before


def test_new_pages_keep_the_security_headers_and_no_key_or_secret(client, portal_account):
    scan_id = create(client, portal_account, "paul@example.com")
    with db.connection_context():
        key_settings.set_webhook(portal_account.key.id, portal_account.id, "https://hooks.example.com/x",
                             "whsec_c2Vrcml0LXNla3JpdC0wMTIzNDU2Nzg5")
    login(client)
    for path in ("/app/scans", f"/app/scans/{scan_id}", "/app/usage", f"/app/api-keys/{portal_account.key.id}"):
        response = client.get(path)
        assert "script-src 'none'" in response.headers["Content-Security-Policy"], path
        page = text(response)
        assert portal_account.api_key not in page and "whsec_c2Vrcml0LXNla3JpdC0wMTIzNDU2Nzg5" not in page, path
        assert "<script" not in page and " style=" not in page, path
    # Every form that changes something carries a CSRF token.
    assert csrf(client, f"/app/api-keys/{portal_account.key.id}")


def test_chart_axis_steps_and_escaped_titles():
    from app.portal.charts import _nice_max, bar_chart
    assert [_nice_max(v) for v in (0, 7, 9, 41, 1001)] == [4, 8, 12, 60, 1200]
    svg = str(bar_chart("c", f"T {HOSTILE}", "D", [f"day {HOSTILE}", "d2"], [("scans", "scans", [3, 0])]))
    assert HOSTILE not in svg and svg.count("<rect") == 2 and "<title>day &lt;script&gt;" in svg
    assert 'role="img"' in svg and 'aria-labelledby="c-t c-d"' in svg


def test_a_refused_call_is_in_the_ledger_by_route_without_the_foreign_id(client, portal_account, make_customer):
    other = make_customer(name="Someone else")
    foreign = create(client, other, "quinn@example.com")
    assert client.get(f"/api/v1/scan/{foreign}", headers=portal_account.headers).status_code == 403
    assert client.get("/api/v1/scan/bulk/blk_nope", headers=portal_account.headers).status_code == 404
    login(client)
    page = text(client.get("/app/usage"))
    assert foreign not in page and "blk_nope" not in page
    assert "<code>GET /api/v1/scan/{scan_id}</code>" in page  # reads are summed by route (D24)
    assert "<code>GET /api/v1/scan/bulk/{bulk_id}</code>" in page


def test_the_usage_page_says_billings_prices(client, portal_account):
    login(client)
    page = text(client.get("/app/usage"))
    assert f"a bulk call {charges.PRICE_WORDS['bulk']}." in page
    free = charges.PRICE_WORDS["free_403"].replace("`", "")
    assert f"costs {charges.PRICE_WORDS['call']} (except {free});" in page  # the free 403s named
    assert "insufficient_scope, ip_not_allowed or target_suppressed" in page


def test_a_finished_scan_is_erased_from_its_page_once_the_box_is_ticked(client, portal_account):
    login(client)
    scan_id = create(client, portal_account, "erase.me@example.com")
    page = text(client.get(f"/app/scans/{scan_id}"))
    assert "Erase this scan" not in page  # in flight: nothing to erase yet
    complete(scan_id)
    token = csrf(client, f"/app/scans/{scan_id}")
    refused = client.post(f"/app/scans/{scan_id}/erase", data={"csrf_token": token}, follow_redirects=True)
    assert "Tick the box" in text(refused)
    with db.connection_context():
        assert Scan.get_by_id(scan_id).erased_at is None
    no_token = client.post(f"/app/scans/{scan_id}/erase", data={"confirm": "y"})
    assert no_token.status_code == 400  # CSRF
    erased = client.post(f"/app/scans/{scan_id}/erase", data={"csrf_token": token, "confirm": "y"},
                         follow_redirects=True)
    shown = text(erased)
    assert "personal data was erased" in shown and "Erased scan" in shown and "erase.me@example.com" not in shown
    assert "erase.me@example.com" not in text(client.get("/app/scans"))
    with db.connection_context():
        assert Scan.get_by_id(scan_id).target is None


def test_owners_set_the_personal_data_settings(client, portal_account):
    from app.accounts.models import Customer
    login(client)
    page = text(client.get("/app/settings"))
    assert 'value="90"' in page and "Require a purpose" in page
    token = csrf(client, "/app/settings")
    refused = client.post("/app/settings", data={"csrf_token": token, "result_retention_days": "0",
                                                 "require_purpose": "y"})
    assert refused.status_code == 400 and "from 1 to 3650" in text(refused)
    with db.connection_context():
        unchanged = Customer.get_by_id(portal_account.id)
    assert (unchanged.result_retention_days, unchanged.require_purpose) == (90, False)
    saved = client.post("/app/settings", data={"csrf_token": token, "result_retention_days": "30",
                                               "require_purpose": "y"})
    assert saved.status_code == 302
    with db.connection_context():
        changed = Customer.get_by_id(portal_account.id)
    assert (changed.result_retention_days, changed.require_purpose, changed.require_2fa) == (30, True, False)


def balance_of(account) -> int:
    with db.connection_context():
        return charges.balance_of(account.id)
