"""Property-based tests of the whole JSON API from its own OpenAPI document (schemathesis).

For every operation, schemathesis generates requests from the schema, valid and invalid, sends
them to the app in-process (ASGI, no network) and checks each answer: never a 5xx, a status the
schema documents, a body that matches the documented schema, invalid data refused.

Bounded and deterministic: ``MAX_EXAMPLES`` per operation with a fixed derandomised seed. Lab
runs are kept short by lowering the web's lab budget for this module (a schema-valid request over
it is refused with 422 naming the budget field), so the run takes well under a minute.
Not checked: ``positive_data_acceptance`` (schema-valid data is accepted), since a lab's budget
spans several fields and the schema cannot say it; those refusals are 422s naming the field.
"""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis import checks

import attnlab.web.labs as web_labs
from attnlab.web import create_app

MAX_EXAMPLES = 25
LOCAL = "http://127.0.0.1"  # the app serves loopback Host names only
LAB_SECONDS = 0.05  # the lab budget while these tests run (the web's default is seconds)

APP = create_app()
schema = schemathesis.openapi.from_asgi("/openapi.json", APP, headers={"Host": "127.0.0.1"})


@pytest.fixture(scope="module", autouse=True)
def short_labs():
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(web_labs, "WEB_SECONDS", LAB_SECONDS)
        patch.setattr(web_labs, "RUN_SECONDS", LAB_SECONDS)  # the training labs' routes too
        yield


@schema.parametrize()
@settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)
def test_every_answer_is_documented_and_none_is_a_server_error(case):
    case.call_and_validate(base_url=LOCAL, excluded_checks=[checks.positive_data_acceptance])


def test_the_schema_documents_every_refusal():
    document = APP.openapi()
    assert document["components"]["schemas"]["Refusal"]["required"] == ["message", "detail"]
    operations = [
        (path, method, op)
        for path, methods in document["paths"].items()
        for method, op in methods.items()
    ]
    assert len(operations) >= 10
    for path, method, op in operations:
        answers = op["responses"]
        refusal = answers["422"]["content"]["application/json"]["schema"]
        assert refusal == {"$ref": "#/components/schemas/Refusal"}, (method, path)
        if "requestBody" in op:
            assert "413" in answers, (method, path)
        if path.startswith("/api/labs/"):
            assert {"403", "429"} <= set(answers), (method, path)
            assert "text/csv" in answers["200"]["content"], path
    assert "HTTPValidationError" not in document["components"]["schemas"]
