"""The command line, `python -m explorer COMMAND`: the parser in `main`, shared helpers in `common`, one module each."""
