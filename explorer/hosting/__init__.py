"""What a shared server allows (`settings`) and how its sessions take turns on the one device (`queue`)."""
