"""SCIM 2.0 (D32) checked by an independent conformance checker, scim2-tester (pinned in
requirements-test.txt), over real HTTP against the served app: discovery, then creation, reads,
replacement, PATCH add/replace/remove of each attribute the Schemas endpoint publishes, deletion."""
import uuid
from typing import Annotated
from wsgiref.headers import Headers

import requests
from pydantic import Field
from scim2_client.engines.inprocess import InProcessResponse, _prepare_request
from scim2_client.engines.wsgi import WSGISCIMClient
from scim2_models import Required, Resource, ResourceType, Schema, ScimProvider, Uniqueness
from scim2_tester import Status, check_server

from app.accounts import scim
from app.extensions import db


class HttpScimClient(WSGISCIMClient):
    """scim2-client's engine, its requests sent over HTTP with ``requests`` (the project's client)."""

    def request(self, method, url, **kwargs):
        prepared = _prepare_request(self.base_url, self.headers, method, url, **kwargs)
        headers = {name: value for name, value in prepared.headers if name.lower() != "host"}
        answer = requests.request(prepared.method, prepared.url.geturl(), data=prepared.body or None,
                                  headers=headers, timeout=10)
        return InProcessResponse(status_code=answer.status_code, headers=Headers(list(answer.headers.items())),
                                 content=answer.content)


class FreshEmails(list):
    """The checker's examples of a userName, each one new: the checker fills attributes with random
    text, but a userName here is an e-mail address (as the Schemas document says), and unique."""

    def __len__(self):
        return 1

    def __getitem__(self, index):
        return f"{uuid.uuid4().hex}@acme.example"


def described_service(base_url: str) -> ScimProvider:
    """The service as its discovery documents describe it, the userName's examples e-mail addresses."""
    published = Resource.from_schema(Schema.model_validate(scim.schemas(base_url)[0]))

    class User(published):  # type: ignore[misc,valid-type]
        user_name: Annotated[str | None, Uniqueness.server, Required.true] = Field(None, examples=FreshEmails())

    return ScimProvider([User], [ResourceType.model_validate(scim.resource_types(base_url)[0])])


def test_scim2_tester_reports_no_failure_against_the_served_app(served_app, account):
    with db.connection_context():
        token = scim.issue_token(account.id)
    base_url = f"{served_app.url}/scim/v2"
    client = HttpScimClient(None, base_url=base_url, headers={"Authorization": f"Bearer {token}"},
                            provider=described_service(base_url))
    results = check_server(client, raise_exceptions=False)
    assert results, "the checker ran no check"
    failures = [f"{r.title} [{r.resource_type}]: {r.reason}" for r in results
                if r.status in (Status.DEVIATION, Status.ERROR, Status.CRITICAL)]
    assert failures == [], "\n".join(failures)
    assert sum(r.status == Status.SUCCESS for r in results) >= 30  # 35 with scim2-tester 0.5.2
