"""OpenTelemetry for ``gpuscope monitor``: names (:mod:`.names`, no SDK), the sampler's rows as
observable instruments (:mod:`.sink`) and where they go (:mod:`.export`). Only the monitor
command imports the SDK modules."""
