"""OpenTelemetry for ``gpuscope monitor`` and ``gpuscope run --otlp``: names (:mod:`.names`, no
SDK), where OTLP goes, checked before anything starts (:mod:`.otlp`, no SDK), the sampler's rows
as observable instruments (:mod:`.sink`), the one resource and MeterProvider setup both commands
use (:mod:`.setup`), where the metrics go (:mod:`.export`, :mod:`.endpoint`; other exporters' names: :mod:`.dcgm`, :mod:`.amd`) and a run's spans
(:mod:`.spans`). The SDK is imported only inside the functions that build exporters."""
