"""The dashboard: server-rendered pages under /ui over the same state as the REST API.

Pages only read; every change a page offers is a call of the JSON API from the
browser, with the session cookie and its CSRF token, so the API's guards, validation
and audit trail apply to the dashboard unchanged.
"""
