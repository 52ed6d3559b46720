"""The navigation bar sits in the same place on every page, live or not."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def test_the_nav_links_stay_right_aligned_on_live_pages(login, live_server_url, operator, resource_group):
    page = login("op", "pw-op-123")

    def links_box(path: str, live: bool) -> tuple[float, float]:
        page.goto(f"{live_server_url}{path}")
        if live:
            page.wait_for_selector("body[data-live='on']", timeout=15_000)
        box = page.locator("header.lattice-nav nav").bounding_box()
        bar = page.locator("header.lattice-nav").bounding_box()
        assert box is not None and bar is not None
        return round(bar["x"] + bar["width"] - (box["x"] + box["width"])), round(box["width"])

    plain = links_box("/ops/audit/", live=False)
    assert links_box("/ops/", live=True) == plain
    assert links_box("/jobs/", live=False) == plain
