"""`python -m explorer owner`: the device owner on its own (a GPU box the web tier points at with
`EXPLORER_DEVICE_URL`); the app starts one of its own otherwise."""

from __future__ import annotations

import argparse
import os

from explorer.cli.common import add_command
from explorer.hosting.client import TOKEN_ENV

DEFAULT_PORT = 8765


def register(commands: argparse._SubParsersAction) -> None:
    owner = add_command(
        commands,
        "owner",
        "the device owner: runs the model, takes jobs over HTTP, streams records back",
        description=f"Serve the device to web tiers. Loopback by default; another address needs {TOKEN_ENV}.",
    )
    owner.add_argument("--host", default="127.0.0.1", help="address to listen on (not loopback: needs a token)")
    owner.add_argument("--port", type=int, default=DEFAULT_PORT, help="port to listen on")
    owner.add_argument("--no-warm", action="store_true", help="do not load the default model at start")
    owner.add_argument("--parent-pid", type=int, default=None, help=argparse.SUPPRESS)  # the app's own owner
    # loads_models=False: nothing is loaded at its start (models load in its jobs and its warm-up), so neither torch nor
    # transformers is imported before its port opens, and a restarted owner answers in about a second.
    owner.set_defaults(func=run, precheck=precheck, loads_models=False)


def precheck(args: argparse.Namespace) -> None:
    from explorer.owner.server import check_bind

    check_bind(args.host, os.environ.get(TOKEN_ENV) or None)  # refused before torch loads


def run(args: argparse.Namespace) -> None:
    from explorer.owner.server import serve

    # What `quiet_libraries` does, without importing transformers at the start (1-2 s of a restart on 2 busy cores):
    # the libraries read these when a job first loads a model.
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

    warm = not args.no_warm and os.environ.get("EXPLORER_WARM", "1") != "0"  # tests switch the warm-up off
    serve(args.host, args.port, os.environ.get(TOKEN_ENV) or None, warm=warm, parent_pid=args.parent_pid)
