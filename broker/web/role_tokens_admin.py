"""Admin REST for the cluster's role-token signing keys (SCRAM's role tokens; a pulsar-grpc
extension, Pulsar has no such resource):

- ``GET /admin/v2/role-token-keys``: the keys, current last (ids and times, never secrets);
- ``POST /admin/v2/role-token-keys/rotate[?revokePrevious=true]``: a new current key for the
  whole cluster; the previous keys keep verifying the tokens they signed until those expire,
  or, with revokePrevious, stop at once for new calls (a leaked key): their holders
  authenticate again. Streams opened before end at their token's expiry, not at the
  revocation (the expiry check compares times, it does not re-verify signatures).

Either answers 412 when the broker does not run the scram provider, and, with
authorizationEnabled, 403 to anyone but a super-user (the keys are the whole cluster's).
"""

from __future__ import annotations

from aiohttp import web

from pulsar_grpc.broker import errors as e
from pulsar_grpc.broker.security.authentication import AuthenticationService
from pulsar_grpc.broker.security.role_tokens import KeyRing, RoleTokens
from pulsar_grpc.broker.web.access import AdminAccess

__all__ = ["add_role_token_routes"]

PATH = "/admin/v2/role-token-keys"


def add_role_token_routes(
    app: web.Application, service: AuthenticationService | None, access: AdminAccess
) -> None:
    def role_tokens() -> RoleTokens:
        tokens = service.role_tokens if service is not None else None
        if tokens is None:
            raise e.PreconditionFailedError("role tokens need the scram authentication provider")
        return tokens

    async def keys(request: web.Request) -> web.Response:
        access.super_user(request, "reading the role-token keys")
        return _keys_response(await role_tokens().ring())

    async def rotate(request: web.Request) -> web.Response:
        access.super_user(request, "rotating the role-token keys")
        revoke = request.query.get("revokePrevious", "false").lower()
        if revoke not in ("true", "false"):
            raise e.InvalidArgumentError("revokePrevious: true or false")
        return _keys_response(await role_tokens().rotate(revoke_previous=revoke == "true"))

    app.add_routes([web.get(PATH, keys), web.post(PATH + "/rotate", rotate)])


def _keys_response(ring: KeyRing) -> web.Response:
    return web.json_response({"current": ring.current.id, "keys": [k.public() for k in ring.keys]})
