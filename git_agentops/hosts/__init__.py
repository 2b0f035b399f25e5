"""Agent hosts: how a worker's agent process is launched (the built-in scripted agent, or any command)."""
