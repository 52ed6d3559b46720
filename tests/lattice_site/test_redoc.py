"""ReDoc's bundle as /api/redoc/ loads it: the sidecar's, with nothing fetched from the internet."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db


def test_the_redoc_page_loads_the_bundle_that_names_no_cdn(client, operator):
    client.force_login(operator)
    page = client.get("/api/redoc/").content.decode()
    assert 'src="/api/redoc-dist/bundles/redoc.standalone.js"' in page
    bundle = client.get("/api/redoc-dist/bundles/redoc.standalone.js")
    assert bundle.status_code == 200 and bundle["Content-Type"].startswith("text/javascript")
    body = b"".join(bundle.streaming_content) if bundle.streaming else bundle.content
    assert len(body) > 500_000 and b"cdn.redoc.ly" not in body


@pytest.mark.parametrize("path", ["/api/docs/", "/api/redoc/"])
@pytest.mark.parametrize("method", ["options", "post", "put", "delete"])
def test_the_docs_pages_answer_other_methods_with_405_not_a_500(client, operator, path, method):
    """OPTIONS on Swagger UI's page rendered DRF's metadata through a template renderer that had no
    template for it: a 500 for anyone, logged in or not."""
    client.raise_request_exception = False
    client.force_login(operator)
    response = getattr(client, method)(path)
    assert response.status_code == 405, response.content[:200]
    assert client.get(path).status_code == 200
