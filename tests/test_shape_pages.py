"""`shape:NAME` in the app: the sidebar's model box takes it (a hosted server only when its allow-list names it), every
page of its run says the tokens are not meaningful, and At scale measures its config here beside the what-if."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from explorer.core.errors import BadInput
from explorer.core.loaded_model import LoadedModel
from explorer.hosting.settings import HostedPolicy
from explorer.models import shape_model
from explorer.scale.config import load_architecture
from explorer.scale.params import count_params
from explorer.ui import state as ui_state
from tests.apptest_support import navigation_like_a_server, new_app  # noqa: F401 - an autouse fixture
from tests.owner_support import OwnersOfATest

SHAPE = "shape:smollm2-135m"
GB = 10**9


def seeded(shape_lm: LoadedModel, owners: OwnersOfATest, device: str = "auto") -> None:
    """The session's build of the shape put in the device owner's model store, as a first load would leave it."""
    owners.owner().models[(SHAPE, device, "float32")] = shape_lm


def by_label(widgets: object, label: str) -> object:
    return next(w for w in widgets if w.label == label)


def texts(at: AppTest) -> str:
    return " ".join(e.value for e in [*at.warning, *at.sidebar.warning, *at.caption, *at.markdown, *at.info])


def test_the_model_box_takes_a_shape_and_every_page_says_its_tokens_mean_nothing(
    shape_lm: LoadedModel, fresh_device_owner: OwnersOfATest
) -> None:
    seeded(shape_lm, fresh_device_owner)
    at = new_app()
    at.sidebar.text_input(key="sidebar-model").input(SHAPE)
    at.sidebar.number_input(key="sidebar-max-new-tokens").set_value(3)
    by_label(at.sidebar.toggle, "Capture attention maps").set_value(False)  # not what this test is about: seconds
    by_label(at.sidebar.button, "Run").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    trace = at.session_state[ui_state.RUN].trace
    assert trace.model.random_weights and trace.model.name == SHAPE and trace.new_tokens == 3
    for page in ("pages/run.py", "pages/cost.py", "pages/batching.py"):
        at.switch_page(page).run()
        assert not at.exception, at.exception
        assert f"Shape model: {trace.model.shape_note}." in [w.value for w in at.sidebar.warning]
        if page != "pages/batching.py":  # a page drawn from the run says it above its figures too
            banner = f"**Shape model** (SmolLM2\\-135M shape \\(random weights\\)): {trace.model.shape_note}."
            assert banner in [w.value for w in at.main.warning]


def test_a_hosted_server_runs_a_shape_only_when_its_allow_list_names_it() -> None:
    hosted = HostedPolicy.from_env({"EXPLORER_HOSTED": "1"})
    with pytest.raises(BadInput, match="only runs these models: embedded"):
        hosted.check_model(SHAPE)
    listed = HostedPolicy.from_env({"EXPLORER_HOSTED": "1", "EXPLORER_ALLOWED_MODELS": f"embedded,{SHAPE}"})
    assert listed.check_model(SHAPE) == SHAPE


def test_at_scale_measures_a_shipped_config_here_beside_the_what_if(
    shape_lm: LoadedModel, fresh_device_owner: OwnersOfATest
) -> None:
    seeded(shape_lm, fresh_device_owner)
    at = new_app()
    at.switch_page("pages/at_scale.py").run()
    by_label(at.selectbox, "Model").set_value("smollm2-135m").run()
    at.button(key="scale-measure-here").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    trace = at.session_state[ui_state.SCALE_HERE]
    assert trace.model.name == SHAPE and trace.new_tokens == 8
    frame = at.dataframe[-1].value
    params = f"{count_params(load_architecture('smollm2-135m')).total:,}"
    row = frame[frame["figure"] == "parameters"].iloc[0]
    assert row["what-if: H100 SXM, bfloat16 (modelled)"] == f"{params} (config.json)"
    assert row[f"here: {trace.device.name} (measured)"] == f"{params} (the built tensors)"
    assert "a decode step of this shape took" in texts(at) and "on the H100 SXM (bfloat16) is" in texts(at)
    assert ui_state.RUN not in at.session_state  # the page's measurement is its own, not the sidebar's run
    owner = fresh_device_owner.owner()
    assert [turn.what for turn in owner.queue.turns] == ["run"] and list(owner.models) == [(SHAPE, "auto", "float32")]


def test_at_scale_refuses_in_one_line_a_config_that_cannot_fit_here(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shape_model, "free_memory", lambda device: (8 * GB, "of available RAM (injected)"))
    monkeypatch.setattr(shape_model, "build_model", lambda *args: pytest.fail("allocated a shape that cannot fit"))
    at = new_app()
    at.switch_page("pages/at_scale.py").run()
    by_label(at.selectbox, "Model").set_value("llama-3.1-8b").run()
    at.button(key="scale-measure-here").click().run()
    errors = [e.value for e in at.error]
    assert len(errors) == 1 and "does not fit here" in errors[0] and "8\\.00 GB of available RAM" in errors[0]
    assert ui_state.SCALE_HERE not in at.session_state
