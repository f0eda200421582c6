"""The OpenAPI document carries each lab's work budget and the cross-site refusal of every
/api route, so a schema-driven client knows them before it sends anything."""

from __future__ import annotations

from attnlab.labs import LABS
from attnlab.web import create_app
from attnlab.web.labs import WEB_BYTES, WEB_SECONDS
from attnlab.web.runs import RUN_BYTES, RUN_SECONDS

DOCUMENT = create_app().openapi()


def test_every_lab_route_documents_its_work_budget_on_the_field_it_blames():
    labs = [p for p in DOCUMENT["paths"] if p.startswith("/api/labs/")]
    assert len(labs) == len(LABS)
    for path in labs:
        op = DOCUMENT["paths"][path]["get"]
        spec = LABS[path.rsplit("/", 1)[1]]
        # A training lab's route runs the CLI's defaults, so it has a training run's budget.
        seconds, size = (RUN_SECONDS, RUN_BYTES) if spec.training else (WEB_SECONDS, WEB_BYTES)
        field = spec.budget_field
        assert op["x-work-budget"] == {"seconds": seconds, "bytes": size, "field": field}
        described = [p for p in op.get("parameters", []) if p["name"] == field]
        assert all("Work budget" in p["description"] for p in described), path
        assert "Work budget" in op["description"]


def test_every_api_route_documents_the_cross_site_refusal():
    for path, methods in DOCUMENT["paths"].items():
        for method, op in methods.items():
            if path.startswith("/api/"):
                assert "403" in op["responses"], (method, path)
