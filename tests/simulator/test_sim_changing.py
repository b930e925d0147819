"""The simulator's changing targets (E7): each new investigation of the same target finds one more
breach, and every other one one more verified profile; what was found stays found."""
import pytest
from freezegun import freeze_time

from simulator.app import create_sim_app

START = "2025-03-01 12:00:00"




def results(client, items):
    """Submit ``items`` (one batch), run them to the end, and return their results in order."""
    with freeze_time(START) as frozen:
        answers = client.post("/v1/investigations/batch", json={"items": items}).get_json()["items"]
        frozen.tick(max(a["eta_seconds"] for a in answers) + 1)
        return [client.get(f"/v1/investigations/{a['id']}").get_json()["result"] for a in answers]


def shape(result):
    return (len(result["breaches"]), len(result["profiles"]["verified"]))


@pytest.mark.parametrize("target,kind", [("changing.jane@example.com", "email"), ("+14155554444", "phone"),
                                         ("ChangingBot", "username")])
def test_each_new_investigation_of_a_changing_target_finds_more(client, target, kind):
    found = results(client, [{"target": target, "kind": kind}] * 4)
    (breaches, profiles) = shape(found[0])
    assert [shape(r) for r in found] == [(breaches, profiles), (breaches + 1, profiles), (breaches + 2, profiles + 1),
                                         (breaches + 3, profiles + 1)]
    for earlier, later in zip(found, found[1:]):  # what was found stays found, alike
        assert all(b in later["breaches"] for b in earlier["breaches"])
        assert all(p in later["profiles"]["verified"] for p in earlier["profiles"]["verified"])
        assert later["counts"]["findings"] > earlier["counts"]["findings"]
    names = [b["name"] for b in found[3]["breaches"]]
    assert len(set(names)) == len(names)


def test_counts_are_per_target_and_by_submission_and_a_reset_starts_again(client):
    first = results(client, [{"target": "changing.a@example.com", "kind": "email"}])[0]
    other = results(client, [{"target": "changing.b@example.com", "kind": "email"}])[0]
    again = results(client, [{"target": "changing.a@example.com", "kind": "email"}])[0]
    assert shape(again)[0] == shape(first)[0] + 1
    assert shape(other) == shape(results(create_sim_app().test_client(),
                                         [{"target": "changing.b@example.com", "kind": "email"}])[0])
    client.post("/_sim/engine/reset")
    assert results(client, [{"target": "changing.a@example.com", "kind": "email"}])[0]["breaches"] == first["breaches"]


def test_other_targets_find_the_same_every_time(client):
    found = results(client, [{"target": "steady@example.com", "kind": "email"}] * 3)
    assert found[0]["breaches"] == found[1]["breaches"] == found[2]["breaches"]
