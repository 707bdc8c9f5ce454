"""Placeholder until this page is built."""

import streamlit as st

st.title("kv_cache")
