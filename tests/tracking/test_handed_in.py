"""What tracking is handed at start by the app: the watches' comparison of a finished watch scan."""
from app.tracking import handed_in
from app.watches import watch_changes


def test_the_app_hands_tracking_the_watches_comparison(app):
    assert handed_in.WATCH_SCANS_FINISHED() is watch_changes.record_changes
