"""MkDocs hook: the coordinator API reference page (docs/reference/api.md) gets its routes from the
OpenAPI document the coordinator serves, so the page cannot drift from the routes."""

from __future__ import annotations

import json
from typing import Any

from coordinator.api.openapi import openapi_document

MARKER = "<!-- the routes are inserted here by docs/_hooks/api_reference.py -->"


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    if page.file.src_uri != "reference/api.md":
        return markdown
    if MARKER not in markdown:
        raise ValueError(f"reference/api.md lost its marker {MARKER!r}")
    return markdown.replace(MARKER, _routes(openapi_document()))


def _routes(document: dict[str, Any]) -> str:
    out: list[str] = []
    for path, methods in document["paths"].items():
        for method, op in methods.items():
            out += [f"## `{method.upper()} {path}`", "", op.get("summary") or op.get("description") or "", ""]
            params = op.get("parameters", [])
            if params:
                out += ["| parameter | in | required | schema |", "|---|---|---|---|"]
                for p in params:
                    schema = json.dumps(p.get("schema", {}), separators=(",", ":")).replace("|", "\\|")
                    out.append(f"| `{p['name']}` | {p['in']} | {'yes' if p.get('required') else 'no'} | `{schema}` |")
                out.append("")
            out += ["| status | answer |", "|---|---|"]
            for status, response in op.get("responses", {}).items():
                out.append(f"| {status} | {response.get('description', '')} |")
            out.append("")
    return "\n".join(out)
