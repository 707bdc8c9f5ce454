"""Getting a model onto the device: the embedded GGUF, a hub id, a local folder or a shipped config's shape with
random weights, each checked before anything loads."""
