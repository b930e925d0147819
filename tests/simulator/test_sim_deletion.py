"""The simulated engine's deletion (E7) and ids that do not show their target (D25)."""
import base64

from freezegun import freeze_time

from simulator.app import create_sim_app
from simulator.investigations import decode_id

START = "2025-03-01 12:00:00"




def submit(client, target, kind="email"):
    response = client.post("/v1/investigations", json={"target": target, "kind": kind, "reference": "scan_1"})
    assert response.status_code == 201
    return response.get_json()


def test_an_id_shows_nothing_of_its_target_yet_decodes_to_it():
    from simulator.investigations import encode_id
    engine_id = encode_id("email", "jane.doe@example.com")
    raw = base64.urlsafe_b64decode(engine_id[4:] + "=" * (-len(engine_id[4:]) % 4))
    assert b"jane" not in raw and b"example" not in raw and "jane" not in engine_id
    assert decode_id(engine_id).target == "jane.doe@example.com"
    tampered = engine_id[:-2] + ("A" if engine_id[-2] != "A" else "B") + engine_id[-1]
    assert decode_id(tampered) is None


def test_a_deleted_investigation_is_forgotten_with_its_result_and_artifacts(client):
    with freeze_time(START) as frozen:
        submission = submit(client, "jane.doe@example.com")
        kept = submit(client, "jane.doe@example.com")
        frozen.tick(submission["eta_seconds"] + 1)
        engine_id = submission["id"]
        done = client.get(f"/v1/investigations/{engine_id}").get_json()
        assert done["status"] == "done"
        pdf = done["result"]["artifacts"]["pdf"].removeprefix("http://localhost")
        assert client.get(pdf).status_code == 200
        deleted = client.delete(f"/v1/investigations/{engine_id}")
        assert deleted.status_code == 204 and deleted.get_data() == b""
        assert client.get(f"/v1/investigations/{engine_id}").status_code == 404
        assert client.get(pdf).status_code == 404
        assert client.get(pdf.replace(".pdf", ".card.json")).status_code == 404
        batch = client.post("/v1/investigations/status", json={"ids": [engine_id]}).get_json()["items"][0]
        assert (batch["status"], batch["error"]["code"]) == ("error", "not_found")
        assert client.delete(f"/v1/investigations/{engine_id}").status_code == 404  # once only
        assert client.get(f"/v1/investigations/{kept['id']}").get_json()["status"] == "done"  # only that one


def test_deleting_an_unknown_id_is_404_and_a_reset_brings_nothing_back(client):
    assert client.delete("/v1/investigations/inv_nope").status_code == 404
    engine_id = submit(client, "bob@example.com")["id"]
    assert client.delete(f"/v1/investigations/{engine_id}").status_code == 204
    client.post("/_sim/engine/reset")
    assert client.get(f"/v1/investigations/{engine_id}").status_code == 404


def test_deletion_is_gated_by_the_mode_and_the_token_and_counted(monkeypatch):
    monkeypatch.delenv("SIM_TIME_SCALE", raising=False)
    client = create_sim_app({"ENGINE_TOKEN": "t0k"}).test_client()
    auth = {"Authorization": "Bearer t0k"}
    engine_id = client.post("/v1/investigations", json={"target": "c@example.com", "kind": "email"},
                            headers=auth).get_json()["id"]
    assert client.delete(f"/v1/investigations/{engine_id}").status_code == 401
    client.post("/_sim/engine/mode", json={"mode": "down"})
    assert client.delete(f"/v1/investigations/{engine_id}", headers=auth).status_code == 503
    client.post("/_sim/engine/mode", json={"mode": "up"})
    assert client.delete(f"/v1/investigations/{engine_id}", headers=auth).status_code == 204
    assert client.get("/_sim/engine/stats").get_json()["deletes"] == 3


def test_an_engine_without_deletion_answers_405_and_keeps_the_investigation(client):
    engine_id = submit(client, "dan@example.com")["id"]
    assert client.post("/_sim/engine/mode", json={"mode": "up", "deletion": False}).get_json()["deletion"] is False
    assert client.delete(f"/v1/investigations/{engine_id}").status_code == 405
    assert client.get(f"/v1/investigations/{engine_id}").status_code == 200
    assert client.post("/_sim/engine/mode", json={"mode": "up", "deletion": "no"}).status_code == 400
