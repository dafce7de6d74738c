"""The OpenAPI links: added to the document by method and path, or refused loudly."""

import pytest
from litestar import Litestar, get

from jobledger.api.openapi_links import add_links


@get("/api/v1/jobs", opt={"public": True}, sync_to_thread=False)
def only_a_list() -> list[str]:
    return []


def test_a_link_from_or_to_a_missing_route_is_refused() -> None:
    """If the app lacks a route a link names, then adding the links raises naming the
    route, instead of serving a link to nowhere."""
    with pytest.raises(LookupError, match="POST /api/v1/jobs"):
        add_links(Litestar(route_handlers=[only_a_list]))
