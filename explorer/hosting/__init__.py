"""What a shared server allows (`settings`), how its sessions take turns on the one device (`queue`) and its warm-up
at start (`warm`)."""
