"""Schemathesis checks for the wardfs API, loaded through SCHEMATHESIS_HOOKS by tests/security.

`error_body_has_code`: every 4xx and 5xx answer is JSON with a string `code` (the stable error
codes of docs/api.md), and the only 5xx allowed are the ones that report an unreachable
dependency (a git remote, a sandbox) — anything else is a server error.
"""

import json

import schemathesis

# 5xx answers that name a dependency the fuzzer pointed at (an unreachable git remote or
# sandbox), not a fault of the daemon itself.
DEPENDENCY_CODES = {
    502: {"REMOTE_UNAVAILABLE", "SANDBOX_UNAVAILABLE"},
    503: {"SANDBOX_UNAVAILABLE", "ZONE_UNAVAILABLE"},
    507: {"NO_SPACE"},
    504: {"SANDBOX_UNAVAILABLE", "REMOTE_UNAVAILABLE"},
}


@schemathesis.check
def error_body_has_code(ctx, response, case):
    status = response.status_code
    if status < 400:
        return None
    try:
        body = json.loads(response.content)
    except ValueError as e:
        raise AssertionError(f"{status} answer is not JSON ({e}): {response.content[:200]!r}")
    code = body.get("code") if isinstance(body, dict) else None
    if not isinstance(code, str) or not code:
        raise AssertionError(f"{status} answer has no string `code`: {body!r}")
    if status >= 500 and code not in DEPENDENCY_CODES.get(status, set()):
        raise AssertionError(f"server error {status} {code}: {body!r}")
    return None


@schemathesis.hook
def before_call(ctx, case, kwargs):
    """`GET /v1/events` follows the journal until the client leaves: ask it to end instead.

    Only a missing or true `follow` is replaced; a malformed one is still sent (and refused)."""
    if case.operation.path != "/v1/events":
        return
    query = case.query if isinstance(case.query, dict) else {}
    if query.get("follow") in (None, True, "true"):
        query["follow"] = "false"
    case.query = query
