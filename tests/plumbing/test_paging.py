"""paging: a numbered page and how many pages a total makes."""
import pytest

from app.plumbing.paging import Page


@pytest.mark.parametrize("total, per_page, pages", [
    (0, 20, 1),   # an empty list is still one (empty) page
    (1, 20, 1), (20, 20, 1), (21, 20, 2), (40, 20, 2), (41, 20, 3), (7, 1, 7),
])
def test_pages_round_up_and_never_fall_below_one(total, per_page, pages):
    assert Page(items=[], total=total, page=1, per_page=per_page).pages == pages


def test_a_page_keeps_its_items_and_position():
    page = Page(items=["a", "b"], total=5, page=3, per_page=2)
    assert (page.items, page.page, page.pages) == (["a", "b"], 3, 3)
