"""A small instrumented program using the real OpenTelemetry Python SDK,
exporting to Tally over OTLP/gRPC or OTLP/HTTP.

It records a Counter, an UpDownCounter, a Histogram and an observable Gauge
for a few rounds, exporting after each round (force_flush), and prints on
stdout, as one JSON document, the resource's attributes (the SDK adds
some of its own, such as a random service.instance.id), every data point
the SDK handed to its exporter, and whether each export succeeded. The test computes what Tally
must hold from that record with its own reference model.

usage: agent.py ENDPOINT grpc|http cumulative|delta HOST ROUNDS
"""

import json
import sys
import time

from opentelemetry.sdk.metrics import (
    Counter,
    Histogram,
    MeterProvider,
    ObservableCounter,
    ObservableGauge,
    ObservableUpDownCounter,
    UpDownCounter,
)
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    Gauge,
    MetricExporter,
    MetricExportResult,
    PeriodicExportingMetricReader,
    Sum,
)
from opentelemetry.sdk.metrics.export import Histogram as HistogramData
from opentelemetry.sdk.resources import Resource
from opentelemetry.metrics import Observation


class Recording(MetricExporter):
    """Hands every batch to the real exporter and keeps what it sent."""

    def __init__(self, inner):
        super().__init__(
            preferred_temporality=inner._preferred_temporality,
            preferred_aggregation=inner._preferred_aggregation,
        )
        self.inner = inner
        self.points = []
        self.results = []

    def export(self, metrics_data, timeout_millis=10_000, **kwargs):
        result = self.inner.export(metrics_data, timeout_millis=timeout_millis)
        self.results.append(result == MetricExportResult.SUCCESS)
        for rm in metrics_data.resource_metrics:
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    self.points.extend(describe(m))
        return result

    def force_flush(self, timeout_millis=10_000):
        return self.inner.force_flush(timeout_millis)

    def shutdown(self, timeout_millis=30_000, **kwargs):
        self.inner.shutdown(timeout_millis=timeout_millis)


def describe(m):
    data = m.data
    if isinstance(data, Gauge):
        kind, extra = "gauge", {}
    elif isinstance(data, Sum):
        kind = "sum"
        extra = {
            "monotonic": data.is_monotonic,
            "delta": data.aggregation_temporality == AggregationTemporality.DELTA,
        }
    elif isinstance(data, HistogramData):
        kind = "histogram"
        extra = {"delta": data.aggregation_temporality == AggregationTemporality.DELTA}
    else:
        raise SystemExit(f"unexpected data type {type(data)}")
    out = []
    for p in data.data_points:
        point = {
            "name": m.name,
            "kind": kind,
            "attributes": dict(p.attributes or {}),
            "time_unix_nano": p.time_unix_nano,
            **extra,
        }
        if kind == "histogram":
            point.update(
                count=p.count,
                sum=p.sum,
                bucket_counts=list(p.bucket_counts),
                explicit_bounds=list(p.explicit_bounds),
            )
        else:
            point["value"] = p.value
        out.append(point)
    return out


def exporter(endpoint, transport, delta):
    temporality = {}
    if delta:
        temporality = {
            Counter: AggregationTemporality.DELTA,
            Histogram: AggregationTemporality.DELTA,
            ObservableCounter: AggregationTemporality.DELTA,
            UpDownCounter: AggregationTemporality.CUMULATIVE,
            ObservableUpDownCounter: AggregationTemporality.CUMULATIVE,
            ObservableGauge: AggregationTemporality.CUMULATIVE,
        }
    if transport == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter

        return OTLPMetricExporter(
            endpoint=endpoint, insecure=True, preferred_temporality=temporality
        )
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

    return OTLPMetricExporter(endpoint=endpoint, preferred_temporality=temporality)


def main():
    endpoint, transport, temporality, host, rounds = sys.argv[1:6]
    rec = Recording(exporter(endpoint, transport, temporality == "delta"))
    reader = PeriodicExportingMetricReader(rec, export_interval_millis=3_600_000)
    resource = Resource.create({"host.name": host, "service.name": "otel-agent"})
    provider = MeterProvider(resource=resource, metric_readers=[reader])
    meter = provider.get_meter("tally-test")
    requests = meter.create_counter("http.server.requests", unit="1")
    in_flight = meter.create_up_down_counter("db.client.connections.usage")
    latency = meter.create_histogram("http.server.duration", unit="ms")
    state = {"round": 0}
    meter.create_observable_gauge(
        "system.temperature",
        callbacks=[lambda _options: [Observation(20.0 + 1.5 * state["round"], {"zone": "a"})]],
    )
    for r in range(int(rounds)):
        state["round"] = r
        requests.add(r + 1, {"http.route": "/a", "http.method": "GET"})
        requests.add(2, {"http.route": "/b", "http.method": "POST"})
        in_flight.add(3 if r % 2 == 0 else -1, {"pool": "main"})
        for v in (0.5 * (r + 1), 7.5, 30.0):
            latency.record(v, {"http.route": "/a"})
        provider.force_flush()
        time.sleep(0.2)
    provider.shutdown()
    json.dump(
        {
            "resource": {k: str(v) for k, v in resource.attributes.items()},
            "results": rec.results,
            "points": rec.points,
        },
        sys.stdout,
    )


if __name__ == "__main__":
    main()
