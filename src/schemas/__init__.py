"""The request and response bodies of the REST API: one definition, served by the API
and decoded by ``jobledger.client``.

These modules import msgspec and the domain's policy values only, so a program that
talks to jobledger over HTTP loads none of the server (no Litestar, no database
drivers, no event store).
"""
