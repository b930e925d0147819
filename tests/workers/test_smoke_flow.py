from freezegun import freeze_time

from app.scans.models import Scan


def test_single_scan_completes_by_scheduled_time(client, account, jobs):
    with freeze_time("2026-11-21 12:00:00") as frozen:
        r = client.post("/api/v1/scan", json={"target": "jane@example.com"}, headers=account.headers)
        assert r.status_code == 202, r.json
        scan_id = r.json["scan_id"]
        assert jobs.run(frozen, until=lambda: Scan.get_by_id(scan_id).status == "completed")
        body = client.get(f"/api/v1/scan/{scan_id}", headers=account.headers).json
        assert body["status"] == "completed"
        assert set(body["result"]) == {"risk", "counts", "profiles", "contacts", "breaches", "phone_profile",
                                       "ai_summary", "artifacts", "sources", "coverage", "partial", "findings", "match"}
