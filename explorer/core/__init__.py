"""What one request is and costs: the trace, the engine and its timing, the roofline, the device, the loaded model."""
