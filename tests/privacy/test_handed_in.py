"""What privacy is handed at start by the app: the watches of a person's target."""
from app.privacy import handed_in
from app.watches import statements as watch_store
from app.watches import watch_changes


def test_the_app_hands_privacy_the_watches_of_a_target(app):
    watches = handed_in.WATCHES()
    assert watches.open_with_optout_hash is watch_store.open_with_optout_hash
    assert watches.end_watches_of_optout is watch_changes.end_watches_of_optout
