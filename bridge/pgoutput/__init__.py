"""Pure pgoutput decoder: bytes in, typed messages out. Standard library only, no I/O."""
