"""``gpuscope monitor``'s room: the loop that samples every GPU and the host and exports them
(:mod:`.loop`). The command (:mod:`gpuscope.cli.monitor`) only parses and checks its arguments
and calls :func:`.loop.run_monitor`."""
