"""/favicon.ico, which browsers ask for on pages that name no icon (the API's docs, error pages)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db


def test_favicon_ico_leads_to_the_project_s_own_icon_for_anyone(client):
    response = client.get("/favicon.ico")
    assert response.status_code == 301
    assert response["Location"].endswith("favicon.svg") and "://" not in response["Location"]
    assert client.post("/favicon.ico").status_code == 405
