"""`jobledger token create`: an API token for a program, made on the store.

Whoever can reach the store holds every right already (as for the other operations
commands); the token is still a user's, and capped by that user's role, as one made
through the API is. Only the secret goes to standard output, so a shell can keep it:
``export JOBLEDGER_TOKEN=$(jobledger token create shop --role operator)``.
"""

import argparse
import sys
from datetime import timedelta
from typing import Any

from jobledger.domain.clock import utc_now
from jobledger.domain.roles import Role
from jobledger.services.accounts import AccountService
from jobledger.services.actors import Actor
from jobledger.services.errors import ServiceError


class TokenUserError(ServiceError):
    """The user named for a token does not exist or is disabled."""


def add_parser(commands: "argparse._SubParsersAction[Any]") -> None:
    token = commands.add_parser("token", help="API tokens for programs")
    token_commands = token.add_subparsers(dest="token_command", required=True, metavar="ACTION")
    create = token_commands.add_parser(
        "create", help="make a token and print its secret (shown only once)"
    )
    create.add_argument("name", help="what the token is for, e.g. shop")
    create.add_argument(
        "--role",
        choices=[role.value for role in Role],
        default=Role.OPERATOR.value,
        help="what it may do (default operator; at most its user's role)",
    )
    create.add_argument(
        "--user", help="whose token it is (default: the admin, JOBLEDGER_ADMIN_USERNAME)"
    )
    create.add_argument("--expires-days", type=float, help="days until it expires (default: never)")


def create(args: argparse.Namespace, accounts: AccountService, *, admin: str) -> int:
    username = args.user or admin
    user = next((u for u in accounts.accounts.list_users() if u.username == username), None)
    if user is None or user.disabled:
        state = "is disabled" if user is not None else "does not exist"
        raise TokenUserError(
            f"--user: the user {username!r} {state}; name an enabled user (or start the API "
            "once, which creates the admin)"
        )
    expires = None if args.expires_days is None else timedelta(days=args.expires_days)
    by = Actor(user.username, user.role, user.id)
    token, secret = accounts.create_token(
        args.name, Role(args.role), expires_in=expires, at=utc_now(), by=by
    )
    print(secret)
    print(
        f"token {token.name!r} ({token.id}) of {user.username}, role {token.role}", file=sys.stderr
    )
    return 0
