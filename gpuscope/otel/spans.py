"""A finished ``gpuscope run`` as OpenTelemetry spans (``gpuscope run --otlp``): one span for
the run, one child span per profiler window, a span event per ``gpuscope.mark`` mark; never one
span per kernel. :func:`run_span_plan` is pure (the run's summary in, span descriptions out);
:func:`export_spans` sends them with the SDK, inside the caller's trace when ``TRACEPARENT`` is
set.
"""
from __future__ import annotations

from typing import Any

#: At most this many mark events on the run span (a long decode loop marks every step).
MAX_MARK_EVENTS = 1000


def run_span_plan(summary: dict[str, Any], *, name: str, command: str | None, started_ns: int, ended_ns: int,
                  windows: list[dict[str, Any]], marks: list[dict[str, Any]]) -> dict[str, Any]:
    """The spans of one run: ``{"name", "start_ns", "end_ns", "attributes", "events", "children"}``.
    ``command`` must already be redacted (it is what the store holds)."""
    attrs: dict[str, Any] = {"gpuscope.run.id": int(summary.get("run_id") or 0), "gpuscope.run.name": name,
                             "process.exit.code": int(summary.get("exit_code") or 0)}
    if command:
        attrs["gpuscope.run.command"] = command
    analysis = summary.get("analysis") or {}
    devices = [d.get("name") or d.get("key") for d in analysis.get("devices") or [] if isinstance(d, dict)]
    if devices:
        attrs["gpuscope.run.devices"] = [str(d) for d in devices]
    t = analysis.get("time_us") or {}
    whole = sum(float(t.get(k) or 0.0) for k in ("compute", "communication", "memory", "idle"))
    if analysis.get("gpu_activity") and whole > 0:
        for k in ("compute", "communication", "memory", "idle"):
            attrs[f"gpuscope.time.{k}_share"] = round(float(t.get(k) or 0.0) / whole, 6)
    roof = [(float(o["roof_us"]), float(o.get("kernel_us") or 0.0)) for o in analysis.get("ops") or []
            if isinstance(o, dict) and o.get("roof_us") is not None and o.get("kernel_us")]
    measured = sum(k for _, k in roof)
    if measured > 0:
        # GPU time at the roof over the time measured, for the ops the roofline could place
        attrs["gpuscope.roofline.pct_of_roof"] = round(100.0 * sum(r for r, _ in roof) / measured, 3)
    gen = ((summary.get("telemetry") or {}).get("generation") or {})
    for key, attr in (("tokens_per_s", "gpuscope.tokens_per_s"), ("energy_per_token_j", "gpuscope.energy_per_token_j")):
        if gen.get(key) is not None:
            attrs[attr] = float(gen[key])
    decode = gen.get("decode") or {}
    if decode.get("tokens_per_s") is not None:
        attrs["gpuscope.decode.tokens_per_s"] = float(decode["tokens_per_s"])
    energy = (summary.get("telemetry") or {}).get("energy_j")
    if energy is not None:
        attrs["gpuscope.energy_j"] = float(energy)
    children = []
    for w in windows:
        if isinstance(w.get("start_ns"), int) and isinstance(w.get("end_ns"), int):
            wa: dict[str, Any] = {"gpuscope.window.pid": int(w.get("pid") or 0)}
            for k in ("open_ns", "written_ns"):
                if isinstance(w.get(k), int):
                    wa[f"gpuscope.window.{k}"] = int(w[k])
            children.append({"name": f"profiler window {w.get('label') or ''}".strip(), "start_ns": int(w["start_ns"]),
                             "end_ns": int(w["end_ns"]), "attributes": wa})
    events = []
    for m in marks[:MAX_MARK_EVENTS]:
        if isinstance(m.get("ts_ns"), int):
            ea = {f"gpuscope.mark.{k}": m[k] for k in ("tokens", "prompt_tokens", "phase", "step")
                  if isinstance(m.get(k), (int, float, str)) and not isinstance(m.get(k), bool)}
            events.append({"name": str(m.get("name") or "mark"), "ts_ns": int(m["ts_ns"]), "attributes": ea})
    if len(marks) > MAX_MARK_EVENTS:
        attrs["gpuscope.marks_not_exported"] = len(marks) - MAX_MARK_EVENTS
    return {"name": "gpuscope run", "start_ns": int(started_ns), "end_ns": int(ended_ns), "attributes": attrs,
            "events": events, "children": children}


def traces_endpoint(url: str) -> str:
    """An OTLP/HTTP base URL (``--otlp URL``, as ``OTEL_EXPORTER_OTLP_ENDPOINT``) as the traces
    endpoint: ``v1/traces`` appended to its path (:func:`gpuscope.otel.otlp.signal_url`)."""
    from .otlp import signal_url

    return signal_url(url, "traces")


def export_spans(plan: dict[str, Any], endpoint: str | None, protocol: str, resource_attrs: dict[str, str],
                 traceparent: str | None = None, tracestate: str | None = None, timeout_s: float = 5.0) -> bool:
    """Send the plan's spans; True when the exporter took them. Never raises for a network
    failure (the run is stored already; the caller notes the failure)."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExportResult

    kw: dict[str, Any] = {"timeout": timeout_s}
    exporter: Any  # the gRPC or the HTTP span exporter: two classes with one interface
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as Grpc

        if endpoint:
            kw.update(endpoint=endpoint, insecure=endpoint.startswith("http://"))
        exporter = Grpc(**kw)
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as Http

        if endpoint:
            kw["endpoint"] = traces_endpoint(endpoint)
        exporter = Http(**kw)
    results: list[Any] = []

    class Recording:  # the exporter's answer, kept for the caller
        def export(self, spans: Any) -> Any:
            r = exporter.export(spans)
            results.append(r)
            return r

        def shutdown(self) -> None:
            exporter.shutdown()

        def force_flush(self, timeout_millis: int = 30_000) -> bool:
            return True

    provider = TracerProvider(resource=Resource.create(resource_attrs))
    provider.add_span_processor(BatchSpanProcessor(Recording(), schedule_delay_millis=60_000))  # type: ignore[arg-type]
    tracer = provider.get_tracer("gpuscope")
    context = None
    if traceparent:
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        carrier = {"traceparent": traceparent}
        if tracestate:
            carrier["tracestate"] = tracestate
        context = TraceContextTextMapPropagator().extract(carrier)
    from opentelemetry import trace

    run_span = tracer.start_span(plan["name"], context=context, start_time=plan["start_ns"],
                                 attributes=plan["attributes"])
    for ev in plan["events"]:
        run_span.add_event(ev["name"], attributes=ev["attributes"], timestamp=ev["ts_ns"])
    inner = trace.set_span_in_context(run_span)
    for child in plan["children"]:
        s = tracer.start_span(child["name"], context=inner, start_time=child["start_ns"], attributes=child["attributes"])
        s.end(end_time=child["end_ns"])
    run_span.end(end_time=plan["end_ns"])
    provider.force_flush(timeout_millis=int(timeout_s * 2000))
    provider.shutdown()
    return bool(results) and all(r == SpanExportResult.SUCCESS for r in results)
