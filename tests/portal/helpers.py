"""What the portal's tests (and a few others that log in) share: the test password, the CSRF
token of a page, a login through the form."""
from __future__ import annotations

import re

PASSWORD = "correct horse battery staple"
CSRF_RE = re.compile(r'name="csrf_token" type="hidden" value="([^"]+)"')


def csrf(client, path):
    page = client.get(path)
    match = CSRF_RE.search(page.get_data(as_text=True))
    assert match, page.get_data(as_text=True)[:500]
    return match.group(1)


def login(client, email="ops@acme.example", password=PASSWORD, next_path=""):
    token = csrf(client, "/app/login")
    return client.post("/app/login", data={"email": email, "password": password, "csrf_token": token,
                                           "next": next_path})
