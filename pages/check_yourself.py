"""Check yourself: a short quiz on prefill and decode, each answer explained and checked against the user's own run."""

import streamlit as st

from explorer import ui
from explorer.teach import quiz
from explorer.ui.page_start import under_load_warning
from explorer.ui.state import QUIZ_VERSION


def start_over() -> None:
    QUIZ_VERSION.set((QUIZ_VERSION.get() or 0) + 1)


ui.page_title("Check yourself")
st.caption(
    f"{len(quiz.QUESTIONS)} questions on prefill and decode, with the answers people often get wrong among the "
    "choices. Answers live only in this browser session: nothing is saved."
)
result = ui.current_run()
trace = result.trace if result is not None else None
maps = result.attention if result is not None else None
if result is None:
    ui.run_here("quiz", "No run yet: the questions work without one; run a prompt to see each answer in your own run.")
else:
    under_load_warning(result.trace.device)  # the page's one under-load line: the answers state bounds plainly

summary = st.empty()  # filled once every answer below is known
version = QUIZ_VERSION.get() or 0
answers: dict[str, int] = {}
for number, q in enumerate(quiz.QUESTIONS, start=1):
    with st.container(border=True):
        choice = st.radio(
            f"**{number}. {q.topic}** — {q.prompt}",
            range(len(q.choices)),
            format_func=lambda i, q=q: q.choices[i],
            index=None,
            key=f"quiz-{q.key}-{version}",
        )
        if choice is None:
            continue
        answers[q.key] = choice
        verdict = quiz.grade(q, choice)
        if verdict.correct:
            st.success(verdict.headline)
        else:  # a wrong answer is part of learning, not an error of the app
            st.warning(f"{verdict.headline} The answer: {q.choices[q.correct]}")
        st.markdown(q.explanation)
        found = quiz.evidence(q.key, trace, maps)
        if found is not None:
            st.markdown("**In your run**")
            st.text(found.text)  # text, never markdown: it quotes the model name the user typed
            st.caption(f"{found.source} — *{q.origin}*")
        else:
            st.caption(f"*{q.origin}* · run a prompt to see this in your own run")

right, answered = quiz.score(answers)
summary.markdown(f"**{right} of {answered}** answered right · {len(quiz.QUESTIONS) - answered} to go")
st.button("Start over", on_click=start_over, key="quiz-start-over")
