"""Recordings in the app: open a bundled one from a link (`/?recording=NAME`, on any page) or the sidebar, or an
uploaded `.pdx`; the opened recording becomes the session's current run (the previous run moves to the history, so
Compare sets the two side by side), drawn under a banner that says it is recorded, where and when. No model is loaded
to show one: every page reads its trace and maps as it reads a live run's."""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from explorer.core.errors import ExplorerError
from explorer.core.recording import SUFFIX, Recording, RecordingMeta, bundled, recording_bytes
from explorer.core.recording_checks import read_recording
from explorer.ui.shared import device_session
from explorer.ui.state import RECORDING_LINKED, RECORDING_UPLOADED, RunResult, current_run, make_current
from explorer.ui.widgets import show_error

LINKED = "explorer_recording_linked"  # the recording a link opened in this session: a link opens it once
UPLOADED = "explorer_recording_uploaded"  # the file id of the upload last opened: a rerun does not reopen it
UPLOAD_KEY = "recording-upload"  # the uploader's own key
NO_MAPS = "This recording holds no attention maps."
QUERY = "recording"


def bundled_recording(path: Path) -> Recording:
    """A bundled file, read and checked once per server (and again if it changes on disk)."""
    stat = path.stat()
    key = ("recording", path, stat.st_size, stat.st_mtime_ns)
    return device_session().read_once.get(key, lambda: read_recording(path.read_bytes()))  # type: ignore[return-value]


def as_result(recording: Recording) -> RunResult:
    note = recording.meta.attention_note or ("" if recording.attention else NO_MAPS)
    return RunResult(
        recording.trace, recording.attention, note, f"recorded: {recording.meta.name}", recorded=recording.meta
    )


def open_bundled(name: str) -> bool:
    """Make a bundled recording the current run; an unknown name or a damaged file is one line."""
    found = bundled()  # one listing of the folder for the check, the message and the read
    if name not in found:
        known = ", ".join(found) or "none"
        show_error(f"No bundled recording is called '{name[:60]}': the bundled ones are {known}.")
        return False
    try:
        make_current(as_result(bundled_recording(found[name])))
    except ExplorerError as exc:
        show_error(f"The recording '{name}' cannot be opened: {exc}")
        return False
    return True


def open_from_link() -> None:
    """`?recording=NAME` opens that recording once per session: a later Run is not replaced on the next click."""
    name = st.query_params.get(QUERY)
    if not name or RECORDING_LINKED.get() == name:
        return
    RECORDING_LINKED.set(name)
    open_bundled(name)


def recordings_sidebar() -> None:
    """The bundled recordings to open, and an upload box for a `.pdx` (checked like any upload: one line if bad)."""
    found = bundled()
    run = current_run()
    with st.sidebar.expander("Open a recording", expanded=run is None):
        st.caption("A finished run saved earlier: its figures were measured then, on the device it names.")
        if found:
            name = st.selectbox(
                "Bundled recordings", list(found), format_func=lambda n: title_of(n, found[n]), key="recording-choice"
            )
            if st.button("Open this recording", width="stretch"):
                open_bundled(name)
        # Any type: a type filter makes Streamlit refuse a wrong file with its own message; this says one line.
        uploaded = st.file_uploader(f"…or upload a {SUFFIX} file", key=UPLOAD_KEY)
        if uploaded is not None and RECORDING_UPLOADED.get() != uploaded.file_id:
            RECORDING_UPLOADED.set(uploaded.file_id)
            open_upload(uploaded.name, uploaded.getvalue())


def title_of(name: str, path: Path) -> str:
    try:
        return f"{name}: {bundled_recording(path).meta.title}"
    except (ExplorerError, OSError):
        return f"{name} (cannot be read)"


def open_upload(file_name: str, raw: bytes) -> None:
    if not file_name.lower().endswith(SUFFIX):
        show_error(f"'{file_name[:60]}' is not a recording: open a {SUFFIX} file (`explorer run ... --record`).")
        return
    try:
        make_current(as_result(read_recording(raw)))
    except ExplorerError as exc:
        show_error(str(exc))


def needs_live_run(result: RunResult, what: str) -> bool:
    """True (with a line saying so) when `what` would run the model on a recorded run's tokens."""
    if result.recorded is None:
        return False
    st.info(f"{what} runs the model again: press **Run** in the sidebar for a live run first.")
    return True


def as_recording_bytes(result: RunResult) -> bytes:
    """The current run as a `.pdx` (a recorded one as it was opened; a live one with its maps, if captured)."""
    meta = result.recorded or RecordingMeta.of(result.trace, "explorer-run", "recorded in the app (Download recording)")
    return recording_bytes(meta, result.trace, result.attention)
