"""Named limits: list them with their use, create, change or delete one (operator)."""

from typing import Annotated

from litestar import Controller, delete, get, post, put
from litestar.di import NamedDependency
from litestar.params import FromPath, JSONBody, PathParameter
from litestar.status_codes import HTTP_200_OK, HTTP_201_CREATED

from jobledger.api.common import Cursor, Limit
from jobledger.api.security import OPERATOR, VIEWER
from jobledger.domain.clock import Clock
from jobledger.schemas.limits import LimitIn, LimitList, LimitOut, LimitStateOut, LimitValuesIn
from jobledger.services.actors import Actor
from jobledger.services.limits import Limits

# The domain checks the name and names the fix; this only bounds what reaches it.
LimitName = Annotated[str, PathParameter(max_length=200, description="the limit's key")]


class LimitController(Controller):
    path = "/api/v1/limits"
    tags = ["limits"]  # noqa: RUF012 (Litestar reads a class attribute)

    @get("/", opt=VIEWER, sync_to_thread=True)
    def list_limits(
        self,
        limits: NamedDependency[Limits],
        actor: NamedDependency[Actor],
        clock: NamedDependency[Clock],
        limit: Limit = 100,
        cursor: Cursor = None,
    ) -> LimitList:
        """The named limits by name with their use over every queue, a page at a time
        (follow ``next_cursor``), and every limit key in use or waited for (named or
        given by runs), per queue."""
        return limits.overview(at=clock(), by=actor, limit=limit, cursor=cursor)

    @get("/{name:str}", opt=VIEWER, sync_to_thread=True)
    def get_limit(
        self,
        name: FromPath[LimitName],
        limits: NamedDependency[Limits],
        actor: NamedDependency[Actor],
        clock: NamedDependency[Clock],
    ) -> LimitOut:
        """One named limit and its use."""
        return limits.get(name, at=clock(), by=actor)

    @post("/", opt=OPERATOR, sync_to_thread=True, status_code=HTTP_201_CREATED)
    def create_limit(
        self,
        data: JSONBody[LimitIn],
        limits: NamedDependency[Limits],
        actor: NamedDependency[Actor],
        clock: NamedDependency[Clock],
    ) -> LimitStateOut:
        """A named limit: every run naming its key is held to its values, also runs
        already waiting (409 if it exists)."""
        values = LimitValuesIn(
            concurrency=data.concurrency, rate=data.rate, per_seconds=data.per_seconds
        )
        return limits.define(data.name, values, at=clock(), by=actor)

    @put("/{name:str}", opt=OPERATOR, sync_to_thread=True, status_code=HTTP_200_OK)
    def change_limit(
        self,
        name: FromPath[LimitName],
        data: JSONBody[LimitValuesIn],
        limits: NamedDependency[Limits],
        actor: NamedDependency[Actor],
        clock: NamedDependency[Clock],
    ) -> LimitStateOut:
        """New values for a named limit (``changed`` false when they were the same)."""
        return limits.change(name, data, at=clock(), by=actor)

    @delete("/{name:str}", opt=OPERATOR, sync_to_thread=True, status_code=HTTP_200_OK)
    def delete_limit(
        self,
        name: FromPath[LimitName],
        limits: NamedDependency[Limits],
        actor: NamedDependency[Actor],
        clock: NamedDependency[Clock],
    ) -> LimitStateOut:
        """Stop applying a named limit (within a second): runs naming its key go back to
        their own values, and those without values wait for nothing (404 if there is
        no such limit)."""
        return limits.delete(name, at=clock(), by=actor)
