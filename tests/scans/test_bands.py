"""bands: a risk score's band, the one table the normaliser and a filtered read derive it from."""
from app.scans.bands import BAND_NAMES, BANDS, band_for


def test_each_score_from_0_to_100_has_the_band_whose_range_holds_it():
    assert [band_for(s) for s in (0, 24, 25, 49, 50, 74, 75, 100)] == \
        ["low", "low", "medium", "medium", "high", "high", "critical", "critical"]
    assert {"low", "medium", "high", "critical"} == BAND_NAMES


def test_the_bands_cover_0_to_100_without_a_gap_or_an_overlap():
    edges = [(low, high) for _, low, high in BANDS]
    assert edges[0][0] == 0 and edges[-1][1] == 100
    assert all(high + 1 == next_low for (_, high), (next_low, _) in zip(edges, edges[1:], strict=False))
