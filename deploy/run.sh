#!/usr/bin/env bash
# The hosted demo's entry command: hosted mode on, no model hub, Streamlit headless on one address and port.
# systemd runs it (deploy/explorer.service) and the browser tests start the server through it, so it is tested.
#
# Settings (environment): EXPLORER_HOST (default 127.0.0.1: put a TLS proxy in front, or set 0.0.0.0 on a trusted
# network), EXPLORER_PORT (default 8501), EXPLORER_PYTHON (default: the checkout's .venv/bin/python, else python3),
# EXPLORER_HOSTED (default 1) and the caps of explorer/hosting/settings.py. Extra arguments go to `streamlit run`.
#
# The server warms up as it starts, with no request needed: `streamlit run app.py` serves the `st.App` that app.py
# defines, whose lifespan loads the default model and takes the device figures in the background
# (explorer/ui/warm_start.py; EXPLORER_WARM=0 turns it off). The journal says when it starts and when the server is warm.
set -euo pipefail

cd "$(dirname "$(readlink -f "$0")")/.."  # the repository root: app.py and .streamlit/config.toml live there

export EXPLORER_HOSTED="${EXPLORER_HOSTED:-1}"
export HF_HUB_OFFLINE="${HF_HUB_OFFLINE:-1}"  # the embedded model needs no hub; visitors cannot name hub models anyway
export TRANSFORMERS_VERBOSITY="${TRANSFORMERS_VERBOSITY:-error}"
export PYTHONUNBUFFERED=1  # log lines reach the journal as they happen

host="${EXPLORER_HOST:-127.0.0.1}"
port="${EXPLORER_PORT:-8501}"
python="${EXPLORER_PYTHON:-}"
if [ -z "$python" ]; then
  if [ -x .venv/bin/python ]; then python=.venv/bin/python; else python=python3; fi
fi

# fileWatcherType none: a server does not reload on file changes (and spends no CPU watching the checkout).
# postScriptGC false: no full garbage collection (~0.4 s holding the GIL, every session stalled) after each rerun.
# maxUploadSize 64 (MB): the only upload is a recorded sweep's JSON (the Endpoint page), about 70 bytes per token:
# ~11 MB for 5 levels x 64 requests x 512 tokens, ~36 MB for 16 levels at the hosted caps (explorer/hosting/settings.py).
# Streamlit's default of 200 MB would let a visitor fill the server's memory.
exec "$python" -m streamlit run app.py \
  --server.headless true \
  --server.address "$host" \
  --server.port "$port" \
  --server.fileWatcherType none \
  --server.maxUploadSize 64 \
  --runner.postScriptGC false \
  --browser.gatherUsageStats false \
  "$@"
